/*
** memory.h -- every byte xferlua holds: page-aligned host memory (hostmem.c), and each
** device's caching allocator with its segments, their pins and imports (memory.c; DESIGN.md,
** "Memory"). Layer 5 of docs/architecture.md: it calls util.h and device.h, and the backends
** only through backend.h's wrappers.
*/
#ifndef XFER_MEMORY_H
#define XFER_MEMORY_H

#include "device.h"

/* -- hostmem.c ---------------------------------------------------------------------- */

/* Page-aligned host memory; large blocks come populated (no page-fault storm). */
void *xfer_host_pages_alloc(size_t nbytes);
void xfer_host_pages_free(void *p, size_t nbytes);

/* -- memory.c: blocks ----------------------------------------------------------------- */

/* A block of at least nbytes (NULL for 0 bytes): from the device's cache, or from the
** driver (emptying the cache, running the reclaimer and retrying once when it refuses). */
xfer_code xfer_mem_alloc(xfer_device *dev, size_t nbytes, xfer_block **out, xfer_error *err);
/* Back to the cache (or to the driver, when caching is off or over the limit). */
void xfer_mem_free(xfer_block *b);
/* host: blocks are whole pages, so any host block can be pinned or imported in place */
xfer_code xfer_mem_device_init(xfer_device *dev, int host);
void xfer_mem_device_fini(xfer_device *dev);
/* After the runtimes open: which devices keep their memory in another runtime's. */
void xfer_mem_link_backing(xfer_ctx *ctx);
/* Quarantine: a block freed while a device of its context is stalled (a wait for its work
** ended at a move's deadline) is held by each such device -- its work may still use it --
** and goes back only when xfer_mem_quarantine_settle finds the device done. */
/* When a stalled device's blocks are let go (and it is no longer stalled): NOW, if its work is
** done (copy->idle); CLOSE (the device closes), once it is within 2 s, else kept; END (the
** context goes, its runtimes next), after 2 s at most whatever its work. Nothing for a device
** not stalled. */
typedef enum { XFER_SETTLE_NOW, XFER_SETTLE_CLOSE, XFER_SETTLE_END } xfer_settle;
void xfer_mem_quarantine_settle(xfer_device *dev, xfer_settle how);
/* Every stalled device of the context whose lock is free settled NOW: called when a move lets
** its devices go, so that a device no move uses again does not hold what is freed for good. */
void xfer_mem_settle_stalled(xfer_ctx *ctx);

/* At close, before the runtimes: every cached segment back to its driver. */
void xfer_mem_release_all(xfer_ctx *ctx);
/* Memory's settings (cache, cache_limit): their defaults (XFER_CACHE read), their check, and
** what a change gives back at once (open.c keeps every setting and asks). */
void xfer_mem_config_defaults(xfer_config *config);
xfer_code xfer_mem_config_check(const xfer_config *config, xfer_error *err);
void xfer_mem_config_applied(xfer_ctx *ctx, const xfer_config *config);
/* Tensor bytes made and dropped, for the GC pressure count. */
void xfer_mem_tensor_made(xfer_ctx *ctx, size_t nbytes);
void xfer_mem_tensor_dropped(xfer_ctx *ctx, size_t nbytes);

/* -- memory.c: imports ------------------------------------------------------------------ */

/* A segment's imports, under its allocator's lock: `importer`'s view of it or NULL (*room:
** whether another import would fit), and one more kept (0 when there was no room). */
void *xfer_mem_import_find(xfer_segment *seg, const xfer_device *importer, int *room);
int xfer_mem_import_keep(xfer_segment *seg, xfer_device *importer, void *buf, void *handle);
/* Undoes what `dev` made for host segments, and its imports of other devices' segments (a
** closing device). */
void xfer_mem_host_unpin_device(xfer_ctx *ctx, xfer_device *dev);
void xfer_mem_drop_imports_by(xfer_ctx *ctx, xfer_device *dev);
/* Releases the imports listed (each through its importer's backend). */
void xfer_imports_release(xfer_import *imports, int *nimports);

/* -- memory.c: host segments, the one registry of host memory runtimes use in place ------ */

/* 1 and the span of the host segment holding [ptr, ptr+n), else 0 (memory xferlua does not
** own, which a runtime must not keep hold of). */
int xfer_host_span_of(xfer_ctx *ctx, const void *ptr, size_t n, xfer_host_span *out);
/* What `key` (a device, or an owner) made for the host segment at `base` and kept with it,
** or NULL. */
void *xfer_host_pin(xfer_ctx *ctx, const char *base, const void *key);
/* Keeps `pin` with the segment at `base` until it goes back to the system (then dev's
** host_unpin undoes it). 0 when the segment is gone, holds one of dev's already, or has no
** room: the caller undoes its own. */
int xfer_host_pin_keep(xfer_ctx *ctx, const char *base, xfer_device *dev, void *pin);
/* The same for an owner that is no device: `undo(owner, base, size, pin)` undoes the pin when
** the segment goes back to the system or xfer_host_unpin_owner(ctx, owner) is called; it runs
** under the host allocator's lock (it must not call back into the allocator). */
int xfer_host_pin_keep_owned(xfer_ctx *ctx, const char *base, void *owner, void *pin,
                             xfer_pin_undo undo);
/* How many kept pins of host memory and imports of device memory have been undone in this
** process: a runtime that found memory pinned or imported may rely on its address while this
** count has not changed. */
uint64_t xfer_mem_mappings_undone(void);
/* Every pin `owner` kept is undone (the owner is closing). */
void xfer_host_unpin_owner(xfer_ctx *ctx, void *owner);
/* Wrapped host memory the runtimes may pin (pin = true), and letting go of it. */
xfer_segment *xfer_mem_host_external(xfer_ctx *ctx, void *base, size_t size);
void xfer_mem_host_external_drop(xfer_ctx *ctx, xfer_segment *seg);

#endif
