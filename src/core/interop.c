/*
** interop.c -- the interop path: two runtimes on one physical GPU (equal device UUIDs)
** move a tensor with device copies only. A runtime that exports (Vulkan) hands an opaque
** fd of a segment's memory to one that imports (CUDA, OpenCL), once per segment and
** importer; the import lives as long as the segment, which the caching allocator keeps
** when its tensors are freed, so a steady-state move is one device copy. Two importers
** (CUDA <-> OpenCL) meet in a block of the exporter's memory (cached with its imports like
** any other). Across two GPUs that CUDA joins with peer copies, an end of another runtime
** is reached the same way, by importing its memory into the CUDA device of its GPU: the
** move is one peer copy.
*/
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_call.h"

static int same_gpu(const xfer_device *a, const xfer_device *b)
{
  /* a remote device may be this very GPU, served back over the network: it shares nothing */
  return !a->remote && !b->remote && a->has_uuid && b->has_uuid &&
         !memcmp(a->uuid, b->uuid, sizeof a->uuid);
}

/* An exporting device on the same GPU as `dev`, for a move between two importers. */
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
  if (dev->backing && dev->backing->rt == rt && !dev->backing->lost) return dev->backing;
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
  if (src == dst || (src->rt == dst->rt && xfer_be_peer_joins(src, dst)) || !src->has_uuid ||
      !dst->has_uuid || same_gpu(src, dst))
    return 0; /* a runtime's copy between its own devices is same_runtime's */
  xfer_ctx *ctx = src->ctx;
  for (size_t r = 0; r < ctx->nruntimes; r++) {
    const xfer_runtime *rt = &ctx->runtimes[r];
    if (!rt->available || !xfer_rt_has_peer(rt)) continue;
    xfer_device *s = peer_alias(src, rt), *d = peer_alias(dst, rt);
    if (s && d && s != d) {
      route->src = s;
      route->dst = d;
      return 1;
    }
  }
  return 0;
}

/* One device's memory is the other's (a backed device and its backing): the backing
** runtime copies between its own buffers. */
static int backed_pair(const xfer_device *src, const xfer_device *dst)
{
  return (src->backing == dst && !dst->lost) || (dst->backing == src && !src->lost);
}

int xfer_interop_applies(const xfer_device *src, const xfer_device *dst)
{
  peer_route route;
  if (peer_route_for(src, dst, &route)) return 1;
  if (src->rt == dst->rt || !same_gpu(src, dst)) return 0;
  if (backed_pair(src, dst)) return 1;
  if ((src->can_export && dst->can_import) || (dst->can_export && src->can_import)) return 1;
  return src->can_import && dst->can_import && exporter_for(src) != NULL;
}

int xfer_interop_fits(const xfer_device *src, const xfer_device *dst, size_t nbytes)
{
  /* a large tensor's segment is its size rounded up to 2 MiB (memory.c) */
  uint64_t segment = ((uint64_t)nbytes + ((uint64_t)2 << 20) - 1) & ~(((uint64_t)2 << 20) - 1);
  xfer_device *helpers[2] = {NULL, NULL};
  const xfer_device *ends[4] = {src, dst, NULL, NULL};
  int n = xfer_interop_helpers(src, dst, helpers);
  for (int i = 0; i < n; i++) ends[2 + i] = helpers[i];
  for (int i = 0; i < 4; i++)
    if (ends[i] && ends[i]->max_import && segment > ends[i]->max_import) return 0;
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
  if (src->rt == dst->rt || !same_gpu(src, dst) || backed_pair(src, dst) || src->can_export ||
      dst->can_export || !src->can_import || !dst->can_import)
    return 0;
  out[0] = exporter_for(src);
  return out[0] != NULL;
}

void xfer_imports_release(xfer_import *imports, int *nimports)
{
  for (int i = 0; i < *nimports; i++) {
    xfer_be_release_import(imports[i].dev, imports[i].buf, imports[i].handle);
  }
  *nimports = 0;
}

/* The segment of block `b` as `importer` sees it: from the segment's imports, or exported
** and imported now. The fd is closed exactly once on every failure; after a successful
** import it is the importer's. Two moves never import one segment into one device at once:
** both would hold the segment's device; the list itself is the allocator's (memory.c), which
** a closing device edits too. */
static xfer_code imported(const xfer_block *b, xfer_device *importer, void **out, xfer_error *err)
{
  xfer_segment *seg = b->seg;
  int room = 0;
  if ((*out = xfer_mem_import_find(seg, importer, &room))) return XFER_E_OK;
  if (!room)
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "import", "a buffer is imported at most %d times",
                        XFER_MAX_IMPORTS);
  int fd = -1;
  uint64_t size = 0;
  xfer_code rc = xfer_be_export_fd(seg->dev, seg->buf, &fd, &size, err);
  if (rc) return rc;
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* drivers make it inheritable; a child must not get it */
  void *ibuf = NULL, *handle = NULL;
  rc = xfer_be_import_fd(importer, fd, size, seg->size, "import", &ibuf, &handle, err);
  if (rc) {
    close(fd);
    return rc;
  }
  if (!xfer_mem_import_keep(seg, importer, ibuf, handle)) { /* filled up meanwhile */
    xfer_be_release_import(importer, ibuf, handle);
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "import", "a buffer is imported at most %d times",
                        XFER_MAX_IMPORTS);
  }
  *out = ibuf;
  return XFER_E_OK;
}

/* -- The plan, in words ----------------------------------------------------------------- */

/* How `alias` (of the peer runtime) reaches `dev`'s tensors, as a step; 1 when it is memory
** of alias's own. */
static int describe_view(xfer_plan *plan, const xfer_device *dev, const xfer_device *alias)
{
  if (dev == alias) return 1;
  if (dev->backing == alias) {
    xfer_plan_step(plan, "%s's memory is %s's, imported into %s", dev->name, alias->name,
                   dev->name);
    return 1;
  }
  xfer_plan_step(plan, "export %s's buffer, import it into %s once", dev->name, alias->name);
  return 0;
}

void xfer_interop_describe(const xfer_tensor *src, const xfer_device *dst, xfer_plan *plan)
{
  const xfer_device *from = src->dev;
  size_t n = src->nbytes;
  peer_route route;
  if (peer_route_for(from, dst, &route)) {
    snprintf(plan->reason, sizeof plan->reason,
             "%s and %s are two GPUs that %s joins: one peer copy through shared memory, no host",
             from->name, dst->name, route.src->rt->name);
    int src_own = describe_view(plan, from, route.src);
    int dst_own = describe_view(plan, dst, route.dst);
    if (!src_own && !dst_own)
      xfer_plan_step(plan, "copy %zu bytes on %s into scratch memory of its own", n,
                     route.src->name);
    xfer_plan_step(plan, "peer copy of %zu bytes from %s to %s", n, route.src->name,
                   route.dst->name);
    return;
  }
  snprintf(plan->reason, sizeof plan->reason,
           "%s and %s are one GPU: device copies through shared memory, no host", from->name,
           dst->name);
  if (backed_pair(from, dst)) {
    const xfer_device *owner = dst->backing == from ? from : dst;
    const xfer_device *backed = owner == from ? dst : from;
    xfer_plan_step(plan, "%s's memory is %s's, imported into %s", backed->name, owner->name,
                   backed->name);
    xfer_plan_step(plan, "copy %zu bytes on %s", n, owner->name);
  } else if (from->can_export && dst->can_import) {
    xfer_plan_step(plan, "export %s's buffer, import it into %s once, copy %zu bytes there",
                   from->name, dst->name, n);
  } else if (dst->can_export && from->can_import) {
    xfer_plan_step(plan, "export %s's buffer, import it into %s once, copy %zu bytes there",
                   dst->name, from->name, n);
  } else {
    xfer_plan_step(plan, "copy %zu bytes on %s into exported memory both import once", n,
                   from->name);
    xfer_plan_step(plan, "copy them on %s out of it", dst->name);
  }
}

/* -- The move ------------------------------------------------------------------------------ */

/* The block a tensor's memory lies in: its own, or its base's for a view. */
static const xfer_block *block_of(const xfer_tensor *t) { return t->base ? t->base->block : t->block; }

/* A tensor's memory as the backing device sees it (its own), or NULL. */
static void *backing_view(const xfer_tensor *t, const xfer_device *alias)
{
  return t->dev->backing == alias && block_of(t) ? block_of(t)->seg->backing_buf : NULL;
}

/* A tensor as the peer runtime's device `alias` sees it: its own buffer, the memory it lives
** in, or its segment imported once (the tensor at its own offset in each). *own: the memory
** is alias's own (not an import). */
static xfer_code peer_view(xfer_tensor *t, xfer_device *alias, void **view, int *own,
                           xfer_error *err)
{
  *own = 1;
  if (t->dev == alias) {
    *view = t->buf;
    return XFER_E_OK;
  }
  if ((*view = backing_view(t, alias))) return XFER_E_OK;
  *own = 0;
  return imported(block_of(t), alias, view, err);
}

xfer_code xfer_interop_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  xfer_device *from = src->dev, *to = dst->dev;
  size_t n = src->nbytes;
  void *view = NULL;
  xfer_code rc;
  peer_route route;
  if (peer_route_for(from, to, &route)) { /* two GPUs: one peer copy between two views */
    void *src_view = NULL, *dst_view = NULL;
    int src_own = 0, dst_own = 0;
    rc = peer_view(src, route.src, &src_view, &src_own, err);
    if (!rc) rc = peer_view(dst, route.dst, &dst_view, &dst_own, err);
    if (rc) return rc;
    if (src_own || dst_own)
      return xfer_be_peer(route.dst, dst_view, dst->offset, route.src, src_view, src->offset, n,
                          err);
    /* Both ends imported: a peer copy between two imports ran at 38.6 GB/s on two H200s
    ** (slower than staging; the driver does not map imports for the peer), against 388 with
    ** one end the runtime's own. So the source is first copied within its GPU into a block
    ** of its own (cached, like every block). */
    xfer_block *scratch = NULL;
    rc = xfer_mem_alloc(route.src, n, &scratch, err);
    if (rc) return rc;
    rc = xfer_be_copy(route.src, scratch->buf, scratch->offset, src_view, src->offset, n, err);
    if (!rc)
      rc = xfer_be_peer(route.dst, dst_view, dst->offset, route.src, scratch->buf, scratch->offset,
                        n, err);
    xfer_mem_free(scratch);
    return rc;
  }
  if (!same_gpu(from, to)) /* planned as a peer copy, but a device it needs was lost since */
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "plan",
                        "interop between %s and %s is no longer possible: a device it needs was lost",
                        from->name, to->name);
  void *backed;
  if ((backed = backing_view(dst, from))) /* the source's runtime copies into its own memory */
    return xfer_be_copy(from, backed, dst->offset, src->buf, src->offset, n, err);
  if ((backed = backing_view(src, to))) /* the target's runtime copies out of its own memory */
    return xfer_be_copy(to, dst->buf, dst->offset, backed, src->offset, n, err);
  if (from->can_export && to->can_import) { /* the target copies out of the source */
    rc = imported(block_of(src), to, &view, err);
    return rc ? rc : xfer_be_copy_imported(to, dst->buf, dst->offset, view, src->offset, n, 0, err);
  }
  if (to->can_export && from->can_import) { /* the source copies into the target */
    rc = imported(block_of(dst), from, &view, err);
    return rc ? rc : xfer_be_copy_imported(from, src->buf, src->offset, view, dst->offset, n, 1, err);
  }
  /* two importers: through a block of the exporter's memory, one device copy each; the
  ** exporter is locked with both ends, so moves through it take turns */
  xfer_device *exporter = exporter_for(from);
  if (!exporter) /* lost since the move was planned */
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "plan",
                        "interop between %s and %s is no longer possible: a device it needs was lost",
                        from->name, to->name);
  xfer_block *between = NULL;
  void *src_view = NULL, *dst_view = NULL;
  rc = xfer_mem_alloc(exporter, n, &between, err);
  if (!rc) rc = imported(between, from, &src_view, err);
  if (!rc) rc = imported(between, to, &dst_view, err);
  if (!rc)
    rc = xfer_be_copy_imported(from, src->buf, src->offset, src_view, between->offset, n, 1, err);
  if (!rc)
    rc = xfer_be_copy_imported(to, dst->buf, dst->offset, dst_view, between->offset, n, 0, err);
  xfer_mem_free(between);
  return rc;
}
