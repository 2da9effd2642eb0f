/*
** transfer.c -- moving a tensor to another device: the route (route.c) says how, this file
** runs it -- the devices it names held, the tensors checked under their locks, the path's
** calls made, the ledger told -- and a failure leaves the source untouched and nothing
** allocated. Views are packed or scattered around a move of their elements, dtypes converted
** on the host around it.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger.h"
#include "transfer.h"

/* -- Executing ------------------------------------------------------------------------- */

/* What a move holds: the devices its route uses, locked in one global order, and both tensors
** marked busy (free() waits for them). Taken after the route is chosen: the route names the
** devices. */
typedef struct hold {
  xfer_hold held;
  xfer_tensor *tensors[2];
} hold;

static xfer_code hold_take(hold *h, const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                           xfer_error *err)
{
  xfer_device *devs[4];
  int n = xfer_route_devices(route, devs);
  h->tensors[0] = src;
  h->tensors[1] = dst;
  return xfer_hold_take(&h->held, devs, n, h->tensors, 2, err);
}

static void hold_drop(hold *h) { xfer_hold_drop(&h->held); }




/* -- Moves told in steps ------------------------------------------------------------------- */

/* A move with a progress callback goes in steps of this many bytes, telling each: the
** single-call paths (a device's own copy, a peer copy, interop's one copy, the host
** round-trip) would otherwise say nothing between the start and the end. Without a callback
** they stay one call. 16 MiB: 0.3 ms of a host link at 50 GB/s, so a step's synchronous calls
** (~10 us) cost ~3% there, and a move of tens of MiB is told on its way too (with 64 MiB steps a
** 40 MiB move said only its start and its end); device-local copies (2 TB/s: 0.13 ms a step)
** in 256 MiB steps. */
#define PROGRESS_STEP ((size_t)16 << 20)
#define PROGRESS_STEP_DEVICE ((size_t)256 << 20)

/* The host round-trip of n bytes from byte `at` of both tensors, through `bytes` (a host
** buffer of n bytes at least) unless one end is host memory already: then one copy. */
static xfer_code host_roundtrip_range(xfer_tensor *src, xfer_tensor *dst, size_t at, size_t n, char *bytes,
                                      xfer_error *err)
{
  char *dst_host = xfer_be_host_address(dst->dev, dst->buf, dst->offset);
  char *src_host = xfer_be_host_address(src->dev, src->buf, src->offset);
  if (dst_host) return xfer_be_read(src->dev, src->buf, src->offset + at, dst_host + at, n, err);
  if (src_host) return xfer_be_write(dst->dev, dst->buf, dst->offset + at, src_host + at, n, err);
  xfer_code rc = xfer_be_read(src->dev, src->buf, src->offset + at, bytes, n, err);
  return rc ? rc : xfer_be_write(dst->dev, dst->buf, dst->offset + at, bytes, n, err);
}

static xfer_code run_host_roundtrip(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  size_t n = src->nbytes;
  /* a move told in steps stages a step at a time (and so needs a step's host memory) */
  size_t step = xfer_progress_wanted() && n > PROGRESS_STEP ? PROGRESS_STEP : n;
  int one_copy = xfer_be_host_address(dst->dev, dst->buf, dst->offset) ||
                 xfer_be_host_address(src->dev, src->buf, src->offset);
  xfer_block *staging = NULL; /* from the host pool: pinned and imported once, then reused */
  xfer_device *host = xfer_host_of(src->dev->ctx);
  xfer_code rc = one_copy ? XFER_E_OK : xfer_mem_alloc(host, step, &staging, err);
  char *bytes = staging ? xfer_be_host_address(host, staging->buf, staging->offset) : NULL;
  for (size_t at = 0; !rc && at < n; at += step) {
    size_t len = n - at < step ? n - at : step;
    rc = host_roundtrip_range(src, dst, at, len, bytes, err);
    if (!rc && at + len < n) rc = xfer_progress(at + len, n, err);
  }
  xfer_mem_free(staging);
  return rc;
}

/* A device's own copy, a peer copy or interop's one copy, in steps when told (see above). */
static xfer_code run_in_steps(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  size_t n = src->nbytes;
  size_t step = xfer_progress_wanted() && n > PROGRESS_STEP_DEVICE ? PROGRESS_STEP_DEVICE : n;
  xfer_code rc = XFER_E_OK;
  for (size_t at = 0; !rc && at < n; at += step) {
    size_t len = n - at < step ? n - at : step;
    if (route->path == XFER_PATH_SAME_DEVICE)
      rc = xfer_be_copy(src->dev, dst->buf, dst->offset + at, src->buf, src->offset + at, len, err);
    else if (route->path == XFER_PATH_SAME_RUNTIME)
      rc = xfer_be_peer(dst->dev, dst->buf, dst->offset + at, src->dev, src->buf, src->offset + at, len, err);
    else
      rc = xfer_interop_run_range(route, src, dst, at, len, err);
    if (!rc && at + len < n) rc = xfer_progress(at + len, n, err);
  }
  return rc;
}

/* The remote end's transport moves the local end's device memory in place. */
static xfer_code run_direct(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  int into_remote = xfer_be_has_direct(dst->dev);
  xfer_tensor *far = into_remote ? dst : src, *near = into_remote ? src : dst;
  xfer_memory mem;
  xfer_code rc = xfer_be_device_memory(near->dev, near->buf, near->offset, &mem, err);
  if (!rc)
    rc = xfer_be_direct(far->dev, far->buf, far->offset, &mem, src->nbytes, into_remote, err);
  return rc;
}

/* A route that could not be made is the move's error once the tensors checked out: a freed
** tensor is said first, as it is for every move. */
static xfer_code planned_error(xfer_code planned, const xfer_error *planning, xfer_error *err)
{
  if (planned && err) *err = *planning;
  return planned;
}

xfer_code xfer_transfer_run(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                            xfer_error *err)
{
  xfer_path path = route->path;
  size_t n = src->nbytes;
  xfer_code rc = xfer_progress(0, n, err); /* the start */
  if (rc || n == 0) return rc;
  double start = xfer_now();
  switch (path) {
  case XFER_PATH_SAME_DEVICE:
  case XFER_PATH_SAME_RUNTIME:
    rc = run_in_steps(route, src, dst, err);
    break;
  case XFER_PATH_INTEROP:
    rc = xfer_interop_ranged(route) ? run_in_steps(route, src, dst, err) : xfer_interop_run(route, src, dst, err);
    break;
  case XFER_PATH_DIRECT:
    rc = run_direct(src, dst, err);
    break;
  case XFER_PATH_STAGED:
    rc = xfer_staged_run(route, src, dst, err);
    break;
  default:
    rc = run_host_roundtrip(src, dst, err);
    break;
  }
  if (!rc && path != XFER_PATH_STAGED) rc = xfer_progress(n, n, err); /* (staged: per chunk) */
  if (rc) xfer_err_frame(err, src->dev, dst->dev, n);
  /* the ledger remembers: what moved, and a failure against the path for this pair (a path
  ** set aside is skipped by the default choice; a success clears the count) */
  xfer_ledger_record(src->dev->ctx, src->dev, dst->dev, path, n, xfer_now() - start, rc, err);
  return rc;
}

/* A view and a contiguous tensor of as many elements, one of them on the host and the other
** on a device whose runtime takes batches (or both on one device): the view's runs moved in
** one submission (xfer_view_many), no pack on the CPU -- every other row of a pinned host
** matrix reaches a CUDA device at the link's speed. XFER_E_UNSUPPORTED, nothing said, when
** the runtime takes no such batch: the caller packs instead. */
static xfer_code view_at_once(xfer_tensor *view, xfer_tensor *packed, int to_packed,
                              const xfer_transfer_opts *opts, xfer_error *err)
{
  if (opts && opts->via != XFER_PATH_AUTO && opts->via != XFER_PATH_HOST) return XFER_E_UNSUPPORTED;
  /* host <-> a device whose memory another runtime of its GPU imports and runs batches over
  ** (Vulkan on NVIDIA: CUDA's kernel, where Vulkan's copy engine pays per run), as batch
  ** groups do */
  int view_on_host = xfer_is_host(view->dev), packed_on_host = xfer_is_host(packed->dev);
  xfer_device *dev_end = view_on_host == packed_on_host ? NULL : view_on_host ? packed->dev : view->dev;
  xfer_device *importer = dev_end ? xfer_route_many_importer(dev_end) : NULL;
  if (!importer && !xfer_many_runner(view->dev, packed->dev)) return XFER_E_UNSUPPORTED;
  xfer_route route = {.path = view->dev == packed->dev ? XFER_PATH_SAME_DEVICE
                          : dev_end ? XFER_PATH_HOST : XFER_PATH_INTEROP,
                      .from = to_packed ? view->dev : packed->dev,
                      .to = to_packed ? packed->dev : view->dev, .nbytes = view->nbytes,
                      .helpers = {importer, NULL}, .nhelpers = importer != NULL};
  hold h;
  xfer_code rc = hold_take(&h, &route, view, packed, err);
  if (!rc) rc = xfer_tensor_check(view, "copy", err);
  if (!rc) rc = xfer_tensor_check(packed, "copy", err);
  double start = xfer_now();
  const xfer_transfer_opts *outer = xfer_progress_install(opts);
  if (!rc) rc = xfer_progress(0, view->nbytes, err);
  if (!rc) {
    rc = XFER_E_UNSUPPORTED;
    xfer_error ignored; /* an import refused: the device's own batch, or a pack */
    const xfer_tensor *far = dev_end == view->dev ? view : packed;
    xfer_many_via via = {importer, xfer_tensor_block(far), NULL};
    if (importer && via.imported && !xfer_interop_view(far, importer, &via.view, &ignored))
      rc = xfer_view_many_via(view, packed, to_packed, &via, err);
    if (rc == XFER_E_UNSUPPORTED && xfer_many_runner(view->dev, packed->dev))
      rc = xfer_view_many(view, packed, to_packed, err);
    if (rc != XFER_E_UNSUPPORTED) {
      if (!rc) rc = xfer_progress(view->nbytes, view->nbytes, err);
      if (rc) xfer_err_frame(err, route.from, route.to, view->nbytes);
      xfer_ledger_record(view->dev->ctx, route.from, route.to, route.path, view->nbytes,
                         xfer_now() - start, rc, err);
    }
  }
  xfer_progress_restore(outer);
  hold_drop(&h);
  return rc;
}

/* A non-contiguous view packed into a new host tensor (its rows read by the backend's
** rectangle copies, or its span, or its runs). */
static xfer_code pack_on_host(xfer_tensor *src, xfer_tensor **out, xfer_error *err)
{
  xfer_device *host = xfer_host_of(src->dev->ctx);
  xfer_code rc = xfer_tensor_alloc(host, src->dtype, &src->shape, src->dev, out, err);
  if (rc) return rc;
  void *bytes = xfer_be_host_address(host, (*out)->buf, (*out)->offset);
  if (src->nbytes) rc = xfer_tensor_read(src, bytes, src->nbytes, err);
  if (rc) {
    xfer_tensor_release(*out);
    *out = NULL;
  }
  return rc;
}

/* A non-contiguous view packed into a new tensor on its own device, by the backend's copies
** of rows (nothing leaves the device). */
static xfer_code pack_on_device(xfer_tensor *src, xfer_tensor **out, xfer_error *err)
{
  xfer_code rc = xfer_tensor_alloc(src->dev, src->dtype, &src->shape, src->dev, out, err);
  if (rc) return rc;
  xfer_device_lock(src->dev);
  rc = xfer_tensor_check(src, "copy", err);
  if (!rc) rc = xfer_view_device_move(src, *out, 1, err);
  xfer_device_unlock(src->dev);
  if (rc) {
    xfer_tensor_release(*out);
    *out = NULL;
  }
  return rc;
}

/* A view packed where its move to `to` is cheapest: on the host when it goes there (the
** backend's rectangle reads: one pass), else on its own device when the backend copies rows
** there (then one contiguous move, on any path), else on the host. */
static xfer_code pack(xfer_tensor *src, const xfer_device *to, xfer_tensor **out, xfer_error *err)
{
  if (!xfer_is_host(to) && xfer_view_on_device(src)) return pack_on_device(src, out, err);
  return pack_on_host(src, out, err);
}

/* `from` (contiguous, any device) scattered into the view `dst` on dst's device: `from` moved
** there first when it lives elsewhere, then the backend's copies of rows. */
static xfer_code scatter_on_device(xfer_tensor *dst, xfer_tensor *from, xfer_error *err)
{
  xfer_tensor *there = NULL;
  xfer_code rc = XFER_E_OK;
  if (from->dev != dst->dev) rc = xfer_transfer_to(from, dst->dev, NULL, &there, err);
  xfer_tensor *packed = there ? there : from;
  if (!rc) {
    xfer_device_lock(dst->dev);
    rc = xfer_tensor_check(dst, "copy", err);
    if (!rc) rc = xfer_tensor_check(packed, "copy", err);
    if (!rc) rc = xfer_view_device_move(dst, packed, 0, err);
    xfer_device_unlock(dst->dev);
  }
  xfer_tensor_release(there);
  return rc;
}

/* A new host tensor holding src's elements as `dtype`: src read packed to the host (in place
** when it lies there), converted element by element. */
static xfer_code convert_on_host(xfer_tensor *src, xfer_dtype dtype, xfer_tensor **out,
                                 xfer_error *err)
{
  xfer_device *host = xfer_host_of(src->dev->ctx);
  xfer_tensor *packed = NULL;
  xfer_code rc = XFER_E_OK;
  if (!xfer_is_host(src->dev) || !src->contiguous) rc = pack_on_host(src, &packed, err);
  xfer_tensor *from = packed ? packed : src;
  if (!rc) rc = xfer_tensor_check(from, "convert", err);
  if (!rc) rc = xfer_tensor_alloc(host, dtype, &src->shape, src->dev, out, err);
  if (!rc && src->numel) {
    const void *in = xfer_be_host_address(host, from->buf, from->offset);
    void *converted = xfer_be_host_address(host, (*out)->buf, (*out)->offset);
    rc = xfer_convert(dtype, converted, src->dtype, in, src->numel, err);
    if (rc) {
      xfer_tensor_release(*out);
      *out = NULL;
    }
  }
  xfer_tensor_release(packed);
  return rc;
}

/* The ends of a converting or packing move on its error: a conversion's own error is framed
** ("Failed to convert a tensor from a to b: f32 to u8: element 3: ..."); a read or write on
** the way (through the host) already says what failed, and only gets the move's ends. */
static xfer_code convert_failed(xfer_code rc, xfer_error *err, const xfer_device *from,
                                const xfer_device *to, size_t nbytes)
{
  if (!err) return rc;
  if (err->op_id == XFER_OP_CONVERT) {
    xfer_err_frame(err, from, to, nbytes);
  } else {
    snprintf(err->from, sizeof err->from, "%s", from->name);
    snprintf(err->to, sizeof err->to, "%s", to->name);
  }
  return rc;
}

/* A dtype change passes the host: only the host path (or the planner's choice) allows it. */
static xfer_code check_convert_path(const xfer_transfer_opts *opts, const char *op, xfer_error *err)
{
  if (!opts || opts->via == XFER_PATH_AUTO || opts->via == XFER_PATH_HOST) return XFER_E_OK;
  return xfer_err_set(err, XFER_E_UNSUPPORTED, op, "a dtype change is made on the host: the move "
                      "passes the host, which via = \"%s\" forbids (via = \"host\", or none)",
                      xfer_path_name(opts->via));
}

xfer_code xfer_transfer_to(xfer_tensor *src, xfer_device *dst_dev, const xfer_transfer_opts *opts,
                           xfer_tensor **out, xfer_error *err)
{
  *out = NULL;
  if (!src) return xfer_tensor_check(src, "plan", err); /* before src->dev is touched */
  if (opts && opts->convert && opts->dtype != src->dtype) {
    if ((unsigned)opts->dtype >= XFER_DTYPE__COUNT)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, "unknown dtype %d", (int)opts->dtype);
    xfer_tensor *converted;
    xfer_code rc = check_convert_path(opts, "plan", err);
    if (!rc) rc = convert_on_host(src, opts->dtype, &converted, err);
    if (rc) return convert_failed(rc, err, src->dev, dst_dev, src->nbytes);
    if (xfer_is_host(dst_dev)) {
      *out = converted;
      return XFER_E_OK;
    }
    rc = xfer_transfer_to(converted, dst_dev, NULL, out, err);
    xfer_tensor_release(converted);
    return rc ? convert_failed(rc, err, src->dev, dst_dev, src->nbytes) : rc;
  }
  if (!src->contiguous) { /* a view's layout never changes: no lock to read it */
    xfer_tensor *packed = NULL;
    /* a host view to a device whose runtime takes batches, or a device view to the host where
    ** another runtime reaches the device's memory (a Vulkan view read by CUDA's kernel; a
    ** device's own rectangle reads serve the rest) */
    if ((xfer_is_host(src->dev) && !xfer_is_host(dst_dev) && xfer_many_runner(src->dev, dst_dev)) ||
        (xfer_is_host(dst_dev) && !xfer_is_host(src->dev) && xfer_route_many_importer(src->dev))) {
      xfer_code rc = xfer_tensor_alloc(dst_dev, src->dtype, &src->shape, src->dev, &packed, err);
      if (!rc) rc = view_at_once(src, packed, 1, opts, err);
      if (!rc) {
        *out = packed;
        return XFER_E_OK;
      }
      if (packed) xfer_tensor_release(packed);
      if (rc != XFER_E_UNSUPPORTED) return rc;
    }
    xfer_code rc = pack(src, dst_dev, &packed, err); /* checks src under its device's lock */
    if (rc) return convert_failed(rc, err, src->dev, dst_dev, src->nbytes);
    if (packed->dev == dst_dev && (!opts || opts->via == XFER_PATH_AUTO)) {
      *out = packed; /* packed where it was to go: that is the move */
      return XFER_E_OK;
    }
    rc = xfer_transfer_to(packed, dst_dev, opts, out, err);
    xfer_tensor_release(packed);
    return rc ? convert_failed(rc, err, src->dev, dst_dev, src->nbytes) : rc;
  }
  xfer_route route;
  xfer_error planning;
  xfer_code planned = xfer_route_make(src, dst_dev, NULL, opts, &route, NULL, 0, &planning);
  hold h;
  xfer_tensor *dst = NULL;
  xfer_code rc = hold_take(&h, &route, src, NULL, err);
  if (!rc) rc = xfer_tensor_check(src, "plan", err);
  if (!rc) rc = planned_error(planned, &planning, err);
  if (!rc) rc = xfer_tensor_alloc(dst_dev, src->dtype, &src->shape, src->dev, &dst, err);
  const xfer_transfer_opts *outer = xfer_progress_install(opts);
  if (!rc) rc = xfer_transfer_run(&route, src, dst, err);
  xfer_progress_restore(outer);
  hold_drop(&h);
  if (rc) {
    xfer_tensor_release(dst);
    return rc;
  }
  *out = dst;
  return XFER_E_OK;
}

static xfer_code check_same_shape(const xfer_tensor *dst, const xfer_tensor *src,
                                  xfer_error *err)
{
  if (dst->shape.ndim == src->shape.ndim &&
      !memcmp(dst->shape.dims, src->shape.dims, sizeof dst->shape.dims[0] * (size_t)dst->shape.ndim))
    return XFER_E_OK;
  char want[96], got[96];
  xfer_shape_format(dst->dtype, &dst->shape, want, sizeof want);
  xfer_shape_format(src->dtype, &src->shape, got, sizeof got);
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_COPY,
                      "copy_from needs one shape at both ends: target %s, source %s", want, got);
}


xfer_code xfer_transfer_copy(xfer_tensor *dst, xfer_tensor *src, const xfer_transfer_opts *opts,
                             xfer_error *err)
{
  if (!src || !dst) return xfer_tensor_check(NULL, "copy", err); /* before either is touched */
  if (src->dtype != dst->dtype) { /* converted on the host, then copied */
    xfer_tensor *converted;
    xfer_code rc = check_same_shape(dst, src, err);
    if (!rc) rc = check_convert_path(opts, "copy", err);
    if (!rc) rc = convert_on_host(src, dst->dtype, &converted, err);
    if (rc) return convert_failed(rc, err, src->dev, dst->dev, src->nbytes);
    rc = xfer_transfer_copy(dst, converted, NULL, err);
    xfer_tensor_release(converted);
    return rc ? convert_failed(rc, err, src->dev, dst->dev, src->nbytes) : rc;
  }
  if (!src->contiguous || !dst->contiguous) {
    /* views: the source packed on the host (or read packed), scattered into the target (the
    ** reads and writes check both under their devices' locks) */
    xfer_code rc = check_same_shape(dst, src, err);
    if (rc) return rc;
    if (src->contiguous != dst->contiguous) { /* one view: its runs at once where it can */
      rc = src->contiguous ? view_at_once(dst, src, 0, opts, err) : view_at_once(src, dst, 1, opts, err);
      if (rc != XFER_E_UNSUPPORTED) return rc ? convert_failed(rc, err, src->dev, dst->dev, src->nbytes) : rc;
      rc = XFER_E_OK;
    }
    xfer_tensor *packed = NULL;
    if (!src->contiguous) rc = pack(src, dst->dev, &packed, err);
    if (!rc && dst->contiguous) rc = xfer_transfer_copy(dst, packed, opts, err);
    xfer_tensor *from = packed ? packed : src;
    if (!rc && !dst->contiguous && !xfer_is_host(from->dev) && xfer_view_on_device(dst)) {
      /* from a device: moved to dst's device whole, scattered there (host data is scattered
      ** straight from the host, by the rectangle writes) */
      rc = scatter_on_device(dst, from, err);
    } else if (!rc && !dst->contiguous) {
      void *bytes = from->nbytes ? xfer_be_host_address(from->dev, from->buf, from->offset) : NULL;
      char *scratch = NULL;
      if (!bytes && from->nbytes) { /* a contiguous device source: read it packed first */
        bytes = scratch = malloc(from->nbytes);
        rc = scratch ? xfer_tensor_read(from, scratch, from->nbytes, err)
                     : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_COPY);
      }
      if (!rc && from->nbytes) rc = xfer_tensor_write(dst, bytes, from->nbytes, err);
      free(scratch);
    }
    xfer_tensor_release(packed);
    return rc ? convert_failed(rc, err, src->dev, dst->dev, src->nbytes) : rc;
  }
  /* checked under the locks: another thread may be freeing either tensor */
  xfer_route route;
  xfer_error planning;
  xfer_code planned = dst == src ? XFER_E_OK
                                 : xfer_route_make(src, dst->dev, dst, opts, &route, NULL, 0, &planning);
  if (dst == src) route = (xfer_route){.path = XFER_PATH_SAME_DEVICE, .from = src->dev, .to = src->dev};
  hold h;
  xfer_code rc = hold_take(&h, &route, src, dst, err);
  if (!rc) rc = xfer_tensor_check(dst, "copy", err);
  if (!rc) rc = xfer_tensor_check(src, "copy", err);
  if (!rc) rc = check_same_shape(dst, src, err);
  if (!rc) rc = planned_error(planned, &planning, err);
  const xfer_transfer_opts *outer = xfer_progress_install(opts);
  if (!rc && dst != src) rc = xfer_transfer_run(&route, src, dst, err);
  xfer_progress_restore(outer);
  hold_drop(&h);
  return rc;
}
