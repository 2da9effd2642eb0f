/*
** faults.c -- fault injection: rules that make the nth matching driver call fail.
** Backends ask xfer_fault_hit() before each driver call and, on a hit, report the
** failure through the same code a real failure takes.
*/
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"

static const char *const fault_ops[] = {
  "alloc", "read", "write", "copy", "peer", "import", "export", "register", "map", "sync",
  "send", "recv", /* send, recv: the remote runtime's messages */
  "verify",         /* a device's own sum of its memory (its kernel's calls) */
  "stall",          /* a wait for the device's work never sees it done: the move ends at its
                    ** deadline (without one, never -- as on a device that stalled) */
  "corrupt",        /* a move into the runtime's memory lands with one bit flipped (the runner
                    ** flips it once the bytes are in: what a link that corrupts would leave) */
  NULL,
};

const char *const *xfer_fault_ops(void) { return fault_ops; }

/* The op a rule names, as the backends ask for it; XFER_OP_OTHER for one no call has. */
static xfer_op injectable_op(const char *name)
{
  for (const char *const *o = fault_ops; *o; o++)
    if (!strcmp(*o, name)) return xfer_op_of(name);
  return XFER_OP_OTHER;
}

/* "file" is no runtime but an endpoint (file_io.c): its reads, writes and syncs fail on
** request like a driver's calls. */
static int known_runtime(const xfer_ctx *ctx, const char *runtime)
{
  if (!strcmp(runtime, "file")) return 1;
  for (size_t i = 0; i < ctx->nruntimes; i++)
    if (!strcmp(ctx->runtimes[i].name, runtime)) return 1;
  return 0;
}

xfer_code xfer_fault_inject(xfer_ctx *ctx, const xfer_fault *fault, xfer_error *err)
{
  if (!known_runtime(ctx, fault->runtime))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_INJECT, XFER_S_FAULT_RUNTIME_UNKNOWN,
                       fault->runtime);
  xfer_op op = injectable_op(fault->op);
  if (op == XFER_OP_OTHER)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_INJECT, XFER_S_FAULT_OP_UNKNOWN, fault->op);
  if (fault->nth < 1 || fault->count < 1)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_INJECT, XFER_S_FAULT_NTH_COUNT, fault->nth,
                       fault->count);
  pthread_mutex_lock(&ctx->lock); /* moves on other threads read the rules */
  size_t n = ctx->nfaults;
  if (n < XFER_MAX_FAULTS) {
    xfer_fault_rule *rule = &ctx->faults[n];
    rule->fault = *fault;
    rule->op = op;
    rule->skip = fault->nth - 1;
    rule->left = fault->count;
    __atomic_store_n(&ctx->nfaults, n + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&ctx->lock);
  if (n == XFER_MAX_FAULTS)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_INJECT, XFER_S_FAULT_TOO_MANY_RULES,
                       XFER_MAX_FAULTS);
  return XFER_E_OK;
}

/* A whole number of `text` in [lo, hi], in *out; 0 when it is not one (or out of range:
** strtol would otherwise clip, and a cast to int wrap 4294967297 to 1). */
static int parse_whole(const char *text, int base, long long lo, long long hi, long long *out)
{
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, base);
  if (*text == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* One rule "runtime:op[:nth[:count[:native]]]" of `len` characters. */
static xfer_code parse_rule(xfer_ctx *ctx, const char *rule, size_t len, xfer_error *err)
{
  char text[80], *field[5] = {0};
  int nfields = 0;
  if (len >= sizeof text)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_INJECT, XFER_S_FAULT_RULE_TOO_LONG, (int)len,
                       rule);
  memcpy(text, rule, len);
  text[len] = '\0';
  char *rest = text;
  while (rest && nfields < 5) field[nfields++] = strsep(&rest, ":");
  xfer_fault fault = {.nth = 1, .count = 1};
  long long nth = 1, count = 1;
  int bad = nfields < 2 || rest != NULL || strlen(field[0]) >= sizeof fault.runtime ||
            strlen(field[1]) >= sizeof fault.op;
  if (!bad && field[2]) bad = !parse_whole(field[2], 10, 1, INT_MAX, &nth);
  if (!bad && field[3]) bad = !parse_whole(field[3], 10, 1, INT_MAX, &count);
  /* native codes are ints to every driver (errno, CUresult, VkResult, cl_int): a wider one
  ** would wrap on its way (99999999999 became errno 1215752191), as faults.inject refuses */
  if (!bad && field[4]) bad = !parse_whole(field[4], 0, INT_MIN, INT_MAX, &fault.native);
  if (bad)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_INJECT, XFER_S_FAULT_RULE_BAD, (int)len, rule,
                       INT_MAX, INT_MIN, INT_MAX);
  fault.nth = (int)nth;
  fault.count = (int)count;
  snprintf(fault.runtime, sizeof fault.runtime, "%s", field[0]); /* lengths checked above */
  snprintf(fault.op, sizeof fault.op, "%s", field[1]);
  return xfer_fault_inject(ctx, &fault, err);
}

xfer_code xfer_fault_parse(xfer_ctx *ctx, const char *spec, xfer_error *err)
{
  for (const char *p = spec; *p;) {
    size_t len = strcspn(p, ",");
    if (len) {
      xfer_code rc = parse_rule(ctx, p, len, err);
      if (rc) return rc;
    }
    p += len;
    if (*p == ',') p++;
  }
  return XFER_E_OK;
}

void xfer_fault_clear(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->lock);
  __atomic_store_n(&ctx->nfaults, 0, __ATOMIC_RELEASE);
  __atomic_add_fetch(&ctx->fault_epoch, 1, __ATOMIC_RELEASE); /* their failures are over */
  pthread_mutex_unlock(&ctx->lock);
}

size_t xfer_fault_list(xfer_ctx *ctx, xfer_fault *out, size_t max)
{
  pthread_mutex_lock(&ctx->lock);
  size_t n = ctx->nfaults;
  for (size_t i = 0; i < n && i < max; i++) {
    out[i] = ctx->faults[i].fault;
    out[i].nth = ctx->faults[i].skip + 1;
    out[i].count = ctx->faults[i].left;
  }
  pthread_mutex_unlock(&ctx->lock);
  return n;
}

/* -- Failing the k-th call (torture) ---------------------------------------------- */

void xfer_fault_fail_at_point(xfer_ctx *ctx, xfer_point kind, uint64_t k)
{
  pthread_mutex_lock(&ctx->lock);
  memset(&ctx->failed, 0, sizeof ctx->failed);
  __atomic_store_n(&ctx->fault_calls, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->fault_waits, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->fail_at, kind == XFER_POINT_CALL ? k : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->stall_at, kind == XFER_POINT_WAIT ? k : 0, __ATOMIC_RELAXED);
  xfer_watch_cancel_at(kind == XFER_POINT_STEP ? k : 0);
  ctx->cancel_armed = kind == XFER_POINT_STEP ? k : 0;
  __atomic_add_fetch(&ctx->fault_epoch, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_fault_fail_at(xfer_ctx *ctx, uint64_t k) { xfer_fault_fail_at_point(ctx, XFER_POINT_CALL, k); }

uint64_t xfer_fault_points(xfer_ctx *ctx, xfer_point kind)
{
  return kind == XFER_POINT_CALL ? __atomic_load_n(&ctx->fault_calls, __ATOMIC_RELAXED)
         : kind == XFER_POINT_WAIT ? __atomic_load_n(&ctx->fault_waits, __ATOMIC_RELAXED)
                                   : xfer_watch_steps();
}

uint64_t xfer_fault_calls(xfer_ctx *ctx) { return xfer_fault_points(ctx, XFER_POINT_CALL); }

int xfer_fault_failed(xfer_ctx *ctx, xfer_fault *out)
{
  pthread_mutex_lock(&ctx->lock);
  *out = ctx->failed;
  if (!out->nth && ctx->cancel_armed && xfer_watch_step_hit()) { /* the step that canceled */
    xfer_copy_text(out->op, sizeof out->op, xfer_op_name(XFER_OP_CANCEL));
    out->nth = ctx->cancel_armed > INT_MAX ? INT_MAX : (int)ctx->cancel_armed;
    out->count = 1;
  }
  pthread_mutex_unlock(&ctx->lock);
  return out->nth > 0;
}

/* Counts a point of a kind (*seen) and says whether it is the armed one (*at), recording it as
** what failed (runtime, op, its number): from any thread. */
static int point_hit(xfer_ctx *ctx, uint64_t *seen, const uint64_t *at, const char *runtime, xfer_op op)
{
  uint64_t n = __atomic_add_fetch(seen, 1, __ATOMIC_RELAXED);
  if (n != __atomic_load_n(at, __ATOMIC_RELAXED)) return 0;
  pthread_mutex_lock(&ctx->lock);
  xfer_copy_text(ctx->failed.runtime, sizeof ctx->failed.runtime, runtime);
  xfer_copy_text(ctx->failed.op, sizeof ctx->failed.op, xfer_op_name(op));
  ctx->failed.nth = n > INT_MAX ? INT_MAX : (int)n;
  ctx->failed.count = 1;
  pthread_mutex_unlock(&ctx->lock);
  return 1;
}

/* The k-th wait the torture stalls: every wait of a device under a deadline is counted (one
** with no deadline to end it is not one). */
static int stall_at_hit(xfer_ctx *ctx, const char *runtime)
{
  return xfer_watch_deadline() && point_hit(ctx, &ctx->fault_waits, &ctx->stall_at, runtime, XFER_OP_STALL);
}

/* The call fail_at names: every fallible call is counted. */
static int fail_at_hit(xfer_ctx *ctx, const char *runtime, xfer_op op)
{
  return point_hit(ctx, &ctx->fault_calls, &ctx->fail_at, runtime, op);
}

int xfer_fault_hit(xfer_ctx *ctx, const char *runtime, xfer_op op, long long *native)
{
  int hit = 0;
  *native = 0;
  /* "corrupt" is asked after a move and "stall" of a wait, of no driver call: fail_at counts
  ** calls alone */
  if (op != XFER_OP_CORRUPT && op != XFER_OP_STALL && fail_at_hit(ctx, runtime, op)) return 1;
  if (op == XFER_OP_STALL && stall_at_hit(ctx, runtime)) return 1;
  if (!__atomic_load_n(&ctx->nfaults, __ATOMIC_ACQUIRE)) return 0; /* the common case */
  pthread_mutex_lock(&ctx->lock); /* the staged path calls from two threads */
  for (size_t i = 0; i < ctx->nfaults; i++) {
    xfer_fault_rule *rule = &ctx->faults[i];
    if (rule->op != op || strcmp(rule->fault.runtime, runtime)) continue;
    if (rule->skip > 0) {
      rule->skip--;
    } else if (!hit) { /* one failure per call, even if several rules match */
      rule->left--;
      hit = 1;
      *native = rule->fault.native;
    }
  }
  /* drop used-up rules, keeping the order of the rest */
  size_t kept = 0;
  for (size_t i = 0; i < ctx->nfaults; i++)
    if (ctx->faults[i].left > 0) ctx->faults[kept++] = ctx->faults[i];
  __atomic_store_n(&ctx->nfaults, kept, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->lock);
  return hit;
}

uint64_t xfer_fault_epoch(const xfer_ctx *ctx)
{
  return __atomic_load_n(&ctx->fault_epoch, __ATOMIC_ACQUIRE);
}
