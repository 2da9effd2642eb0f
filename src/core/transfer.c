/*
** transfer.c -- moving a tensor to another device: the planner picks the first path
** that applies (DESIGN.md, "Transfers"), the executor runs it, and a failure leaves the
** source untouched and nothing allocated.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_call.h"

static const char *const path_names[XFER_PATH__COUNT] = {
  "auto", "same_device", "same_runtime", "interop", "direct", "staged", "host",
};

const char *xfer_path_name(xfer_path path)
{
  return (unsigned)path < XFER_PATH__COUNT ? path_names[path] : "?";
}

int xfer_path_parse(const char *name, xfer_path *out)
{
  for (int i = XFER_PATH_SAME_DEVICE; i < XFER_PATH__COUNT; i++)
    if (!strcmp(name, path_names[i])) {
      *out = (xfer_path)i;
      return 0;
    }
  return -1;
}

/* -- Planning ------------------------------------------------------------------------- */

void xfer_plan_step(xfer_plan *plan, const char *fmt, ...)
{
  if (plan->nsteps == XFER_PLAN_MAX_STEPS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(plan->steps[plan->nsteps++], sizeof plan->steps[0], fmt, ap);
  va_end(ap);
}

/* Why a path does not apply, in `why` -- or, when `why` is NULL (the planner in a hurry),
** only that it does not. */
static const char *refuse(char *why, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static const char *refuse(char *why, size_t cap, const char *fmt, ...)
{
  if (!why) return "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return why;
}

/* Why `path` cannot move src to dst, or NULL when it can. */
static const char *inapplicable(xfer_path path, const xfer_device *src, const xfer_device *dst,
                                char *why, size_t cap)
{
  switch (path) {
  case XFER_PATH_SAME_DEVICE:
    if (src == dst) return NULL;
    return refuse(why, cap, "same_device needs one device at both ends, not %s and %s",
                  src->name, dst->name);
  case XFER_PATH_SAME_RUNTIME:
    if (src->rt != dst->rt)
      return refuse(why, cap, "same_runtime needs one runtime at both ends, not %s and %s",
                    src->rt->name, dst->rt->name);
    if (src == dst)
      return refuse(why, cap, "same_runtime moves between two devices; %s is both ends",
                    src->name);
    if (!xfer_be_has_peer(src))
      return refuse(why, cap, "%s cannot copy between two of its devices directly",
                    src->rt->name);
    if (!xfer_be_peer_joins(src, dst))
      return refuse(why, cap, "%s and %s are not joined by %s (two servers' devices)",
                    src->name, dst->name, src->rt->name);
    return NULL;
  case XFER_PATH_INTEROP:
    if (xfer_interop_applies(src, dst)) return NULL;
    if (!src->has_uuid || !dst->has_uuid || memcmp(src->uuid, dst->uuid, sizeof src->uuid) ||
        src->rt == dst->rt)
      return refuse(why, cap, "interop needs two runtimes on one physical GPU (equal device "
                    "UUIDs), or two GPUs that CUDA joins, each end CUDA's or exported to it; "
                    "%s and %s are neither", src->name, dst->name);
    return refuse(why, cap, "%s and %s share a GPU, but neither can export its memory as an "
                  "opaque fd to the other (nor can a Vulkan device of that GPU)",
                  src->name, dst->name);
  case XFER_PATH_DIRECT: {
    if (src->remote == dst->remote)
      return refuse(why, cap, "direct moves between a remote device and local device memory; "
                    "%s and %s are %s", src->name, dst->name, src->remote ? "both remote" : "both local");
    const xfer_device *far = src->remote ? src : dst, *near = src->remote ? dst : src;
    if (xfer_be_memory_kind(near) == XFER_MEMORY_HOST)
      return refuse(why, cap, "direct lends device memory to the transport in place, and %s has "
                    "none it lends (CUDA's only; %s)", near->name, xfer_is_host(near)
                    ? "host memory takes the host path, one copy" : "its moves are staged");
    /* the transport says why not where it can; this, where it cannot */
    refuse(why, cap, "%s's runtime moves no device memory in place", far->name);
    return xfer_be_direct_joins(far, near, why, cap) ? NULL : why ? why : "";
  }
  case XFER_PATH_STAGED:
    if (xfer_is_host(src) || xfer_is_host(dst))
      return refuse(why, cap, "staged moves between two devices; %s is host memory, which the "
                    "host path moves in one copy", xfer_is_host(src) ? src->name : dst->name);
    if (src == dst)
      return refuse(why, cap, "staged moves between two devices; %s is both ends", src->name);
    return NULL;
  default:
    return NULL; /* the host round-trip always applies */
  }
}

static void describe(xfer_plan *plan, const xfer_tensor *src, const xfer_device *dst)
{
  const char *from = src->dev->name, *to = dst->name;
  size_t n = src->nbytes;
  switch (plan->path) {
  case XFER_PATH_SAME_DEVICE:
    snprintf(plan->reason, sizeof plan->reason, "source and target are both %s", from);
    xfer_plan_step(plan, "copy %zu bytes within %s", n, from);
    break;
  case XFER_PATH_SAME_RUNTIME:
    if (src->dev->remote) {
      snprintf(plan->reason, sizeof plan->reason, "%s and %s are devices of one server: it "
               "moves the bytes between them, nothing crosses the network", from, to);
      xfer_plan_step(plan, "the server copies %zu bytes from %s to %s", n, from, to);
      return;
    }
    snprintf(plan->reason, sizeof plan->reason, "%s copies between its own devices",
             src->dev->rt->name);
    xfer_plan_step(plan, "peer copy of %zu bytes from %s to %s", n, from, to);
    break;
  case XFER_PATH_INTEROP:
    xfer_interop_describe(src, dst, plan);
    break;
  case XFER_PATH_DIRECT: {
    const xfer_device *far = src->dev->remote ? src->dev : dst;
    const xfer_device *near = src->dev->remote ? dst : src->dev;
    snprintf(plan->reason, sizeof plan->reason, "%s's transport moves %s's memory in place: no "
             "host staging on this side", far->name, near->name);
    if (near == src->dev)
      xfer_plan_step(plan, "send %zu bytes from %s's memory to %s", n, from, to);
    else
      xfer_plan_step(plan, "receive %zu bytes from %s into %s's memory", n, from, to);
    break;
  }
  case XFER_PATH_STAGED: {
    size_t chunk = 0;
    int depth = xfer_staged_chunks(src->dev->ctx, n, &chunk);
    snprintf(plan->reason, sizeof plan->reason,
             "%s and %s share no memory: pipelined through %d host chunk%s of %zu bytes", from, to,
             depth, depth == 1 ? "" : "s", chunk);
    xfer_plan_step(plan, "read %zu bytes off %s, a chunk at a time, into host chunks", n, from);
    xfer_plan_step(plan, "write each chunk to %s while the next is read", to);
    break;
  }
  default:
    if (src->dev->rt != dst->rt && (xfer_is_host(src->dev) || xfer_is_host(dst)))
      snprintf(plan->reason, sizeof plan->reason,
               "one end is host memory: a single copy from %s to %s", from, to);
    else if (src->dev->rt != dst->rt)
      snprintf(plan->reason, sizeof plan->reason,
               "no direct path between %s and %s: through host memory", from, to);
    else
      snprintf(plan->reason, sizeof plan->reason, "through host memory between %s and %s", from,
               to);
    if (xfer_be_addressable(dst))
      xfer_plan_step(plan, "read %zu bytes off %s straight into the target's memory on %s", n, from,
               to);
    else if (xfer_be_addressable(src->dev))
      xfer_plan_step(plan, "write %zu bytes to %s straight from the source's memory on %s", n, to,
               from);
    else {
      xfer_plan_step(plan, "read %zu bytes off %s into host staging", n, from);
      xfer_plan_step(plan, "write %zu bytes from host staging to %s", n, to);
    }
    break;
  }
  /* a remote end: what crossing the network means */
  const xfer_device *ends[2] = {src->dev, dst};
  for (int i = 0; i < 2; i++)
    if (ends[i]->remote && (i == 0 || ends[1] != ends[0]))
      xfer_plan_step(plan, "%s: across the network, in chunks (%s)", ends[i]->name,
                     ends[i]->platform);
}

/* The path a move takes, without the words: transfers call this on every move. */
/* Interop shares xferlua's own memory (its segments, exported and imported once): memory an
** application wrapped is not such memory at either end. */
static const char *wrapped_end(const xfer_tensor *src, const xfer_tensor *dst_t, char *why,
                               size_t cap)
{
  const xfer_tensor *w = xfer_tensor_is_wrapped(src) ? src
                         : dst_t && xfer_tensor_is_wrapped(dst_t) ? dst_t : NULL;
  if (!w) return NULL;
  return refuse(why, cap, "interop shares xferlua's own memory; the tensor on %s wraps memory "
                "of the application", w->dev->name);
}

/* Whether the default choice may take `path` for this move (set aside or not). */
static int applies(const xfer_tensor *src, const xfer_device *dst, const xfer_tensor *dst_t,
                   xfer_path path)
{
  if (path == XFER_PATH_HOST) return 1;
  return !inapplicable(path, src->dev, dst, NULL, 0) &&
         !(path == XFER_PATH_INTEROP && (wrapped_end(src, dst_t, NULL, 0) ||
                                         !xfer_interop_fits(src->dev, dst, src->nbytes)));
}

/* set_aside (may be NULL): why a path that applies was passed over, for the plan's words */
static xfer_code choose(xfer_tensor *src, xfer_device *dst, const xfer_tensor *dst_t,
                        const xfer_transfer_opts *opts, xfer_path *path, char *set_aside,
                        size_t set_aside_cap, xfer_error *err)
{
  if (set_aside && set_aside_cap) set_aside[0] = '\0';
  xfer_code rc = xfer_tensor_check(src, "plan", err);
  if (rc) return rc;
  if (dst->lost)
    return xfer_device_lost_error(dst, "plan", err);
  if (xfer_device_is_closed(dst))
    return xfer_err_set(err, XFER_E_CLOSED, "plan", "device %s is closed (xfer.device(\"%s\") "
                        "opens it again)", dst->name, dst->name);
  xfer_path via = opts ? opts->via : XFER_PATH_AUTO;
  char why[200];
  if (via != XFER_PATH_AUTO) {
    if ((unsigned)via >= XFER_PATH__COUNT)
      return xfer_err_set(err, XFER_E_INVALID, "plan", "unknown path %d", (int)via);
    if (inapplicable(via, src->dev, dst, why, sizeof why) ||
        (via == XFER_PATH_INTEROP && wrapped_end(src, dst_t, why, sizeof why)))
      return xfer_err_set(err, XFER_E_UNSUPPORTED, "plan", "%s", why);
    if (via == XFER_PATH_INTEROP && !xfer_interop_fits(src->dev, dst, src->nbytes))
      return xfer_err_set(err, XFER_E_UNSUPPORTED, "plan", "interop between %s and %s would "
                          "import a buffer of more than %llu bytes into %s, whose driver fails on "
                          "such imports; this tensor has %zu", src->dev->name, dst->name,
                          (unsigned long long)(dst->max_import ? dst : src->dev)->max_import,
                          (dst->max_import ? dst : src->dev)->name, src->nbytes);
    *path = via;
    return XFER_E_OK;
  }
  /* the first that applies, asking only yes or no, and is not set aside for this pair --
  ** or a later one whose measured cost for this size is clearly lower (costs.c) */
  xfer_path usable[XFER_PATH__COUNT];
  int n = 0;
  for (int p = XFER_PATH_SAME_DEVICE; p < XFER_PATH_HOST; p++)
    if (applies(src, dst, dst_t, (xfer_path)p)) {
      if (xfer_health_set_aside(src->dev->ctx, src->dev, dst, (xfer_path)p, set_aside,
                                set_aside_cap)) {
        xfer_health_note_decision(src->dev->ctx);
        continue;
      }
      usable[n++] = (xfer_path)p;
    }
  usable[n++] = XFER_PATH_HOST; /* the last resort always applies */
  *path = xfer_cost_choose(src->dev->ctx, src->dev, dst, src->nbytes, usable[0], usable + 1, n - 1);
  return XFER_E_OK;
}

xfer_code xfer_transfer_plan(xfer_tensor *src, xfer_device *dst, const xfer_transfer_opts *opts,
                             xfer_plan *plan, xfer_error *err)
{
  memset(plan, 0, sizeof *plan);
  char aside[sizeof plan->reason];
  xfer_code rc = choose(src, dst, NULL, opts, &plan->path, aside, sizeof aside, err);
  if (!rc) describe(plan, src, dst);
  for (int p = XFER_PATH_SAME_DEVICE; !rc && p < XFER_PATH__COUNT; p++) {
    if (!applies(src, dst, NULL, (xfer_path)p)) continue;
    int i = plan->nestimates++;
    plan->estimates[i].path = (xfer_path)p;
    plan->estimates[i].measured = xfer_cost_estimate(src->dev->ctx, src->dev, dst, (xfer_path)p,
                                                     src->nbytes, &plan->estimates[i].seconds);
  }
  if (!rc && aside[0]) { /* what was passed over comes first */
    char reason[sizeof plan->reason];
    snprintf(reason, sizeof reason, "%.250s; so: %.200s", aside, plan->reason);
    memcpy(plan->reason, reason, sizeof plan->reason);
  }
  return rc;
}

/* -- Executing ------------------------------------------------------------------------- */

/* The progress callback of the move this thread runs (the outermost move's, when a move runs
** others: a packed view's, a conversion's). */
static _Thread_local const xfer_transfer_opts *progress_of;

xfer_code xfer_progress(uint64_t done, uint64_t total, xfer_error *err)
{
  const xfer_transfer_opts *o = progress_of;
  if (!o || !o->progress || !o->progress(o->progress_ud, done, total)) return XFER_E_OK;
  return xfer_err_set(err, XFER_E_INVALID, "progress", "the move was stopped by its progress "
                      "callback at %llu of %llu bytes", (unsigned long long)done,
                      (unsigned long long)total);
}

/* Installs opts' callback for the moves this thread runs until the returned one is put back. */
static const xfer_transfer_opts *progress_install(const xfer_transfer_opts *opts)
{
  const xfer_transfer_opts *before = progress_of;
  if (opts && opts->progress) progress_of = opts;
  return before;
}


static xfer_code run_host_roundtrip(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  size_t n = src->nbytes;
  char *dst_host = xfer_be_host_address(dst->dev, dst->buf, dst->offset);
  char *src_host = xfer_be_host_address(src->dev, src->buf, src->offset);
  /* Where one end is host memory already, it is the staging buffer: one copy, not two. */
  if (dst_host) return xfer_be_read(src->dev, src->buf, src->offset, dst_host, n, err);
  if (src_host) return xfer_be_write(dst->dev, dst->buf, dst->offset, src_host, n, err);
  xfer_block *staging = NULL; /* from the host pool: pinned and imported once, then reused */
  xfer_device *host = xfer_host_of(src->dev->ctx);
  xfer_code rc = xfer_mem_alloc(host, n, &staging, err);
  char *bytes = staging ? xfer_be_host_address(host, staging->buf, staging->offset) : NULL;
  if (!rc) rc = xfer_be_read(src->dev, src->buf, src->offset, bytes, n, err);
  if (!rc) rc = xfer_be_write(dst->dev, dst->buf, dst->offset, bytes, n, err);
  xfer_mem_free(staging);
  return rc;
}

/* The remote end's transport moves the local end's device memory in place. */
static xfer_code run_direct(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  int into_remote = dst->dev->remote;
  xfer_tensor *far = into_remote ? dst : src, *near = into_remote ? src : dst;
  xfer_memory mem;
  xfer_code rc = xfer_be_device_memory(near->dev, near->buf, near->offset, &mem, err);
  if (!rc)
    rc = xfer_be_direct(far->dev, far->buf, far->offset, &mem, src->nbytes, into_remote, err);
  return rc;
}

static xfer_code run(xfer_path path, xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  size_t n = src->nbytes;
  xfer_code rc = xfer_progress(0, n, err); /* the start */
  if (rc || n == 0) return rc;
  double start = xfer_now();
  switch (path) {
  case XFER_PATH_SAME_DEVICE:
    rc = xfer_be_copy(src->dev, dst->buf, dst->offset, src->buf, src->offset, n, err);
    break;
  case XFER_PATH_SAME_RUNTIME:
    rc = xfer_be_peer(dst->dev, dst->buf, dst->offset, src->dev, src->buf, src->offset, n, err);
    break;
  case XFER_PATH_INTEROP:
    rc = xfer_interop_run(src, dst, err);
    break;
  case XFER_PATH_DIRECT:
    rc = run_direct(src, dst, err);
    break;
  case XFER_PATH_STAGED:
    rc = xfer_staged_run(src, dst, err);
    break;
  default:
    rc = run_host_roundtrip(src, dst, err);
    break;
  }
  if (!rc && path != XFER_PATH_STAGED) rc = xfer_progress(n, n, err); /* (staged: per chunk) */
  if (rc)
    xfer_err_frame(err, src->dev, dst->dev, n);
  else
    xfer_stats_record(src->dev->ctx, path, src->dev, dst->dev, n, xfer_now() - start);
  /* the planner remembers: a failure counts against the path for this pair (a path set
  ** aside is skipped by the default choice), a success clears the count */
  xfer_health_record(src->dev->ctx, src->dev, dst->dev, path, rc, err);
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
  if (!strcmp(err->op, "convert")) {
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
      return xfer_err_set(err, XFER_E_INVALID, "convert", "unknown dtype %d", (int)opts->dtype);
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
    xfer_tensor *packed;
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
  xfer_hold hold;
  xfer_hold_take(&hold, src, dst_dev, NULL);
  xfer_path path = XFER_PATH_HOST;
  xfer_tensor *dst = NULL;
  xfer_code rc = choose(src, dst_dev, NULL, opts, &path, NULL, 0, err);
  if (!rc) rc = xfer_tensor_alloc(dst_dev, src->dtype, &src->shape, src->dev, &dst, err);
  const xfer_transfer_opts *outer = progress_install(opts);
  if (!rc) rc = run(path, src, dst, err);
  progress_of = outer;
  xfer_hold_drop(&hold);
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
  return xfer_err_set(err, XFER_E_INVALID, "copy",
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
                     : xfer_err_set(err, XFER_E_ALLOC, "copy", "out of host memory");
      }
      if (!rc && from->nbytes) rc = xfer_tensor_write(dst, bytes, from->nbytes, err);
      free(scratch);
    }
    xfer_tensor_release(packed);
    return rc ? convert_failed(rc, err, src->dev, dst->dev, src->nbytes) : rc;
  }
  /* checked under the locks: another thread may be freeing either tensor */
  xfer_hold hold;
  xfer_hold_take(&hold, src, dst->dev, dst);
  xfer_path path = XFER_PATH_HOST;
  xfer_code rc = xfer_tensor_check(dst, "copy", err);
  if (!rc) rc = xfer_tensor_check(src, "copy", err);
  if (!rc) rc = check_same_shape(dst, src, err);
  if (!rc && dst != src) rc = choose(src, dst->dev, dst, opts, &path, NULL, 0, err);
  const xfer_transfer_opts *outer = progress_install(opts);
  if (!rc && dst != src) rc = run(path, src, dst, err);
  progress_of = outer;
  xfer_hold_drop(&hold);
  return rc;
}
