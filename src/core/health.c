/*
** health.c -- a planner that remembers: a path that failed for a pair of devices with an
** error that will not go away by itself (not retryable), or `setaside_after` times in a row,
** is set aside for that pair; the default choice then takes the next path that applies. A
** forced `via` still tries it; a success clears its count; xfer_forget_failures clears what
** was set aside. What injected faults set aside is forgotten when the faults are cleared.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

struct xfer_health_entry {
  const xfer_device *from, *to;
  xfer_path path;
  int failures;                 /* in a row */
  int set_aside;
  int injected;                 /* the last failure was an injected fault */
  time_t when;
  char reason[200];
};

static xfer_health_entry *entry_of(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                                   xfer_path path, int make)
{
  for (size_t i = 0; i < ctx->nhealth; i++) {
    xfer_health_entry *e = &ctx->health[i];
    if (e->from == from && e->to == to && e->path == path) return e;
  }
  if (!make) return NULL;
  if (ctx->nhealth == ctx->health_cap) {
    size_t cap = ctx->health_cap ? ctx->health_cap * 2 : 8;
    xfer_health_entry *grown = realloc(ctx->health, cap * sizeof *grown);
    if (!grown) return NULL; /* not remembered: the planner chooses as before */
    ctx->health = grown;
    ctx->health_cap = cap;
  }
  xfer_health_entry *e = &ctx->health[ctx->nhealth];
  __atomic_store_n(&ctx->nhealth, ctx->nhealth + 1, __ATOMIC_RELEASE);
  memset(e, 0, sizeof *e);
  e->from = from;
  e->to = to;
  e->path = path;
  return e;
}

void xfer_health_record(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                        xfer_path path, xfer_code rc, const xfer_error *err)
{
  if (path == XFER_PATH_HOST) return; /* the last resort is never set aside */
  if (rc && err && !strcmp(err->op, "progress")) return; /* the caller stopped it: no failure */
  /* every move comes here: a success with nothing remembered takes no lock */
  if (!rc && !__atomic_load_n(&ctx->nhealth, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&ctx->lock);
  xfer_health_entry *e = entry_of(ctx, from, to, path, rc != XFER_E_OK);
  if (e && rc == XFER_E_OK) {
    e->failures = 0;
  } else if (e) {
    e->failures++;
    e->injected = err && err->injected;
    int after = __atomic_load_n(&ctx->config.setaside_after, __ATOMIC_RELAXED);
    if (after > 0 && !e->set_aside && ((err && !err->retryable) || e->failures >= after)) {
      e->set_aside = 1;
      e->when = time(NULL);
      snprintf(e->reason, sizeof e->reason, "%.199s", err ? err->message : xfer_code_name(rc));
    }
  }
  pthread_mutex_unlock(&ctx->lock);
}

int xfer_health_set_aside(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                          xfer_path path, char *why, size_t cap)
{
  if (!__atomic_load_n(&ctx->nhealth, __ATOMIC_ACQUIRE)) return 0; /* the usual case: no lock */
  pthread_mutex_lock(&ctx->lock);
  const xfer_health_entry *e = entry_of(ctx, from, to, path, 0);
  int aside = e && e->set_aside;
  if (aside && why) {
    struct tm tm;
    char at[32];
    strftime(at, sizeof at, "%H:%M:%S", localtime_r(&e->when, &tm));
    snprintf(why, cap, "%s set aside for %s -> %s after %.120s at %s", xfer_path_name(path),
             from->name, to->name, e->reason, at);
  }
  pthread_mutex_unlock(&ctx->lock);
  return aside;
}

void xfer_health_note_decision(xfer_ctx *ctx)
{
  __atomic_add_fetch(&ctx->health_decisions, 1, __ATOMIC_RELAXED);
}

size_t xfer_health(xfer_ctx *ctx, xfer_health_info *out, size_t max, uint64_t *decisions)
{
  size_t n = 0;
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < ctx->nhealth; i++) {
    const xfer_health_entry *e = &ctx->health[i];
    if (!e->set_aside) continue;
    if (n < max) {
      xfer_health_info *o = &out[n];
      memset(o, 0, sizeof *o);
      snprintf(o->from, sizeof o->from, "%s", e->from->name);
      snprintf(o->to, sizeof o->to, "%s", e->to->name);
      o->path = e->path;
      o->failures = e->failures;
      o->injected = e->injected;
      o->when = (int64_t)e->when;
      memcpy(o->reason, e->reason, sizeof o->reason);
    }
    n++;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (decisions) *decisions = __atomic_load_n(&ctx->health_decisions, __ATOMIC_RELAXED);
  return n;
}

/* Forgets what was set aside (and the counts) for from -> to, for every pair when either is
** NULL; only_injected: only what injected faults set aside (when the faults are cleared). */
static void forget(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to, int only_injected)
{
  pthread_mutex_lock(&ctx->lock);
  size_t kept = 0;
  for (size_t i = 0; i < ctx->nhealth; i++) {
    xfer_health_entry *e = &ctx->health[i];
    int match = (!from || e->from == from) && (!to || e->to == to) && (!only_injected || e->injected);
    if (!match) ctx->health[kept++] = *e;
  }
  __atomic_store_n(&ctx->nhealth, kept, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_forget_failures(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to)
{
  forget(ctx, from, to, 0);
}

void xfer_health_forget_injected(xfer_ctx *ctx) { forget(ctx, NULL, NULL, 1); }

void xfer_health_fini(xfer_ctx *ctx)
{
  free(ctx->health);
  ctx->health = NULL;
  ctx->nhealth = ctx->health_cap = 0;
}
