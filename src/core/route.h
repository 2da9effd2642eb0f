/*
** route.h -- the one decision of a move: which path, which runtime exports and which
** imports, which helper devices, how many staging chunks. route.c makes it; transfer.c,
** interop.c and staged.c only carry it out. (Layer 8 of docs/architecture.md: it sees the
** tensors, the ledger and the backends' capabilities, and nothing that moves.)
*/
#ifndef XFER_ROUTE_H
#define XFER_ROUTE_H

#include "tensor.h"

/* How an interop move shares memory between its ends. */
typedef enum xfer_share {
  XFER_SHARE_NONE = 0,
  XFER_SHARE_PEER,         /* two GPUs a peer runtime joins: helpers are its devices standing for
                           ** src and dst, and the move is one peer copy between their views */
  XFER_SHARE_INTO_BACKED,  /* dst's memory is src's runtime's own: src copies into it */
  XFER_SHARE_OUT_OF_BACKED, /* src's memory is dst's runtime's own: dst copies out of it */
  XFER_SHARE_SRC_EXPORTS,  /* dst imports src's segment once and copies out of it */
  XFER_SHARE_DST_EXPORTS,  /* src imports dst's segment once and copies into it */
  XFER_SHARE_BETWEEN,      /* both import a block of helpers[0] (the exporter of their GPU) */
} xfer_share;

typedef struct xfer_route {
  xfer_path path;
  xfer_device *from, *to;
  size_t nbytes;
  xfer_share share;        /* interop: how */
  xfer_device *helpers[2]; /* interop: the peer runtime's devices, or the exporter */
  int nhelpers;
  int peer_scratch;        /* PEER: neither end is the peer runtime's own memory (both would be
                           ** imports, which the peer copy reads slowly): the source is first
                           ** copied into scratch memory of helpers[0]'s own */
  size_t chunk;            /* staged: the chunk size and how many chunks in the ring */
  int depth;
  size_t told_step;        /* a single-call path told of its progress: the bytes of each step
                           ** (0: one call whatever is told; staged: its chunks tell) */
} xfer_route;

/* The staging policy's settings (staging_chunk, staging_depth): their defaults and ranges
** (open.c keeps them). */
void xfer_route_config_defaults(xfer_config *config);
xfer_code xfer_route_config_check(const xfer_config *config, xfer_error *err);

/* The packed bytes of each chunk a batch group moving through host memory stages (the staging
** policy's: route.c cuts every move's bytes). */
size_t xfer_route_through_chunk(void);

/* The route moving src's bytes to dst_dev (dst_t: the target tensor when there is one, whose
** memory may rule interop out). The tensors are not checked (a move checks them under its
** locks); a lost or closed target, or a forced path that does not apply, is an error.
** aside (may be NULL): why a path that applies was set aside, in words. */
xfer_code xfer_route_make(const xfer_tensor *src, xfer_device *dst_dev, const xfer_tensor *dst_t,
                          const xfer_transfer_opts *opts, xfer_route *route, char *aside,
                          size_t aside_cap, xfer_error *err);
/* The same for a move of nbytes from device `from`, whose source tensor (src) the move makes
** on its way (NULL: a new tensor of xferlua's own, as a pack or a conversion makes). */
xfer_code xfer_route_make_from(xfer_device *from, size_t nbytes, const xfer_tensor *src,
                               xfer_device *dst_dev, const xfer_tensor *dst_t,
                               const xfer_transfer_opts *opts, xfer_route *route, char *aside,
                               size_t aside_cap, xfer_error *err);
/* The route, made for another move between the same tensors' devices, sized for a move of
** nbytes: its chunks planned again (a batch group's route serves elements of every size; a
** 16-byte element's single chunk once staged a 100 kB one, past the chunk's end). */
void xfer_route_resize(xfer_route *route, size_t nbytes);
/* A device that runs host <-> dev batches (copy->many) over `dev`'s memory imported: one of
** another runtime on its GPU that imports what dev exports (CUDA for Vulkan on NVIDIA), or NULL
** (dev shares memory with the host, or XFER_BATCH_IMPORTS=0). */
xfer_device *xfer_route_many_importer(const xfer_device *dev);
/* The devices a move on this route uses, both ends first: how many (at most 4). */
int xfer_route_devices(const xfer_route *route, xfer_device *out[4]);

/* The route in words for xfer.plan: its path, its reason (after what plan->reason said already,
** the steps before it, and `aside`: why a path was passed over), its steps appended, and the
** estimates of each path that applies. */
void xfer_route_words(const xfer_route *route, const xfer_tensor *src, const char *aside,
                      xfer_plan *plan);
/* A step of a plan in words (at most XFER_PLAN_MAX_STEPS; more are dropped). */
void xfer_plan_say(xfer_plan *plan, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
