/*
** plan.h -- the whole of one move, decided once: for t:to(dev) and dst:copy_from(src), with a
** view at either end, a dtype change or neither, every step that will run, in order -- pack,
** convert, the views' runs at once, the contiguous move on its route, scatter -- where each
** runs, and what runs instead when a step may be refused. plan.c makes plans (its
** callers: transfer.c's runner, and xfer_transfer_plan, which puts them into words);
** transfer.c runs them and decides nothing. Layer 10 of docs/architecture.md.
*/
#ifndef XFER_PLAN_H
#define XFER_PLAN_H

#include "route.h"

typedef enum xfer_step_kind {
  XFER_STEP_PACK,     /* a view (in) packed into a new tensor on `at`: its own device's row
                      ** copies there, or the backend's rectangle reads into host memory */
  XFER_STEP_CONVERT,  /* in (contiguous, host) into a new host tensor of `dtype` */
  XFER_STEP_AT_ONCE,  /* a view's runs moved to or from a contiguous tensor in one submission:
                      ** by `importer` over the device end's memory, else by the runtime that
                      ** takes batches there; refused (an import the driver declined, runs a
                      ** runtime will not take): the plan's fallback runs instead */
  XFER_STEP_MOVE,     /* in (contiguous) to out on `route` */
  XFER_STEP_SCATTER,  /* in (contiguous) written into the view out: on `at`, out's device, by
                      ** its row copies (in lies there), or from host memory by the rectangle
                      ** writes (`at` the host: in's bytes where they lie, or read packed) */
} xfer_step_kind;

/* The tensors a plan's steps read and make: the source, the target (copy_from's, or the new
** tensor of a to), and those made on the way. */
enum { XFER_SLOT_SRC = 0, XFER_SLOT_DST = 1, XFER_SLOT_A = 2, XFER_SLOT_B = 3, XFER_SLOTS = 4 };

typedef struct xfer_step {
  xfer_step_kind kind;
  int in, out;             /* slots; out is made by the step unless it is the copy's target */
  xfer_device *at;         /* PACK, SCATTER: where it runs; MOVE, AT_ONCE: out's device */
  xfer_dtype dtype;        /* CONVERT */
  int to_packed;           /* AT_ONCE: in is the view (1), or out is (0) */
  xfer_device *importer;   /* AT_ONCE: the runtime that imports the device end's memory */
  int view_at_device_end;  /* AT_ONCE: the view is that end (else the contiguous tensor) */
  xfer_device *runner;     /* AT_ONCE: else the device whose own runtime takes the batch */
  int with_opts;           /* MOVE, AT_ONCE: the caller's progress callback and via apply */
  xfer_route route;        /* MOVE, AT_ONCE: from, to, path, helpers (the ledger's key) */
  xfer_code planned;       /* MOVE: a route that could not be made, said when the move runs
                           ** (after its tensors are checked: a freed tensor is said first);
                           ** its error and words are its sequence's (one MOVE a sequence) */
} xfer_step;

#define XFER_PLAN_MOST 4
/* Steps run in order, and what their contiguous move (a sequence has one at most: a pack, a
** conversion or a scatter around it) left in words: why its route could not be made, why a
** path was passed over. Kept here, not in each step: a prepared batch keeps a plan per view or
** dtype element, and a step's own error and words were 1.3 KB of its 1.5. */
typedef struct xfer_steps {
  int n;
  xfer_step step[XFER_PLAN_MOST];
  xfer_error planning;     /* its MOVE's error, when that step's planned is set */
  char aside[256];         /* its MOVE's words: why a path that applies was passed over */
} xfer_steps;
typedef struct xfer_move_plan {
  xfer_steps primary;
  xfer_steps fallback;     /* run instead of primary's AT_ONCE step (and any after it) when it is
                           ** refused */
  int framed;              /* more than one move's worth: a failure is framed with both ends */
  xfer_device *from, *to;  /* the move's ends, for that frame */
  size_t nbytes;
} xfer_move_plan;
/* The plan of src:to(dst_dev, opts): checked arguments (an unknown dtype, a dtype change
** on a path that does not pass the host) are errors; a route that cannot be made is the
** MOVE's (see planned). */
xfer_code xfer_plan_to(xfer_tensor *src, xfer_device *dst_dev, const xfer_transfer_opts *opts,
                       xfer_move_plan *plan, xfer_error *err);
/* The plan of dst:copy_from(src, opts): the same, and shapes that differ are an error (for two
** contiguous ends the runner asks xfer_plan_shapes_agree under its locks). */
xfer_code xfer_plan_copy(xfer_tensor *dst, xfer_tensor *src, const xfer_transfer_opts *opts,
                         xfer_move_plan *plan, xfer_error *err);
/* The plan in words (xfer.plan, b:plan()): its reason, every step, its moves as the ledger
** will record them; a route that could not be made is its error. */
xfer_code xfer_plan_words(const xfer_move_plan *plan, const xfer_tensor *src, xfer_plan *words,
                          xfer_error *err);
xfer_code xfer_plan_shapes_agree(const xfer_tensor *dst, const xfer_tensor *src, xfer_error *err);

#endif
