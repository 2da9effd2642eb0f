/*
** plan.c -- every step of one move, decided here and nowhere else (plan.h): whether a view's
** runs cross in one submission or the view is packed (and where: on its own device, or on the
** host), whether a dtype change packs first, where a view target is scattered, and each
** contiguous move's route (route.c). transfer.c runs the plan; xfer_transfer_plan says it.
*/
#include <stdio.h>
#include <string.h>

#include "plan.h"
#include "view_io.h"

/* What a step reads: a tensor that exists (the source, the target), or one the plan makes. */
typedef struct operand {
  xfer_device *dev;
  size_t nbytes;
  int contiguous;
  const xfer_tensor *t; /* NULL: made by an earlier step (xferlua's own memory) */
  int slot;
} operand;

static operand of_tensor(xfer_tensor *t, int slot)
{
  return (operand){t->dev, t->nbytes, t->contiguous, t, slot};
}

/* An empty plan: its counts and ends; its steps are written as they are added. */
static void plan_begin(xfer_move_plan *p)
{
  p->primary.n = p->fallback.n = p->framed = 0;
  p->primary.aside[0] = p->fallback.aside[0] = '\0';
  p->from = p->to = NULL;
  p->nbytes = 0;
}

static xfer_step *add(xfer_steps *q, xfer_step_kind kind, int in, int out)
{
  xfer_step *s = &q->step[q->n++];
  /* the step alone, not the sequence's error and words (written where a route is made, read
  ** only when it failed): zeroing the whole plan per move was 3x the instructions of a 4 KiB
  ** host copy (callgrind, 2026-12-03) */
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->in = in;
  s->out = out;
  return s;
}

/* A contiguous move of `from` to `to_dev` (into dst_t when the copy's target is the end). */
static void add_move(xfer_steps *q, const operand *from, xfer_device *to_dev,
                     const xfer_tensor *dst_t, int out, const xfer_transfer_opts *opts)
{
  xfer_step *s = add(q, XFER_STEP_MOVE, from->slot, out);
  s->at = to_dev;
  s->with_opts = opts != NULL;
  s->planned = xfer_route_make_from(from->dev, from->nbytes, from->t, to_dev, dst_t, opts,
                                    &s->route, q->aside, sizeof q->aside, &q->planning);
}

/* Where a view goes to `to` cheapest packed: on its own device when it goes to a device and
** the backend copies its rows there (then one contiguous move, on any path), else on the host
** (the backend's rectangle reads: one pass). */
static xfer_device *pack_site(const xfer_tensor *view, const xfer_device *to)
{
  if (!xfer_is_host(to) && xfer_view_on_device(view)) return view->dev;
  return xfer_host_of(view->dev->ctx);
}

/* The views' runs at once between `view` and a contiguous tensor on `other`, one of the two on
** the host and the other on a device another runtime of its GPU imports and runs batches over
** (Vulkan on NVIDIA: CUDA's kernel, where Vulkan's copy engine pays per run), or whose own
** runtime takes batches (or both on one device). 0: neither, the view is packed. */
static int at_once_applies(const xfer_tensor *view, xfer_device *other,
                           const xfer_transfer_opts *opts, xfer_step *s)
{
  if (opts && opts->via != XFER_PATH_AUTO && opts->via != XFER_PATH_HOST) return 0;
  if (!xfer_view_many_worth(view)) return 0;
  int view_on_host = xfer_is_host(view->dev), other_on_host = xfer_is_host(other);
  xfer_device *dev_end = view_on_host == other_on_host ? NULL : view_on_host ? other : view->dev;
  s->importer = dev_end ? xfer_route_many_importer(dev_end) : NULL;
  s->view_at_device_end = dev_end == view->dev;
  s->runner = xfer_many_runner(view->dev, other);
  if (!s->importer && !s->runner) return 0;
  xfer_device *from = s->to_packed ? view->dev : other, *to = s->to_packed ? other : view->dev;
  s->route = (xfer_route){.path = view->dev == other ? XFER_PATH_SAME_DEVICE
                              : dev_end ? XFER_PATH_HOST : XFER_PATH_INTEROP,
                          .from = from, .to = to, .nbytes = view->nbytes,
                          .helpers = {s->importer, NULL}, .nhelpers = s->importer != NULL};
  return 1;
}

/* A refused move's ends named in its error. */
static xfer_code ends(xfer_code rc, xfer_error *err, const xfer_device *from, const xfer_device *to)
{
  if (rc && err) {
    snprintf(err->from, sizeof err->from, "%s", from->name);
    snprintf(err->to, sizeof err->to, "%s", to->name);
  }
  return rc;
}

/* A dtype change passes the host: only the host path (or the planner's choice) allows it. */
static xfer_code check_convert_path(const xfer_transfer_opts *opts, xfer_op op,
                                    xfer_error *err)
{
  if (!opts || opts->via == XFER_PATH_AUTO || opts->via == XFER_PATH_HOST) return XFER_E_OK;
  return xfer_err_op(err, XFER_E_UNSUPPORTED, op, XFER_S_CONVERT_VIA_HOST_FORBIDDEN,
                     xfer_path_name(opts->via));
}

/* src's elements converted on the host into a new host tensor (slot B): src packed to the host
** first unless it lies there contiguous. */
static operand add_convert(xfer_steps *q, xfer_tensor *src, xfer_dtype dtype)
{
  xfer_device *host = xfer_host_of(src->dev->ctx);
  int in = XFER_SLOT_SRC;
  if (!xfer_is_host(src->dev) || !src->contiguous) {
    add(q, XFER_STEP_PACK, XFER_SLOT_SRC, XFER_SLOT_A)->at = host;
    in = XFER_SLOT_A;
  }
  xfer_step *s = add(q, XFER_STEP_CONVERT, in, XFER_SLOT_B);
  s->at = host;
  s->dtype = dtype;
  return (operand){host, src->numel * xfer_dtype_size(dtype), 1, NULL, XFER_SLOT_B};
}

/* -- to ----------------------------------------------------------------------------------- */

/* A view to dst_dev packed (slot A, or the result itself when packed where it goes), then
** moved. */
static void pack_then_move(xfer_steps *q, xfer_tensor *src, xfer_device *dst_dev,
                           const xfer_transfer_opts *opts)
{
  xfer_device *site = pack_site(src, dst_dev);
  int done = site == dst_dev && (!opts || opts->via == XFER_PATH_AUTO);
  add(q, XFER_STEP_PACK, XFER_SLOT_SRC, done ? XFER_SLOT_DST : XFER_SLOT_A)->at = site;
  if (done) return;
  operand packed = {site, src->nbytes, 1, NULL, XFER_SLOT_A};
  add_move(q, &packed, dst_dev, NULL, XFER_SLOT_DST, opts);
}

static void plan_view_to(xfer_move_plan *p, xfer_tensor *src, xfer_device *dst_dev,
                         const xfer_transfer_opts *opts)
{
  /* a host view to a device whose runtime takes batches, or a device view to the host where
  ** another runtime reaches the device's memory (a device's own rectangle reads serve the
  ** rest) */
  int at_once = (xfer_is_host(src->dev) && !xfer_is_host(dst_dev) && xfer_many_runner(src->dev, dst_dev)) ||
                (xfer_is_host(dst_dev) && !xfer_is_host(src->dev) && xfer_route_many_importer(src->dev));
  xfer_step probe = {.kind = XFER_STEP_AT_ONCE, .to_packed = 1};
  if (at_once && at_once_applies(src, dst_dev, opts, &probe)) {
    xfer_step *s = add(&p->primary, XFER_STEP_AT_ONCE, XFER_SLOT_SRC, XFER_SLOT_DST);
    probe.in = s->in, probe.out = s->out, probe.at = dst_dev, probe.with_opts = 1;
    *s = probe;
    pack_then_move(&p->fallback, src, dst_dev, opts);
    return;
  }
  pack_then_move(&p->primary, src, dst_dev, opts);
}

xfer_code xfer_plan_to(xfer_tensor *src, xfer_device *dst_dev, const xfer_transfer_opts *opts,
                       xfer_move_plan *p, xfer_error *err)
{
  plan_begin(p);
  if (!src) return xfer_tensor_usable(src, XFER_OP_PLAN, err); /* before src->dev is touched */
  p->from = src->dev, p->to = dst_dev, p->nbytes = src->nbytes;
  if (opts && opts->convert && opts->dtype != src->dtype) {
    if ((unsigned)opts->dtype >= XFER_DTYPE__COUNT)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, XFER_S_DTYPE_UNKNOWN,
                         (int)opts->dtype);
    xfer_code rc = ends(check_convert_path(opts, XFER_OP_PLAN, err), err, src->dev, dst_dev);
    if (rc) return rc;
    operand converted = add_convert(&p->primary, src, opts->dtype);
    if (xfer_is_host(dst_dev)) p->primary.step[p->primary.n - 1].out = XFER_SLOT_DST;
    else add_move(&p->primary, &converted, dst_dev, NULL, XFER_SLOT_DST, NULL);
    p->framed = 1;
    return XFER_E_OK;
  }
  if (!src->contiguous) { /* a view's layout never changes: no lock to read it */
    plan_view_to(p, src, dst_dev, opts);
    p->framed = 1;
    return XFER_E_OK;
  }
  operand whole = of_tensor(src, XFER_SLOT_SRC);
  add_move(&p->primary, &whole, dst_dev, NULL, XFER_SLOT_DST, opts);
  return XFER_E_OK;
}

/* -- copy_from ----------------------------------------------------------------------------- */

xfer_code xfer_plan_shapes_agree(const xfer_tensor *dst, const xfer_tensor *src, xfer_error *err)
{
  if (dst->shape.ndim == src->shape.ndim &&
      !memcmp(dst->shape.dims, src->shape.dims, sizeof dst->shape.dims[0] * (size_t)dst->shape.ndim))
    return XFER_E_OK;
  char want[96], got[96];
  xfer_shape_format(dst->dtype, &dst->shape, want, sizeof want);
  xfer_shape_format(src->dtype, &src->shape, got, sizeof got);
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_COPY, XFER_S_COPY_SHAPES_DIFFER, want, got);
}

/* `from` (contiguous) into the view dst: from a device, moved to dst's device whole (slot B
** there) and scattered by its row copies where dst's device has them; host data, or a device
** without them, by the rectangle writes from the host. */
static void add_scatter(xfer_steps *q, xfer_tensor *dst, const operand *from)
{
  if (!xfer_is_host(from->dev) && xfer_view_on_device(dst)) {
    int in = from->slot;
    if (from->dev != dst->dev) {
      add_move(q, from, dst->dev, NULL, XFER_SLOT_B, NULL);
      in = XFER_SLOT_B;
    }
    add(q, XFER_STEP_SCATTER, in, XFER_SLOT_DST)->at = dst->dev;
    return;
  }
  add(q, XFER_STEP_SCATTER, from->slot, XFER_SLOT_DST)->at = xfer_host_of(dst->dev->ctx);
}

/* `from` into dst, one dtype: packed first when it is a view, then moved (a contiguous
** target) or scattered (a view). */
static void pack_move_scatter(xfer_steps *q, xfer_tensor *dst, const operand *from,
                              xfer_tensor *src, const xfer_transfer_opts *opts)
{
  operand packed = *from;
  if (!from->contiguous) {
    xfer_device *site = pack_site(src, dst->dev);
    add(q, XFER_STEP_PACK, from->slot, XFER_SLOT_A)->at = site;
    packed = (operand){site, from->nbytes, 1, NULL, XFER_SLOT_A};
  }
  if (dst->contiguous) add_move(q, &packed, dst->dev, dst, XFER_SLOT_DST, opts);
  else add_scatter(q, dst, &packed);
}

/* `from` into dst: when one end is a view, its runs at once where that applies (the fallback
** packs, moves and scatters), else packed, moved and scattered; two contiguous ends: a move. */
static void plan_views(xfer_move_plan *p, xfer_tensor *dst, const operand *from,
                       xfer_tensor *src, const xfer_transfer_opts *opts)
{
  if (from->contiguous != dst->contiguous) {
    const xfer_tensor *view = from->contiguous ? dst : src;
    xfer_device *other = from->contiguous ? from->dev : dst->dev;
    xfer_step probe = {.kind = XFER_STEP_AT_ONCE, .to_packed = !from->contiguous};
    if (at_once_applies(view, other, opts, &probe)) {
      probe.in = from->slot, probe.out = XFER_SLOT_DST, probe.at = dst->dev;
      probe.with_opts = opts != NULL;
      p->primary.step[p->primary.n++] = probe;
      pack_move_scatter(&p->fallback, dst, from, src, opts);
      return;
    }
  }
  pack_move_scatter(&p->primary, dst, from, src, opts);
}

xfer_code xfer_plan_copy(xfer_tensor *dst, xfer_tensor *src, const xfer_transfer_opts *opts,
                         xfer_move_plan *p, xfer_error *err)
{
  plan_begin(p);
  if (!src || !dst) /* before either is touched */
    return xfer_tensor_usable(NULL, XFER_OP_COPY, err);
  p->from = src->dev, p->to = dst->dev, p->nbytes = src->nbytes;
  if (src->dtype != dst->dtype) { /* converted on the host, then copied */
    xfer_code rc = ends(xfer_plan_shapes_agree(dst, src, err), err, src->dev, dst->dev);
    if (!rc) rc = ends(check_convert_path(opts, XFER_OP_COPY, err), err, src->dev, dst->dev);
    if (rc) return rc;
    operand converted = add_convert(&p->primary, src, dst->dtype);
    plan_views(p, dst, &converted, src, NULL); /* a contiguous target: one move */
    p->framed = 1;
    return XFER_E_OK;
  }
  if (!src->contiguous || !dst->contiguous) {
    xfer_code rc = xfer_plan_shapes_agree(dst, src, err);
    if (rc) return rc;
    operand from = of_tensor(src, XFER_SLOT_SRC);
    plan_views(p, dst, &from, src, opts);
    p->framed = 1;
    return XFER_E_OK;
  }
  xfer_step *s = add(&p->primary, XFER_STEP_MOVE, XFER_SLOT_SRC, XFER_SLOT_DST);
  s->at = dst->dev;
  s->with_opts = 1;
  if (dst == src) /* nothing moves; the tensors are still checked */
    s->route = (xfer_route){.path = XFER_PATH_SAME_DEVICE, .from = src->dev, .to = src->dev};
  else
    s->planned = xfer_route_make(src, dst->dev, dst, opts, &s->route, p->primary.aside,
                                 sizeof p->primary.aside, &p->primary.planning);
  return XFER_E_OK;
}

/* -- The plan in words (xfer.plan) --------------------------------------------------------- */

/* A move the ledger will record: its ends, path, and the runner where not the path's own. */
static void say_move(xfer_plan *words, const xfer_route *r, const xfer_device *runner,
                     int fallback)
{
  if (words->nmoves == (int)(sizeof words->moves / sizeof words->moves[0])) return;
  int i = words->nmoves++;
  snprintf(words->moves[i].from, sizeof words->moves[i].from, "%s", r->from->name);
  snprintf(words->moves[i].to, sizeof words->moves[i].to, "%s", r->to->name);
  snprintf(words->moves[i].runner, sizeof words->moves[i].runner, "%s", runner ? runner->name : "");
  words->moves[i].path = r->path;
  words->moves[i].fallback = fallback;
}

static void say_step(xfer_plan *words, const xfer_steps *q, const xfer_step *s,
                     const xfer_tensor *src)
{
  const char *dev = src->dev->name;
  if (s->kind == XFER_STEP_MOVE) say_move(words, &s->route, NULL, 0);
  if (s->kind == XFER_STEP_AT_ONCE) say_move(words, &s->route, s->importer ? s->importer : s->runner, 0);
  switch (s->kind) {
  case XFER_STEP_PACK:
    if (xfer_is_host(s->at))
      xfer_plan_say(words, "pack the view's %zu bytes off %s into host memory", src->nbytes, dev);
    else
      xfer_plan_say(words, "pack the view's %zu bytes on %s by its own row copies", src->nbytes, dev);
    break;
  case XFER_STEP_CONVERT:
    xfer_plan_say(words, "convert %zu elements from %s to %s on the host", src->numel,
                  xfer_dtype_name(src->dtype), xfer_dtype_name(s->dtype));
    break;
  case XFER_STEP_AT_ONCE:
    if (s->importer)
      xfer_plan_say(words, "the view's runs in one batch by %s over %s's memory, imported once",
                    s->importer->name, s->view_at_device_end ? s->route.from->name : s->route.to->name);
    else
      xfer_plan_say(words, "the view's runs in one batch of %s's own", s->runner->name);
    break;
  case XFER_STEP_MOVE:
    xfer_route_words(&s->route, s->in == XFER_SLOT_SRC ? src : NULL, q->aside, words);
    break;
  default:
    if (xfer_is_host(s->at))
      xfer_plan_say(words, "write into the target view from host memory (rectangle writes)");
    else
      xfer_plan_say(words, "scatter into the target view on %s by its own row copies", s->at->name);
    break;
  }
}

/* Why the plan has the steps it has, before the route's reason. */
static void say_reason(xfer_plan *words, const xfer_move_plan *p, const xfer_tensor *src)
{
  const xfer_step *first = &p->primary.step[0];
  if (first->kind == XFER_STEP_AT_ONCE) {
    words->path = first->route.path;
    snprintf(words->reason, sizeof words->reason, "a view between %s and %s: its runs cross in "
             "one submission, no pack on the CPU (refused, it is packed and moved instead)",
             first->route.from->name, first->route.to->name);
  } else if (first->kind == XFER_STEP_CONVERT || (first->kind == XFER_STEP_PACK && p->primary.n > 1 &&
                                                  p->primary.step[1].kind == XFER_STEP_CONVERT)) {
    snprintf(words->reason, sizeof words->reason, "a dtype change is made on the host");
  } else if (first->kind == XFER_STEP_PACK) {
    snprintf(words->reason, sizeof words->reason, "a view of %s: packed on %s first", src->dev->name,
             first->at->name);
  }
}

xfer_code xfer_plan_words(const xfer_move_plan *p, const xfer_tensor *src, xfer_plan *words,
                          xfer_error *err)
{
  memset(words, 0, sizeof *words);
  if (!p->primary.n) return XFER_E_OK; /* a made plan has a step: an unmade one says nothing */
  for (int i = 0; i < p->primary.n; i++)
    if (p->primary.step[i].kind == XFER_STEP_MOVE && p->primary.step[i].planned) {
      if (err) *err = p->primary.planning;
      return p->primary.step[i].planned;
    }
  say_reason(words, p, src);
  for (int i = 0; i < p->primary.n; i++) say_step(words, &p->primary, &p->primary.step[i], src);
  for (int i = 0; i < p->fallback.n; i++)
    if (p->fallback.step[i].kind == XFER_STEP_MOVE) say_move(words, &p->fallback.step[i].route, NULL, 1);
  if (p->primary.step[p->primary.n - 1].kind == XFER_STEP_MOVE) return XFER_E_OK;
  /* a plan without a contiguous move (packed where it goes; converted for the host): the one
  ** path its last step takes */
  if (p->primary.step[0].kind != XFER_STEP_AT_ONCE)
    words->path = p->from == p->to ? XFER_PATH_SAME_DEVICE : XFER_PATH_HOST;
  return XFER_E_OK;
}

xfer_code xfer_transfer_plan(xfer_tensor *src, xfer_device *dst, const xfer_transfer_opts *opts,
                             xfer_plan *words, xfer_error *err)
{
  memset(words, 0, sizeof *words);
  xfer_code rc = xfer_tensor_usable(src, XFER_OP_PLAN, err);
  xfer_move_plan p;
  if (!rc) rc = xfer_plan_to(src, dst, opts, &p, err);
  return rc ? rc : xfer_plan_words(&p, src, words, err);
}
