/*
** wrap.c -- tensors over memory the application owns (xfer_tensor_wrap): a host pointer, a
** CUdeviceptr, a VkBuffer with its memory, a cl_mem. The backend turns the description into
** the buffer handle its ops take; xferlua never frees the memory, and calls the
** application's release once it lets go of it.
*/
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

/* What each kind of memory is, in its API's words (a device's table says which it takes). */
static const char *const kind_words[] = {
  [XFER_EXTERNAL_HOST] = "host memory", [XFER_EXTERNAL_CUDA] = "a CUdeviceptr",
  [XFER_EXTERNAL_VULKAN] = "a VkBuffer", [XFER_EXTERNAL_OPENCL] = "a cl_mem",
};

/* The memory must be of the kind the device's runtime wraps (its table says which). */
static xfer_code check_kind(const xfer_device *dev, const xfer_external *mem, xfer_error *err)
{
  int known = (unsigned)mem->kind <= XFER_EXTERNAL_OPENCL;
  xfer_external_kind takes = xfer_be_external_kind(dev);
  if (!known || mem->kind != takes) {
    const char *what = known ? kind_words[mem->kind] : "memory of an unknown kind";
    if (takes == XFER_EXTERNAL_NONE)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_NOTHING, what, dev->name);
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_WRONG_RUNTIME, what,
                       dev->name, kind_words[takes]);
  }
  return XFER_E_OK;
}

xfer_code xfer_tensor_wrap(xfer_device *dev, const xfer_external *mem, xfer_dtype dtype,
                           const xfer_shape *shape, const int64_t *strides,
                           void (*release)(void *ud), void *release_ud, xfer_tensor **out,
                           xfer_error *err)
{
  *out = NULL;
  if (!dev || !mem || !shape)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_NEEDS);
  xfer_code rc = check_kind(dev, mem, err);
  if (rc) return rc;
  if (xfer_device_is_closed(dev))
    return xfer_err_op(err, XFER_E_CLOSED, XFER_OP_WRAP, XFER_S_WRAP_DEVICE_CLOSED, dev->name);
  if (mem->pin && mem->kind != XFER_EXTERNAL_HOST)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_PIN_HOST_ONLY);
  if ((unsigned)dtype >= XFER_DTYPE__COUNT || shape->ndim < 0 || shape->ndim > XFER_MAX_DIMS)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_BAD_SHAPE);
  size_t esize = xfer_dtype_size(dtype), numel = 1;
  int64_t packed[XFER_MAX_DIMS];
  xfer_packed_strides(shape, packed);
  if (!strides) strides = packed;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] < 0 || strides[i] < 0)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_NEGATIVE, i + 1,
                         (long long)shape->dims[i], (long long)strides[i]);
    numel *= (size_t)shape->dims[i];
  }
  int64_t extent = xfer_layout_extent(shape, strides);
  if ((double)extent * (double)esize > (double)mem->size)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, XFER_S_WRAP_PAST_END,
                       (double)extent * (double)esize, mem->size);
  if (!xfer_be_has_wrap(dev))
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_WRAP, XFER_S_WRAP_REFUSED, dev->name);
  xfer_tensor *t = calloc(1, sizeof *t);
  if (!t) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRAP);
  rc = xfer_be_wrap(dev, mem, &t->buf, err);
  if (rc) {
    free(t);
    return rc;
  }
  t->refs = 1;
  t->dev = dev;
  t->dtype = dtype;
  t->shape = *shape;
  memcpy(t->strides, strides, sizeof t->strides[0] * (size_t)shape->ndim);
  t->contiguous = xfer_strides_packed(shape, strides);
  t->numel = numel;
  t->nbytes = numel * esize;
  t->offset = mem->offset;
  t->wrapped = 1;
  t->release = release;
  t->release_ud = release_ud;
  /* the runtimes may pin or import it in place, as they do xferlua's own host memory: listed
  ** with the host segments (not when it overlaps one: it then moves as pageable memory) */
  if (mem->pin) t->external = xfer_mem_host_external(dev->ctx, mem->ptr, mem->offset + mem->size);
  xfer_tensor_adopt(t);
  *out = t;
  return XFER_E_OK;
}

int xfer_tensor_is_wrapped(const xfer_tensor *t)
{
  return t && (t->wrapped || (t->base && t->base->wrapped));
}
