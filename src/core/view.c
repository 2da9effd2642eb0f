/*
** view.c -- views: tensors that share another's memory with a shape, strides (in elements)
** and a first element of their own, and the strided reads and writes that pack a view's
** elements into host memory and scatter them back (in place where the CPU maps the memory,
** by the backend's rectangle copies where it has them, else through the covering span or run
** by run), or pack and scatter them within their device (the backend's copy_rows). Which a
** move takes is transfer.c's choice.
*/
#include <stdlib.h>
#include <string.h>

#include "backend_call.h"

/* A read or write of one run at a time costs a driver call each: below this run size the
** covering span is moved whole when it is not much larger than the view. */
#define RUN_CALL_MIN ((size_t)64 << 10)
#define SPAN_WASTE_MAX 4

void xfer_packed_strides(const xfer_shape *shape, int64_t *strides)
{
  int64_t step = 1;
  for (int i = shape->ndim; i-- > 0;) {
    strides[i] = step;
    step *= shape->dims[i] ? shape->dims[i] : 1;
  }
}

int xfer_strides_packed(const xfer_shape *shape, const int64_t *strides)
{
  int64_t step = 1;
  for (int i = shape->ndim; i-- > 0;) {
    if (shape->dims[i] == 0) return 1; /* no elements: any layout is packed */
    if (shape->dims[i] != 1 && strides[i] != step) return 0;
    step *= shape->dims[i];
  }
  return 1;
}

int64_t xfer_layout_extent(const xfer_shape *shape, const int64_t *strides)
{
  int64_t last = 0;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] == 0) return 0;
    last += (shape->dims[i] - 1) * strides[i];
  }
  return last + 1;
}

xfer_code xfer_tensor_view(xfer_tensor *t, const xfer_shape *shape, const int64_t *strides,
                           int64_t first, xfer_tensor **out, xfer_error *err)
{
  *out = NULL;
  xfer_code rc = xfer_tensor_check(t, "view", err);
  if (rc) return rc;
  if (shape->ndim < 0 || shape->ndim > XFER_MAX_DIMS)
    return xfer_err_set(err, XFER_E_INVALID, "view", "a tensor has 0 to %d dimensions, not %d",
                        XFER_MAX_DIMS, shape->ndim);
  xfer_tensor *owner = t->base ? t->base : t;
  size_t numel = 1;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] < 0 || strides[i] < 0)
      return xfer_err_set(err, XFER_E_INVALID, "view", "dimension %d: size %lld, stride %lld: "
                          "neither may be negative", i + 1, (long long)shape->dims[i],
                          (long long)strides[i]);
    if (shape->dims[i] > (int64_t)owner->numel)
      return xfer_err_set(err, XFER_E_INVALID, "view", "dimension %d: %lld elements in a tensor "
                          "of %zu", i + 1, (long long)shape->dims[i], owner->numel);
    numel *= (size_t)shape->dims[i];
  }
  int64_t extent = xfer_layout_extent(shape, strides);
  if (first < 0 || (numel && (first > (int64_t)owner->numel ||
                              extent > (int64_t)owner->numel - first)))
    return xfer_err_set(err, XFER_E_INVALID, "view", "the view reaches element %lld of a tensor "
                        "of %zu elements", (long long)first + (long long)extent, owner->numel);
  xfer_tensor *v = calloc(1, sizeof *v);
  if (!v) return xfer_err_set(err, XFER_E_ALLOC, "view", "out of host memory");
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

/* -- Runs: the view's elements as contiguous pieces ------------------------------------- */

/* The view as `count` runs of `run` bytes each; calls fn(arg, byte offset of the run from
** the first element, index of the run) in order of the packed layout, stopping at an error. */
typedef xfer_code (*run_fn)(void *arg, size_t at, size_t k, xfer_error *err);

static xfer_code each_run(const xfer_tensor *t, size_t *run_bytes, run_fn fn, void *arg,
                          xfer_error *err)
{
  size_t esize = xfer_dtype_size(t->dtype);
  int inner = t->shape.ndim;
  int64_t run = 1; /* the trailing dimensions laid out packed make one run */
  while (inner > 0 && (t->shape.dims[inner - 1] == 1 || t->strides[inner - 1] == run)) {
    run *= t->shape.dims[inner - 1];
    inner--;
  }
  *run_bytes = (size_t)run * esize;
  if (t->numel == 0) return XFER_E_OK;
  int64_t index[XFER_MAX_DIMS] = {0};
  size_t count = t->numel / (size_t)run;
  for (size_t k = 0; k < count; k++) {
    int64_t at = 0;
    for (int i = 0; i < inner; i++) at += index[i] * t->strides[i];
    if (fn) {
      xfer_code rc = fn(arg, (size_t)at * esize, k, err);
      if (rc) return rc;
    }
    for (int i = inner; i-- > 0;) { /* the odometer */
      if (++index[i] < t->shape.dims[i]) break;
      index[i] = 0;
    }
  }
  return XFER_E_OK;
}

typedef struct mover {
  xfer_tensor *t;
  char *strided;  /* the first element's bytes in host memory (in place, or a read span) */
  char *packed;
  size_t run;
  int to_packed;
} mover;

static xfer_code copy_run(void *arg, size_t at, size_t k, xfer_error *err)
{
  (void)err;
  mover *m = arg;
  if (m->to_packed) memcpy(m->packed + k * m->run, m->strided + at, m->run);
  else memcpy(m->strided + at, m->packed + k * m->run, m->run);
  return XFER_E_OK;
}

static xfer_code io_run(void *arg, size_t at, size_t k, xfer_error *err)
{
  mover *m = arg;
  if (m->to_packed)
    return xfer_be_read(m->t->dev, m->t->buf, m->t->offset + at, m->packed + k * m->run, m->run, err);
  return xfer_be_write(m->t->dev, m->t->buf, m->t->offset + at, m->packed + k * m->run, m->run, err);
}

/* The view as slabs of rows: each slab `rows` runs of `run` bytes, `pitch` bytes apart (the
** innermost dimension that is not packed); the slabs in packed order, each a driver call of
** the backend's read_rows/write_rows. 0 when the layout is no such thing (a stride of 0, a
** pitch the drivers refuse). */
static int rows_layout(const xfer_tensor *t, size_t run, size_t *pitch, size_t *rows, int *outer)
{
  size_t esize = xfer_dtype_size(t->dtype);
  int inner = t->shape.ndim;
  int64_t packed = 1;
  while (inner > 0 && (t->shape.dims[inner - 1] == 1 || t->strides[inner - 1] == packed)) {
    packed *= t->shape.dims[inner - 1];
    inner--;
  }
  if (inner == 0) return 0;
  *outer = inner - 1;
  *rows = (size_t)t->shape.dims[inner - 1];
  *pitch = (size_t)t->strides[inner - 1] * esize;
  return *pitch >= run && *pitch < ((size_t)1 << 31);
}

/* Calls fn(arg, byte offset of the slab's first run from the view's first element, k) for
** each slab of `rows` runs, in packed order. */
typedef xfer_code (*slab_fn)(void *arg, size_t at, size_t k, xfer_error *err);

static xfer_code each_slab(const xfer_tensor *t, int outer, size_t slab, slab_fn fn, void *arg,
                           xfer_error *err)
{
  int64_t index[XFER_MAX_DIMS] = {0};
  size_t esize = xfer_dtype_size(t->dtype), count = t->nbytes / slab;
  for (size_t k = 0; k < count; k++) {
    int64_t at = 0;
    for (int i = 0; i < outer; i++) at += index[i] * t->strides[i];
    xfer_code rc = fn(arg, (size_t)at * esize, k, err);
    if (rc) return rc;
    for (int i = outer; i-- > 0;) {
      if (++index[i] < t->shape.dims[i]) break;
      index[i] = 0;
    }
  }
  return XFER_E_OK;
}

typedef struct slabs {
  mover *m;
  xfer_tensor *packed; /* on the device (device moves), else NULL */
  size_t pitch, rows;
} slabs;

static xfer_code host_slab(void *arg, size_t at, size_t k, xfer_error *err)
{
  slabs *s = arg;
  xfer_tensor *t = s->m->t;
  size_t slab = s->rows * s->m->run;
  return xfer_be_rows(t->dev, t->buf, t->offset + at, s->pitch, s->m->run, s->rows,
                      s->m->packed + k * slab, !s->m->to_packed, err);
}

static xfer_code device_slab(void *arg, size_t at, size_t k, xfer_error *err)
{
  slabs *s = arg;
  xfer_tensor *t = s->m->t, *p = s->packed;
  size_t run = s->m->run, at_packed = p->offset + k * s->rows * run;
  if (s->m->to_packed)
    return xfer_be_copy_rows(t->dev, p->buf, at_packed, run, t->buf, t->offset + at, s->pitch,
                             run, s->rows, err);
  return xfer_be_copy_rows(t->dev, t->buf, t->offset + at, s->pitch, p->buf, at_packed, run, run,
                           s->rows, err);
}

int xfer_view_on_device(const xfer_tensor *t)
{
  size_t run, pitch, rows;
  int outer;
  each_run(t, &run, NULL, NULL, NULL); /* the run size only */
  return !xfer_is_host(t->dev) && xfer_be(t->dev)->copy_rows && t->numel &&
         rows_layout(t, run, &pitch, &rows, &outer);
}

xfer_code xfer_view_device_move(xfer_tensor *t, xfer_tensor *packed, int to_packed,
                                xfer_error *err)
{
  mover m = {.t = t, .to_packed = to_packed};
  slabs s = {.m = &m, .packed = packed};
  int outer;
  each_run(t, &m.run, NULL, NULL, err);
  if (!rows_layout(t, m.run, &s.pitch, &s.rows, &outer))
    return xfer_err_set(err, XFER_E_UNSUPPORTED, "copy", "the view is no layout of rows");
  return each_slab(t, outer, s.rows * m.run, device_slab, &s, err);
}

/* Packs the view's elements into `packed` (to_packed) or scatters them from it. The caller
** holds the device's lock and has checked the tensor. */
xfer_code xfer_view_move(xfer_tensor *t, char *packed, int to_packed, xfer_error *err)
{
  mover m = {.t = t, .packed = packed, .to_packed = to_packed};
  size_t run;
  each_run(t, &run, NULL, NULL, err); /* the run size only */
  m.run = run;
  if (t->numel == 0) return XFER_E_OK;
  size_t esize = xfer_dtype_size(t->dtype);
  m.strided = xfer_be_host_address(t->dev, t->buf, t->offset);
  if (m.strided) return each_run(t, &run, copy_run, &m, err);
  size_t pitch, rows;
  int outer;
  if (xfer_be_has_rows(t->dev) && rows_layout(t, run, &pitch, &rows, &outer)) {
    slabs s = {.m = &m, .pitch = pitch, .rows = rows}; /* the driver's rectangle copies */
    return each_slab(t, outer, rows * run, host_slab, &s, err);
  }
  size_t span = (size_t)xfer_layout_extent(&t->shape, t->strides) * esize;
  if (run >= RUN_CALL_MIN || span > SPAN_WASTE_MAX * t->nbytes)
    return each_run(t, &run, io_run, &m, err); /* a driver call per run */
  /* the covering span through host memory: read, pack or scatter, and (scattering) written
  ** back whole -- under the device's lock, so no other move of ours writes it meanwhile */
  /* the span's host memory from the host's cache: its pages are reused, not faulted in anew */
  xfer_device *host = xfer_host_of(t->dev->ctx);
  xfer_block *scratch;
  xfer_code rc = xfer_mem_alloc(host, span, &scratch, err);
  if (rc) return rc;
  m.strided = xfer_be_host_address(host, scratch->buf, scratch->offset);
  rc = xfer_be_read(t->dev, t->buf, t->offset, m.strided, span, err);
  if (!rc) rc = each_run(t, &run, copy_run, &m, err);
  if (!rc && !to_packed) rc = xfer_be_write(t->dev, t->buf, t->offset, m.strided, span, err);
  xfer_mem_free(scratch);
  return rc;
}

/* -- One element ---------------------------------------------------------------------------- */

static xfer_code element_at(const xfer_tensor *t, const int64_t *index, int n, size_t *at,
                            const char *op, xfer_error *err)
{
  if (n != t->shape.ndim)
    return xfer_err_set(err, XFER_E_INVALID, op, "%d indices for a tensor of %d dimensions", n,
                        t->shape.ndim);
  int64_t e = 0;
  for (int i = 0; i < n; i++) {
    if (index[i] < 0 || index[i] >= t->shape.dims[i])
      return xfer_err_set(err, XFER_E_INVALID, op, "index %lld is out of range for dimension %d "
                          "(size %lld)", (long long)index[i] + 1, i + 1,
                          (long long)t->shape.dims[i]);
    e += index[i] * t->strides[i];
  }
  *at = t->offset + (size_t)e * xfer_dtype_size(t->dtype);
  return XFER_E_OK;
}

/* One element read (get) or written (set), under the device's lock. */
static xfer_code element_io(xfer_tensor *t, const int64_t *index, int n, void *elem, int writing,
                            xfer_error *err)
{
  const char *op = writing ? "set" : "get";
  if (!t) return xfer_tensor_check(t, op, err);
  xfer_device_lock(t->dev);
  size_t at = 0;
  xfer_code rc = xfer_tensor_check(t, op, err);
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
