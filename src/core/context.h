/*
** context.h -- a context made and its runtimes opened (context.c), the two halves open.c's
** xfer_ctx_open puts its settings between. Layer 7 of docs/architecture.md.
*/
#ifndef XFER_CONTEXT_H
#define XFER_CONTEXT_H

#include "types.h"

/* A context whose runtimes are named (their backend tables set), none opened; NULL: out of
** memory. */
xfer_ctx *xfer_ctx_new(void);
/* Opens every runtime (one that cannot work here is listed unavailable with its reason), then
** links the devices whose memory another runtime keeps. */
void xfer_ctx_open_runtimes(xfer_ctx *ctx);

#endif
