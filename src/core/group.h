/*
** group.h -- a batch group's plan (group.c decides it; the runner, transfer.c, runs it): the
** elements between one pair of devices that move alike, their route, the ways they may run at
** once, best first (one submission of a device's runtime, or packed through host chunks, or
** element by element), and the parts of the way in use (its pieces, made once). batch.c makes
** the groups of a batch; the runner asks xfer_group_next_way when a way is refused.
** Layer 11 of docs/architecture.md, below the runner.
*/
#ifndef XFER_GROUP_H
#define XFER_GROUP_H

#include "batch_through.h"
#include "batch_uses.h"
#include "paths.h"

/* The tensors of another runtime whose memory one group reaches through imports. */
#define XFER_GROUP_VIEWS 8

/* One way a group may run, all of it at once: `many` takes its pieces in one submission (over
** imports of the other runtime's memory: imports), or `through` packs it into host chunks that
** `many` scatters; `many` NULL: element by element on the group's route. */
typedef struct xfer_group_way {
  xfer_device *many, *through;
  int imports;
} xfer_group_way;
#define XFER_GROUP_WAYS 3

typedef struct xfer_group {
  xfer_device *from, *to;
  size_t part;                  /* the part its elements are in (xfer_batch_prepare_parts) */
  size_t first, count;          /* the group's elements: order[first .. first+count) */
  const xfer_batch_item *items; /* the batch's elements, and its order of them: the group's */
  const size_t *order;          /* ... are items[order[first]] .. items[order[first+count-1]] */
  size_t bytes;
  xfer_route route;             /* made once, at prepare */
  xfer_code planned;            /* its error, reported when the group runs */
  xfer_error planning;
  int verify;                   /* each element's bytes checked once moved: opts.verify (1, -1;
                                ** 0: as the context's setting when it runs) */
  int general;                  /* one element moved as xfer_transfer_copy moves it, by */
  xfer_move_plan *plan;         /* ... its plan, made once at prepare (planned: its error), or
                                ** the one before's where their elements are alike: */
  int owns_plan;
  size_t sample;                /* a general group's element (its only one) */
  xfer_group_way ways[XFER_GROUP_WAYS];   /* the ways it may run, best first, decided at prepare; the
                                ** last is element by element. A way whose memory a runner
                                ** cannot reach, or that a driver refuses, gives way to the
                                ** next, for good: */
  int nways, way;               /* ... how many, and the one in use, whose parts follow */
  xfer_device *many;            /* the device that takes the group at once, or NULL */
  xfer_piece *pieces;           /* ... and its pieces, in the group's order */
  xfer_device *through;         /* a group through host memory in two submissions: the device
                                ** that packs the sources into it (`many` then scatters it) */
  xfer_through staged;          /* ... and its parts, chunk by chunk (batch_through.c) */
  uint64_t keep;                /* names the pieces to `many` from the second run on (a runtime
                                ** may keep what it made of them: CUDA its descriptor table on
                                ** the device); a new name whenever the pieces change */
  unsigned runs;                /* runs at once in this way (the first passes no name: a batch
                                ** made for one run keeps nothing) */
  xfer_use *uses;               /* the group's tensors, each once, checked once per run */
  size_t nuses;
  int imports;                  /* the runner reaches ends of another runtime through imports
                                ** of their memory, one per tensor: */
  size_t nviews;
  struct {
    const xfer_tensor *t;
    void *view;                 /* t's segment as the runner sees it when the pieces were made */
  } views[XFER_GROUP_VIEWS];
} xfer_group;

/* The bytes an element moves (nbytes 0: its whole tensors). */
static inline size_t xfer_item_bytes(const xfer_batch_item *it)
{
  return it->nbytes ? it->nbytes : it->src->nbytes;
}

/* The ways the group may run, best first, decided once (its route made), the way before the
** first in use: xfer_group_next_way then makes the first whose parts can be made. */
void xfer_group_ways(xfer_group *gr);
/* The group's next way whose parts can be made (memory its runner reaches): the runner asks
** this when a way is refused, and takes what the plan lists -- it chooses nothing itself. */
xfer_code xfer_group_next_way(xfer_group *gr, xfer_error *err);
/* Before a run over imports (devices held): the pieces made current with the imports of now. */
xfer_code xfer_group_views_current(xfer_group *gr, xfer_error *err);
/* The devices a group's run holds: its route's, and a runner that is neither end. */
int xfer_group_devices(const xfer_group *gr, xfer_device *devs[6]);
/* What the group's runner kept of its pieces let go (they change, or go). */
void xfer_group_forget(xfer_group *gr);
/* Its parts freed (the plan of a general group is its batch's to free). */
void xfer_group_free(xfer_group *gr);

#endif
