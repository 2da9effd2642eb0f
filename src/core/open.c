/*
** open.c -- the top of the core: xfer_ctx_open (a context made, its settings' defaults asked of
** their owners, its runtimes opened, fault rules read from the environment) and xfer.config.
** The settings are kept here, in the context, and read where they are used; each is owned by
** the part that reads it, which gives its default and its range: route.c the staging chunks,
** memory.c the cache, ledger.c setting paths aside, each runtime its own (the remote one: its
** requests and their timeout). Layer 13 of docs/architecture.md.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_call.h"
#include "context.h"
#include "ledger.h"
#include "route.h"

/* Every owner's defaults, kept. */
static void config_defaults(xfer_ctx *ctx)
{
  xfer_config c = {0};
  xfer_route_config_defaults(&c);
  xfer_mem_config_defaults(&c);
  xfer_ledger_config_defaults(&c);
  for (size_t r = 0; r < XFER_RUNTIMES; r++) xfer_rt_config_defaults(&ctx->runtimes[r], &c);
  ctx->config = c; /* before any thread reads it */
}

void xfer_config_get(const xfer_ctx *ctx, xfer_config *out)
{
  out->staging_chunk = __atomic_load_n(&ctx->config.staging_chunk, __ATOMIC_RELAXED);
  out->staging_depth = __atomic_load_n(&ctx->config.staging_depth, __ATOMIC_RELAXED);
  out->cache = __atomic_load_n(&ctx->config.cache, __ATOMIC_RELAXED);
  out->cache_limit = __atomic_load_n(&ctx->config.cache_limit, __ATOMIC_RELAXED);
  out->setaside_after = __atomic_load_n(&ctx->config.setaside_after, __ATOMIC_RELAXED);
  out->remote_timeout = ctx->config.remote_timeout;
  out->remote_chunk = __atomic_load_n(&ctx->config.remote_chunk, __ATOMIC_RELAXED);
  out->remote_depth = __atomic_load_n(&ctx->config.remote_depth, __ATOMIC_RELAXED);
  out->remote_device_chunk = __atomic_load_n(&ctx->config.remote_device_chunk, __ATOMIC_RELAXED);
  out->verify = __atomic_load_n(&ctx->config.verify, __ATOMIC_RELAXED);
  __atomic_load(&ctx->config.timeout, &out->timeout, __ATOMIC_RELAXED);
}

xfer_code xfer_config_set(xfer_ctx *ctx, const xfer_config *config, xfer_error *err)
{
  /* every owner checks its own, before any setting is kept */
  xfer_code refused = xfer_route_config_check(config, err);
  if (!refused) refused = xfer_watch_config_check(config, err);
  if (!refused) refused = xfer_mem_config_check(config, err);
  if (!refused) refused = xfer_ledger_config_check(config, err);
  for (size_t r = 0; r < XFER_RUNTIMES && !refused; r++)
    refused = xfer_rt_check_config(&ctx->runtimes[r], config, err);
  if (refused) return refused;
  __atomic_store_n(&ctx->config.remote_chunk, config->remote_chunk, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.remote_depth, config->remote_depth, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.remote_device_chunk, config->remote_device_chunk, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.setaside_after, config->setaside_after, __ATOMIC_RELAXED);
  ctx->config.remote_timeout = config->remote_timeout; /* read when a peer connects */
  __atomic_store_n(&ctx->config.staging_chunk, config->staging_chunk, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.staging_depth, config->staging_depth, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.cache, config->cache, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.cache_limit, config->cache_limit, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->config.verify, config->verify != 0, __ATOMIC_RELAXED); /* the runner's */
  __atomic_store(&ctx->config.timeout, &config->timeout, __ATOMIC_RELAXED);
  xfer_mem_config_applied(ctx, config);
  return XFER_E_OK;
}

/* XFER_FAIL_AT and XFER_FAULTS: fault rules from the environment, refused when malformed. */
static xfer_code faults_from_env(xfer_ctx *ctx, xfer_error *err)
{
  const char *at = getenv("XFER_FAIL_AT");
  if (at && *at) {
    char *end = NULL;
    errno = 0;
    unsigned long long k = strtoull(at, &end, 10);
    if (*end || errno == ERANGE || at[0] == '-')
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_OPEN, XFER_S_FAIL_AT_NOT_NUMBER, at);
    xfer_fault_fail_at(ctx, k);
  }
  const char *spec = getenv("XFER_FAULTS");
  if (!spec) return XFER_E_OK;
  xfer_code rc = xfer_fault_parse(ctx, spec, err);
  if (rc) {
    char why[sizeof err->message];
    snprintf(why, sizeof why, "%s", err->message);
    xfer_err_op(err, rc, XFER_OP_OPEN, XFER_S_FAULTS_ENV, why);
  }
  return rc;
}

xfer_code xfer_ctx_open(xfer_ctx **out, xfer_error *err)
{
  *out = NULL;
  xfer_code bad = xfer_env_flags_check(err);
  if (bad) return bad;
  xfer_ctx *ctx = xfer_ctx_new();
  if (!ctx) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  config_defaults(ctx);
  xfer_ctx_open_runtimes(ctx);
  bad = faults_from_env(ctx, err);
  if (bad) {
    xfer_ctx_release(ctx);
    return bad;
  }
  /* the measured figures of earlier calibrations: a cache that cannot be read is no reason to
  ** refuse to open (the planner chooses as without it; xfer.costs_load says why) */
  xfer_costs_load(ctx, NULL, NULL, NULL);
  *out = ctx;
  return XFER_E_OK;
}
