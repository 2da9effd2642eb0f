/*
** transfer.h -- what transfer.c offers the layer above it (batch.c): running a route on two
** tensors whose devices and tensors the caller holds.
** Layer 10 of docs/architecture.md.
*/
#ifndef XFER_TRANSFER_H
#define XFER_TRANSFER_H

#include "paths.h"

/* Moves src's bytes into dst (both contiguous, same length) by the route, the route's devices
** held and both tensors checked by the caller; frames an error with both ends and tells the
** ledger. `src` and `dst` may be windows: shallow copies of a tensor naming a byte range of it
** (dev, buf, offset, nbytes are what a path reads), never retained or released. */
xfer_code xfer_transfer_run(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                            xfer_error *err);

#endif
