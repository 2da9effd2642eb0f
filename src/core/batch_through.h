/*
** batch_through.h -- a batch group through host memory (batch_through.c): packed by one
** device's runtime, scattered by another's, chunk by chunk, the two overlapped: a way a
** group may run (group.c). Layer 11 of docs/architecture.md, below the runner.
*/
#ifndef XFER_BATCH_THROUGH_H
#define XFER_BATCH_THROUGH_H

#include "plan.h"

typedef struct xfer_through {
  xfer_device *packer, *scatterer;
  xfer_piece *packing, *scattering; /* source -> host chunk, host chunk -> target: the parts of
                                    ** the pieces, cut at the chunks' edges; a host end's
                                    ** offset is its place in its chunk */
  size_t *first;                    /* chunk c's parts: [first[c], first[c+1]) */
  size_t nchunks, npieces, bytes;
  size_t chunk;                     /* packed bytes a chunk holds (route.c's policy) */
} xfer_through;

/* The parts of `n` pieces whose dst ends `scatterer` reaches and src ends `packer` reaches
** (set in t by the caller), in chunks of `chunk` packed bytes. */
xfer_code xfer_through_make(xfer_through *t, const xfer_piece *ends, size_t n, size_t chunk,
                            xfer_error *err);
/* Runs them (the devices held by the caller): two chunks of the host pool. */
xfer_code xfer_through_run(xfer_through *t, xfer_ctx *ctx, xfer_error *err);
void xfer_through_free(xfer_through *t);

#endif
