/*
** interop.c -- the interop path, carried out as its route says (route.c decides which runtime
** exports, which imports, and which helper devices stand between): two runtimes on one
** physical GPU move a tensor with device copies only. A runtime that exports (Vulkan) hands
** an opaque fd of a segment's memory to one that imports (CUDA, OpenCL), once per segment and
** importer; the import lives as long as the segment, which the caching allocator keeps when its
** tensors are freed, so a steady-state move is one device copy. Two importers (CUDA <-> OpenCL)
** meet in a block of the exporter's memory (cached with its imports like any other). Across two
** GPUs that CUDA joins with peer copies, an end of another runtime is reached the same way, by
** importing its memory into the CUDA device of its GPU: the move is one peer copy.
*/
#include <fcntl.h>
#include <unistd.h>

#include "paths.h"

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
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_IMPORT, XFER_S_IMPORTED_TOO_OFTEN,
                       XFER_MAX_IMPORTS);
  int fd = -1;
  uint64_t size = 0;
  xfer_code rc = xfer_be_export_fd(seg->dev, seg->buf, &fd, &size, err);
  if (rc) return rc;
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* drivers make it inheritable; a child must not get it */
  void *ibuf = NULL, *handle = NULL;
  rc = xfer_be_import_fd(importer, fd, size, seg->size, XFER_OP_IMPORT, &ibuf, &handle, err);
  if (rc) {
    close(fd);
    return rc;
  }
  if (!xfer_mem_import_keep(seg, importer, ibuf, handle)) { /* filled up meanwhile */
    xfer_be_release_import(importer, ibuf, handle);
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_IMPORT, XFER_S_IMPORTED_TOO_OFTEN,
                       XFER_MAX_IMPORTS);
  }
  *out = ibuf;
  return XFER_E_OK;
}

/* A tensor's memory as the device backing it sees it (its own), or NULL. */
static void *backing_view(const xfer_tensor *t, const xfer_device *alias)
{
  const xfer_block *b = xfer_tensor_block(t);
  return t->dev->backing == alias && b ? b->seg->backing_buf : NULL;
}

/* A tensor as the peer runtime's device `alias` sees it: its own buffer, the memory it lives
** in, or its segment imported once (the tensor at its own offset in each). */
static xfer_code peer_view(xfer_tensor *t, xfer_device *alias, void **view, xfer_error *err)
{
  if (t->dev == alias) {
    *view = t->buf;
    return XFER_E_OK;
  }
  if ((*view = backing_view(t, alias))) return XFER_E_OK;
  return imported(xfer_tensor_block(t), alias, view, err);
}

/* Two GPUs: one peer copy between the two ends as the peer runtime sees them. */
static xfer_code run_peer(const xfer_route *r, xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  xfer_device *from = r->helpers[0], *to = r->helpers[1];
  size_t n = r->nbytes;
  void *src_view = NULL, *dst_view = NULL;
  xfer_code rc = peer_view(src, from, &src_view, err);
  if (!rc) rc = peer_view(dst, to, &dst_view, err);
  if (rc) return rc;
  /* the route decided whether the source goes through scratch memory first (both ends
  ** imports: route.c, peer_share); a block its device's backing did not take is an import
  ** where the route counted on the backing's memory: still right, just the slower copy */
  if (!r->peer_scratch)
    return xfer_be_peer(to, dst_view, dst->offset, from, src_view, src->offset, n, err);
  xfer_block *scratch = NULL; /* cached, like every block */
  rc = xfer_mem_alloc(from, n, &scratch, err);
  if (rc) return rc;
  rc = xfer_be_copy(from, scratch->buf, scratch->offset, src_view, src->offset, n, err);
  if (!rc)
    rc = xfer_be_peer(to, dst_view, dst->offset, from, scratch->buf, scratch->offset, n, err);
  xfer_mem_free(scratch);
  return rc;
}

/* Two importers: through a block of the exporter's memory, one device copy each; the exporter
** is held with both ends, so moves through it take turns. */
static xfer_code run_between(const xfer_route *r, xfer_tensor *src, xfer_tensor *dst,
                             xfer_error *err)
{
  xfer_device *from = src->dev, *to = dst->dev;
  size_t n = r->nbytes;
  xfer_block *between = NULL;
  void *src_view = NULL, *dst_view = NULL;
  xfer_code rc = xfer_mem_alloc(r->helpers[0], n, &between, err);
  if (!rc) rc = imported(between, from, &src_view, err);
  if (!rc) rc = imported(between, to, &dst_view, err);
  if (!rc)
    rc = xfer_be_copy_imported(from, src->buf, src->offset, src_view, between->offset, n, 1, err);
  if (!rc)
    rc = xfer_be_copy_imported(to, dst->buf, dst->offset, dst_view, between->offset, n, 0, err);
  xfer_mem_free(between);
  return rc;
}

xfer_code xfer_interop_view(const xfer_tensor *t, xfer_device *importer, void **view,
                            xfer_error *err)
{
  const xfer_block *b = xfer_tensor_block(t);
  if (!b) return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_IMPORT, XFER_S_SHARE_FOREIGN_MEMORY);
  return imported(b, importer, view, err);
}

int xfer_interop_ranged(const xfer_route *r)
{
  return r->share == XFER_SHARE_INTO_BACKED || r->share == XFER_SHARE_OUT_OF_BACKED ||
         r->share == XFER_SHARE_SRC_EXPORTS || r->share == XFER_SHARE_DST_EXPORTS;
}

xfer_code xfer_interop_run_range(const xfer_route *r, xfer_tensor *src, xfer_tensor *dst, size_t at,
                                 size_t n, xfer_error *err)
{
  xfer_device *from = src->dev, *to = dst->dev;
  size_t s_off = src->offset + at, d_off = dst->offset + at;
  void *view = NULL;
  xfer_code rc;
  switch (r->share) {
  case XFER_SHARE_INTO_BACKED: /* the source's runtime copies into its own memory */
    return xfer_be_copy(from, backing_view(dst, from), d_off, src->buf, s_off, n, err);
  case XFER_SHARE_OUT_OF_BACKED: /* the target's runtime copies out of its own memory */
    return xfer_be_copy(to, dst->buf, d_off, backing_view(src, to), s_off, n, err);
  case XFER_SHARE_SRC_EXPORTS: /* the target copies out of the source */
    rc = imported(xfer_tensor_block(src), to, &view, err);
    return rc ? rc : xfer_be_copy_imported(to, dst->buf, d_off, view, s_off, n, 0, err);
  case XFER_SHARE_DST_EXPORTS: /* the source copies into the target */
    rc = imported(xfer_tensor_block(dst), from, &view, err);
    return rc ? rc : xfer_be_copy_imported(from, src->buf, s_off, view, d_off, n, 1, err);
  default: /* the others move whole (xfer_interop_run) */
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_PLAN, XFER_S_INTEROP_WHOLE_ONLY, from->name,
                       to->name);
  }
}

xfer_code xfer_interop_run(const xfer_route *r, xfer_tensor *src, xfer_tensor *dst,
                           xfer_error *err)
{
  xfer_device *from = src->dev, *to = dst->dev;
  if (xfer_interop_ranged(r)) return xfer_interop_run_range(r, src, dst, 0, r->nbytes, err);
  switch (r->share) {
  case XFER_SHARE_PEER:
    return run_peer(r, src, dst, err);
  case XFER_SHARE_BETWEEN:
    return run_between(r, src, dst, err);
  default: /* a route is made with its share; a guard, not a path */
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_PLAN, XFER_S_INTEROP_NO_SHARE, from->name,
                       to->name);
  }
}
