/*
** route.c -- the one place that decides how a move goes (DESIGN.md, "Transfers"): the first
** path that applies, unless the ledger set it aside for this pair or measured a later one
** clearly cheaper; for interop, which runtime exports, which imports and which helper devices
** stand between; for staged, the chunks. plan.c puts each contiguous move of a plan on a
** route made here, transfer.c runs it, interop.c and staged.c carry out their parts of it, and
** xfer_route_words puts it into words for xfer.plan. Nothing here moves
** a byte or takes a device lock: a move locks the devices its route names.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ledger.h"
#include "route.h"

/* -- Interop: how two devices share memory ---------------------------------------------- */

/* An exporting device on the same GPU as `dev`, for a move between two importers. */
static xfer_device *exporter_for(const xfer_device *dev)
{
  xfer_ctx *ctx = dev->ctx;
  for (size_t d = 0; d < ctx->ndevices; d++)
    if (ctx->devices[d]->can_export && !ctx->devices[d]->lost && xfer_same_gpu(ctx->devices[d], dev))
      return ctx->devices[d];
  return NULL;
}

/* `dev` as runtime `rt` sees it: itself, or the device of `rt` on the same GPU whose memory
** dev's is, or that imports what `dev` exports. NULL when there is none. */
static xfer_device *peer_alias(const xfer_device *dev, const xfer_runtime *rt)
{
  if (dev->rt == rt) return (xfer_device *)dev;
  if (dev->backing && dev->backing->rt == rt && !dev->backing->lost) return dev->backing;
  if (!dev->can_export || dev->lost) return NULL;
  xfer_ctx *ctx = dev->ctx;
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_device *alias = ctx->devices[d];
    if (alias->rt == rt && alias->can_import && !alias->lost && xfer_same_gpu(alias, dev)) return alias;
  }
  return NULL;
}

xfer_device *xfer_route_many_importer(const xfer_device *dev)
{
  /* a device the CPU shares memory with moves its own batches with memcpy: nothing to win */
  if (!dev->can_export || dev->lost || dev->unified || !xfer_env_flag("XFER_BATCH_IMPORTS"))
    return NULL;
  xfer_ctx *ctx = dev->ctx;
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_device *alias = ctx->devices[d];
    if (alias->rt != dev->rt && alias->can_import && !alias->lost && !alias->closed &&
        xfer_be_has_many(alias) && xfer_same_gpu(alias, dev))
      return alias;
  }
  return NULL;
}

/* Two GPUs that a runtime with peer copies (CUDA, over NVLink) joins, where an end of another
** runtime (Vulkan) exports its memory to the runtime's device on its GPU: one peer copy. */
static int peer_share(const xfer_device *src, const xfer_device *dst, xfer_route *r)
{
  if (src == dst || (src->rt == dst->rt && xfer_be_peer_joins(src, dst)) || !src->has_uuid ||
      !dst->has_uuid || xfer_same_gpu(src, dst))
    return 0; /* a runtime's copy between its own devices is same_runtime's */
  xfer_ctx *ctx = src->ctx;
  for (size_t i = 0; i < ctx->nruntimes; i++) {
    const xfer_runtime *rt = &ctx->runtimes[i];
    if (!rt->available || !xfer_rt_has_peer(rt)) continue;
    xfer_device *s = peer_alias(src, rt), *d = peer_alias(dst, rt);
    if (s && d && s != d) {
      r->share = XFER_SHARE_PEER;
      r->helpers[0] = s;
      r->helpers[1] = d;
      r->nhelpers = 2;
      /* an end is the peer runtime's own memory where it is that runtime's device, or lives in
      ** its memory (backing); else it is imported. Between two imports a peer copy ran at 38.6
      ** GB/s on two H200s (the driver does not map imports for the peer) against 388 with one
      ** end its own: then the source goes through scratch memory of its own first. */
      r->peer_scratch = src != s && src->backing != s && dst != d && dst->backing != d;
      return 1;
    }
  }
  return 0;
}

/* The interop decision, the only one: how src and dst share memory, if they do (r->share,
** r->helpers). */
static xfer_share share_for(const xfer_device *src, const xfer_device *dst, xfer_route *r)
{
  r->share = XFER_SHARE_NONE;
  r->nhelpers = 0;
  r->peer_scratch = 0;
  r->helpers[0] = r->helpers[1] = NULL;
  if (peer_share(src, dst, r)) return r->share;
  if (src->rt == dst->rt || !xfer_same_gpu(src, dst)) return XFER_SHARE_NONE;
  if (dst->backing == src && !src->lost) return r->share = XFER_SHARE_INTO_BACKED;
  if (src->backing == dst && !dst->lost) return r->share = XFER_SHARE_OUT_OF_BACKED;
  if (src->can_export && dst->can_import) return r->share = XFER_SHARE_SRC_EXPORTS;
  if (dst->can_export && src->can_import) return r->share = XFER_SHARE_DST_EXPORTS;
  if (src->can_import && dst->can_import && (r->helpers[0] = exporter_for(src))) {
    r->nhelpers = 1;
    return r->share = XFER_SHARE_BETWEEN;
  }
  return XFER_SHARE_NONE;
}

/* A buffer of n bytes as the caching allocator makes it: a large one's segment is its size
** rounded up to 2 MiB (memory.c). */
static uint64_t segment_for(size_t n)
{
  return ((uint64_t)n + ((uint64_t)2 << 20) - 1) & ~(((uint64_t)2 << 20) - 1);
}

/* The largest segment interop would import for this move: each end's own (a view's or a batch
** element's is its whole tensor's segment, not the bytes moved), or one made for it. */
static uint64_t imported_size(const xfer_route *r, const xfer_tensor *src, const xfer_tensor *dst_t)
{
  uint64_t largest = segment_for(r->nbytes);
  const xfer_tensor *ends[2] = {src, dst_t};
  for (int i = 0; i < 2; i++) {
    const xfer_block *b = ends[i] ? xfer_tensor_block(ends[i]) : NULL;
    if (b && b->seg && b->seg->size > largest) largest = b->seg->size;
  }
  return largest;
}

/* NULL unless the route would import a buffer larger than a device on it imports (max_import:
** NVIDIA's OpenCL fails on large imports): interop does not apply to it, the next path does. */
static const xfer_device *import_too_large(const xfer_route *r, uint64_t segment)
{
  const xfer_device *ends[4] = {r->from, r->to, r->helpers[0], r->helpers[1]};
  for (int i = 0; i < 4; i++)
    if (ends[i] && ends[i]->max_import && segment > ends[i]->max_import) return ends[i];
  return NULL;
}

/* -- Which paths apply ------------------------------------------------------------------ */

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

static const char *interop_refused(const xfer_device *src, const xfer_device *dst, char *why,
                                   size_t cap)
{
  if (!xfer_same_gpu(src, dst) || src->rt == dst->rt)
    return refuse(why, cap, "interop needs two runtimes on one physical GPU (equal device "
                  "UUIDs), or two GPUs that CUDA joins, each end CUDA's or exported to it; "
                  "%s and %s are neither", src->name, dst->name);
  return refuse(why, cap, "%s and %s share a GPU, but neither can export its memory as an "
                "opaque fd to the other (nor can a Vulkan device of that GPU)",
                src->name, dst->name);
}

static const char *direct_refused(const xfer_device *src, const xfer_device *dst, char *why,
                                  size_t cap)
{
  int src_far = xfer_be_has_direct(src), dst_far = xfer_be_has_direct(dst);
  if (src_far == dst_far)
    return refuse(why, cap, "direct moves between a remote device and local device memory; "
                  "%s and %s are %s", src->name, dst->name, src_far ? "both remote" : "both local");
  const xfer_device *far = src_far ? src : dst, *near = src_far ? dst : src;
  if (xfer_be_memory_kind(near) == XFER_MEMORY_HOST)
    return refuse(why, cap, "direct lends device memory to the transport in place, and %s has "
                  "none it lends (CUDA's only; %s)", near->name, xfer_is_host(near)
                  ? "host memory takes the host path, one copy" : "its moves are staged");
  /* the transport says why not where it can; this, where it cannot */
  refuse(why, cap, "%s's runtime moves no device memory in place", far->name);
  return xfer_be_direct_joins(far, near, why, cap) ? NULL : why ? why : "";
}

/* Why `path` cannot take the route's move, or NULL when it can (interop: r->share set). */
static const char *inapplicable(xfer_path path, xfer_route *r, const xfer_tensor *src,
                                const xfer_tensor *dst_t, char *why, size_t cap)
{
  const xfer_device *from = r->from, *to = r->to;
  switch (path) {
  case XFER_PATH_SAME_DEVICE:
    if (from == to) return NULL;
    return refuse(why, cap, "same_device needs one device at both ends, not %s and %s",
                  from->name, to->name);
  case XFER_PATH_SAME_RUNTIME:
    if (from->rt != to->rt)
      return refuse(why, cap, "same_runtime needs one runtime at both ends, not %s and %s",
                    from->rt->name, to->rt->name);
    if (from == to)
      return refuse(why, cap, "same_runtime moves between two devices; %s is both ends",
                    from->name);
    if (!xfer_be_has_peer(from))
      return refuse(why, cap, "%s cannot copy between two of its devices directly",
                    from->rt->name);
    if (!xfer_be_peer_joins(from, to))
      return refuse(why, cap, "%s and %s are not joined by %s (two servers' devices)",
                    from->name, to->name, from->rt->name);
    return NULL;
  case XFER_PATH_INTEROP: {
    if (!share_for(from, to, r)) return interop_refused(from, to, why, cap);
    /* interop shares xferlua's own memory (its segments, exported and imported once) */
    const xfer_tensor *w = xfer_tensor_is_wrapped(src) ? src
                           : dst_t && xfer_tensor_is_wrapped(dst_t) ? dst_t : NULL;
    if (w)
      return refuse(why, cap, "interop shares xferlua's own memory; the tensor on %s wraps "
                    "memory of the application", w->dev->name);
    uint64_t segment = imported_size(r, src, dst_t);
    const xfer_device *small = import_too_large(r, segment);
    if (small)
      return refuse(why, cap, "interop between %s and %s would import a buffer of more than "
                    "%llu bytes into %s, whose driver fails on such imports; this move's "
                    "memory is %llu bytes", from->name, to->name,
                    (unsigned long long)small->max_import, small->name,
                    (unsigned long long)segment);
    return NULL;
  }
  case XFER_PATH_DIRECT:
    return direct_refused(from, to, why, cap);
  case XFER_PATH_STAGED:
    if (xfer_is_host(from) || xfer_is_host(to))
      return refuse(why, cap, "staged moves between two devices; %s is host memory, which the "
                    "host path moves in one copy", xfer_is_host(from) ? from->name : to->name);
    if (from == to)
      return refuse(why, cap, "staged moves between two devices; %s is both ends", from->name);
    return NULL;
  default:
    return NULL; /* the host round-trip always applies */
  }
}

/* -- The staging policy: how every move's bytes are cut, here alone -------------------------
** A staged move: in chunks of xfer.config's staging_chunk, staging_depth of them in a ring (a
** setting: the best chunk depends on the pair's links). A batch group through host memory: in
** THROUGH_CHUNK packed bytes (batch_through.c runs it), large enough that a submission's fixed
** cost (a kernel launch, a command buffer) is small beside it, small enough that a 64 MiB batch
** (4096 KV blocks of 16 KiB) is four chunks, overlapped. A single-call path told of its
** progress (a device's own copy, a peer copy, interop's one copy, the host round-trip) goes in
** steps, telling each, where it would otherwise say nothing between the start and the end:
** TOLD_STEP_HOST over a host link (16 MiB: 0.3 ms at 50 GB/s, so a step's synchronous calls,
** ~10 us, cost ~3%, and a move of tens of MiB is told on its way; with 64 MiB steps a 40 MiB
** move said only its start and end), TOLD_STEP_DEVICE within a GPU (2 TB/s: 0.13 ms a step).
** Without a callback they stay one call. The file layer cuts its reads itself (file_route.c:
** its chunk is the disk's, not a link's). */
#define THROUGH_CHUNK ((size_t)16 << 20)
#define TOLD_STEP_HOST ((size_t)16 << 20)
#define TOLD_STEP_DEVICE ((size_t)256 << 20)

size_t xfer_route_through_chunk(void)
{
  return THROUGH_CHUNK;
}

void xfer_route_config_defaults(xfer_config *config)
{
  config->staging_chunk = (size_t)4 << 20;
  config->staging_depth = 3;
}

xfer_code xfer_route_config_check(const xfer_config *config, xfer_error *err)
{
  if (config->staging_chunk < 4096 || config->staging_chunk > ((size_t)1 << 30))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG, XFER_S_CONFIG_STAGING_CHUNK,
                       config->staging_chunk);
  if (config->staging_depth < 2 || config->staging_depth > 16)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG, XFER_S_CONFIG_STAGING_DEPTH,
                       config->staging_depth);
  return XFER_E_OK;
}

/* The chunks a staged move of n bytes takes: how many (at most the depth), and their size (at
** most the setting, no more than the move needs). */
static void staging_plan(const xfer_ctx *ctx, xfer_route *r)
{
  /* this file's own settings, kept by open.c (xfer_config_set writes them atomically) */
  size_t setting = __atomic_load_n(&ctx->config.staging_chunk, __ATOMIC_RELAXED);
  int depth = __atomic_load_n(&ctx->config.staging_depth, __ATOMIC_RELAXED);
  r->chunk = r->nbytes < setting ? r->nbytes : setting;
  size_t chunks = r->chunk ? (r->nbytes + r->chunk - 1) / r->chunk : 1;
  r->depth = chunks < (size_t)depth ? (int)chunks : depth;
}

/* The route on `path`, whose applying was checked: its interop share, its chunks. */
static void settle_on(xfer_route *r, xfer_path path)
{
  r->path = path;
  if (path == XFER_PATH_INTEROP) share_for(r->from, r->to, r);
  else r->share = XFER_SHARE_NONE, r->nhelpers = 0, r->helpers[0] = r->helpers[1] = NULL;
  if (path == XFER_PATH_STAGED) staging_plan(r->from->ctx, r);
  r->told_step = path == XFER_PATH_HOST ? TOLD_STEP_HOST
                 : path == XFER_PATH_SAME_DEVICE || path == XFER_PATH_SAME_RUNTIME ||
                         path == XFER_PATH_INTEROP
                   ? TOLD_STEP_DEVICE
                   : 0;
}

xfer_code xfer_route_make(const xfer_tensor *src, xfer_device *dst_dev, const xfer_tensor *dst_t,
                          const xfer_transfer_opts *opts, xfer_route *r, char *aside,
                          size_t aside_cap, xfer_error *err)
{
  return xfer_route_make_from(src->dev, src->nbytes, src, dst_dev, dst_t, opts, r, aside,
                              aside_cap, err);
}

xfer_code xfer_route_make_from(xfer_device *from, size_t nbytes, const xfer_tensor *src,
                               xfer_device *dst_dev, const xfer_tensor *dst_t,
                               const xfer_transfer_opts *opts, xfer_route *r, char *aside,
                               size_t aside_cap, xfer_error *err)
{
  memset(r, 0, sizeof *r);
  r->from = from;
  r->to = dst_dev;
  r->nbytes = nbytes;
  if (aside && aside_cap) aside[0] = '\0';
  if (dst_dev->lost) return xfer_device_lost_error(dst_dev, XFER_OP_PLAN, err);
  if (xfer_device_is_closed(dst_dev))
    return xfer_err_op(err, XFER_E_CLOSED, XFER_OP_PLAN, XFER_S_DEVICE_CLOSED_REOPEN, dst_dev->name,
                       dst_dev->name);
  xfer_path via = opts ? opts->via : XFER_PATH_AUTO;
  if (via != XFER_PATH_AUTO) {
    char why[200];
    if ((unsigned)via >= XFER_PATH__COUNT)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_PLAN, XFER_S_PATH_UNKNOWN, (int)via);
    if (inapplicable(via, r, src, dst_t, why, sizeof why)) {
      settle_on(r, XFER_PATH_HOST); /* what a move holds while it says so: both ends */
      return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_PLAN, XFER_S_CAUSE, why);
    }
    settle_on(r, via);
    return XFER_E_OK;
  }
  /* the first that applies and is not set aside for this pair -- or a later one whose
  ** measured cost for this size is clearly lower (the ledger) */
  xfer_ctx *ctx = from->ctx;
  xfer_path usable[XFER_PATH__COUNT];
  int n = 0;
  for (int p = XFER_PATH_SAME_DEVICE; p < XFER_PATH_HOST; p++) {
    if (inapplicable((xfer_path)p, r, src, dst_t, NULL, 0)) continue;
    if (xfer_ledger_set_aside(ctx, r->from, r->to, (xfer_path)p, NULL, aside, aside_cap)) {
      xfer_ledger_note_decision(ctx);
      continue;
    }
    usable[n++] = (xfer_path)p;
  }
  usable[n++] = XFER_PATH_HOST; /* the last resort always applies */
  settle_on(r, xfer_ledger_choose(ctx, r->from, r->to, r->nbytes, usable[0], usable + 1, n - 1));
  return XFER_E_OK;
}

void xfer_route_resize(xfer_route *r, size_t nbytes)
{
  r->nbytes = nbytes;
  if (r->path == XFER_PATH_STAGED) staging_plan(r->from->ctx, r);
}

int xfer_route_devices(const xfer_route *r, xfer_device *out[4])
{
  out[0] = r->from;
  out[1] = r->to;
  out[2] = r->helpers[0];
  out[3] = r->helpers[1];
  return 2 + r->nhelpers;
}

/* -- The route in words (xfer.plan) ------------------------------------------------------- */

void xfer_plan_say(xfer_plan *plan, const char *fmt, ...)
{
  if (plan->nsteps == XFER_PLAN_MAX_STEPS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(plan->steps[plan->nsteps++], sizeof plan->steps[0], fmt, ap);
  va_end(ap);
}

/* How `alias` (of the peer runtime) reaches `dev`'s tensors, as a step; 1 when it is memory
** of alias's own. */
static void describe_alias(xfer_plan *plan, const xfer_device *dev, const xfer_device *alias)
{
  if (dev == alias) return;
  if (dev->backing == alias)
    xfer_plan_say(plan, "%s's memory is %s's, imported into %s", dev->name, alias->name, dev->name);
  else
    xfer_plan_say(plan, "export %s's buffer, import it into %s once", dev->name, alias->name);
}

static void describe_interop(const xfer_route *r, xfer_plan *plan)
{
  const char *from = r->from->name, *to = r->to->name;
  size_t n = r->nbytes;
  if (r->share == XFER_SHARE_PEER) {
    snprintf(plan->reason, sizeof plan->reason,
             "%s and %s are two GPUs that %s joins: one peer copy through shared memory, no host",
             from, to, r->helpers[0]->rt->name);
    describe_alias(plan, r->from, r->helpers[0]);
    describe_alias(plan, r->to, r->helpers[1]);
    if (r->peer_scratch)
      xfer_plan_say(plan, "copy %zu bytes on %s into scratch memory of its own", n, r->helpers[0]->name);
    xfer_plan_say(plan, "peer copy of %zu bytes from %s to %s", n, r->helpers[0]->name, r->helpers[1]->name);
    return;
  }
  snprintf(plan->reason, sizeof plan->reason,
           "%s and %s are one GPU: device copies through shared memory, no host", from, to);
  switch (r->share) {
  case XFER_SHARE_INTO_BACKED:
  case XFER_SHARE_OUT_OF_BACKED: {
    const xfer_device *owner = r->share == XFER_SHARE_INTO_BACKED ? r->from : r->to;
    const xfer_device *backed = owner == r->from ? r->to : r->from;
    xfer_plan_say(plan, "%s's memory is %s's, imported into %s", backed->name, owner->name, backed->name);
    xfer_plan_say(plan, "copy %zu bytes on %s", n, owner->name);
    break;
  }
  case XFER_SHARE_SRC_EXPORTS:
    xfer_plan_say(plan, "export %s's buffer, import it into %s once, copy %zu bytes there", from, to, n);
    break;
  case XFER_SHARE_DST_EXPORTS:
    xfer_plan_say(plan, "export %s's buffer, import it into %s once, copy %zu bytes there", to, from, n);
    break;
  default:
    xfer_plan_say(plan, "copy %zu bytes on %s into exported memory both import once", n, from);
    xfer_plan_say(plan, "copy them on %s out of it", to);
    break;
  }
}

static void describe_host(const xfer_route *r, xfer_plan *plan)
{
  const xfer_device *src = r->from, *dst = r->to;
  const char *from = src->name, *to = dst->name;
  size_t n = r->nbytes;
  if (src->rt != dst->rt && (xfer_is_host(src) || xfer_is_host(dst)))
    snprintf(plan->reason, sizeof plan->reason,
             "one end is host memory: a single copy from %s to %s", from, to);
  else if (src->rt != dst->rt)
    snprintf(plan->reason, sizeof plan->reason,
             "no direct path between %s and %s: through host memory", from, to);
  else
    snprintf(plan->reason, sizeof plan->reason, "through host memory between %s and %s", from, to);
  if (xfer_be_addressable(dst))
    xfer_plan_say(plan, "read %zu bytes off %s straight into the target's memory on %s", n, from, to);
  else if (xfer_be_addressable(src))
    xfer_plan_say(plan, "write %zu bytes to %s straight from the source's memory on %s", n, to, from);
  else {
    xfer_plan_say(plan, "read %zu bytes off %s into host staging", n, from);
    xfer_plan_say(plan, "write %zu bytes from host staging to %s", n, to);
  }
}

static void describe(const xfer_route *r, xfer_plan *plan)
{
  const char *from = r->from->name, *to = r->to->name;
  size_t n = r->nbytes;
  plan->path = r->path;
  switch (r->path) {
  case XFER_PATH_SAME_DEVICE:
    snprintf(plan->reason, sizeof plan->reason, "source and target are both %s", from);
    xfer_plan_say(plan, "copy %zu bytes within %s", n, from);
    break;
  case XFER_PATH_SAME_RUNTIME:
    if (xfer_be_shares_nothing(r->from)) {
      snprintf(plan->reason, sizeof plan->reason, "%s and %s are devices of one server: it "
               "moves the bytes between them, nothing crosses the network", from, to);
      xfer_plan_say(plan, "the server copies %zu bytes from %s to %s", n, from, to);
      return;
    }
    snprintf(plan->reason, sizeof plan->reason, "%s copies between its own devices",
             r->from->rt->name);
    xfer_plan_say(plan, "peer copy of %zu bytes from %s to %s", n, from, to);
    break;
  case XFER_PATH_INTEROP:
    describe_interop(r, plan);
    break;
  case XFER_PATH_DIRECT: {
    int into_far = xfer_be_has_direct(r->to);
    const xfer_device *far = into_far ? r->to : r->from, *near = into_far ? r->from : r->to;
    snprintf(plan->reason, sizeof plan->reason, "%s's transport moves %s's memory in place: no "
             "host staging on this side", far->name, near->name);
    if (into_far)
      xfer_plan_say(plan, "send %zu bytes from %s's memory to %s", n, from, to);
    else
      xfer_plan_say(plan, "receive %zu bytes from %s into %s's memory", n, from, to);
    break;
  }
  case XFER_PATH_STAGED:
    snprintf(plan->reason, sizeof plan->reason,
             "%s and %s share no memory: pipelined through %d host chunk%s of %zu bytes", from, to,
             r->depth, r->depth == 1 ? "" : "s", r->chunk);
    xfer_plan_say(plan, "read %zu bytes off %s, a chunk at a time, into host chunks", n, from);
    xfer_plan_say(plan, "write each chunk to %s while the next is read", to);
    break;
  default:
    describe_host(r, plan);
    break;
  }
  /* an end on another machine: what crossing the network means */
  const xfer_device *ends[2] = {r->from, r->to};
  for (int i = 0; i < 2; i++)
    if (xfer_be_shares_nothing(ends[i]) && (i == 0 || ends[1] != ends[0]))
      xfer_plan_say(plan, "%s: across the network, in chunks (%s)", ends[i]->name, ends[i]->platform);
}

void xfer_route_words(const xfer_route *r, const xfer_tensor *src, const char *aside,
                      xfer_plan *plan)
{
  plan->path = r->path;
  char reason[sizeof plan->reason];
  memcpy(reason, plan->reason, sizeof reason); /* what the plan said before the route */
  plan->reason[0] = '\0';
  describe(r, plan);
  if (reason[0] || (aside && aside[0])) { /* what was passed over, or done first, comes first */
    char route_reason[sizeof plan->reason];
    memcpy(route_reason, plan->reason, sizeof route_reason);
    snprintf(plan->reason, sizeof plan->reason, "%.150s%s%.150s%s%.200s", reason,
             reason[0] ? "; then " : "", aside ? aside : "", aside && aside[0] ? "; so: " : "",
             route_reason);
  }
  xfer_route each = {.from = r->from, .to = r->to, .nbytes = r->nbytes}; /* each path, asked anew */
  plan->nestimates = 0;
  for (int p = XFER_PATH_SAME_DEVICE; p < XFER_PATH__COUNT; p++) {
    if (inapplicable((xfer_path)p, &each, src, NULL, NULL, 0)) continue;
    int i = plan->nestimates++;
    plan->estimates[i].path = (xfer_path)p;
    plan->estimates[i].measured = xfer_ledger_estimate(r->from->ctx, r->from, r->to,
                                                       (xfer_path)p, r->nbytes,
                                                       &plan->estimates[i].seconds);
  }
}
