/*
** tensor.c -- tensors: shape checks, lifetime (reference count plus explicit free),
** and moving a tensor's bytes between it and host memory.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

/* Fill and compare work in host chunks of this size, never a whole-tensor copy. */
#define CHUNK_BYTES ((size_t)1 << 20)

xfer_code xfer_tensor_usable(const xfer_tensor *t, xfer_op op, xfer_error *err)
{
  if (!t || t->freed)
    return xfer_err_code(err, XFER_E_FREED, op);
  if (t->base && __atomic_load_n(&t->base->freed, __ATOMIC_ACQUIRE))
    return xfer_err_op(err, XFER_E_FREED, op, XFER_S_VIEW_OF_FREED);
  if (t->base) t = t->base; /* a view lives and dies with its base's memory */
  if (__atomic_load_n(&t->closed, __ATOMIC_ACQUIRE))
    return xfer_err_op(err, XFER_E_CLOSED, op, XFER_S_TENSOR_OF_CLOSED_DEVICE, t->dev->name);
  if (t->dev->lost) return xfer_device_lost_error(t->dev, op, err);
  return XFER_E_OK;
}

xfer_code xfer_tensor_valid(const xfer_tensor *t, xfer_op op, xfer_error *err)
{
  int how = __atomic_load_n(&t->not_valid, __ATOMIC_ACQUIRE);
  if (!how) return XFER_E_OK;
  return xfer_err_op(err, XFER_E_INVALID, op, XFER_S_NOT_VALID, xfer_code_name((xfer_code)how));
}

void xfer_tensor_set_valid(xfer_tensor *t, xfer_code how)
{
  if (t && (how == XFER_E_OK || how == XFER_E_TIMEOUT || how == XFER_E_CANCELED))
    __atomic_store_n(&t->not_valid, (int)how, __ATOMIC_RELEASE);
}

/* op: the caller's name for what it attempted (a Lua function's), named in the error */
xfer_code xfer_tensor_check(const xfer_tensor *t, const char *op, xfer_error *err)
{
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_OTHER, err);
  if (rc) xfer_err_call(err, op);
  return rc;
}

xfer_code xfer_tensor_readable(const xfer_tensor *t, const char *op, xfer_error *err)
{
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_OTHER, err);
  if (!rc) rc = xfer_tensor_valid(t, XFER_OP_OTHER, err);
  if (rc) xfer_err_call(err, op);
  return rc;
}

static xfer_code check_shape(xfer_dtype dtype, const xfer_shape *shape, size_t *numel,
                             xfer_error *err)
{
  if ((unsigned)dtype >= XFER_DTYPE__COUNT)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_TENSOR, XFER_S_DTYPE_UNKNOWN, (int)dtype);
  if (shape->ndim < 0 || shape->ndim > XFER_MAX_DIMS)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_TENSOR, XFER_S_TENSOR_RANK, XFER_MAX_DIMS,
                       shape->ndim);
  size_t n = 1, limit = SIZE_MAX / 2 / xfer_dtype_size(dtype);
  for (int i = 0; i < shape->ndim; i++) {
    int64_t d = shape->dims[i];
    if (d < 0)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_TENSOR, XFER_S_TENSOR_NEGATIVE_DIMENSION,
                         i + 1, (long long)d);
    if (d && n > limit / (uint64_t)d)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_TENSOR, XFER_S_TENSOR_TOO_LARGE);
    n *= (size_t)d;
  }
  *numel = n;
  return XFER_E_OK;
}

xfer_code xfer_tensor_alloc(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                            const xfer_device *from, xfer_tensor **out, xfer_error *err)
{
  *out = NULL;
  size_t numel = 0;
  xfer_code rc = check_shape(dtype, shape, &numel, err);
  if (rc) return rc;
  xfer_tensor *t = calloc(1, sizeof *t);
  if (!t) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_ALLOC);
  t->refs = 1;
  t->dev = dev;
  t->dtype = dtype;
  t->shape = *shape;
  t->numel = numel;
  t->nbytes = numel * xfer_dtype_size(dtype);
  xfer_packed_strides(shape, t->strides);
  t->contiguous = 1;
  rc = xfer_mem_alloc(dev, t->nbytes, &t->block, err);
  if (rc) {
    xfer_err_frame(err, from, dev, t->nbytes);
    free(t);
    return rc;
  }
  t->buf = t->block ? t->block->buf : NULL;
  t->offset = t->block ? t->block->offset : 0;
  xfer_mem_tensor_made(dev->ctx, t->nbytes);
  xfer_tensor_adopt(t);
  *out = t;
  return XFER_E_OK;
}

void xfer_tensor_adopt(xfer_tensor *t)
{
  xfer_device *dev = t->dev;
  xfer_ctx_retain(dev->ctx);
  xfer_device_retain(dev);
  pthread_mutex_lock(&dev->ctx->lock); /* listed, so that closing the device finds it */
  t->next_on_dev = dev->tensors;
  if (dev->tensors) dev->tensors->prev_on_dev = t;
  dev->tensors = t;
  pthread_mutex_unlock(&dev->ctx->lock);
}

xfer_code xfer_tensor_empty(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                            xfer_tensor **out, xfer_error *err)
{
  return xfer_tensor_alloc(dev, dtype, shape, NULL, out, err);
}

xfer_code xfer_tensor_from_bytes(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                                 const void *bytes, size_t nbytes, xfer_tensor **out,
                                 xfer_error *err)
{
  xfer_tensor *t;
  xfer_code rc = xfer_tensor_empty(dev, dtype, shape, &t, err);
  if (rc) return rc;
  rc = xfer_tensor_write(t, bytes, nbytes, err);
  if (rc) {
    xfer_tensor_release(t);
    return rc;
  }
  *out = t;
  return XFER_E_OK;
}

/* -- Lifetime ------------------------------------------------------------------------ */

xfer_tensor *xfer_tensor_retain(xfer_tensor *t)
{
  __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED); /* jobs retain from their threads */
  return t;
}

/* A view's free: the view reads as freed, and its base may be freed once no view is left. */
static void view_free(xfer_tensor *v)
{
  xfer_ctx *ctx = v->dev->ctx;
  pthread_mutex_lock(&ctx->lock);
  while (v->busy) pthread_cond_wait(&ctx->idle, &ctx->lock);
  int was_freed = v->freed;
  v->freed = 1;
  v->buf = NULL;
  if (!was_freed) v->base->views--;
  pthread_mutex_unlock(&ctx->lock);
}

/* What a wrapped tensor's free does, once: the backend's handle, the owner's release. */
static void wrapped_release(xfer_tensor *t, void *buf)
{
  xfer_mem_host_external_drop(t->dev->ctx, t->external); /* the pins first: the memory goes next */
  t->external = NULL;
  if (buf) xfer_be_unwrap(t->dev, buf);
  if (t->release) t->release(t->release_ud);
  t->release = NULL;
}

xfer_code xfer_tensor_free(xfer_tensor *t, xfer_error *err)
{
  if (!t) return XFER_E_OK;
  if (t->base) {
    view_free(t);
    return XFER_E_OK;
  }
  xfer_ctx *ctx = t->dev->ctx;
  /* moves using it (on other threads) finish first; from here on it reads as freed, so a
  ** move that starts now fails its check instead of using memory on its way out */
  pthread_mutex_lock(&ctx->lock);
  while (t->busy) pthread_cond_wait(&ctx->idle, &ctx->lock);
  if (t->lent && !t->freed) {
    int lent = t->lent;
    pthread_mutex_unlock(&ctx->lock);
    return xfer_err_op(err, XFER_E_IN_USE, XFER_OP_FREE, XFER_S_FREE_LENT_BY_DLPACK, lent,
                       lent == 1 ? "" : "s");
  }
  if (t->views && !t->freed) {
    int views = t->views;
    pthread_mutex_unlock(&ctx->lock);
    return xfer_err_op(err, XFER_E_IN_USE, XFER_OP_FREE, XFER_S_FREE_VIEWS_USE_MEMORY, views,
                       views == 1 ? "" : "s", views == 1 ? "s" : "", views == 1 ? "it" : "them",
                       views == 1 ? "it" : "them");
  }
  int was_freed = t->freed;
  t->freed = 1;
  xfer_block *block = t->block; /* NULL once its device was closed: given back then */
  void *wrapped_buf = t->wrapped ? t->buf : NULL;
  t->block = NULL;
  t->buf = NULL;
  if (!was_freed) { /* off its device's list */
    xfer_device *dev = t->dev;
    if (t->prev_on_dev) t->prev_on_dev->next_on_dev = t->next_on_dev;
    else if (dev->tensors == t) dev->tensors = t->next_on_dev;
    if (t->next_on_dev) t->next_on_dev->prev_on_dev = t->prev_on_dev;
    t->prev_on_dev = t->next_on_dev = NULL;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (!was_freed && t->wrapped) { /* the application's memory: its handle and release */
    wrapped_release(t, wrapped_buf);
    return XFER_E_OK;
  }
  if (was_freed || !block) return XFER_E_OK;
  /* no device lock: the block goes back to the cache, which has a lock of its own (so a
  ** collector that frees tensors in the middle of a move takes no lock out of order) */
  xfer_mem_free(block);
  xfer_mem_tensor_dropped(ctx, t->nbytes);
  return XFER_E_OK;
}

void xfer_tensor_release(xfer_tensor *t)
{
  if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  xfer_ctx *ctx = t->dev->ctx;
  xfer_device *dev = t->dev;
  xfer_tensor *base = t->base;
  xfer_tensor_free(t, NULL); /* the last reference: no view holds it */
  free(t);
  xfer_tensor_release(base); /* a view's base, once the view is gone */
  xfer_device_release(dev);
  xfer_ctx_release(ctx);
}

int xfer_tensor_is_freed(const xfer_tensor *t) { return t->freed; }
xfer_dtype xfer_tensor_dtype(const xfer_tensor *t) { return t->dtype; }
const xfer_shape *xfer_tensor_shape(const xfer_tensor *t) { return &t->shape; }
size_t xfer_tensor_numel(const xfer_tensor *t) { return t->numel; }
size_t xfer_tensor_nbytes(const xfer_tensor *t) { return t->nbytes; }
xfer_device *xfer_tensor_device(const xfer_tensor *t) { return t->dev; }

size_t xfer_shape_format(xfer_dtype dtype, const xfer_shape *shape, char *buf, size_t cap)
{
  size_t used = (size_t)snprintf(buf, cap, "%s[", xfer_dtype_name(dtype));
  for (int i = 0; i < shape->ndim; i++)
    used += (size_t)snprintf(buf + (used < cap ? used : cap), used < cap ? cap - used : 0,
                             "%s%lld", i ? "," : "", (long long)shape->dims[i]);
  used += (size_t)snprintf(buf + (used < cap ? used : cap), used < cap ? cap - used : 0, "]");
  return used;
}

/* -- Bytes in and out ---------------------------------------------------------------- */

void *xfer_tensor_host_data(xfer_tensor *t)
{
  if (t->freed || t->nbytes == 0) return NULL;
  return xfer_be_host_address(t->dev, t->buf, t->offset);
}

xfer_memory_kind xfer_device_memory_kind(const xfer_device *dev)
{
  return xfer_be_memory_kind(dev);
}

xfer_code xfer_tensor_device_memory(xfer_tensor *t, size_t offset, xfer_memory *out,
                                   xfer_error *err)
{
  if (t->freed || offset >= t->nbytes || !t->contiguous ||
      xfer_be_memory_kind(t->dev) == XFER_MEMORY_HOST)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DIRECT, XFER_S_DIRECT_NOT_LENT,
                       t->dev->name);
  return xfer_be_device_memory(t->dev, t->buf, t->offset + offset, out, err);
}

static xfer_code check_size(const xfer_tensor *t, size_t nbytes, xfer_op op,
                            xfer_error *err)
{
  if (nbytes == t->nbytes) return XFER_E_OK;
  return xfer_err_op(err, XFER_E_INVALID, op, XFER_S_SIZE_MISMATCH, nbytes,
                     xfer_dtype_name(t->dtype), t->nbytes);
}

xfer_code xfer_tensor_read(xfer_tensor *t, void *dst, size_t nbytes, xfer_error *err)
{
  if (!t) return xfer_tensor_usable(t, XFER_OP_READ, err); /* before t->dev is touched */
  xfer_device_lock(t->dev);
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_READ, err);
  if (!rc) rc = xfer_tensor_valid(t, XFER_OP_READ, err);
  if (!rc) rc = check_size(t, nbytes, XFER_OP_READ, err);
  if (!rc && nbytes) {
    rc = t->contiguous ? xfer_be_read(t->dev, t->buf, t->offset, dst, nbytes, err)
                       : xfer_view_move(t, dst, 1, err);
    if (rc) xfer_err_frame(err, t->dev, xfer_host_of(t->dev->ctx), nbytes);
  }
  xfer_device_unlock(t->dev);
  return rc;
}

xfer_code xfer_tensor_write(xfer_tensor *t, const void *src, size_t nbytes, xfer_error *err)
{
  if (!t) return xfer_tensor_usable(t, XFER_OP_WRITE, err); /* before t->dev is touched */
  xfer_device_lock(t->dev);
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_WRITE, err);
  if (!rc) rc = check_size(t, nbytes, XFER_OP_WRITE, err);
  if (!rc && nbytes) {
    rc = t->contiguous ? xfer_be_write(t->dev, t->buf, t->offset, src, nbytes, err)
                       : xfer_view_move(t, (char *)src, 0, err);
    if (!rc) xfer_tensor_set_valid(t, XFER_E_OK); /* written again */
    /* a view's scatter reads its span first: a failed read is a read off the device */
    int reading = rc && err && err->op_id == XFER_OP_READ;
    xfer_device *host = xfer_host_of(t->dev->ctx);
    if (rc) xfer_err_frame(err, reading ? t->dev : host, reading ? host : t->dev, nbytes);
  }
  xfer_device_unlock(t->dev);
  return rc;
}

xfer_code xfer_tensor_fill(xfer_tensor *t, const void *elem, xfer_error *err)
{
  if (!t) return xfer_tensor_usable(t, XFER_OP_WRITE, err); /* before t->dev is touched */
  xfer_device_lock(t->dev);
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_WRITE, err);
  xfer_device_unlock(t->dev); /* taken again below, around the writes */
  if (rc || t->nbytes == 0) return rc;
  size_t esize = xfer_dtype_size(t->dtype);
  if (!t->contiguous) { /* a view: its elements scattered from a packed pattern */
    char *packed = malloc(t->nbytes);
    if (!packed) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
    for (size_t off = 0; off < t->nbytes; off += esize) memcpy(packed + off, elem, esize);
    rc = xfer_tensor_write(t, packed, t->nbytes, err);
    free(packed);
    return rc;
  }
  size_t chunk = t->nbytes < CHUNK_BYTES ? t->nbytes : CHUNK_BYTES / esize * esize;
  char *pattern = malloc(chunk);
  if (!pattern) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  for (size_t off = 0; off < chunk; off += esize) memcpy(pattern + off, elem, esize);
  xfer_device_lock(t->dev);
  for (size_t off = 0; off < t->nbytes && !rc; off += chunk) {
    size_t n = t->nbytes - off < chunk ? t->nbytes - off : chunk;
    rc = xfer_be_write(t->dev, t->buf, t->offset + off, pattern, n, err);
  }
  xfer_device_unlock(t->dev);
  free(pattern);
  if (rc) xfer_err_frame(err, xfer_host_of(t->dev->ctx), t->dev, t->nbytes);
  return rc;
}

/* The bytes [off, off+n) of `t` as host memory: in place when the CPU can address the
** buffer, else read into `scratch`. */
static xfer_code host_view(xfer_tensor *t, size_t off, size_t n, char *scratch,
                           const char **view, xfer_error *err)
{
  char *in_place = xfer_be_host_address(t->dev, t->buf, t->offset);
  if (in_place) {
    *view = in_place + off;
    return XFER_E_OK;
  }
  *view = scratch;
  xfer_code rc = xfer_be_read(t->dev, t->buf, t->offset + off, scratch, n, err);
  if (rc) xfer_err_frame(err, t->dev, xfer_host_of(t->dev->ctx), n);
  return rc;
}

xfer_code xfer_tensor_equal(xfer_tensor *a, xfer_tensor *b, int *equal, xfer_error *err)
{
  *equal = 0;
  xfer_device *devs[2] = {a->dev, b->dev};
  xfer_hold h;
  xfer_code rc = xfer_hold_take(&h, devs, 2, NULL, 0, err);
  if (!rc) rc = xfer_tensor_usable(a, XFER_OP_EQUALS, err);
  if (!rc) rc = xfer_tensor_usable(b, XFER_OP_EQUALS, err);
  if (!rc) rc = xfer_tensor_valid(a, XFER_OP_EQUALS, err);
  if (!rc) rc = xfer_tensor_valid(b, XFER_OP_EQUALS, err);
  xfer_hold_drop(&h);
  if (rc) return rc;
  if (a->dtype != b->dtype || a->shape.ndim != b->shape.ndim ||
      memcmp(a->shape.dims, b->shape.dims, sizeof a->shape.dims[0] * (size_t)a->shape.ndim))
    return XFER_E_OK;
  if (!a->contiguous || !b->contiguous) { /* views: both packed on the host, compared */
    char *pa = malloc(a->nbytes ? a->nbytes : 1), *pb = malloc(b->nbytes ? b->nbytes : 1);
    if (!pa || !pb) {
      free(pa);
      free(pb);
      return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_EQUALS);
    }
    rc = xfer_tensor_read(a, pa, a->nbytes, err);
    if (!rc) rc = xfer_tensor_read(b, pb, b->nbytes, err);
    *equal = !rc && memcmp(pa, pb, a->nbytes) == 0;
    free(pa);
    free(pb);
    return rc;
  }
  char *scratch = malloc(2 * CHUNK_BYTES);
  if (!scratch) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_EQUALS);
  int same = 1;
  rc = xfer_hold_take(&h, devs, 2, NULL, 0, err);
  for (size_t off = 0; off < a->nbytes && same && !rc; off += CHUNK_BYTES) {
    size_t n = a->nbytes - off < CHUNK_BYTES ? a->nbytes - off : CHUNK_BYTES;
    const char *va, *vb;
    rc = host_view(a, off, n, scratch, &va, err);
    if (!rc) rc = host_view(b, off, n, scratch + CHUNK_BYTES, &vb, err);
    if (!rc) same = memcmp(va, vb, n) == 0;
  }
  xfer_hold_drop(&h);
  free(scratch);
  *equal = !rc && same;
  return rc;
}

/* -- Checksums ------------------------------------------------------------------------------- */

xfer_code xfer_tensor_crc32c(xfer_tensor *t, uint32_t *crc, xfer_error *err)
{
  *crc = 0;
  if (!t) return xfer_tensor_usable(t, XFER_OP_VERIFY, err); /* before t->dev is touched */
  if (!t->contiguous) { /* a view: its elements packed first */
    char *packed = t->nbytes ? malloc(t->nbytes) : NULL;
    if (t->nbytes && !packed) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
    xfer_code rc = xfer_tensor_read(t, packed, t->nbytes, err);
    if (!rc) *crc = xfer_crc32c(0, packed, t->nbytes);
    free(packed);
    return rc;
  }
  xfer_device_lock(t->dev);
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_VERIFY, err);
  if (!rc) rc = xfer_range_crc32c(t, 0, t->nbytes, crc, err);
  xfer_device_unlock(t->dev);
  return rc;
}

xfer_code xfer_tensor_crc32c_each(xfer_tensor *t, size_t stretch, uint32_t *crc, size_t count,
                                  xfer_error *err)
{
  if (!t) return xfer_tensor_usable(t, XFER_OP_VERIFY, err);
  size_t there = stretch ? (t->nbytes + stretch - 1) / stretch : 0;
  if (!t->contiguous || !stretch || count != there)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_VERIFY, XFER_S_SUM_STRETCHES, count,
                       t->nbytes, stretch, t->contiguous ? there : 0);
  if (!count) return XFER_E_OK;
  xfer_sum_range *ranges = malloc(count * sizeof *ranges);
  if (!ranges) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  for (size_t i = 0; i < count; i++) {
    size_t at = i * stretch;
    ranges[i] = (xfer_sum_range){ t, at, t->nbytes - at < stretch ? t->nbytes - at : stretch };
  }
  xfer_device_lock(t->dev);
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_VERIFY, err);
  if (!rc) rc = xfer_sums_of(ranges, count, crc, err);
  xfer_device_unlock(t->dev);
  free(ranges);
  return rc;
}
