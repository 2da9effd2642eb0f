/*
** view.c -- views: tensors that share another's memory with a shape, strides (in elements)
** and a first element of their own; and one element read or written. Moving a view's elements
** is view_io.c's.
*/
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

xfer_code xfer_tensor_view(xfer_tensor *t, const xfer_shape *shape, const int64_t *strides,
                           int64_t first, xfer_tensor **out, xfer_error *err)
{
  *out = NULL;
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_VIEW, err);
  if (rc) return rc;
  if (shape->ndim < 0 || shape->ndim > XFER_MAX_DIMS)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_VIEW, XFER_S_TENSOR_RANK, XFER_MAX_DIMS,
                       shape->ndim);
  xfer_tensor *owner = t->base ? t->base : t;
  size_t numel = 1;
  int empty = 0; /* a size 0: a view of no element, whatever its other sizes (NumPy, PyTorch) */
  for (int i = 0; i < shape->ndim; i++) empty |= shape->dims[i] == 0;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] < 0 || strides[i] < 0)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_VIEW, XFER_S_VIEW_NEGATIVE, i + 1,
                         (long long)shape->dims[i], (long long)strides[i]);
    if (empty) {
      numel = 0;
      continue;
    }
    if (shape->dims[i] > (int64_t)owner->numel)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_VIEW, XFER_S_VIEW_DIMENSION_TOO_LARGE, i + 1,
                         (long long)shape->dims[i], owner->numel);
    numel *= (size_t)shape->dims[i];
  }
  int64_t extent = xfer_layout_extent(shape, strides);
  if (first < 0 || (numel && (first > (int64_t)owner->numel ||
                              extent > (int64_t)owner->numel - first)))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_VIEW, XFER_S_VIEW_PAST_END,
                       (long long)first + (long long)extent, owner->numel);
  xfer_tensor *v = calloc(1, sizeof *v);
  if (!v) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VIEW);
  size_t esize = xfer_dtype_size(t->dtype);
  v->refs = 1;
  v->dev = t->dev;
  v->dtype = t->dtype;
  v->shape = *shape;
  memcpy(v->strides, strides, sizeof v->strides[0] * (size_t)shape->ndim);
  v->numel = numel;
  v->nbytes = numel * esize;
  v->contiguous = xfer_strides_packed(shape, strides);
  v->first = (size_t)first;
  v->buf = owner->buf;
  v->offset = owner->offset + (size_t)first * esize;
  v->base = xfer_tensor_retain(owner);
  xfer_ctx_retain(t->dev->ctx);
  xfer_device_retain(t->dev);
  pthread_mutex_lock(&t->dev->ctx->lock);
  owner->views++;
  pthread_mutex_unlock(&t->dev->ctx->lock);
  *out = v;
  return XFER_E_OK;
}

const int64_t *xfer_tensor_strides(const xfer_tensor *t) { return t->strides; }
int xfer_tensor_is_contiguous(const xfer_tensor *t) { return t->contiguous; }
size_t xfer_tensor_first(const xfer_tensor *t) { return t->first; }

/* -- One element ---------------------------------------------------------------------------- */

static xfer_code element_at(const xfer_tensor *t, const int64_t *index, int n, size_t *at,
                            xfer_op op, xfer_error *err)
{
  if (n != t->shape.ndim)
    return xfer_err_op(err, XFER_E_INVALID, op, XFER_S_INDEX_COUNT, n, t->shape.ndim);
  int64_t e = 0;
  for (int i = 0; i < n; i++) {
    if (index[i] < 0 || index[i] >= t->shape.dims[i])
      return xfer_err_op(err, XFER_E_INVALID, op, XFER_S_INDEX_OUT_OF_RANGE,
                         (long long)index[i] + 1, i + 1, (long long)t->shape.dims[i]);
    e += index[i] * t->strides[i];
  }
  *at = t->offset + (size_t)e * xfer_dtype_size(t->dtype);
  return XFER_E_OK;
}

/* One element read (get) or written (set), under the device's lock. */
static xfer_code element_io(xfer_tensor *t, const int64_t *index, int n, void *elem, int writing,
                            xfer_error *err)
{
  xfer_op op = writing ? XFER_OP_SET : XFER_OP_GET;
  if (!t) return xfer_tensor_usable(t, op, err);
  xfer_device_lock(t->dev);
  size_t at = 0;
  xfer_code rc = xfer_tensor_usable(t, op, err);
  if (!rc) rc = element_at(t, index, n, &at, op, err);
  size_t esize = xfer_dtype_size(t->dtype);
  if (!rc) rc = writing ? xfer_be_write(t->dev, t->buf, at, elem, esize, err)
                        : xfer_be_read(t->dev, t->buf, at, elem, esize, err);
  xfer_device_unlock(t->dev);
  return rc;
}

xfer_code xfer_tensor_get(xfer_tensor *t, const int64_t *index, int n, void *elem,
                          xfer_error *err)
{
  return element_io(t, index, n, elem, 0, err);
}

xfer_code xfer_tensor_set(xfer_tensor *t, const int64_t *index, int n, const void *elem,
                          xfer_error *err)
{
  return element_io(t, index, n, (void *)elem, 1, err);
}
