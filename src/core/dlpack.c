/*
** dlpack.c -- DLPack 1.x: a tensor lent to another framework (DLManagedTensorVersioned, or
** the older DLManagedTensor for consumers that know only it) and a framework's tensor taken
** in as a wrapped tensor (no copy), the producer's deleter called once when xferlua lets go.
** The structs follow DLPack's dlpack.h field for field (its ABI); they are written here so
** that the public headers need no dlpack.h.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

typedef struct { uint32_t major, minor; } dl_version;
typedef struct { int32_t device_type, device_id; } dl_device; /* DLDeviceType is an enum */
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct {
  void *data;
  dl_device device;
  int32_t ndim;
  dl_dtype dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
  dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *self);
} dl_managed;
typedef struct dl_versioned {
  dl_version version;
  void *manager_ctx;
  void (*deleter)(struct dl_versioned *self);
  uint64_t flags;
  dl_tensor dl_tensor;
} dl_versioned;

enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };
#define DL_READ_ONLY 1u

static const struct { xfer_dtype dtype; uint8_t code, bits; } dl_types[] = {
  {XFER_F16, DL_FLOAT, 16}, {XFER_BF16, DL_BFLOAT, 16}, {XFER_F32, DL_FLOAT, 32},
  {XFER_F64, DL_FLOAT, 64}, {XFER_I8, DL_INT, 8}, {XFER_I16, DL_INT, 16},
  {XFER_I32, DL_INT, 32}, {XFER_I64, DL_INT, 64}, {XFER_U8, DL_UINT, 8},
  {XFER_U16, DL_UINT, 16}, {XFER_U32, DL_UINT, 32}, {XFER_U64, DL_UINT, 64},
  {XFER_BOOL, DL_BOOL, 8},
};

/* -- Export ------------------------------------------------------------------------------ */

/* One allocation: the managed struct, then shape and strides. */
typedef struct lent {
  union { dl_managed plain; dl_versioned versioned; } m;
  xfer_tensor *t;
  int64_t dims[2 * XFER_MAX_DIMS];
} lent;

/* The memory a loan holds: its tensor's owner's (a view's base) -- what free() would give back. */
static xfer_tensor *owner_of(xfer_tensor *t) { return t->base ? t->base : t; }

static void lent_free(lent *l)
{
  xfer_ctx *ctx = l->t->dev->ctx;
  pthread_mutex_lock(&ctx->lock);
  owner_of(l->t)->lent--;
  pthread_mutex_unlock(&ctx->lock);
  xfer_tensor_release(l->t);
  free(l);
}
static void delete_plain(dl_managed *self) { lent_free((lent *)self); }
static void delete_versioned(dl_versioned *self) { lent_free((lent *)self); }

/* The DLPack device a tensor is lent as, and its data's address: a runtime whose table names
** a DLPack device type (the host's kDLCPU, CUDA's kDLCUDA), its device memory at hand; 0 for
** a tensor that is not lent. DLPack names a device by its ordinal: the runtime's own index. */
static int lent_device(const xfer_tensor *t, dl_device *device, void **data)
{
  int type = xfer_be_dlpack_type(t->dev);
  if (type == DL_CPU && xfer_be_addressable(t->dev)) {
    *device = (dl_device){DL_CPU, 0};
    *data = xfer_be_host_address(t->dev, t->buf, t->offset);
    return 1;
  }
  void *native = type == DL_CUDA ? xfer_be_native(t->dev, t->buf) : NULL;
  if (!native) return 0;
  *device = (dl_device){type, t->dev->index};
  *data = (char *)native + t->offset;
  return 1;
}

void xfer_tensor_dlpack_device(const xfer_tensor *t, int *type, int *id)
{
  dl_device device = {-1, 0};
  void *data;
  if (!t || xfer_tensor_is_freed(t) || !lent_device(t, &device, &data)) device = (dl_device){-1, 0};
  *type = device.device_type;
  *id = device.device_id;
}

xfer_code xfer_tensor_to_dlpack(xfer_tensor *t, int versioned, void **out, xfer_error *err)
{
  *out = NULL;
  xfer_code rc = xfer_tensor_usable(t, XFER_OP_DLPACK, err);
  if (rc) return rc;
  dl_device device;
  void *data = NULL;
  if (!lent_device(t, &device, &data))
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_NOT_LENT,
                       t->dev->name);
  lent *l = calloc(1, sizeof *l);
  if (!l) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_DLPACK);
  dl_tensor *d = versioned ? &l->m.versioned.dl_tensor : &l->m.plain.dl_tensor;
  d->data = t->numel ? data : NULL;
  d->device = device;
  d->ndim = t->shape.ndim;
  for (size_t i = 0; i < sizeof dl_types / sizeof dl_types[0]; i++)
    if (dl_types[i].dtype == t->dtype) d->dtype = (dl_dtype){dl_types[i].code, dl_types[i].bits, 1};
  memcpy(l->dims, t->shape.dims, sizeof t->shape.dims[0] * (size_t)t->shape.ndim);
  memcpy(l->dims + XFER_MAX_DIMS, t->strides, sizeof t->strides[0] * (size_t)t->shape.ndim);
  d->shape = l->dims;
  d->strides = l->dims + XFER_MAX_DIMS;
  d->byte_offset = 0;
  l->t = xfer_tensor_retain(t); /* the consumer's reference, dropped by the deleter */
  pthread_mutex_lock(&t->dev->ctx->lock); /* and its memory stays: free() is refused meanwhile */
  owner_of(t)->lent++;
  pthread_mutex_unlock(&t->dev->ctx->lock);
  if (versioned) {
    l->m.versioned.version = (dl_version){1, 0};
    l->m.versioned.manager_ctx = l;
    l->m.versioned.deleter = delete_versioned;
    l->m.versioned.flags = 0;
  } else {
    l->m.plain.manager_ctx = l;
    l->m.plain.deleter = delete_plain;
  }
  *out = l;
  return XFER_E_OK;
}

/* -- Import ------------------------------------------------------------------------------ */

typedef struct borrowed {
  void *managed;
  int versioned;
} borrowed;

static void give_back(void *ud)
{
  borrowed *b = ud;
  if (b->versioned) {
    dl_versioned *m = b->managed;
    if (m->deleter) m->deleter(m);
  } else {
    dl_managed *m = b->managed;
    if (m->deleter) m->deleter(m);
  }
  free(b);
}

/* The device a DLPack device names: a device of the runtime whose table names its type (pinned
** host memory is host memory), by its ordinal. */
static xfer_code dlpack_device(xfer_ctx *ctx, const dl_device *device, xfer_device **out,
                               xfer_error *err)
{
  int type = device->device_type == DL_CUDA_HOST ? DL_CPU : device->device_type;
  const xfer_runtime *rt = NULL;
  for (size_t r = 0; r < ctx->nruntimes && !rt; r++)
    if (ctx->runtimes[r].backend && ctx->runtimes[r].backend->dlpack_device_type == type)
      rt = &ctx->runtimes[r];
  if (!rt || type < 0)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_DEVICE_TYPE,
                       (int)device->device_type);
  char name[48];
  if (type == DL_CPU || device->device_id == 0)
    snprintf(name, sizeof name, "%s", rt->name); /* its first device */
  else
    snprintf(name, sizeof name, "%s:%d", rt->name, (int)device->device_id);
  return xfer_device_find(ctx, name, out, err);
}

/* A DLPack tensor's dtype, shape and strides as xferlua's (numel: its elements), or
** XFER_E_UNSUPPORTED for what xferlua has not (lanes, more dimensions, negative strides). */
static xfer_code dlpack_layout(const dl_tensor *d, xfer_dtype *dtype, xfer_shape *shape,
                               int64_t *strides, size_t *numel, xfer_error *err)
{
  *dtype = XFER_DTYPE__COUNT;
  for (size_t i = 0; i < sizeof dl_types / sizeof dl_types[0]; i++)
    if (dl_types[i].code == d->dtype.code && dl_types[i].bits == d->dtype.bits)
      *dtype = dl_types[i].dtype;
  if (*dtype == XFER_DTYPE__COUNT || d->dtype.lanes != 1)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_DTYPE, d->dtype.code,
                       d->dtype.bits, d->dtype.lanes);
  if (d->ndim < 0 || d->ndim > XFER_MAX_DIMS)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_TOO_MANY_DIMENSIONS,
                       (int)d->ndim, XFER_MAX_DIMS);
  *shape = (xfer_shape){d->ndim, {0}};
  *numel = 1;
  for (int i = 0; i < d->ndim; i++) {
    shape->dims[i] = d->shape[i];
    *numel *= (size_t)(d->shape[i] > 0 ? d->shape[i] : 0);
  }
  xfer_packed_strides(shape, strides);
  for (int i = 0; i < d->ndim; i++) {
    if (d->strides) strides[i] = d->strides[i];
    if (strides[i] < 0)
      return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_NEGATIVE_STRIDE,
                         i + 1);
  }
  return XFER_E_OK;
}

xfer_code xfer_tensor_from_dlpack(xfer_ctx *ctx, void *managed, int versioned, xfer_tensor **out,
                                  xfer_error *err)
{
  *out = NULL;
  if (!managed) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_DLPACK, XFER_S_DLPACK_NULL_TENSOR);
  const dl_tensor *d;
  if (versioned) {
    const dl_versioned *m = managed;
    if (m->version.major != 1)
      return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_VERSION,
                         m->version.major, m->version.minor);
    if (m->flags & DL_READ_ONLY)
      return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_READ_ONLY);
    d = &m->dl_tensor;
  } else {
    d = &((const dl_managed *)managed)->dl_tensor;
  }
  xfer_device *dev = NULL;
  xfer_code rc = dlpack_device(ctx, &d->device, &dev, err);
  if (rc) return rc;
  if (!dev) return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_DLPACK, XFER_S_DLPACK_NO_DEVICE);
  xfer_dtype dtype;
  xfer_shape shape;
  int64_t strides[XFER_MAX_DIMS];
  size_t numel = 0;
  rc = dlpack_layout(d, &dtype, &shape, strides, &numel, err);
  if (rc) return rc;
  borrowed *b = malloc(sizeof *b);
  if (!b) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_DLPACK);
  b->managed = managed;
  b->versioned = versioned;
  xfer_external mem = {
    .kind = xfer_be_external_kind(dev),
    .ptr = (char *)d->data + d->byte_offset,
    .size = (size_t)xfer_layout_extent(&shape, strides) * xfer_dtype_size(dtype),
  };
  if (!mem.ptr && numel) {
    free(b);
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_DLPACK, XFER_S_DLPACK_NO_DATA);
  }
  if (!mem.ptr) mem.ptr = b; /* an empty tensor's address is never read */
  rc = xfer_tensor_wrap(dev, &mem, dtype, &shape, strides, give_back, b, out, err);
  if (rc) free(b); /* not taken: the caller keeps the managed tensor */
  return rc;
}
