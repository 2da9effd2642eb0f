/*
** stats.c -- what moved: count, bytes and seconds per path and pair of devices, and the
** trace line per move (xfer.trace(true) or XFER_TRACE=1).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

double xfer_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static xfer_stat *entry(xfer_ctx *ctx, xfer_path path, const char *from, const char *to)
{
  for (size_t i = 0; i < ctx->nstats; i++) {
    xfer_stat *s = &ctx->stats[i];
    if (s->path == path && !strcmp(s->from, from) && !strcmp(s->to, to)) return s;
  }
  if (ctx->nstats == ctx->stats_cap) {
    size_t cap = ctx->stats_cap ? ctx->stats_cap * 2 : 16;
    xfer_stat *grown = realloc(ctx->stats, cap * sizeof *grown);
    if (!grown) return NULL; /* a move not counted rather than a move failed */
    ctx->stats = grown;
    ctx->stats_cap = cap;
  }
  xfer_stat *s = &ctx->stats[ctx->nstats++];
  memset(s, 0, sizeof *s);
  s->path = path;
  xfer_copy_text(s->from, sizeof s->from, from);
  xfer_copy_text(s->to, sizeof s->to, to);
  return s;
}

void xfer_stats_record(xfer_ctx *ctx, xfer_path path, const xfer_device *from,
                       const xfer_device *to, size_t bytes, double seconds)
{
  pthread_mutex_lock(&ctx->lock);
  xfer_stat *s = entry(ctx, path, from->name, to->name);
  if (s) {
    s->count++;
    s->bytes += bytes;
    s->seconds += seconds;
  }
  int trace = ctx->trace;
  pthread_mutex_unlock(&ctx->lock);
  if (trace)
    fprintf(stderr, "xfer: %s -> %s  %-12s %zu bytes  %.3f ms  %.2f GB/s\n", from->name, to->name,
            xfer_path_name(path), bytes, seconds * 1e3,
            seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0);
}

size_t xfer_stats(xfer_ctx *ctx, xfer_stat *out, size_t max)
{
  pthread_mutex_lock(&ctx->lock);
  size_t n = ctx->nstats;
  for (size_t i = 0; i < n && i < max; i++) out[i] = ctx->stats[i];
  pthread_mutex_unlock(&ctx->lock);
  return n;
}

void xfer_stats_reset(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->lock);
  ctx->nstats = 0;
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_stats_clear(xfer_ctx *ctx)
{
  free(ctx->stats);
  ctx->stats = NULL;
  ctx->nstats = ctx->stats_cap = 0;
}

void xfer_trace(xfer_ctx *ctx, int on)
{
  pthread_mutex_lock(&ctx->lock);
  ctx->trace = on;
  pthread_mutex_unlock(&ctx->lock);
}
