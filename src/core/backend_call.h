/*
** backend_call.h -- the core's only way into a backend: one small wrapper per member of the
** backend's tables (as SQLite's sqlite3OsRead and Redis's connWrite), so no other file reads
** dev->rt->backend->..., and optional tables and members are checked in one place.
** (scripts/layers checks that no core file reads a table anywhere else.)
*/
#ifndef XFER_BACKEND_CALL_H
#define XFER_BACKEND_CALL_H

#include "util.h"

static inline const xfer_backend *xfer_be(const xfer_device *dev) { return dev->rt->backend; }

/* A failed call names its device in the error, unless a call inside it named one first. */
static inline xfer_code xfer_be_blame(const xfer_device *dev, xfer_code rc, xfer_error *err)
{
  if (rc && err && !err->device[0]) xfer_copy_text(err->device, sizeof err->device, dev->name);
  return rc;
}

/* -- The runtime ------------------------------------------------------------------------- */

/* The version of the tables a runtime's backend was built with (XFER_BACKEND_VERSION: this
** core's). */
static inline int xfer_rt_version(const xfer_runtime *rt) { return rt->backend->version; }

/* Loads the driver and adds the devices; XFER_E_UNAVAILABLE with the reason otherwise. */
static inline xfer_code xfer_rt_open(xfer_runtime *rt, xfer_error *err)
{
  return rt->backend->runtime->open(rt, err);
}

/* Releases the runtime's devices and driver (a runtime whose open succeeded). */
static inline void xfer_rt_close(xfer_runtime *rt)
{
  if (rt->backend->runtime->close) rt->backend->runtime->close(rt);
}

/* XFER_E_INVALID when the runtime refuses a setting of its own (any runtime built in, open or
** not: a setting is kept for when it is). */
static inline xfer_code xfer_rt_check_config(const xfer_runtime *rt, const xfer_config *config,
                                             xfer_error *err)
{
  const xfer_runtime_ops *r = rt->backend ? rt->backend->runtime : NULL;
  return r && r->check_config ? r->check_config(config, err) : XFER_E_OK;
}

/* The defaults of the settings the runtime owns, written into config (none: left as they are). */
static inline void xfer_rt_config_defaults(const xfer_runtime *rt, xfer_config *config)
{
  const xfer_runtime_ops *r = rt->backend ? rt->backend->runtime : NULL;
  if (r && r->config_defaults) r->config_defaults(config);
}

/* A transport's runtime (the remote one): its devices come with a connection, not at open. */
static inline int xfer_rt_devices_later(const xfer_runtime *rt)
{
  return rt->backend && rt->backend->transport != NULL;
}

/* Its other name ("cpu"), or NULL. */
static inline const char *xfer_rt_alias(const xfer_runtime *rt)
{
  return rt->backend ? rt->backend->alias : NULL;
}

static inline xfer_external_kind xfer_be_external_kind(const xfer_device *dev)
{
  return xfer_be(dev)->external_kind;
}

static inline int xfer_be_dlpack_type(const xfer_device *dev)
{
  return xfer_be(dev)->dlpack_device_type;
}

static inline int xfer_rt_has_peer(const xfer_runtime *rt)
{
  return rt->backend && rt->backend->copy->peer;
}

/* -- Memory ----------------------------------------------------------------------------------- */

static inline xfer_code xfer_be_alloc(xfer_device *dev, size_t n, void **buf, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->memory->alloc(dev, n, buf, err), err);
}

static inline void xfer_be_free(xfer_device *dev, void *buf, size_t n)
{
  xfer_be(dev)->memory->free(dev, buf, n);
}

/* The CPU address of byte `off` of a buffer, or NULL where the CPU cannot use it in place. */
static inline char *xfer_be_host_address(xfer_device *dev, void *buf, size_t off)
{
  const xfer_memory_ops *m = xfer_be(dev)->memory;
  char *base = m->host_address && buf ? m->host_address(dev, buf) : NULL;
  return base ? base + off : NULL;
}

static inline int xfer_be_addressable(const xfer_device *dev)
{
  return xfer_be(dev)->memory->host_address != NULL;
}

/* The address a buffer stands for (host memory, a CUdeviceptr), for lending it through DLPack;
** NULL where the backend lends none. */
static inline void *xfer_be_native(xfer_device *dev, void *buf)
{
  const xfer_memory_ops *m = xfer_be(dev)->memory;
  return m->native ? m->native(dev, buf) : NULL;
}

/* Whether the backend takes memory the application owns (wrap), taking it, and letting go of
** its handle (the memory stays the application's). */
static inline int xfer_be_has_wrap(const xfer_device *dev) { return xfer_be(dev)->memory->wrap != NULL; }

static inline xfer_code xfer_be_wrap(xfer_device *dev, const xfer_external *mem, void **buf,
                                     xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->memory->wrap(dev, mem, buf, err), err);
}

static inline void xfer_be_unwrap(xfer_device *dev, void *buf)
{
  if (xfer_be(dev)->memory->unwrap) xfer_be(dev)->memory->unwrap(dev, buf);
}

static inline void xfer_be_host_unpin(xfer_device *dev, void *base, size_t size, void *pin)
{
  if (xfer_be(dev)->memory->host_unpin) xfer_be(dev)->memory->host_unpin(dev, base, size, pin);
}

static inline xfer_code xfer_be_memory(xfer_device *dev, uint64_t *free_bytes, uint64_t *total,
                                       xfer_error *err)
{
  const xfer_memory_ops *m = xfer_be(dev)->memory;
  if (!m->info)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_MEMORY, XFER_S_NO_FREE_MEMORY_TOLD,
                       dev->name);
  return m->info(dev, free_bytes, total, err);
}

/* -- Copies ----------------------------------------------------------------------------------- */

static inline xfer_code xfer_be_write(xfer_device *dev, void *buf, size_t off, const void *src,
                                      size_t n, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->copy->host(dev, buf, off, (void *)src, n, 1, err), err);
}

static inline xfer_code xfer_be_read(xfer_device *dev, void *buf, size_t off, void *dst, size_t n,
                                     xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->copy->host(dev, buf, off, dst, n, 0, err), err);
}

static inline int xfer_be_has_rows(const xfer_device *dev)
{
  return xfer_be(dev)->copy->host_rows != NULL;
}

static inline xfer_code xfer_be_rows(xfer_device *dev, void *buf, size_t off, size_t pitch,
                                     size_t run, size_t rows, void *host, int writing,
                                     xfer_error *err)
{
  return xfer_be_blame(
      dev, xfer_be(dev)->copy->host_rows(dev, buf, off, pitch, run, rows, host, writing, err), err);
}

/* Queued host copies: a backend without them does the copy in full (*queued = 0). */
static inline xfer_code xfer_be_start(xfer_device *dev, int to_device, void *buf, size_t off,
                                      void *host, size_t n, int slot, int *queued,
                                      xfer_error *err)
{
  const xfer_copy_ops *c = xfer_be(dev)->copy;
  *queued = 0;
  xfer_code rc = c->start ? c->start(dev, buf, off, host, n, to_device, slot, queued, err)
                          : c->host(dev, buf, off, host, n, to_device, err);
  return xfer_be_blame(dev, rc, err);
}

static inline xfer_code xfer_be_finish(xfer_device *dev, int slot, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->copy->finish(dev, slot, err), err);
}

static inline xfer_code xfer_be_copy(xfer_device *dev, void *dst, size_t dst_off, void *src,
                                     size_t src_off, size_t n, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->copy->within(dev, dst, dst_off, src, src_off, n, err),
                       err);
}

/* Whether the device takes a batch of copies at once, and giving it one: XFER_E_UNSUPPORTED
** with nothing said when these pieces are not for it. */
static inline int xfer_be_has_many(const xfer_device *dev) { return xfer_be(dev)->copy->many != NULL; }

static inline xfer_code xfer_be_many(xfer_device *dev, const xfer_piece *pieces, size_t n,
                                     uint64_t keep, xfer_error *err)
{
  const xfer_copy_ops *copy = xfer_be(dev)->copy;
  xfer_code rc;
  if (keep && copy->many_again) { /* pieces given before: checked then */
    rc = copy->many_again(dev, pieces, n, keep, err);
  } else {
    for (size_t i = 0; i < n; i++) /* the batch plans none (types.h); a runtime may rely on it */
      if (!pieces[i].n)
        return xfer_err_op(err, XFER_E_INVALID, XFER_OP_COPY, XFER_S_BATCH_PIECE_EMPTY, i + 1, n);
    rc = copy->many(dev, pieces, n, err);
  }
  return rc == XFER_E_UNSUPPORTED ? rc : xfer_be_blame(dev, rc, err);
}

/* What the runtime kept of the pieces named `keep` is let go (their batch is going). */
static inline void xfer_be_many_forget(xfer_device *dev, uint64_t keep)
{
  if (keep && xfer_be(dev)->copy->many_forget) xfer_be(dev)->copy->many_forget(dev, keep);
}

/* Whether every copy submitted to the device so far is done (without waiting). */
static inline int xfer_be_idle(xfer_device *dev)
{
  if (xfer_be(dev)->copy->idle) return xfer_be(dev)->copy->idle(dev);
  dev->idle_upto = xfer_now(); /* (no copy outlives its wait) */
  return 1;
}

/* The device's own CRC32C of ranges of its buffers; XFER_E_UNSUPPORTED, nothing said, where
** it sums none (the caller then reads them back). */
static inline xfer_code xfer_be_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count,
                                       uint32_t *crc, xfer_error *err)
{
  if (!xfer_be(dev)->copy->crc32c) return XFER_E_UNSUPPORTED;
  return xfer_be_blame(dev, xfer_be(dev)->copy->crc32c(dev, pieces, count, crc, err), err);
}

/* The same in two halves (copy->crc32c_begin, crc32c_end): XFER_E_UNSUPPORTED, nothing said,
** where the device cannot sum beside the caller now. */
static inline xfer_code xfer_be_crc32c_begin(xfer_device *dev, const xfer_sum_piece *pieces, size_t count,
                                             int *ticket, xfer_error *err)
{
  if (!xfer_be(dev)->copy->crc32c_begin) return XFER_E_UNSUPPORTED;
  return xfer_be_blame(dev, xfer_be(dev)->copy->crc32c_begin(dev, pieces, count, ticket, err), err);
}

static inline int xfer_be_has_crc32c_begin(const xfer_device *dev)
{
  return xfer_be(dev)->copy->crc32c_begin != NULL;
}

static inline xfer_code xfer_be_crc32c_end(xfer_device *dev, const xfer_sum_piece *pieces, size_t count,
                                           int ticket, uint32_t *crc, int wanted, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->copy->crc32c_end(dev, pieces, count, ticket, crc, wanted, err), err);
}

/* Whether the device copies rows within itself, and doing it. */
static inline int xfer_be_has_copy_rows(const xfer_device *dev)
{
  return xfer_be(dev)->copy->within_rows != NULL;
}

static inline xfer_code xfer_be_copy_rows(xfer_device *dev, void *dst, size_t dst_off,
                                          size_t dst_pitch, void *src, size_t src_off,
                                          size_t src_pitch, size_t run, size_t rows,
                                          xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->copy->within_rows(dev, dst, dst_off, dst_pitch, src,
                                                            src_off, src_pitch, run, rows, err),
                       err);
}

static inline int xfer_be_has_peer(const xfer_device *dev) { return xfer_be(dev)->copy->peer != NULL; }

/* Whether the runtime's peer copy joins src and dst (two devices of one runtime). */
static inline int xfer_be_peer_joins(const xfer_device *src, const xfer_device *dst)
{
  const xfer_copy_ops *c = xfer_be(src)->copy;
  return c->peer && (!c->peer_joins || c->peer_joins(src, dst));
}

/* Whether dev's batches (copy->many) reach `other`'s buffers in place (another GPU's memory). */
static inline int xfer_be_many_reaches(const xfer_device *dev, const xfer_device *other)
{
  const xfer_copy_ops *c = xfer_be(dev)->copy;
  return dev != other && dev->rt == other->rt && c->many && c->many_reaches &&
         c->many_reaches(dev, other);
}

static inline xfer_code xfer_be_peer(xfer_device *dst_dev, void *dst, size_t dst_off,
                                     xfer_device *src_dev, void *src, size_t src_off, size_t n,
                                     xfer_error *err)
{
  return xfer_be_blame(
      src_dev, xfer_be(src_dev)->copy->peer(dst_dev, dst, dst_off, src_dev, src, src_off, n, err),
      err);
}

/* -- Sharing memory ------------------------------------------------------------------------- */

static inline const xfer_share_ops *xfer_be_share(const xfer_device *dev)
{
  return xfer_be(dev)->share;
}

static inline xfer_code xfer_be_export_fd(xfer_device *dev, void *buf, int *fd, uint64_t *size,
                                          xfer_error *err)
{
  const xfer_share_ops *s = xfer_be_share(dev);
  if (!s || !s->export_fd) /* the route asks only exporters; a guard, not a path */
    return xfer_be_blame(dev, xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_EXPORT,
                                          XFER_S_EXPORTS_NO_MEMORY, dev->name), err);
  return xfer_be_blame(dev, s->export_fd(dev, buf, fd, size, err), err);
}

static inline int xfer_be_has_import(const xfer_device *dev)
{
  return xfer_be_share(dev) && xfer_be_share(dev)->import_fd;
}

static inline xfer_code xfer_be_import_fd(xfer_device *dev, int fd, uint64_t memory_size,
                                          size_t n, xfer_op op, void **buf, void **handle,
                                          xfer_error *err)
{
  if (!xfer_be_has_import(dev))
    return xfer_be_blame(dev, xfer_err_op(err, XFER_E_UNSUPPORTED, op, XFER_S_IMPORTS_NO_MEMORY,
                                          dev->name), err);
  return xfer_be_blame(dev, xfer_be_share(dev)->import_fd(dev, fd, memory_size, n, op, buf,
                                                          handle, err), err);
}

static inline void xfer_be_release_import(xfer_device *dev, void *buf, void *handle)
{
  xfer_be_share(dev)->release_import(dev, buf, handle);
}

static inline xfer_code xfer_be_copy_imported(xfer_device *dev, void *buf, size_t off,
                                              void *imported, size_t imported_off, size_t n,
                                              int into_imported, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be_share(dev)->copy_imported(dev, buf, off, imported,
                                                              imported_off, n, into_imported,
                                                              err), err);
}

static inline int xfer_be_can_share(const xfer_device *dev)
{
  const xfer_share_ops *s = xfer_be_share(dev);
  return dev->can_share && s && s->alloc_shared && s->free_shared;
}

static inline xfer_code xfer_be_alloc_shared(xfer_device *dev, size_t n, void **buf, int *fd,
                                             uint64_t *memory_size, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be_share(dev)->alloc_shared(dev, n, buf, fd, memory_size, err),
                       err);
}

static inline void xfer_be_free_shared(xfer_device *dev, void *buf, size_t n)
{
  xfer_be_share(dev)->free_shared(dev, buf, n);
}

/* The kind of memory a device lends a transport in place (host: none it lends). */
static inline xfer_memory_kind xfer_be_memory_kind(const xfer_device *dev)
{
  const xfer_share_ops *s = xfer_be_share(dev);
  return s && s->lend ? s->memory_kind : XFER_MEMORY_HOST;
}

static inline xfer_code xfer_be_device_memory(xfer_device *dev, void *buf, size_t off,
                                              xfer_memory *out, xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be_share(dev)->lend(dev, buf, off, out, err), err);
}

/* -- A transport (the remote runtime) --------------------------------------------------------- */

/* A device that shares no memory with this process (another machine's, or this very GPU served
** back over the network): no interop, and its moves cross a network. */
static inline int xfer_be_shares_nothing(const xfer_device *dev)
{
  return xfer_be(dev)->transport != NULL;
}

/* Whether dev's transport moves other devices' memory in place: its devices are the far end of
** the direct path. */
static inline int xfer_be_has_direct(const xfer_device *dev)
{
  const xfer_transport_ops *t = xfer_be(dev)->transport;
  return t && t->direct;
}

/* Whether dev's transport moves other's device memory in place (the direct path); why not in
** `why` (when given) if the transport says. */
static inline int xfer_be_direct_joins(const xfer_device *dev, const xfer_device *other,
                                       char *why, size_t cap)
{
  return xfer_be_has_direct(dev) && xfer_be_memory_kind(other) != XFER_MEMORY_HOST &&
         xfer_be(dev)->transport->direct_joins(dev, other, why, cap);
}

static inline xfer_code xfer_be_direct(xfer_device *dev, void *buf, size_t off,
                                       const xfer_memory *mem, size_t n, int into_buf,
                                       xfer_error *err)
{
  return xfer_be_blame(dev, xfer_be(dev)->transport->direct(dev, buf, off, mem, n, into_buf, err),
                       err);
}

#endif
