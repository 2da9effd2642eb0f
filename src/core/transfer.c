/*
** transfer.c -- the one runner: a move's plan (plan.h), each step carried out as plan.c
** decided it -- a view packed or its runs moved at once (a refusal running the fallback), a
** dtype converted, a contiguous move on its route with the devices it names held, the tensors
** checked under their locks, the path's calls made, the ledger told, a view target scattered
** -- and a batch group's plan (group.h): its devices held, its tensors checked, then at once
** in the way in use (the plan's next way when one is refused) or element by element on its
** route. A failure leaves the source untouched and nothing allocated. It decides nothing.
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
  xfer_code rc = xfer_hold_take(&h->held, devs, n, h->tensors, 2, err);
  /* a device whose work outlived a deadline: its quarantine let go once it is done */
  for (int i = 0; !rc && i < n; i++)
    if (devs[i]) xfer_mem_quarantine_settle(devs[i], XFER_SETTLE_NOW);
  return rc;
}

static void hold_drop(hold *h) { xfer_hold_drop(&h->held); }

/* -- Integrity ------------------------------------------------------------------------------ */

/* One bit of n arrived bytes of dst flipped, where a fault rule of dst's runtime asks for it
** ("corrupt"): what a link that corrupts leaves behind, made after the move so that every path
** and runner can be seen to be caught by `verify`. */
static void corrupt_if_asked(xfer_tensor *dst, size_t at, size_t n)
{
  long long native = 0;
  if (!n || !xfer_fault_hit(dst->dev->ctx, dst->dev->rt->name, XFER_OP_CORRUPT, &native)) return;
  size_t where = dst->offset + at + n / 2;
  unsigned char byte;
  xfer_error ignored;
  if (!xfer_be_read(dst->dev, dst->buf, where, &byte, 1, &ignored)) {
    byte ^= 0x10;
    xfer_be_write(dst->dev, dst->buf, where, &byte, 1, &ignored);
  }
}

/* Whether a move checks its bytes: its options' say (1, -1), else the context's setting. */
static int verifies(const xfer_ctx *ctx, int asked)
{
  return asked ? asked > 0 : __atomic_load_n(&ctx->config.verify, __ATOMIC_RELAXED);
}

/* Bytes [at, at+len) of dst have landed: a fault may corrupt them, then the target's sums
** (sums.c) may start on them. */
static void landed(xfer_verify *v, xfer_tensor *dst, size_t at, size_t len)
{
  corrupt_if_asked(dst, at, len);
  xfer_verify_landed(v, at + len);
}

/* -- Moves told in steps ------------------------------------------------------------------- */

/* A move with a progress callback goes in the route's told steps, telling each (their size
** is the staging policy's, route.c); without one, in one call. */
static size_t step_of(const xfer_route *route, size_t n)
{
  return xfer_progress_wanted() && route->told_step && n > route->told_step ? route->told_step : n;
}

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

/* A verified move between host memory and a device's own memory, paced by its host end's sums:
** the copy goes in steps queued on the device, two in flight, and a step's host pieces are
** summed once it is done -- a host target's as it lands, while the device writes the next (the
** bytes just written are still in the CPU's last-level cache, where a device's writes land), a
** host source's once the copy engine has read them. Summed beside one copy from its start, the
** sums ran ahead of the engine, which then read lines the cores held: on an H100's host 256 MiB
** host -> cuda cost +46%, and summing each step just before the engine read it, +281%; the
** target summed after 32 MiB steps, +12% (paced: +7%). */
#define PACE_STEP ((size_t)8 << 20)
#define PACE_DEPTH 2

/* Whether a move runs paced: verified, one end host memory summed in pieces, the other a
** device's own memory (XFER_VERIFY_PACE=0: never -- the source summed from the start, a host
** target in 32 MiB steps). */
static int paced(const xfer_verify *v, const xfer_tensor *src, const xfer_tensor *dst)
{
  if (!v->on || v->n <= PACE_STEP || !xfer_env_flag("XFER_VERIFY_PACE")) return 0;
  int src_host = xfer_be_host_address(src->dev, src->buf, src->offset) != NULL;
  int dst_host = xfer_be_host_address(dst->dev, dst->buf, dst->offset) != NULL;
  return src_host != dst_host && v->ends[src_host ? 0 : 1].segs;
}

static xfer_code run_paced(xfer_tensor *src, xfer_tensor *dst, xfer_verify *v, xfer_error *err)
{
  int to_device = xfer_be_host_address(src->dev, src->buf, src->offset) != NULL;
  xfer_tensor *host_end = to_device ? src : dst, *dev_end = to_device ? dst : src;
  char *host = xfer_be_host_address(host_end->dev, host_end->buf, host_end->offset);
  size_t n = src->nbytes, steps = (n + PACE_STEP - 1) / PACE_STEP, started = 0, finished = 0;
  unsigned char queued[PACE_DEPTH] = {0};
  xfer_code rc = XFER_E_OK;
  if (!to_device) xfer_verify_source(v); /* a device source: summed by its device beside the copy */
  while (!rc && finished < steps) {
    if (started < steps && started - finished < PACE_DEPTH) {
      size_t at = started * PACE_STEP, len = n - at < PACE_STEP ? n - at : PACE_STEP;
      int q = 0;
      rc = xfer_be_start(dev_end->dev, to_device, dev_end->buf, dev_end->offset + at, host + at, len,
                         (int)(started % PACE_DEPTH), &q, err);
      if (!rc) queued[started++ % PACE_DEPTH] = (unsigned char)q;
      continue;
    }
    size_t at = finished * PACE_STEP, len = n - at < PACE_STEP ? n - at : PACE_STEP;
    if (queued[finished % PACE_DEPTH]) rc = xfer_be_finish(dev_end->dev, (int)(finished % PACE_DEPTH), err);
    if (rc) break;
    finished++;
    if (to_device) xfer_verify_source_upto(v, at + len);
    landed(v, dst, at, len);
    if (at + len < n) rc = xfer_progress(at + len, n, err);
  }
  for (; finished < started; finished++) { /* failed: what is queued lands (or its device stalls) first */
    xfer_error ignored;
    if (queued[finished % PACE_DEPTH]) xfer_be_finish(dev_end->dev, (int)(finished % PACE_DEPTH), &ignored);
  }
  return rc;
}

static xfer_code run_host_roundtrip(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                                    xfer_verify *v, xfer_error *err)
{
  size_t n = src->nbytes;
  if (!xfer_progress_wanted() && paced(v, src, dst)) return run_paced(src, dst, v, err);
  xfer_verify_source(v);
  /* a move told in steps stages a step at a time (and so needs a step's host memory); a
  ** verified one lands in steps its target's sums can follow */
  size_t step = step_of(route, n), verify_step = xfer_verify_step(v, n);
  if (verify_step < step) step = verify_step;
  int one_copy = xfer_be_host_address(dst->dev, dst->buf, dst->offset) ||
                 xfer_be_host_address(src->dev, src->buf, src->offset);
  xfer_block *staging = NULL; /* from the host pool: pinned and imported once, then reused */
  xfer_device *host = xfer_host_of(src->dev->ctx);
  xfer_code rc = one_copy ? XFER_E_OK : xfer_mem_alloc(host, step, &staging, err);
  char *bytes = staging ? xfer_be_host_address(host, staging->buf, staging->offset) : NULL;
  for (size_t at = 0; !rc && at < n; at += step) {
    size_t len = n - at < step ? n - at : step;
    rc = host_roundtrip_range(src, dst, at, len, bytes, err);
    if (!rc) landed(v, dst, at, len);
    if (!rc && at + len < n) rc = xfer_progress(at + len, n, err);
  }
  xfer_mem_free(staging);
  return rc;
}

/* A device's own copy, a peer copy or interop's one copy, in steps when told (see above). */
static xfer_code run_in_steps(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst, xfer_verify *v,
                              xfer_error *err)
{
  size_t n = src->nbytes;
  size_t step = step_of(route, n);
  xfer_code rc = XFER_E_OK;
  for (size_t at = 0; !rc && at < n; at += step) {
    size_t len = n - at < step ? n - at : step;
    if (route->path == XFER_PATH_SAME_DEVICE)
      rc = xfer_be_copy(src->dev, dst->buf, dst->offset + at, src->buf, src->offset + at, len, err);
    else if (route->path == XFER_PATH_SAME_RUNTIME)
      rc = xfer_be_peer(dst->dev, dst->buf, dst->offset + at, src->dev, src->buf, src->offset + at, len, err);
    else
      rc = xfer_interop_run_range(route, src, dst, at, len, err);
    if (!rc) landed(v, dst, at, len);
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
                            int verify, xfer_error *err)
{
  xfer_path path = route->path;
  size_t n = src->nbytes;
  xfer_code rc = xfer_progress(0, n, err); /* the start */
  if (rc) xfer_err_frame(err, src->dev, dst->dev, n);
  if (rc || n == 0) return rc;
  double start = xfer_now();
  xfer_verify v; /* the ends' sums, made beside the move (sums.c) */
  xfer_verify_begin(&v, verifies(src->dev->ctx, verify), src, 0, dst, 0, n);
  if (path != XFER_PATH_HOST) xfer_verify_source(&v); /* (the host round-trip says when) */
  switch (path) {
  case XFER_PATH_SAME_DEVICE:
  case XFER_PATH_SAME_RUNTIME:
    rc = run_in_steps(route, src, dst, &v, err);
    break;
  case XFER_PATH_INTEROP:
    rc = xfer_interop_ranged(route) ? run_in_steps(route, src, dst, &v, err) : xfer_interop_run(route, src, dst, err);
    break;
  case XFER_PATH_DIRECT:
    rc = run_direct(src, dst, err);
    break;
  case XFER_PATH_STAGED:
    rc = xfer_staged_run(route, src, dst, err);
    break;
  default:
    rc = run_host_roundtrip(route, src, dst, &v, err);
    break;
  }
  if (!rc && v.landed < n) landed(&v, dst, v.landed, n - v.landed); /* (a path not in steps) */
  double moved = xfer_now();
  xfer_code checked = xfer_verify_end(&v, !rc, err);
  if (v.on && !rc && !checked)
    xfer_ledger_trace_verify(src->dev->ctx, src->dev, dst->dev, n, 1, 1, moved - start, xfer_now() - moved,
                             v.waits.devices, v.waits.pool);
  if (!rc) rc = checked;
  if (!rc && path != XFER_PATH_STAGED) rc = xfer_progress(n, n, err); /* (staged: per chunk) */
  if (rc) xfer_err_frame(err, src->dev, dst->dev, n);
  /* the ledger remembers: what moved, and a failure against the path for this pair (a path
  ** set aside is skipped by the default choice; a success clears the count) */
  xfer_ledger_record(src->dev->ctx, src->dev, dst->dev, path, NULL, n, xfer_now() - start, rc, err);
  return rc;
}

/* -- Batch groups (group.h) ------------------------------------------------------------------ */

/* A window: a byte range of a tensor as a shallow copy (transfer.h). */
static xfer_tensor window(const xfer_tensor *t, size_t offset, size_t n)
{
  xfer_tensor w = *t;
  w.offset += offset;
  w.nbytes = n;
  w.numel = n;
  w.dtype = XFER_U8;
  w.shape = (xfer_shape){1, {(int64_t)n}};
  return w;
}

/* A watched group (a deadline, a job that may be canceled) is submitted in slices of pieces
** of about this many bytes, its watch asked between them: it stops within a slice (one
** submission of a whole 1 GiB group could not stop part way). So is a verified group whose
** targets lie in host memory, when it spans more than two slices: the pool sums each slice's
** targets while the next one moves, instead of all of them after the move. */
#define WATCHED_SLICE ((size_t)16 << 20)

/* A group's sums for `verify`: its sources' host ranges given to the sum pool before the move
** (they do not change while it runs, and the pool sums them while the bytes move) and its
** sources' device ranges to their device where it sums beside the caller; targets as their
** slice lands (`landed`, when the group goes in slices) -- in host memory to the pool, on a
** device that sums beside to the device --, the rest once it moved. ranges[k] the source of
** the k-th element in the group's order, ranges[n + k] its target; crc[] alike. */
typedef struct group_sums {
  xfer_sum_range *ranges;
  uint32_t *crc;
  xfer_sums sources;
  xfer_sums *landed;          /* NULL: the targets are summed once the group moved */
  size_t nlanded, room;       /* runs of landed targets begun, of room for */
  size_t landed_upto;         /* the elements they cover */
  size_t landed_least;        /* a run of landed targets' bytes: a slice's, unwatched (watched: */
                              /* 16 MiB slices, a run begun once within a slice of it) */
  size_t slices;              /* submissions the group went in (XFER_TRACE's verify line) */
  xfer_sum_waits waits;       /* ... and what its end waited for */
  int faulted;                /* the injected corruption was asked for, as the first slice landed */
} group_sums;

/* A device's sums begun beside a group: its slots (CUDA's 8) are taken until the group's end, so
** a group's landed targets on a device go in this many runs at most (the sources take a slot). */
#define LANDED_DEVICE_RUNS 6

/* Room for the sums of each slice of a group whose targets are summed as they land -- in host
** memory (by the pool) or on a device that sums beside the caller -- and which spans more than
** two slices; none otherwise. A slice holds at least one piece, and two slices in a row more
** than WATCHED_SLICE bytes; a device's runs of landed targets hold a sixth of the group at
** least (its slots are few). */
static void landed_room(const xfer_group *g, group_sums *gs)
{
  const xfer_batch_item *it = &g->items[g->order[g->first]];
  if (g->through || g->bytes <= 2 * WATCHED_SLICE) return;
  int host = xfer_be_host_address(it->dst->dev, it->dst->buf, it->dst->offset) != NULL;
  if (!host && !xfer_sums_beside(it->dst->dev)) return;
  size_t most = 2 * (g->bytes / WATCHED_SLICE) + 2;
  gs->landed_least = WATCHED_SLICE;
  if (!host && g->bytes / LANDED_DEVICE_RUNS > WATCHED_SLICE) gs->landed_least = g->bytes / LANDED_DEVICE_RUNS;
  gs->room = most < g->count ? most : g->count;
  gs->landed = calloc(gs->room, sizeof *gs->landed);
}

static xfer_code group_sums_begin(const xfer_group *g, group_sums *gs, xfer_error *err)
{
  size_t n = g->count;
  *gs = (group_sums){0};
  gs->ranges = malloc(2 * n * (sizeof *gs->ranges + sizeof *gs->crc)); /* the sums after them */
  if (!gs->ranges) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  gs->crc = (uint32_t *)(gs->ranges + 2 * n);
  for (size_t k = 0; k < n; k++) {
    const xfer_batch_item *it = &g->items[g->order[g->first + k]];
    gs->ranges[k] = (xfer_sum_range){it->src, it->src_offset, xfer_item_bytes(it)};
    gs->ranges[n + k] = (xfer_sum_range){it->dst, it->dst_offset, xfer_item_bytes(it)};
  }
  xfer_sums begun; /* (not begun in gs: the analyzer forgets all of *gs for a call given a part) */
  xfer_code rc = xfer_sums_begin(&begun, gs->ranges, n, gs->crc, err);
  gs->sources = begun;
  gs->sources.waits = &gs->waits;
  if (rc) {
    free(gs->ranges);
    gs->ranges = NULL;
    return rc;
  }
  landed_room(g, gs);
  return XFER_E_OK;
}

/* The targets of the group's elements [landed_upto, upto) have landed: begun (to the pool, or
** to their device) once they hold more than `least` bytes, the last run left to the group's
** end. Out of memory for it: they are summed with the rest once the group moved. */
static void group_sums_landed(const xfer_group *g, group_sums *gs, size_t upto, size_t least)
{
  if (!gs || !gs->landed || upto <= gs->landed_upto || upto >= g->count || gs->nlanded == gs->room) return;
  size_t n = g->count, from = gs->landed_upto, bytes = 0;
  for (size_t k = from; k < upto && bytes <= least; k++) bytes += g->pieces[k].n;
  if (bytes <= least) return; /* more of them first */
  if (!gs->faulted) { /* a link that corrupts does so before the bytes are summed */
    const xfer_batch_item *it = &g->items[g->order[g->first]];
    corrupt_if_asked(it->dst, it->dst_offset, xfer_item_bytes(it));
    gs->faulted = 1;
  }
  xfer_error ignored;
  xfer_sums begun;
  if (xfer_sums_begin(&begun, gs->ranges + n + from, upto - from, gs->crc + n + from, &ignored)) return;
  begun.waits = &gs->waits;
  gs->landed[gs->nlanded++] = begun;
  gs->landed_upto = upto;
}

/* The group's check once it ran (moved: it did; else only its sums end): the targets' host
** ranges not given yet to the pool, the sources' device ranges summed meanwhile, then the
** targets' device ranges; the first element whose ends differ XFER_E_CORRUPT. *good: the
** elements before it (left as it is where no sums were begun: no verify); *waits: what it waited
** for. */
static xfer_code group_sums_end(const xfer_group *g, group_sums *gs, int moved, size_t *good,
                                xfer_sum_waits *waits, xfer_error *err)
{
  if (!gs->ranges) return XFER_E_OK;
  size_t n = g->count, from = gs->landed_upto;
  xfer_sums targets = {0};
  xfer_code rc = moved && from < n ? xfer_sums_begin(&targets, gs->ranges + n + from, n - from, gs->crc + n + from, err)
                                   : XFER_E_OK;
  targets.waits = &gs->waits;
  xfer_code sources = xfer_sums_end(&gs->sources, moved && !rc, rc ? NULL : err);
  if (!rc) rc = sources;
  xfer_code arrived = xfer_sums_end(&targets, moved && !rc, rc ? NULL : err);
  if (!rc) rc = arrived;
  for (size_t s = 0; s < gs->nlanded; s++) { /* every one begun is ended */
    arrived = xfer_sums_end(&gs->landed[s], moved && !rc, rc ? NULL : err);
    if (!rc) rc = arrived;
  }
  *good = rc || !moved ? 0 : n;
  for (size_t k = 0; moved && !rc && k < n; k++) {
    if (gs->crc[k] == gs->crc[n + k]) continue;
    *good = k;
    rc = xfer_err_op(err, XFER_E_CORRUPT, XFER_OP_VERIFY, XFER_S_CORRUPT, gs->ranges[k].n,
                     (unsigned)gs->crc[k], g->from->name, (unsigned)gs->crc[n + k], g->to->name);
  }
  free(gs->landed);
  free(gs->ranges);
  *waits = gs->waits;
  *gs = (group_sums){0};
  return rc;
}

/* The group at once in its way in use: through host chunks, or one submission of `many`
** (over imports: an import no longer to be had refuses it, as a driver would) -- in slices
** when watched, or when sums wait for its targets to land (sums: the group's, or NULL). */
static xfer_code run_way(xfer_group *g, group_sums *sums, xfer_error *err)
{
  if (g->through) return xfer_through_run(&g->staged, g->from->ctx, err);
  xfer_error ignored;
  if (g->nviews && xfer_group_views_current(g, &ignored)) return XFER_E_UNSUPPORTED;
  int watched = xfer_progress_wanted() && g->bytes > WATCHED_SLICE;
  if (watched || (sums && sums->landed)) {
    xfer_code rc = XFER_E_OK;
    size_t moved = 0;
    /* a slice a run of landed targets, unless watched: a slice then WATCHED_SLICE bytes, and a
    ** run begun once it is within a slice of landed_least */
    size_t slice = watched || !sums || !sums->landed ? WATCHED_SLICE : sums->landed_least;
    size_t least = watched && sums && sums->landed ? sums->landed_least - WATCHED_SLICE : 0;
    for (size_t k = 0; k < g->count && !rc;) { /* (slices are not kept: keep 0) */
      size_t m = 0, bytes = 0;
      while (k + m < g->count && (!m || bytes + g->pieces[k + m].n <= slice)) bytes += g->pieces[k + m++].n;
      rc = xfer_be_many(g->many, g->pieces + k, m, 0, err);
      if (sums) sums->slices++;
      k += m;
      moved += bytes;
      if (!rc) group_sums_landed(g, sums, k, least);
      if (!rc && watched && k < g->count) rc = xfer_watch_check(moved, g->bytes, err);
    }
    return rc;
  }
  static uint64_t names; /* of pieces, process-wide: never one name for two lists */
  if (g->runs++ && !g->keep) g->keep = __atomic_add_fetch(&names, 1, __ATOMIC_RELAXED);
  return xfer_be_many(g->many, g->pieces, g->count, g->keep, err);
}

/* The group at once, in its way in use and, when refused, in the next ways the plan lists (for
** this run and every later one); 1 when it ran so (*rc its end), 0 when the way left is element
** by element. Recorded as its runner's move; verified element by element where the plan says
** so (*failed: the element named). */
static int run_at_once_group(xfer_group *g, unsigned char *done, size_t *failed, xfer_code *rc,
                             xfer_error *err)
{
  double start = xfer_now();
  group_sums sums = {0}; /* `verify`: the sources' host ranges summed while the group moves */
  *rc = verifies(g->from->ctx, g->verify) ? group_sums_begin(g, &sums, err) : XFER_E_OK;
  if (*rc) {
    *failed = g->order[g->first];
    return 1;
  }
  *rc = run_way(g, sums.ranges ? &sums : NULL, err);
  /* refused (an importer that cannot take these pieces, runtimes that will not take them
  ** after all): the plan's next way */
  while (*rc == XFER_E_UNSUPPORTED && !(*rc = xfer_group_next_way(g, err)) && g->many)
    *rc = run_way(g, sums.ranges ? &sums : NULL, err);
  size_t good = *rc ? 0 : g->count; /* elements that moved unchanged, in the group's order */
  if (!*rc && !g->many) { /* element by element from here: the sums begun are not wanted */
    xfer_sum_waits unused = {0, 0};
    group_sums_end(g, &sums, 0, &good, &unused, NULL);
    return 0;
  }
  *failed = g->order[g->first]; /* a submission fails whole: its first element is named */
  if (!*rc && !sums.faulted) {
    const xfer_batch_item *it = &g->items[*failed];
    corrupt_if_asked(it->dst, it->dst_offset, xfer_item_bytes(it));
  }
  double moved = xfer_now();
  size_t slices = sums.slices ? sums.slices : 1, verified = sums.ranges != NULL;
  xfer_sum_waits waits = {0, 0};
  xfer_code checked = group_sums_end(g, &sums, !*rc, &good, &waits, *rc ? NULL : err);
  if (verified && !*rc && !checked)
    xfer_ledger_trace_verify(g->from->ctx, g->from, g->to, g->bytes, g->count, slices, moved - start,
                             xfer_now() - moved, waits.devices, waits.pool);
  if (!*rc) *rc = checked;
  for (size_t k = 0; k < good; k++) done[g->order[g->first + k]] = 1;
  if (*rc && good < g->count) *failed = g->order[g->first + good];
  if (*rc) xfer_err_frame(err, g->from, g->to, g->bytes);
  xfer_ledger_record(g->from->ctx, g->from, g->to, g->route.path, g->many, g->bytes,
                     xfer_now() - start, *rc, err);
  return 1;
}

/* The group element by element on its route (sized for each element's bytes); watched (a
** deadline, a job that may be canceled), it stops between elements: 65536 elements of 16 KiB
** each on its own take a quarter of a second, and one element's move may not look itself. */
static xfer_code run_one_by_one(const xfer_group *g, unsigned char *done, size_t *failed,
                                xfer_error *err)
{
  xfer_code rc = XFER_E_OK;
  int watched = xfer_progress_wanted();
  uint64_t moved = 0;
  for (size_t k = 0; k < g->count && !rc; k++) {
    size_t i = g->order[g->first + k];
    const xfer_batch_item *it = &g->items[i];
    size_t len = xfer_item_bytes(it); /* never 0: such an element is in no group */
    *failed = i;
    if (k && watched && (rc = xfer_watch_check(moved, g->bytes, err))) break;
    moved += len;
    xfer_tensor src = window(it->src, it->src_offset, len);
    xfer_tensor dst = window(it->dst, it->dst_offset, len);
    xfer_route route = g->route;
    xfer_route_resize(&route, len);
    rc = xfer_transfer_run(&route, &src, &dst, g->verify, err);
    if (!rc) done[i] = 1;
  }
  return rc;
}

xfer_code xfer_group_run(xfer_group *g, unsigned char *done, size_t *failed, xfer_error *err)
{
  xfer_device *devs[6];
  xfer_hold h; /* its tensors are busy already: the run's claim marked every element's */
  *failed = g->order[g->first];
  int ndevs = xfer_group_devices(g, devs);
  xfer_code rc = xfer_hold_take(&h, devs, ndevs, NULL, 0, err);
  for (int i = 0; !rc && i < ndevs; i++)
    if (devs[i]) xfer_mem_quarantine_settle(devs[i], XFER_SETTLE_NOW);
  for (size_t u = 0; u < g->nuses && !rc; u++) { /* each tensor once, in the order of use */
    rc = xfer_tensor_usable(g->uses[u].t, XFER_OP_BATCH, err);
    if (!rc && g->uses[u].first % 2) rc = xfer_tensor_valid(g->uses[u].t, XFER_OP_BATCH, err); /* a source */
    *failed = g->order[g->first + g->uses[u].first / 2];
  }
  if (!rc && g->planned) {
    if (err) *err = g->planning;
    rc = g->planned;
    *failed = g->order[g->first];
  }
  /* its runner set aside for this pair and path (it kept failing, or failed for good): element
  ** by element on the group's route, until the ledger forgets (faults cleared, or forgotten) */
  int aside = !rc && g->many &&
              xfer_ledger_set_aside(g->from->ctx, g->from, g->to, g->route.path, g->many, NULL, 0);
  if (aside) xfer_ledger_note_decision(g->from->ctx);
  /* a watched group of one element (a deadline, a job that may be canceled) goes on its route
  ** in steps, so that it stops within one: a submission at once cannot stop part way */
  int stepped = g->count == 1 && xfer_progress_wanted();
  if (!rc && (!g->many || aside || stepped || !run_at_once_group(g, done, failed, &rc, err)))
    rc = run_one_by_one(g, done, failed, err);
  xfer_hold_drop(&h);
  return rc;
}

/* -- The steps of a plan (plan.h) ----------------------------------------------------------- */

/* What a plan's run holds: its tensors by slot, which of them it made, the move's shape and
** the caller's options. */
typedef struct run {
  xfer_tensor *slot[XFER_SLOTS];
  int made[XFER_SLOTS];
  const xfer_transfer_opts *opts;
} run;

static const xfer_transfer_opts *opts_of(const run *r, const xfer_step *s)
{
  return s->with_opts ? r->opts : NULL;
}

/* A new tensor of the source's shape on `dev` for slot `out` (of `dtype`). */
static xfer_code make_slot(run *r, int out, xfer_device *dev, xfer_dtype dtype, xfer_error *err)
{
  xfer_tensor *src = r->slot[XFER_SLOT_SRC];
  xfer_code rc = xfer_tensor_alloc(dev, dtype, &src->shape, src->dev, &r->slot[out], err);
  r->made[out] = !rc;
  return rc;
}

static void drop_slot(run *r, int at)
{
  if (!r->made[at]) return;
  xfer_tensor_release(r->slot[at]);
  r->slot[at] = NULL;
  r->made[at] = 0;
}

/* A view's runs in one submission: by the importer over the device end's memory, else the
** devices' own runtime's batch; XFER_E_UNSUPPORTED, nothing said, when both refuse. */
static xfer_code run_at_once(const xfer_step *s, xfer_tensor *view, xfer_tensor *packed,
                             const xfer_transfer_opts *opts, xfer_error *err)
{
  hold h;
  xfer_code rc = hold_take(&h, &s->route, view, packed, err);
  if (!rc) rc = xfer_tensor_usable(view, XFER_OP_COPY, err);
  if (!rc) rc = xfer_tensor_usable(packed, XFER_OP_COPY, err);
  double start = xfer_now();
  const xfer_transfer_opts *outer = xfer_progress_install(opts);
  if (!rc) rc = xfer_progress(0, view->nbytes, err);
  if (!rc) {
    rc = XFER_E_UNSUPPORTED;
    xfer_error ignored; /* an import refused: the device's own batch, or the fallback */
    const xfer_tensor *far = s->view_at_device_end ? view : packed;
    xfer_many_via via = {s->importer, xfer_tensor_block(far), NULL};
    const xfer_device *by = s->importer; /* the ledger's runner of the move */
    if (s->importer && via.imported && !xfer_interop_view(far, s->importer, &via.view, &ignored))
      rc = xfer_view_many_via(view, packed, s->to_packed, &via, err);
    if (rc == XFER_E_UNSUPPORTED && s->runner) {
      by = s->runner;
      rc = xfer_view_many(view, packed, s->to_packed, err);
    }
    if (rc != XFER_E_UNSUPPORTED) {
      if (!rc) rc = xfer_progress(view->nbytes, view->nbytes, err);
      if (rc) xfer_err_frame(err, s->route.from, s->route.to, view->nbytes);
      xfer_ledger_record(view->dev->ctx, s->route.from, s->route.to, s->route.path, by,
                         view->nbytes, xfer_now() - start, rc, err);
    }
  }
  xfer_progress_restore(outer);
  hold_drop(&h);
  return rc;
}

/* A non-contiguous view packed into a new host tensor (its rows read by the backend's
** rectangle copies, or its span, or its runs). */
static xfer_code pack_on_host(xfer_tensor *src, xfer_tensor *out, xfer_error *err)
{
  void *bytes = xfer_be_host_address(out->dev, out->buf, out->offset);
  return src->nbytes ? xfer_tensor_read(src, bytes, src->nbytes, err) : XFER_E_OK;
}

/* A non-contiguous view packed into a new tensor on its own device, by the backend's copies
** of rows (nothing leaves the device). */
static xfer_code pack_on_device(xfer_tensor *src, xfer_tensor *out, xfer_error *err)
{
  xfer_device_lock(src->dev);
  xfer_code rc = xfer_tensor_usable(src, XFER_OP_COPY, err);
  if (!rc) rc = xfer_view_device_move(src, out, 1, err);
  xfer_device_unlock(src->dev);
  return rc;
}

/* in's elements (checked), converted element by element into `out` (host tensors both). */
static xfer_code convert_into(xfer_tensor *in, xfer_tensor *out, xfer_error *err)
{
  if (!in->numel) return XFER_E_OK;
  const void *from = xfer_be_host_address(in->dev, in->buf, in->offset);
  void *to = xfer_be_host_address(out->dev, out->buf, out->offset);
  return xfer_convert(out->dtype, to, in->dtype, from, in->numel, err);
}

/* A contiguous move on the step's route, into `dst`, or into a new tensor on the route's end
** made under the hold (slot `out`). */
static xfer_code run_move(run *r, const xfer_steps *q, const xfer_step *s, xfer_tensor *src,
                          xfer_error *err)
{
  xfer_tensor *dst = r->slot[s->out];
  hold h;
  xfer_code rc = hold_take(&h, &s->route, src, dst, err);
  if (!rc && dst) rc = xfer_tensor_usable(dst, XFER_OP_COPY, err);
  if (!rc) rc = xfer_tensor_usable(src, dst ? XFER_OP_COPY : XFER_OP_PLAN, err);
  if (!rc && dst && s->out == XFER_SLOT_DST && src == r->slot[XFER_SLOT_SRC])
    rc = xfer_plan_shapes_agree(dst, src, err);
  if (!rc) rc = planned_error(s->planned, &q->planning, err); /* the sequence's one move */
  if (!rc && !dst && !(rc = xfer_tensor_alloc(s->at, src->dtype, &src->shape, src->dev, &dst, err))) {
    r->slot[s->out] = dst;
    r->made[s->out] = 1;
  }
  const xfer_transfer_opts *outer = xfer_progress_install(opts_of(r, s));
  const xfer_transfer_opts *o = opts_of(r, s);
  if (!rc && dst != src) rc = xfer_transfer_run(&s->route, src, dst, o ? o->verify : 0, err);
  xfer_progress_restore(outer);
  hold_drop(&h);
  return rc;
}

/* `from` (contiguous) written into the view dst: by dst's device's row copies (from lies
** there), or by the rectangle writes from host memory (from's bytes in place, or read packed
** into a scratch buffer). */
static xfer_code run_scatter(const xfer_step *s, xfer_tensor *from, xfer_tensor *dst,
                             xfer_error *err)
{
  xfer_code rc = XFER_E_OK;
  if (!xfer_is_host(s->at)) {
    xfer_device_lock(dst->dev);
    rc = xfer_tensor_usable(dst, XFER_OP_COPY, err);
    if (!rc) rc = xfer_tensor_usable(from, XFER_OP_COPY, err);
    if (!rc) rc = xfer_view_device_move(dst, from, 0, err);
    xfer_device_unlock(dst->dev);
    return rc;
  }
  if (!from->nbytes) return XFER_E_OK;
  void *bytes = xfer_be_host_address(from->dev, from->buf, from->offset);
  xfer_block *scratch = NULL; /* the host pool's: held, not freed, while a stalled read may land */
  if (!bytes) { /* a contiguous device source: read it packed first */
    xfer_device *host = xfer_host_of(from->dev->ctx);
    rc = xfer_mem_alloc(host, from->nbytes, &scratch, err);
    if (!rc) bytes = xfer_be_host_address(host, scratch->buf, scratch->offset);
    if (!rc) rc = xfer_tensor_read(from, bytes, from->nbytes, err);
  }
  if (!rc) rc = xfer_tensor_write(dst, bytes, from->nbytes, err);
  xfer_mem_free(scratch);
  return rc;
}

static xfer_code run_step(run *r, const xfer_steps *q, const xfer_step *s, xfer_error *err)
{
  xfer_tensor *in = r->slot[s->in];
  xfer_code rc;
  switch (s->kind) {
  case XFER_STEP_PACK:
    if ((rc = make_slot(r, s->out, s->at, in->dtype, err))) return rc;
    return xfer_is_host(s->at) ? pack_on_host(in, r->slot[s->out], err)
                               : pack_on_device(in, r->slot[s->out], err);
  case XFER_STEP_CONVERT:
    if ((rc = xfer_tensor_usable(in, XFER_OP_CONVERT, err))) return rc;
    if ((rc = make_slot(r, s->out, s->at, s->dtype, err))) return rc;
    return convert_into(in, r->slot[s->out], err);
  case XFER_STEP_AT_ONCE: {
    if (!r->slot[s->out] && (rc = make_slot(r, s->out, s->at, in->dtype, err))) return rc;
    xfer_tensor *other = r->slot[s->out];
    return s->to_packed ? run_at_once(s, in, other, opts_of(r, s), err)
                        : run_at_once(s, other, in, opts_of(r, s), err);
  }
  case XFER_STEP_MOVE:
    return run_move(r, q, s, in, err);
  default:
    return run_scatter(s, in, r->slot[s->out], err);
  }
}

/* Runs `steps`; an AT_ONCE refused gives way to the fallback steps. */
static xfer_code run_steps(run *r, const xfer_move_plan *p, const xfer_steps *q, xfer_error *err)
{
  for (int i = 0; i < q->n; i++) {
    xfer_code rc = run_step(r, q, &q->step[i], err);
    if (rc == XFER_E_UNSUPPORTED && q->step[i].kind == XFER_STEP_AT_ONCE && p->fallback.n) {
      drop_slot(r, q->step[i].out);
      return run_steps(r, p, &p->fallback, err);
    }
    if (rc) return rc;
  }
  return XFER_E_OK;
}

/* The ends of a move of several steps on its error: a conversion's own error is framed
** ("Failed to convert a tensor from a to b: f32 to u8: element 3: ..."); a read or write on
** the way already says what failed, and only gets the move's ends. */
static xfer_code frame_steps(xfer_code rc, xfer_error *err, const xfer_move_plan *p)
{
  if (!err) return rc;
  if (err->op_id == XFER_OP_CONVERT) {
    xfer_err_frame(err, p->from, p->to, p->nbytes);
  } else {
    snprintf(err->from, sizeof err->from, "%s", p->from->name);
    snprintf(err->to, sizeof err->to, "%s", p->to->name);
  }
  return rc;
}

/* The one runner (transfer.h): every move's plan, step by step; what it made on the way released, the
** target too when it made it and the move failed. */
xfer_code xfer_plan_run(const xfer_move_plan *p, xfer_tensor *src, xfer_tensor *dst,
                        const xfer_transfer_opts *opts, xfer_tensor **out, xfer_error *err)
{
  run r = {.slot = {src, dst}, .opts = opts};
  xfer_code rc = src ? xfer_tensor_valid(src, XFER_OP_COPY, err) : XFER_E_OK;
  if (!rc) rc = run_steps(&r, p, &p->primary, err);
  if (dst && rc != XFER_E_INVALID) xfer_tensor_set_valid(dst, rc); /* (INVALID: not touched) */
  for (int i = XFER_SLOT_A; i < XFER_SLOTS; i++) drop_slot(&r, i);
  if (rc) drop_slot(&r, XFER_SLOT_DST);
  if (!rc && out) *out = r.slot[XFER_SLOT_DST];
  return rc && p->framed ? frame_steps(rc, err, p) : rc;
}

/* The deadline a move's options ask for, installed from now (transfer.h). */
xfer_watch xfer_transfer_watch(const xfer_ctx *ctx, const xfer_transfer_opts *opts)
{
  double configured = 0; /* (an empty batch has no context) */
  if (ctx) __atomic_load(&ctx->config.timeout, &configured, __ATOMIC_RELAXED);
  return xfer_watch_for(opts ? opts->timeout : 0, configured);
}

xfer_code xfer_transfer_to(xfer_tensor *src, xfer_device *dst_dev, const xfer_transfer_opts *opts,
                           xfer_tensor **out, xfer_error *err)
{
  *out = NULL;
  xfer_move_plan plan;
  xfer_code rc = xfer_plan_to(src, dst_dev, opts, &plan, err);
  if (rc) return rc;
  xfer_watch outer = xfer_transfer_watch(src->dev->ctx, opts);
  rc = xfer_plan_run(&plan, src, NULL, opts, out, err);
  xfer_watch_restore(outer);
  return rc;
}

xfer_code xfer_transfer_copy(xfer_tensor *dst, xfer_tensor *src, const xfer_transfer_opts *opts,
                             xfer_error *err)
{
  xfer_move_plan plan;
  xfer_code rc = xfer_plan_copy(dst, src, opts, &plan, err);
  if (rc) return rc;
  xfer_watch outer = xfer_transfer_watch(src->dev->ctx, opts);
  rc = xfer_plan_run(&plan, src, dst, opts, NULL, err);
  xfer_watch_restore(outer);
  return rc;
}
