/*
** view_io.c -- a view's elements packed into host memory and scattered back (in place where
** the CPU maps the memory, by the backend's rectangle copies where it has them, else through
** the covering span or run by run), or packed and scattered within their device (the
** backend's copy_rows). Which a move takes is the route's choice; tensor.c's reads and writes
** of a view come here.
*/
#include <stdlib.h>
#include <string.h>

#include "view_io.h"

/* A read or write of one run at a time costs a driver call each: below this run size the
** covering span is moved whole when it is not much larger than the view. */
#define RUN_CALL_MIN ((size_t)64 << 10)
#define SPAN_WASTE_MAX 4

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
** the backend's host_rows copies. 0 when the layout is no such thing (a stride of 0, a
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
  return !xfer_is_host(t->dev) && xfer_be_has_copy_rows(t->dev) && t->numel &&
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
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_COPY, XFER_S_VIEW_NOT_ROWS);
  return each_slab(t, outer, s.rows * m.run, device_slab, &s, err);
}

/* -- A view's runs as one batch ---------------------------------------------------------- */

/* Below this run size a batch of runs is a piece per few elements: packing on the CPU wins. */
#define MANY_RUN_MIN ((size_t)512)

/* The device that runs batches over `dev`'s memory: the device whose memory it lives in (OpenCL
** on NVIDIA lives in CUDA's: one kernel, where NVIDIA's OpenCL makes a command a piece), else
** itself (own: itself only, for memory its backing device does not hold); or NULL. */
static xfer_device *many_of(xfer_device *dev, int own)
{
  if (!own && dev->backing && !dev->backing->lost && xfer_be_has_many(dev->backing))
    return dev->backing;
  return xfer_be_has_many(dev) ? dev : NULL;
}

static xfer_device *runner_of(xfer_device *a, xfer_device *b, int own)
{
  if (xfer_is_host(a)) return many_of(b, own);
  if (xfer_is_host(b) || a == b) return many_of(a, own);
  xfer_device *ra = many_of(a, own), *rb = many_of(b, own);
  return ra && ra == rb ? ra : NULL; /* two runtimes in one device's memory */
}

xfer_device *xfer_many_runner(xfer_device *a, xfer_device *b) { return runner_of(a, b, 0); }
xfer_device *xfer_many_runner_own(xfer_device *a, xfer_device *b) { return runner_of(a, b, 1); }

xfer_device *xfer_many_across(xfer_device *a, xfer_device *b)
{
  if (xfer_is_host(a) || xfer_is_host(b)) return NULL;
  xfer_device *ra = many_of(a, 0), *rb = many_of(b, 0);
  return ra && rb && ra != rb && xfer_be_many_reaches(ra, rb) ? ra : NULL;
}

int xfer_piece_end_of(const xfer_tensor *t, size_t at, const xfer_device *runner,
                      xfer_piece_end *out)
{
  char *host = xfer_be_host_address(t->dev, t->buf, t->offset + at);
  if (host && xfer_is_host(t->dev)) {
    *out = (xfer_piece_end){NULL, 0, host};
    return 1;
  }
  if (t->dev == runner) {
    *out = (xfer_piece_end){t->buf, t->offset + at, NULL};
    return 1;
  }
  /* another GPU's memory the runner's copies reach in place (CUDA with peer access on) */
  if (xfer_be_many_reaches(runner, t->dev)) {
    *out = (xfer_piece_end){t->buf, t->offset + at, NULL};
    return 1;
  }
  const xfer_block *b = xfer_tensor_block(t);
  if (!t->dev->backing || !b || !b->seg->backing_buf ||
      (t->dev->backing != runner && !xfer_be_many_reaches(runner, t->dev->backing)))
    return 0;
  *out = (xfer_piece_end){b->seg->backing_buf, t->offset + at, NULL};
  return 1;
}

typedef struct pieces_of {
  const xfer_tensor *view, *packed;
  const xfer_device *runner;
  const xfer_many_via *via;
  xfer_piece *pieces;
  size_t run;
  int to_packed;
} pieces_of;

/* One end as the runner reaches it: in place, or through the import `via` names. */
static int run_end(const pieces_of *p, const xfer_tensor *t, size_t at, xfer_piece_end *out)
{
  if (xfer_piece_end_of(t, at, p->runner, out)) return 1;
  if (!p->via || xfer_tensor_block(t) != p->via->imported) return 0;
  *out = (xfer_piece_end){p->via->view, t->offset + at, NULL};
  return 1;
}

static xfer_code piece_run(void *arg, size_t at, size_t k, xfer_error *err)
{
  (void)err;
  pieces_of *p = arg;
  xfer_piece_end strided, packed;
  if (!run_end(p, p->view, at, &strided) || !run_end(p, p->packed, k * p->run, &packed))
    return XFER_E_UNSUPPORTED;
  p->pieces[k] = p->to_packed ? (xfer_piece){packed, strided, p->run}
                              : (xfer_piece){strided, packed, p->run};
  return XFER_E_OK;
}

int xfer_view_many_worth(const xfer_tensor *view)
{
  size_t run;
  each_run(view, &run, NULL, NULL, NULL); /* the run size only */
  return run >= MANY_RUN_MIN && view->numel > 0;
}

xfer_code xfer_view_many_via(xfer_tensor *view, xfer_tensor *packed, int to_packed,
                             const xfer_many_via *via, xfer_error *err)
{
  xfer_device *runner = via ? via->runner : xfer_many_runner(view->dev, packed->dev);
  size_t run;
  each_run(view, &run, NULL, NULL, NULL); /* the run size only */
  if (!runner || run < MANY_RUN_MIN || view->numel == 0) return XFER_E_UNSUPPORTED;
  size_t count = view->nbytes / run;
  pieces_of p = {view, packed, runner, via, malloc(count * sizeof *p.pieces), run, to_packed};
  if (!p.pieces) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_COPY);
  xfer_code rc = each_run(view, &run, piece_run, &p, err);
  xfer_device *own = via ? NULL : xfer_many_runner_own(view->dev, packed->dev);
  if (rc == XFER_E_UNSUPPORTED && own && own != runner) { /* memory its backing does not hold */
    p.runner = runner = own;
    rc = each_run(view, &run, piece_run, &p, err);
  }
  if (!rc) rc = xfer_be_many(runner, p.pieces, count, 0, err);
  free(p.pieces);
  return rc;
}

xfer_code xfer_view_many(xfer_tensor *view, xfer_tensor *packed, int to_packed, xfer_error *err)
{
  return xfer_view_many_via(view, packed, to_packed, NULL, err);
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
