/*
** costs.c -- a planner that knows sizes: what a path costs a pair of devices, measured
** (xfer.calibrate, the self-test) as a latency and a bandwidth, so that an estimate for n bytes
** is latency + n / bandwidth, or as the times measured at a few sizes: then an estimate is
** read off the line between the two measured sizes around n (beyond the largest, at the rate
** between the two largest), since one line cannot follow a move that runs from the caches at
** 1 MiB and from memory at 256 MiB. The default choice is the first path that applies (transfer.c);
** another one is taken for a move when both have figures and the other's estimate is under
** 0.95 of it (noise between two paths that cost the same never flips the choice). The figures
** are kept in a cache file (XFER_PLAN_CACHE, else ~/.cache/xferlua/plan-cache.tsv; "off":
** none), read when the context opens, written by xfer_costs_save; delete it to forget them.
** A figure names its devices by name, label and UUID: another machine's do not apply.
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* another path is taken when its estimate is under this share of the first one's */
/* (0.9 before the estimates came from times measured at each size: a path 5-10% faster kept
** losing to the first, and the benchmark's goal is within 1.1x of the best, noise included) */
#define CLEARLY_FASTER 0.95

struct xfer_cost_entry {
  const xfer_device *from, *to;
  xfer_path path;
  double latency, bandwidth; /* seconds; bytes per second */
  int npoints;               /* measured times, by increasing size (0: the line alone) */
  double bytes[XFER_COST_POINTS], seconds[XFER_COST_POINTS];
  time_t when;
};

static xfer_cost_entry *find(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                             xfer_path path)
{
  for (size_t i = 0; i < ctx->ncosts; i++) {
    xfer_cost_entry *e = &ctx->costs[i];
    if (e->from == from && e->to == to && e->path == path) return e;
  }
  return NULL;
}

static int figures_valid(double latency, double bandwidth)
{
  return isfinite(latency) && latency >= 0 && isfinite(bandwidth) && bandwidth > 0;
}

/* (ctx->lock held) 0 when out of host memory: the figure is not kept. */
static int keep(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to, xfer_path path,
                double latency, double bandwidth, time_t when, int npoints, const double *bytes,
                const double *seconds)
{
  xfer_cost_entry *e = find(ctx, from, to, path);
  if (!e) {
    if (ctx->ncosts == ctx->costs_cap) {
      size_t cap = ctx->costs_cap ? ctx->costs_cap * 2 : 16;
      xfer_cost_entry *grown = realloc(ctx->costs, cap * sizeof *grown);
      if (!grown) return 0;
      ctx->costs = grown;
      ctx->costs_cap = cap;
    }
    e = &ctx->costs[ctx->ncosts];
    __atomic_store_n(&ctx->ncosts, ctx->ncosts + 1, __ATOMIC_RELEASE);
    e->from = from;
    e->to = to;
    e->path = path;
  }
  e->latency = latency;
  e->bandwidth = bandwidth;
  e->when = when;
  e->npoints = npoints;
  for (int i = 0; i < npoints; i++) {
    e->bytes[i] = bytes[i];
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
static double from_points(const xfer_cost_entry *e, double nbytes)
{
  int n = e->npoints;
  if (nbytes <= e->bytes[0]) return e->seconds[0];
  for (int i = 1; i < n; i++)
    if (nbytes <= e->bytes[i]) {
      double f = (nbytes - e->bytes[i - 1]) / (e->bytes[i] - e->bytes[i - 1]);
      return e->seconds[i - 1] + f * (e->seconds[i] - e->seconds[i - 1]);
    }
  return e->seconds[n - 1] + (nbytes - e->bytes[n - 1]) / e->bandwidth;
}

xfer_code xfer_cost_set_points(xfer_ctx *ctx, xfer_device *from, xfer_device *to, xfer_path path,
                               const double *bytes, const double *seconds, int n, xfer_error *err)
{
  if (!from || !to || from->ctx != ctx || to->ctx != ctx)
    return xfer_err_set(err, XFER_E_INVALID, "set_cost", "set_cost: two devices of this context are needed");
  if (path <= XFER_PATH_AUTO || path >= XFER_PATH__COUNT)
    return xfer_err_set(err, XFER_E_INVALID, "set_cost", "set_cost: a path other than auto is needed");
  if (!points_valid(n, bytes, seconds))
    return xfer_err_set(err, XFER_E_INVALID, "set_cost", "set_cost: points are 2 to %d {bytes, seconds} "
                        "pairs, bytes increasing, both > 0 and finite", XFER_COST_POINTS);
  double latency, bandwidth;
  points_line(n, bytes, seconds, &latency, &bandwidth);
  pthread_mutex_lock(&ctx->lock);
  int kept = keep(ctx, from, to, path, latency, bandwidth, time(NULL), n, bytes, seconds);
  pthread_mutex_unlock(&ctx->lock);
  return kept ? XFER_E_OK : xfer_err_set(err, XFER_E_ALLOC, "set_cost", "out of host memory");
}

xfer_code xfer_cost_set(xfer_ctx *ctx, xfer_device *from, xfer_device *to, xfer_path path,
                        double latency, double bandwidth, xfer_error *err)
{
  if (!from || !to || from->ctx != ctx || to->ctx != ctx)
    return xfer_err_set(err, XFER_E_INVALID, "set_cost", "set_cost: two devices of this context are needed");
  if (path <= XFER_PATH_AUTO || path >= XFER_PATH__COUNT)
    return xfer_err_set(err, XFER_E_INVALID, "set_cost", "set_cost: a path other than auto is needed");
  if (!figures_valid(latency, bandwidth)) {
    char l[32], b[32]; /* "nan" whatever its sign bit */
    snprintf(l, sizeof l, isnan(latency) ? "nan" : "%g", latency);
    snprintf(b, sizeof b, isnan(bandwidth) ? "nan" : "%g", bandwidth);
    return xfer_err_set(err, XFER_E_INVALID, "set_cost", "set_cost: latency must be >= 0 seconds "
                        "and bandwidth > 0 bytes per second, both finite (not %s and %s)", l, b);
  }
  pthread_mutex_lock(&ctx->lock);
  int kept = keep(ctx, from, to, path, latency, bandwidth, time(NULL), 0, NULL, NULL);
  pthread_mutex_unlock(&ctx->lock);
  return kept ? XFER_E_OK : xfer_err_set(err, XFER_E_ALLOC, "set_cost", "out of host memory");
}

size_t xfer_costs_list(xfer_ctx *ctx, xfer_cost *out, size_t cap)
{
  pthread_mutex_lock(&ctx->lock);
  size_t n = ctx->ncosts;
  for (size_t i = 0; i < n && i < cap; i++) {
    const xfer_cost_entry *e = &ctx->costs[i];
    out[i] = (xfer_cost){e->from->name, e->to->name, e->path, e->latency, e->bandwidth,
                         (int64_t)e->when, e->npoints, {0}, {0}};
    for (int k = 0; k < e->npoints; k++) {
      out[i].bytes[k] = e->bytes[k];
      out[i].seconds[k] = e->seconds[k];
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  return n;
}

void xfer_costs_forget(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->lock);
  __atomic_store_n(&ctx->ncosts, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->lock);
}

/* (ctx->lock held) */
static int estimate(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to, xfer_path path,
                    size_t nbytes, double *seconds)
{
  const xfer_cost_entry *e = find(ctx, from, to, path);
  if (e) *seconds = e->npoints ? from_points(e, (double)nbytes) : e->latency + (double)nbytes / e->bandwidth;
  return e != NULL;
}

int xfer_cost_estimate(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                       xfer_path path, size_t nbytes, double *seconds)
{
  if (!__atomic_load_n(&ctx->ncosts, __ATOMIC_ACQUIRE)) return 0; /* the usual case: no lock */
  pthread_mutex_lock(&ctx->lock);
  int found = estimate(ctx, from, to, path, nbytes, seconds);
  pthread_mutex_unlock(&ctx->lock);
  return found;
}

xfer_path xfer_cost_choose(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                           size_t nbytes, xfer_path first, const xfer_path *others, int nothers)
{
  if (!__atomic_load_n(&ctx->ncosts, __ATOMIC_ACQUIRE)) return first; /* every move asks: no lock */
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
    return xfer_err_set(err, XFER_E_INVALID, "load_costs", "load_costs: cannot read %s: %s", file, strerror(errno));
  }
  char line[4096];
  int first = 1, fields_per_line = 7;
  xfer_code rc = XFER_E_OK;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (first && !strcmp(line, FILE_HEADER_V1)) fields_per_line = 6;
    else if (first && strcmp(line, FILE_HEADER)) {
      rc = xfer_err_set(err, XFER_E_INVALID, "load_costs", "load_costs: %s is no xferlua plan cache (its first line "
                        "is not the header this version writes): delete it", file);
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
      return xfer_err_set(err, XFER_E_INVALID, "save_costs", "save_costs: no plan cache to write: %s",
                          set ? "XFER_PLAN_CACHE is off" : "neither XFER_PLAN_CACHE nor HOME is set");
    }
    file = path;
  }
  make_parent(file);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", file, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return xfer_err_set(err, XFER_E_INVALID, "save_costs", "save_costs: cannot write %s: %s", tmp, strerror(errno));
  fprintf(f, "%s\n", FILE_HEADER);
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->ncosts; i++) {
    const xfer_cost_entry *e = &ctx->costs[i];
    char from[256], to[256];
    device_key(e->from, from, sizeof from);
    device_key(e->to, to, sizeof to);
    fprintf(f, "%s\t%s\t%s\t%.9g\t%.9g\t%lld\t", from, to, xfer_path_name(e->path), e->latency,
            e->bandwidth, (long long)e->when);
    for (int k = 0; k < e->npoints; k++)
      fprintf(f, "%s%.9g:%.9g", k ? "," : "", e->bytes[k], e->seconds[k]);
    fprintf(f, "%s\n", e->npoints ? "" : "-");
  }
  pthread_mutex_unlock(&ctx->lock);
  int bad = ferror(f);
  if (fclose(f) || bad) {
    remove(tmp);
    return xfer_err_set(err, XFER_E_INVALID, "save_costs", "save_costs: cannot write %s", tmp);
  }
  if (rename(tmp, file)) { /* whole or not at all: a reader never sees half a file */
    int e = errno;
    remove(tmp);
    return xfer_err_set(err, XFER_E_INVALID, "save_costs", "save_costs: cannot write %s: %s", file, strerror(e));
  }
  return XFER_E_OK;
}

void xfer_costs_fini(xfer_ctx *ctx)
{
  free(ctx->costs);
  ctx->costs = NULL;
  ctx->ncosts = ctx->costs_cap = 0;
}
