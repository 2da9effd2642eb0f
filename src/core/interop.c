/*
** interop.c -- the interop path: two runtimes on one physical GPU (equal device UUIDs)
** move a tensor with device copies only. A runtime that exports (Vulkan) hands an opaque
** fd of its tensor's memory to one that imports (CUDA, OpenCL), once per tensor and
** importer; the import lives as long as the tensor. Two importers (CUDA <-> OpenCL) meet
** in an arena: exported memory both import once, kept with the context. Across two GPUs
** that CUDA joins with peer copies, an end of another runtime is reached the same way, by
** importing its memory into the CUDA device of its GPU: the move is one peer copy.
*/
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

typedef struct xfer_arena {
  xfer_device *dev;             /* the exporting device */
  void *buf;
  size_t size;
  xfer_import imports[XFER_MAX_IMPORTS];
  int nimports;
} xfer_arena;

static int same_gpu(const xfer_device *a, const xfer_device *b)
{
  return a->has_uuid && b->has_uuid && !memcmp(a->uuid, b->uuid, sizeof a->uuid);
}

/* An exporting device on the same GPU as `dev`, for the arena. */
static xfer_device *exporter_for(const xfer_device *dev)
{
  xfer_ctx *ctx = dev->ctx;
  for (size_t d = 0; d < ctx->ndevices; d++)
    if (ctx->devices[d]->can_export && !ctx->devices[d]->lost && same_gpu(ctx->devices[d], dev))
      return ctx->devices[d];
  return NULL;
}

/* -- Two GPUs: peer copies through exported memory ---------------------------------- */

/* `dev` as runtime `rt` sees it: itself, or the device of `rt` on the same GPU that imports
** what `dev` exports. NULL when there is none. */
static xfer_device *peer_alias(const xfer_device *dev, const xfer_runtime *rt)
{
  if (dev->rt == rt) return (xfer_device *)dev;
  if (!dev->can_export || dev->lost) return NULL;
  xfer_ctx *ctx = dev->ctx;
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_device *alias = ctx->devices[d];
    if (alias->rt == rt && alias->can_import && !alias->lost && same_gpu(alias, dev)) return alias;
  }
  return NULL;
}

/* Two GPUs that a runtime with peer copies (CUDA, over NVLink) joins, where an end of
** another runtime (Vulkan) exports its memory to the runtime's device on its GPU: the move
** is a peer copy, no host. */
typedef struct peer_route {
  xfer_device *src, *dst;       /* the peer runtime's devices standing for both ends */
} peer_route;

static int peer_route_for(const xfer_device *src, const xfer_device *dst, peer_route *route)
{
  if (src == dst || (src->rt == dst->rt && src->rt->backend->peer) || !src->has_uuid ||
      !dst->has_uuid || same_gpu(src, dst))
    return 0; /* a runtime's copy between its own devices is same_runtime's */
  xfer_ctx *ctx = src->ctx;
  for (size_t r = 0; r < ctx->nruntimes; r++) {
    const xfer_runtime *rt = &ctx->runtimes[r];
    if (!rt->available || !rt->backend || !rt->backend->peer) continue;
    xfer_device *s = peer_alias(src, rt), *d = peer_alias(dst, rt);
    if (s && d && s != d) {
      route->src = s;
      route->dst = d;
      return 1;
    }
  }
  return 0;
}

int xfer_interop_applies(const xfer_device *src, const xfer_device *dst)
{
  peer_route route;
  if (peer_route_for(src, dst, &route)) return 1;
  if (src->rt == dst->rt || !same_gpu(src, dst)) return 0;
  if ((src->can_export && dst->can_import) || (dst->can_export && src->can_import)) return 1;
  return src->can_import && dst->can_import && exporter_for(src) != NULL;
}

int xfer_interop_peers(const xfer_device *src, const xfer_device *dst, xfer_device **src_alias,
                       xfer_device **dst_alias)
{
  peer_route route;
  if (!peer_route_for(src, dst, &route)) return 0;
  *src_alias = route.src;
  *dst_alias = route.dst;
  return 1;
}

int xfer_interop_helpers(const xfer_device *src, const xfer_device *dst, xfer_device *out[2])
{
  peer_route route;
  if (peer_route_for(src, dst, &route)) {
    out[0] = route.src;
    out[1] = route.dst;
    return 2;
  }
  if (src->rt == dst->rt || !same_gpu(src, dst) || src->can_export || dst->can_export ||
      !src->can_import || !dst->can_import)
    return 0;
  out[0] = exporter_for(src);
  return out[0] != NULL;
}

void xfer_imports_release(xfer_import *imports, int *nimports)
{
  for (int i = 0; i < *nimports; i++) {
    xfer_device *dev = imports[i].dev;
    dev->rt->backend->release_import(dev, imports[i].buf, imports[i].handle);
  }
  *nimports = 0;
}

/* The buffer `buf` of `owner` as `importer` sees it: from the cache, or exported and
** imported now. The fd is closed exactly once on every failure; after a successful import
** it is the importer's. */
static xfer_code imported(xfer_device *owner, void *buf, size_t nbytes, xfer_import *cache,
                          int *ncache, xfer_device *importer, void **out, xfer_error *err)
{
  for (int i = 0; i < *ncache; i++)
    if (cache[i].dev == importer) {
      *out = cache[i].buf;
      return XFER_E_OK;
    }
  if (*ncache == XFER_MAX_IMPORTS)
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "import", "a buffer is imported at most %d times",
                        XFER_MAX_IMPORTS);
  int fd = -1;
  uint64_t size = 0;
  xfer_code rc = owner->rt->backend->export_fd(owner, buf, &fd, &size, err);
  if (rc) return rc;
  void *ibuf = NULL, *handle = NULL;
  rc = importer->rt->backend->import_fd(importer, fd, size, nbytes, &ibuf, &handle, err);
  if (rc) {
    close(fd);
    return rc;
  }
  cache[*ncache].dev = importer;
  cache[*ncache].buf = ibuf;
  cache[*ncache].handle = handle;
  (*ncache)++;
  *out = ibuf;
  return XFER_E_OK;
}

/* -- The arena ------------------------------------------------------------------------- */

/* At close (one thread left), from arena_ready under the arena lock, or from
** xfer_empty_cache, which takes the lock and the exporter's. */
void xfer_arena_release(xfer_ctx *ctx)
{
  xfer_arena *a = ctx->arena;
  if (!a) return;
  xfer_imports_release(a->imports, &a->nimports);
  a->dev->rt->backend->free(a->dev, a->buf, a->size);
  free(a);
  ctx->arena = NULL;
}

uint64_t xfer_arena_bytes(const xfer_device *dev)
{
  const xfer_arena *a = dev->ctx->arena;
  return a && a->dev == dev ? a->size : 0;
}

/* An arena of at least n bytes on `exporter`, made (or grown) now. Its memory is the
** exporter's but no tensor's: it is reported as cached, not in use. */
static xfer_code arena_ready(xfer_device *exporter, size_t n, xfer_arena **out, xfer_error *err)
{
  xfer_ctx *ctx = exporter->ctx;
  if (ctx->arena && ctx->arena->dev == exporter && ctx->arena->size >= n) {
    *out = ctx->arena;
    return XFER_E_OK;
  }
  xfer_arena_release(ctx);
  xfer_arena *a = calloc(1, sizeof *a);
  if (!a) return xfer_err_set(err, XFER_E_ALLOC, "alloc", "out of host memory");
  a->dev = exporter;
  a->size = n < ((size_t)64 << 20) ? (size_t)64 << 20 : n; /* grows rarely */
  xfer_code rc = exporter->rt->backend->alloc(exporter, a->size, &a->buf, err);
  if (rc) {
    free(a);
    return rc;
  }
  ctx->arena = a;
  *out = a;
  return XFER_E_OK;
}

/* -- The move ------------------------------------------------------------------------------ */

/* A buffer as the peer runtime's device `alias` sees it: its own, or imported once. */
static xfer_code peer_view(xfer_tensor *t, xfer_device *alias, void **view, xfer_error *err)
{
  if (t->dev == alias) {
    *view = t->buf;
    return XFER_E_OK;
  }
  return imported(t->dev, t->buf, t->nbytes, t->imports, &t->nimports, alias, view, err);
}

xfer_code xfer_interop_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  xfer_device *from = src->dev, *to = dst->dev;
  const xfer_backend *fb = from->rt->backend, *tb = to->rt->backend;
  size_t n = src->nbytes;
  void *view = NULL;
  xfer_code rc;
  peer_route route;
  if (peer_route_for(from, to, &route)) { /* two GPUs: one peer copy between two views */
    void *src_view = NULL, *dst_view = NULL;
    rc = peer_view(src, route.src, &src_view, err);
    if (!rc) rc = peer_view(dst, route.dst, &dst_view, err);
    if (rc) return rc;
    const xfer_backend *pb = route.src->rt->backend;
    if (route.src == from || route.dst == to)
      return pb->peer(route.dst, dst_view, route.src, src_view, n, err);
    /* Both ends imported: a peer copy between two imports ran at 38.6 GB/s on two H200s
    ** (slower than staging; the driver does not map imports for the peer), against 388 with
    ** one end the runtime's own. So the source is first copied within its GPU into memory
    ** of its own, freed when the move ends. */
    void *scratch = NULL;
    rc = xfer_buffer_alloc(route.src, n, &scratch, err);
    if (rc) return rc;
    rc = pb->copy(route.src, scratch, 0, src_view, 0, n, err);
    if (!rc) rc = pb->peer(route.dst, dst_view, route.src, scratch, n, err);
    xfer_buffer_free(route.src, scratch, n);
    return rc;
  }
  if (!same_gpu(from, to)) /* planned as a peer copy, but a device it needs was lost since */
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "plan",
                        "interop between %s and %s is no longer possible: a device it needs was lost",
                        from->name, to->name);
  if (from->can_export && to->can_import) { /* the target copies out of the source */
    rc = imported(from, src->buf, n, src->imports, &src->nimports, to, &view, err);
    return rc ? rc : tb->copy_imported(to, dst->buf, view, n, 0, err);
  }
  if (to->can_export && from->can_import) { /* the source copies into the target */
    rc = imported(to, dst->buf, n, dst->imports, &dst->nimports, from, &view, err);
    return rc ? rc : fb->copy_imported(from, src->buf, view, n, 1, err);
  }
  /* two importers: through the arena, one device copy each, one move at a time */
  xfer_arena *a = NULL;
  void *src_view = NULL, *dst_view = NULL;
  xfer_ctx *ctx = from->ctx;
  xfer_device *exporter = exporter_for(from); /* locked already, with both ends */
  if (!exporter) /* lost since the move was planned */
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "plan",
                        "interop between %s and %s is no longer possible: a device it needs was lost",
                        from->name, to->name);
  pthread_mutex_lock(&ctx->arena_lock);
  rc = arena_ready(exporter, n, &a, err);
  if (!rc) rc = imported(a->dev, a->buf, a->size, a->imports, &a->nimports, from, &src_view, err);
  if (!rc) rc = imported(a->dev, a->buf, a->size, a->imports, &a->nimports, to, &dst_view, err);
  if (!rc) rc = fb->copy_imported(from, src->buf, src_view, n, 1, err);
  if (!rc) rc = tb->copy_imported(to, dst->buf, dst_view, n, 0, err);
  pthread_mutex_unlock(&ctx->arena_lock);
  return rc;
}

void xfer_empty_cache(xfer_ctx *ctx)
{
  xfer_staging_release(ctx);
  /* moves take the exporter's lock before the arena's: so does this, which means reading
  ** who the exporter is first and checking it did not change */
  pthread_mutex_lock(&ctx->arena_lock);
  xfer_device *exporter = ctx->arena ? ctx->arena->dev : NULL;
  pthread_mutex_unlock(&ctx->arena_lock);
  if (!exporter) return;
  xfer_device_lock(exporter);
  pthread_mutex_lock(&ctx->arena_lock);
  if (ctx->arena && ctx->arena->dev == exporter) xfer_arena_release(ctx);
  pthread_mutex_unlock(&ctx->arena_lock);
  xfer_device_unlock(exporter);
}
