/*
** transfer.h -- what the runner (transfer.c) offers the layer above it (batch.c): running a
** move's plan, a batch group's plan, and a route on two tensors whose devices and tensors the
** caller holds.
** Layer 10 of docs/architecture.md.
*/
#ifndef XFER_TRANSFER_H
#define XFER_TRANSFER_H

#include "group.h"
#include "paths.h"
#include "plan.h"

/* Moves src's bytes into dst (both contiguous, same length) by the route, the route's devices
** held and both tensors checked by the caller; verify (1, -1, 0: as xfer_config's): the bytes
** that arrived checked against the source's (CRC32C; XFER_E_CORRUPT); frames an error with both ends and tells the ledger. `src` and `dst` may be windows: shallow copies of a tensor naming a byte range of it
** (dev, buf, offset, nbytes are what a path reads), never retained or released. */
xfer_code xfer_transfer_run(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                            int verify, xfer_error *err);

/* Runs a move's plan (plan.h) from src into dst (copy_from's plan), or into a new tensor in
** *out (to's: dst NULL): every step, a refused one's fallback, what it made on the way
** released, a failure framed with the move's ends. The one runner of to, copy_from and a
** batch's views and dtype changes. */
xfer_code xfer_plan_run(const xfer_move_plan *plan, xfer_tensor *src, xfer_tensor *dst,
                        const xfer_transfer_opts *opts, xfer_tensor **out, xfer_error *err);

/* Runs a batch group (group.h; the devices it names held here, its tensors marked busy by the
** caller): at once in its way, the next ways the plan lists when one is refused, or element by
** element; done[i] set for each element i that moved. On failure *failed is the element to
** name (a submission fails whole: its first). */
xfer_code xfer_group_run(xfer_group *g, unsigned char *done, size_t *failed, xfer_error *err);

/* Installs the deadline a move's (or a batch run's) options ask for -- theirs, else the
** context's xfer_config timeout -- from now; xfer_watch_restore puts back the one before. */
xfer_watch xfer_transfer_watch(const xfer_ctx *ctx, const xfer_transfer_opts *opts);

#endif
