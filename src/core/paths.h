/*
** paths.h -- the paths that are more than one backend call: interop (interop.c: memory one
** runtime exports and another imports, or a peer copy across two GPUs) and staged (staged.c:
** a pipeline through host chunks). They carry out a route (route.h) and decide nothing.
** Layer 9 of docs/architecture.md: they call route.h's layers below, never transfer.c.
*/
#ifndef XFER_PATHS_H
#define XFER_PATHS_H

#include "route.h"

/* The interop move of route->share between src and dst (devices held). */
xfer_code xfer_interop_run(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                           xfer_error *err);
/* Whether the route's share is one copy that can go a range at a time (the exports and the
** backed memory: not a peer copy nor a move between two imports), and that range: n bytes
** from byte `at` of both tensors. */
int xfer_interop_ranged(const xfer_route *route);
xfer_code xfer_interop_run_range(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst, size_t at,
                                 size_t n, xfer_error *err);
/* A tensor's memory as `importer` (a device of another runtime on its GPU) addresses it: its
** segment exported and imported once, kept with the segment (devices held); the tensor is at
** its own offset in *view. */
xfer_code xfer_interop_view(const xfer_tensor *t, xfer_device *importer, void **view,
                            xfer_error *err);
/* The staged move: route->depth host chunks of route->chunk bytes, the source read into one
** while the target is written from another. */
xfer_code xfer_staged_run(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                          xfer_error *err);

#endif
