/*
** ledger.c -- what the planner knows, one entry per (from, to, path), under the context's
** lock:
**  - what moved: count, bytes and seconds (xfer_stats), and the trace line per move
**    (xfer.trace(true) or XFER_TRACE=1);
**  - what failed: a path that failed for a pair with an error that will not go away by itself
**    (not retryable), or `setaside_after` times in a row, is set aside for that pair, and the
**    default choice takes the next path that applies; a forced `via` still tries it, a success
**    clears its count, xfer_forget_failures clears what was set aside, and what injected faults
**    set aside is over once the faults are cleared (faults.h's epoch);
**  - what it costs: measured (xfer.calibrate, the self-test) as a latency and a bandwidth, so
**    that an estimate for n bytes is latency + n / bandwidth, or as the times measured at a few
**    sizes: then an estimate is read off the line between the two measured sizes around n
**    (beyond the largest, at the rate between the two largest), since one line cannot follow a
**    move that runs from the caches at 1 MiB and from memory at 256 MiB. The default choice is
**    the first path that applies (route.c); another one is taken for a move when both have
**    figures and the other's estimate is under 0.95 of it (noise between two paths that cost
**    the same never flips the choice). The figures are kept in a cache file (XFER_PLAN_CACHE,
**    else ~/.cache/xferlua/plan-cache.tsv; "off": none), read when the context opens, written
**    by xfer_costs_save; delete it to forget them. A figure names its devices by name, label
**    and UUID: another machine's do not apply.
** Every move asks it (set aside? cheaper?) and tells it (done, failed): the usual case, nothing
** failing and nothing measured, takes no lock but the one that counts the move.
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"

/* another path is taken when its estimate is under this share of the first one's */
/* (0.9 before the estimates came from times measured at each size: a path 5-10% faster kept
** losing to the first, and the benchmark's goal is within 1.1x of the best, noise included) */
#define CLEARLY_FASTER 0.95

struct xfer_ledger_entry {
  const xfer_device *from, *to;
  xfer_path path;
  const xfer_device *runner;    /* the device whose runtime ran it, where not the path's own (a
                                ** batch group by one submission: CUDA's kernel over host or
                                ** Vulkan memory); NULL: the path's own */
  /* moved */
  uint64_t count, bytes;
  double moving;                /* seconds */
  /* failed */
  int failures;                 /* in a row */
  int set_aside;
  int injected;                 /* the last failure was an injected fault ... */
  uint64_t epoch;               /* ... of this fault epoch */
  time_t when;
  char reason[200];
  /* costs */
  int costed;
  double latency, bandwidth;    /* seconds; bytes per second */
  int npoints;                  /* measured times, by increasing size (0: the line alone) */
  double bytes_at[XFER_COST_POINTS], seconds[XFER_COST_POINTS];
  time_t measured;
};
typedef struct xfer_ledger_entry xfer_ledger_entry;

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

/* -- Entries ---------------------------------------------------------------------------- */

/* (ctx->lock held) A failure an injected fault caused is over once the rules were cleared. */
static void settle(xfer_ctx *ctx, xfer_ledger_entry *e)
{
  if (!e->injected || e->epoch == xfer_fault_epoch(ctx)) return;
  if (e->failures || e->set_aside) __atomic_sub_fetch(&ctx->failing, 1, __ATOMIC_RELEASE);
  e->failures = e->set_aside = e->injected = 0;
}

/* (ctx->lock held) The entry of (from, to, path, runner), made when `make` (NULL when out of
** memory: then the move is not counted, rather than failed). */
static xfer_ledger_entry *entry_of(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                                   xfer_path path, const xfer_device *runner, int make)
{
  for (size_t i = 0; i < ctx->nledger; i++) {
    xfer_ledger_entry *e = &ctx->ledger[i];
    if (e->from == from && e->to == to && e->path == path && e->runner == runner) {
      settle(ctx, e);
      return e;
    }
  }
  if (!make) return NULL;
  if (ctx->nledger == ctx->ledger_cap) {
    size_t cap = ctx->ledger_cap ? ctx->ledger_cap * 2 : 16;
    xfer_ledger_entry *grown = realloc(ctx->ledger, cap * sizeof *grown);
    if (!grown) return NULL;
    ctx->ledger = grown;
    ctx->ledger_cap = cap;
  }
  xfer_ledger_entry *e = &ctx->ledger[ctx->nledger++];
  memset(e, 0, sizeof *e);
  e->from = from;
  e->to = to;
  e->path = path;
  e->runner = runner;
  return e;
}

/* -- What moved, and what failed ----------------------------------------------------------- */

static void count_failure(xfer_ctx *ctx, xfer_ledger_entry *e, xfer_code rc, const xfer_error *err)
{
  if (!e->failures && !e->set_aside) __atomic_add_fetch(&ctx->failing, 1, __ATOMIC_RELEASE);
  e->failures++;
  e->injected = err && err->injected;
  e->epoch = xfer_fault_epoch(ctx);
  int after = __atomic_load_n(&ctx->config.setaside_after, __ATOMIC_RELAXED);
  if (after > 0 && !e->set_aside && ((err && !err->retryable) || e->failures >= after)) {
    e->set_aside = 1;
    e->when = time(NULL);
    snprintf(e->reason, sizeof e->reason, "%.199s", err ? err->message : xfer_code_name(rc));
  }
}

void xfer_ledger_record(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                        xfer_path path, const xfer_device *runner, size_t bytes, double seconds,
                        xfer_code rc, const xfer_error *err)
{
  /* a move its caller stopped (its progress callback, a cancel) or that ran out of its
  ** caller's deadline -- between steps, or in a device's wait -- is neither a move nor a
  ** failure of its path: the deadline is the caller's budget. Counted, three short deadlines
  ** set cuda:0 -> vulkan:0's interop aside on the H100, and its 1 GiB batch then went element
  ** by element, 130 times slower. A device that never finishes fails every path through it
  ** alike, and each move still ends at its deadline. */
  if (rc == XFER_E_TIMEOUT || rc == XFER_E_CANCELED || (rc && err && err->op_id == XFER_OP_PROGRESS))
    return;
  /* the last resort is never set aside: its failures are not counted */
  if (rc && path == XFER_PATH_HOST && !runner) return;
  pthread_mutex_lock(&ctx->lock);
  xfer_ledger_entry *e = entry_of(ctx, from, to, path, runner, 1);
  if (e && !rc) {
    e->count++;
    e->bytes += bytes;
    e->moving += seconds;
    if (e->failures && !e->set_aside) __atomic_sub_fetch(&ctx->failing, 1, __ATOMIC_RELEASE);
    e->failures = 0;
  } else if (e) {
    count_failure(ctx, e, rc, err);
  }
  int trace = ctx->trace;
  pthread_mutex_unlock(&ctx->lock);
  if (trace && !rc)
    fprintf(stderr, "xfer: %s -> %s  %-12s %zu bytes  %.3f ms  %.2f GB/s%s%s\n", from->name,
            to->name, xfer_path_name(path), bytes, seconds * 1e3,
            seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0, runner ? "  by " : "",
            runner ? runner->name : "");
}

static const char *runner_name(const xfer_ledger_entry *e) { return e->runner ? e->runner->name : ""; }

/* The first entry named as e is (a remote device replaced after a lost peer has the name of
** the one before): xfer_stats adds up the moves of one pair of names. */
static const xfer_ledger_entry *first_named(const xfer_ctx *ctx, const xfer_ledger_entry *e)
{
  for (const xfer_ledger_entry *f = ctx->ledger; f <= e; f++)
    if (f->count && f->path == e->path && !strcmp(f->from->name, e->from->name) &&
        !strcmp(f->to->name, e->to->name) && !strcmp(runner_name(f), runner_name(e)))
      return f;
  return e;
}

size_t xfer_stats(xfer_ctx *ctx, xfer_stat *out, size_t max)
{
  pthread_mutex_lock(&ctx->lock);
  size_t n = 0;
  for (size_t i = 0; i < ctx->nledger; i++) {
    const xfer_ledger_entry *e = &ctx->ledger[i];
    if (!e->count) continue;
    const xfer_ledger_entry *first = first_named(ctx, e);
    size_t at = n;
    if (first != e) /* the row of its names, already out */
      for (at = 0; at < n && at < max; at++)
        if (out[at].path == e->path && !strcmp(out[at].from, e->from->name) &&
            !strcmp(out[at].to, e->to->name) && !strcmp(out[at].runner, runner_name(e)))
          break;
    if (at == n) {
      if (n < max) {
        out[n] = (xfer_stat){.path = e->path};
        xfer_copy_text(out[n].from, sizeof out[n].from, e->from->name);
        xfer_copy_text(out[n].to, sizeof out[n].to, e->to->name);
        xfer_copy_text(out[n].runner, sizeof out[n].runner, runner_name(e));
      }
      n++;
    }
    if (at < max) {
      out[at].count += e->count;
      out[at].bytes += e->bytes;
      out[at].seconds += e->moving;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  return n;
}

void xfer_stats_reset(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nledger; i++) {
    ctx->ledger[i].count = ctx->ledger[i].bytes = 0;
    ctx->ledger[i].moving = 0;
  }
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_ledger_trace_verify(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                              size_t bytes, size_t elements, size_t slices, double moved,
                              double checked, double devices, double pool)
{
  pthread_mutex_lock(&ctx->lock);
  int trace = ctx->trace;
  pthread_mutex_unlock(&ctx->lock);
  if (trace)
    fprintf(stderr, "xfer: %s -> %s  verify  %zu bytes in %zu range%s, %zu submission%s  moved %.3f ms,"
            " then sums %.3f ms (waiting for the devices' %.3f ms, the host pool's %.3f ms)\n", from->name,
            to->name, bytes, elements, elements == 1 ? "" : "s", slices, slices == 1 ? "" : "s", moved * 1e3,
            checked * 1e3, devices * 1e3, pool * 1e3);
}

void xfer_trace(xfer_ctx *ctx, int on)
{
  pthread_mutex_lock(&ctx->lock);
  ctx->trace = on;
  pthread_mutex_unlock(&ctx->lock);
}

int xfer_ledger_set_aside(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                          xfer_path path, const xfer_device *runner, char *why, size_t cap)
{
  if (!__atomic_load_n(&ctx->failing, __ATOMIC_ACQUIRE)) return 0; /* the usual case: no lock */
  pthread_mutex_lock(&ctx->lock);
  const xfer_ledger_entry *e = entry_of(ctx, from, to, path, runner, 0);
  int aside = e && e->set_aside;
  if (aside && why) {
    struct tm tm;
    char at[32];
    strftime(at, sizeof at, "%H:%M:%S", localtime_r(&e->when, &tm));
    snprintf(why, cap, "%s%s%s set aside for %s -> %s after %.120s at %s", xfer_path_name(path),
             runner ? " by " : "", runner ? runner->name : "", from->name, to->name, e->reason,
             at);
  }
  pthread_mutex_unlock(&ctx->lock);
  return aside;
}

void xfer_ledger_note_decision(xfer_ctx *ctx)
{
  __atomic_add_fetch(&ctx->decisions, 1, __ATOMIC_RELAXED);
}

size_t xfer_health(xfer_ctx *ctx, xfer_health_info *out, size_t max, uint64_t *decisions)
{
  size_t n = 0;
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nledger; i++) {
    xfer_ledger_entry *e = &ctx->ledger[i];
    settle(ctx, e);
    if (!e->set_aside) continue;
    if (n < max) {
      xfer_health_info *o = &out[n];
      memset(o, 0, sizeof *o);
      snprintf(o->from, sizeof o->from, "%s", e->from->name);
      snprintf(o->to, sizeof o->to, "%s", e->to->name);
      snprintf(o->runner, sizeof o->runner, "%s", runner_name(e));
      o->path = e->path;
      o->failures = e->failures;
      o->injected = e->injected;
      o->when = (int64_t)e->when;
      memcpy(o->reason, e->reason, sizeof o->reason);
    }
    n++;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (decisions) *decisions = __atomic_load_n(&ctx->decisions, __ATOMIC_RELAXED);
  return n;
}

void xfer_forget_failures(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to)
{
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nledger; i++) {
    xfer_ledger_entry *e = &ctx->ledger[i];
    if ((from && e->from != from) || (to && e->to != to)) continue;
    if (e->failures || e->set_aside) __atomic_sub_fetch(&ctx->failing, 1, __ATOMIC_RELEASE);
    e->failures = e->set_aside = e->injected = 0;
  }
  pthread_mutex_unlock(&ctx->lock);
}

/* -- What it costs ---------------------------------------------------------------------------- */

static int figures_valid(double latency, double bandwidth)
{
  return isfinite(latency) && latency >= 0 && isfinite(bandwidth) && bandwidth > 0;
}

/* (ctx->lock held) 0 when out of host memory: the figure is not kept. */
static int keep(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to, xfer_path path,
                double latency, double bandwidth, time_t when, int npoints, const double *bytes,
                const double *seconds)
{
  xfer_ledger_entry *e = entry_of(ctx, from, to, path, NULL, 1);
  if (!e) return 0;
  if (!e->costed) __atomic_add_fetch(&ctx->costed, 1, __ATOMIC_RELEASE);
  e->costed = 1;
  e->latency = latency;
  e->bandwidth = bandwidth;
  e->measured = when;
  e->npoints = npoints;
  for (int i = 0; i < npoints; i++) {
    e->bytes_at[i] = bytes[i];
    e->seconds[i] = seconds[i];
  }
  return 1;
}

/* Whether n points are measured times: 2..XFER_COST_POINTS of them, sizes > 0 increasing,
** times > 0, all finite. */
static int points_valid(int n, const double *bytes, const double *seconds)
{
  if (n < 2 || n > XFER_COST_POINTS) return 0;
  for (int i = 0; i < n; i++)
    if (!isfinite(bytes[i]) || !isfinite(seconds[i]) || bytes[i] <= 0 || seconds[i] <= 0 ||
        (i && bytes[i] <= bytes[i - 1]))
      return 0;
  return 1;
}

/* The line the points make at their ends (what xfer_costs_list shows): the rate between the
** two largest sizes, and the smallest size's time less its bytes at that rate. */
static void points_line(int n, const double *bytes, const double *seconds, double *latency,
                        double *bandwidth)
{
  double db = bytes[n - 1] - bytes[n - 2], ds = seconds[n - 1] - seconds[n - 2];
  *bandwidth = ds > 0 ? db / ds : bytes[n - 1] / seconds[n - 1];
  *latency = fmax(0, seconds[0] - bytes[0] / *bandwidth);
}

/* The estimate for nbytes from measured points (see the top of the file). */
static double from_points(const xfer_ledger_entry *e, double nbytes)
{
  int n = e->npoints;
  if (nbytes <= e->bytes_at[0]) return e->seconds[0];
  for (int i = 1; i < n; i++)
    if (nbytes <= e->bytes_at[i]) {
      double f = (nbytes - e->bytes_at[i - 1]) / (e->bytes_at[i] - e->bytes_at[i - 1]);
      return e->seconds[i - 1] + f * (e->seconds[i] - e->seconds[i - 1]);
    }
  return e->seconds[n - 1] + (nbytes - e->bytes_at[n - 1]) / e->bandwidth;
}

xfer_code xfer_cost_set_points(xfer_ctx *ctx, xfer_device *from, xfer_device *to, xfer_path path,
                               const double *bytes, const double *seconds, int n, xfer_error *err)
{
  if (!from || !to || from->ctx != ctx || to->ctx != ctx)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SET_COST, XFER_S_COST_TWO_DEVICES);
  if (path <= XFER_PATH_AUTO || path >= XFER_PATH__COUNT)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SET_COST, XFER_S_COST_PATH_AUTO);
  if (!points_valid(n, bytes, seconds))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SET_COST, XFER_S_COST_POINTS, XFER_COST_POINTS);
  double latency, bandwidth;
  points_line(n, bytes, seconds, &latency, &bandwidth);
  pthread_mutex_lock(&ctx->lock);
  int kept = keep(ctx, from, to, path, latency, bandwidth, time(NULL), n, bytes, seconds);
  pthread_mutex_unlock(&ctx->lock);
  return kept ? XFER_E_OK : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_SET_COST);
}

xfer_code xfer_cost_set(xfer_ctx *ctx, xfer_device *from, xfer_device *to, xfer_path path,
                        double latency, double bandwidth, xfer_error *err)
{
  if (!from || !to || from->ctx != ctx || to->ctx != ctx)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SET_COST, XFER_S_COST_TWO_DEVICES);
  if (path <= XFER_PATH_AUTO || path >= XFER_PATH__COUNT)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SET_COST, XFER_S_COST_PATH_AUTO);
  if (!figures_valid(latency, bandwidth)) {
    char l[32], b[32]; /* "nan" whatever its sign bit */
    snprintf(l, sizeof l, isnan(latency) ? "nan" : "%g", latency);
    snprintf(b, sizeof b, isnan(bandwidth) ? "nan" : "%g", bandwidth);
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SET_COST, XFER_S_COST_LINEAR, l, b);
  }
  pthread_mutex_lock(&ctx->lock);
  int kept = keep(ctx, from, to, path, latency, bandwidth, time(NULL), 0, NULL, NULL);
  pthread_mutex_unlock(&ctx->lock);
  return kept ? XFER_E_OK : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_SET_COST);
}

size_t xfer_costs_list(xfer_ctx *ctx, xfer_cost *out, size_t cap)
{
  pthread_mutex_lock(&ctx->lock);
  size_t n = 0;
  for (size_t i = 0; i < ctx->nledger; i++) {
    const xfer_ledger_entry *e = &ctx->ledger[i];
    if (!e->costed) continue;
    if (n < cap) {
      out[n] = (xfer_cost){e->from->name, e->to->name, e->path, e->latency, e->bandwidth,
                           (int64_t)e->measured, e->npoints, {0}, {0}};
      for (int k = 0; k < e->npoints; k++) {
        out[n].bytes[k] = e->bytes_at[k];
        out[n].seconds[k] = e->seconds[k];
      }
    }
    n++;
  }
  pthread_mutex_unlock(&ctx->lock);
  return n;
}

void xfer_costs_forget(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nledger; i++) ctx->ledger[i].costed = 0;
  __atomic_store_n(&ctx->costed, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->lock);
}

/* (ctx->lock held) */
static int estimate(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to, xfer_path path,
                    size_t nbytes, double *seconds)
{
  const xfer_ledger_entry *e = entry_of(ctx, from, to, path, NULL, 0);
  if (e && !e->costed) return 0;
  if (e) *seconds = e->npoints ? from_points(e, (double)nbytes) : e->latency + (double)nbytes / e->bandwidth;
  return e != NULL;
}

int xfer_ledger_estimate(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                       xfer_path path, size_t nbytes, double *seconds)
{
  if (!__atomic_load_n(&ctx->costed, __ATOMIC_ACQUIRE)) return 0; /* the usual case: no lock */
  pthread_mutex_lock(&ctx->lock);
  int found = estimate(ctx, from, to, path, nbytes, seconds);
  pthread_mutex_unlock(&ctx->lock);
  return found;
}

xfer_path xfer_ledger_choose(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                           size_t nbytes, xfer_path first, const xfer_path *others, int nothers)
{
  if (!__atomic_load_n(&ctx->costed, __ATOMIC_ACQUIRE)) return first; /* every move asks: no lock */
  xfer_path chosen = first;
  double best;
  pthread_mutex_lock(&ctx->lock); /* once for every path compared */
  if (estimate(ctx, from, to, first, nbytes, &best)) {
    double bar = best * CLEARLY_FASTER;
    for (int i = 0; i < nothers; i++) {
      double s;
      if (estimate(ctx, from, to, others[i], nbytes, &s) && s < bar && s < best) {
        best = s;
        chosen = others[i];
      }
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  return chosen;
}

/* -- The cache file -------------------------------------------------------------------- */

/* A device as the file names it: "cuda:0|NVIDIA H200|59fdd369-..." (tabs and bars in the
** label become spaces). */
static void device_key(const xfer_device *dev, char *out, size_t cap)
{
  char label[sizeof dev->label];
  snprintf(label, sizeof label, "%s", dev->label);
  for (char *c = label; *c; c++)
    if (*c == '\t' || *c == '|' || *c == '\n' || *c == '\r') *c = ' ';
  char uuid[40] = "-";
  if (dev->has_uuid) xfer_uuid_text(dev->uuid, uuid, sizeof uuid);
  snprintf(out, cap, "%s|%s|%s", dev->name, label, uuid);
}

static xfer_device *device_by_key(xfer_ctx *ctx, const char *key)
{
  char k[256];
  for (size_t d = 0; d < ctx->ndevices; d++) {
    device_key(ctx->devices[d], k, sizeof k);
    if (!strcmp(k, key)) return ctx->devices[d];
  }
  return NULL;
}

/* The file the figures live in: XFER_PLAN_CACHE ("off" or "": none), else under
** $XDG_CACHE_HOME or ~/.cache. 0 when there is none. */
int xfer_costs_file(char *out, size_t cap)
{
  const char *set = getenv("XFER_PLAN_CACHE");
  if (set) {
    if (!*set || !strcmp(set, "off")) return 0;
    return snprintf(out, cap, "%s", set) < (int)cap;
  }
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) return snprintf(out, cap, "%s/xferlua/plan-cache.tsv", xdg) < (int)cap;
  if (home && *home) return snprintf(out, cap, "%s/.cache/xferlua/plan-cache.tsv", home) < (int)cap;
  return 0;
}

#define FILE_HEADER "# xferlua plan cache v2: from\tto\tpath\tlatency_s\tbandwidth_Bps\tunix_time\tbytes:seconds,..."
/* the version before measured points: read as lines of six fields */
#define FILE_HEADER_V1 "# xferlua plan cache v1: from\tto\tpath\tlatency_s\tbandwidth_Bps\tunix_time"

/* "-" (none) or "bytes:seconds,...": how many points, -1 for text this version does not read */
static int parse_points(const char *text, double *bytes, double *seconds)
{
  if (!strcmp(text, "-")) return 0;
  int n = 0;
  for (const char *at = text; *at && n <= XFER_COST_POINTS;) {
    char *end;
    if (n == XFER_COST_POINTS) return -1;
    bytes[n] = strtod(at, &end);
    if (*end != ':') return -1;
    seconds[n] = strtod(end + 1, &end);
    if (*end && *end != ',') return -1;
    n++;
    at = *end ? end + 1 : end;
  }
  return points_valid(n, bytes, seconds) ? n : -1;
}

xfer_code xfer_costs_load(xfer_ctx *ctx, const char *file, size_t *loaded, xfer_error *err)
{
  if (loaded) *loaded = 0;
  char path[1024];
  if (!file) {
    if (!xfer_costs_file(path, sizeof path)) return XFER_E_OK; /* none: nothing to read */
    file = path;
  }
  FILE *f = fopen(file, "r");
  if (!f) {
    if (errno == ENOENT) return XFER_E_OK; /* not calibrated yet */
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_LOAD_COSTS, XFER_S_COSTS_NOT_READ, file,
                       strerror(errno));
  }
  char line[4096];
  int first = 1, fields_per_line = 7;
  xfer_code rc = XFER_E_OK;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (first && !strcmp(line, FILE_HEADER_V1)) fields_per_line = 6;
    else if (first && strcmp(line, FILE_HEADER)) {
      rc = xfer_err_op(err, XFER_E_INVALID, XFER_OP_LOAD_COSTS, XFER_S_COSTS_NOT_A_CACHE, file);
      break;
    }
    first = 0;
    if (line[0] == '#' || !line[0]) continue;
    char *fields[7], *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(line, "\t", &save); tok && n < 7; tok = strtok_r(NULL, "\t", &save))
      fields[n++] = tok;
    if (n != fields_per_line) continue; /* a line cut short: the rest still counts */
    double bytes[XFER_COST_POINTS], secs[XFER_COST_POINTS];
    int npoints = n == 7 ? parse_points(fields[6], bytes, secs) : 0;
    if (npoints < 0) continue;
    xfer_device *from = device_by_key(ctx, fields[0]), *to = device_by_key(ctx, fields[1]);
    xfer_path p;
    char *end1 = NULL, *end2 = NULL;
    double latency = strtod(fields[3], &end1), bandwidth = strtod(fields[4], &end2);
    if (!from || !to || xfer_path_parse(fields[2], &p) || *end1 || *end2 ||
        !figures_valid(latency, bandwidth))
      continue; /* another machine's devices, or a line this version does not read */
    pthread_mutex_lock(&ctx->lock);
    int kept = keep(ctx, from, to, p, latency, bandwidth, (time_t)strtoll(fields[5], NULL, 10),
                    npoints, bytes, secs);
    pthread_mutex_unlock(&ctx->lock);
    if (kept && loaded) (*loaded)++;
  }
  fclose(f);
  return rc;
}

/* mkdir -p of the file's folder */
static void make_parent(const char *file)
{
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return;
  *slash = '\0';
  for (char *c = dir + 1; *c; c++) {
    if (*c != '/') continue;
    *c = '\0';
    mkdir(dir, 0755);
    *c = '/';
  }
  mkdir(dir, 0755);
}

xfer_code xfer_costs_save(xfer_ctx *ctx, const char *file, xfer_error *err)
{
  char path[1024];
  if (!file) {
    if (!xfer_costs_file(path, sizeof path)) {
      const char *set = getenv("XFER_PLAN_CACHE");
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE_COSTS,
                         set ? XFER_S_COSTS_CACHE_OFF : XFER_S_COSTS_NO_CACHE_FILE);
    }
    file = path;
  }
  make_parent(file);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", file, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE_COSTS, XFER_S_COSTS_NOT_WRITTEN_WHY,
                             tmp, strerror(errno));
  fprintf(f, "%s\n", FILE_HEADER);
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nledger; i++) {
    const xfer_ledger_entry *e = &ctx->ledger[i];
    if (!e->costed) continue;
    char from[256], to[256];
    device_key(e->from, from, sizeof from);
    device_key(e->to, to, sizeof to);
    fprintf(f, "%s\t%s\t%s\t%.9g\t%.9g\t%lld\t", from, to, xfer_path_name(e->path), e->latency,
            e->bandwidth, (long long)e->when);
    for (int k = 0; k < e->npoints; k++)
      fprintf(f, "%s%.9g:%.9g", k ? "," : "", e->bytes_at[k], e->seconds[k]);
    fprintf(f, "%s\n", e->npoints ? "" : "-");
  }
  pthread_mutex_unlock(&ctx->lock);
  int bad = ferror(f);
  if (fclose(f) || bad) {
    remove(tmp);
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE_COSTS, XFER_S_COSTS_NOT_WRITTEN, tmp);
  }
  if (rename(tmp, file)) { /* whole or not at all: a reader never sees half a file */
    int e = errno;
    remove(tmp);
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE_COSTS, XFER_S_COSTS_NOT_WRITTEN_WHY, file,
                       strerror(e));
  }
  return XFER_E_OK;
}

void xfer_ledger_fini(xfer_ctx *ctx)
{
  free(ctx->ledger);
  ctx->ledger = NULL;
  ctx->nledger = ctx->ledger_cap = 0;
}

void xfer_ledger_config_defaults(xfer_config *config)
{
  config->setaside_after = 3;
}

xfer_code xfer_ledger_config_check(const xfer_config *config, xfer_error *err)
{
  if (config->setaside_after < 0 || config->setaside_after > 1000000)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG, XFER_S_CONFIG_SETASIDE_AFTER,
                       config->setaside_after);
  return XFER_E_OK;
}
