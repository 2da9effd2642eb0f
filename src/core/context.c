/*
** context.c -- the context: which runtimes this build has and which opened, finding a
** device by name, closing one, and the context's lifetime (reference counted, so tensors
** outlive a closed binding); open.c's xfer_ctx_open opens a context with these. Layer 7 of
** docs/architecture.md: the one core file that names the backends' tables; it calls the
** layers below it, never a tensor or a move.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_call.h"
#include "context.h"
#include "ledger.h"

/* The runtimes in the order xfer.runtimes() lists them (runtimes.h). A NULL backend is a
** runtime this build does not include (its headers were missing when it was built); it is
** listed as unavailable with that reason. */
static const struct {
  const char *name;
  const xfer_backend *backend;
  const char *missing; /* why a NULL backend is missing */
} runtime_table[XFER_RUNTIMES] = {
#define XFER_RUNTIME_ROW(name, missing) {#name, &xfer_backend_##name, missing},
  XFER_RUNTIME_LIST(XFER_RUNTIME_ROW)
#undef XFER_RUNTIME_ROW
};

/* "no NAME device found", before what the backend said of each device it left out (a
** context it could not create, say), which a user needs to see more than the sentence. */
static void say_none_found(xfer_runtime *rt)
{
  char prefix[64];
  int n = snprintf(prefix, sizeof prefix, "no %s device found%s", rt->name,
                   rt->reason[0] ? ": " : "");
  size_t len = n > 0 && (size_t)n < sizeof prefix ? (size_t)n : 0;
  size_t kept = strlen(rt->reason);
  if (kept > sizeof rt->reason - 1 - len) kept = sizeof rt->reason - 1 - len;
  memmove(rt->reason + len, rt->reason, kept);
  memcpy(rt->reason, prefix, len);
  rt->reason[len + kept] = '\0';
}

static void open_runtime(xfer_ctx *ctx, size_t i)
{
  xfer_runtime *rt = &ctx->runtimes[i];
  rt->first_device = ctx->ndevices;
  if (!rt->backend) {
    snprintf(rt->reason, sizeof rt->reason, "%s", runtime_table[i].missing);
    return;
  }
  if (xfer_rt_version(rt) != XFER_BACKEND_VERSION) { /* built against another core */
    snprintf(rt->reason, sizeof rt->reason, "its backend table is version %d, the core's %d",
             xfer_rt_version(rt), XFER_BACKEND_VERSION);
    return;
  }
  xfer_error err;
  char **env = xfer_env_snapshot(); /* see env_guard.c: drivers that edit the environment */
  xfer_code opened = xfer_rt_open(rt, &err);
  xfer_env_restore(env);
  xfer_env_free(env);
  if (opened != XFER_E_OK) {
    snprintf(rt->reason, sizeof rt->reason, "%s", err.message);
    /* a runtime that failed half way keeps no devices */
    for (size_t d = rt->first_device; d < ctx->ndevices; d++)
      xfer_device_destroy(ctx->devices[d]);
    ctx->ndevices = rt->first_device;
    rt->ndevices = 0;
    return;
  }
  rt->opened = 1;
  rt->ndevices = ctx->ndevices - rt->first_device;
  /* a transport's devices (the remote runtime's) come later, with xfer_connect: it works
  ** with none yet */
  rt->available = rt->ndevices > 0 || xfer_rt_devices_later(rt);
  if (!rt->available) say_none_found(rt);
  else if (!rt->ndevices)
    snprintf(rt->reason, sizeof rt->reason, "no peer connected (xfer.connect, xferlua --serve)");
}

xfer_ctx *xfer_ctx_new(void)
{
  xfer_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return NULL;
  ctx->refs = 1;
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_cond_init(&ctx->idle, NULL);
  ctx->trace = xfer_env_flag("XFER_TRACE");
  for (size_t i = 0; i < XFER_RUNTIMES; i++) { /* named, not opened: their settings are asked */
    ctx->runtimes[i].name = runtime_table[i].name;
    ctx->runtimes[i].backend = runtime_table[i].backend;
    ctx->runtimes[i].ctx = ctx;
  }
  return ctx;
}

void xfer_ctx_open_runtimes(xfer_ctx *ctx)
{
  for (size_t i = 0; i < XFER_RUNTIMES; i++) {
    ctx->nruntimes++;
    open_runtime(ctx, i);
  }
  xfer_mem_link_backing(ctx);
}

xfer_ctx *xfer_ctx_retain(xfer_ctx *ctx)
{
  __atomic_add_fetch(&ctx->refs, 1, __ATOMIC_RELAXED); /* jobs retain from their threads */
  return ctx;
}

void xfer_ctx_release(xfer_ctx *ctx)
{
  if (!ctx || __atomic_sub_fetch(&ctx->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  for (size_t d = 0; d < ctx->ndevices; d++) xfer_mem_quarantine_settle(ctx->devices[d], XFER_SETTLE_END);
  xfer_mem_release_all(ctx); /* pinned and imported memory: before the runtimes close */
  for (size_t i = ctx->nruntimes; i-- > 0;) {
    xfer_runtime *rt = &ctx->runtimes[i];
    if (rt->opened) xfer_rt_close(rt);
  }
  for (size_t d = 0; d < ctx->ndevices; d++) xfer_device_destroy(ctx->devices[d]);
  free(ctx->devices);
  xfer_ledger_fini(ctx);
  pthread_mutex_destroy(&ctx->lock);
  pthread_cond_destroy(&ctx->idle);
  free(ctx);
}

/* -- Devices by name, and closing one ------------------------------------------- */

xfer_code xfer_device_find(xfer_ctx *ctx, const char *name, xfer_device **out,
                           xfer_error *err)
{
  *out = NULL;
  for (size_t r = 0; r < ctx->nruntimes; r++) /* another name ("cpu": what PyTorch users say) */
    if (xfer_rt_alias(&ctx->runtimes[r]) && !strcmp(name, xfer_rt_alias(&ctx->runtimes[r])))
      name = ctx->runtimes[r].name;
  /* A listed device first (a peer connected again, or another server of the same name, lists
  ** its devices anew, in a place a closed peer gave back or after the lost ones); else the
  ** last lost one of that name, whose calls say it was lost. */
  xfer_device *lost = NULL;
  for (size_t d = ctx->ndevices; d-- > 0;) {
    xfer_device *dev = ctx->devices[d];
    if (strcmp(dev->name, name)) continue;
    if (!xfer_device_listed(dev)) {
      if (!lost) lost = dev;
      continue;
    }
    *out = dev;
    break;
  }
  if (!*out) *out = lost;
  if (*out) {
    __atomic_store_n(&(*out)->closed, 0, __ATOMIC_RELEASE); /* asked for by name: open */
    return XFER_E_OK;
  }
  /* "cuda" alone means its first device; "cuda:3" of a runtime without that many says why */
  for (size_t r = 0; r < ctx->nruntimes; r++) {
    const xfer_runtime *rt = &ctx->runtimes[r];
    size_t rn = strlen(rt->name);
    if (!strncmp(rt->name, name, rn) && name[rn] == ':' && name[rn + 1] >= '0' &&
        name[rn + 1] <= '9' && !rt->available)
      return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_DEVICE, XFER_S_DEVICE_RUNTIME_UNAVAILABLE,
                         name, rt->name, rt->reason);
    if (strcmp(rt->name, name)) continue;
    if (rt->ndevices) {
      *out = ctx->devices[rt->first_device];
      __atomic_store_n(&(*out)->closed, 0, __ATOMIC_RELEASE);
      return XFER_E_OK;
    }
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_DEVICE, XFER_S_DEVICE_NONE_OF_RUNTIME, name,
                       rt->reason);
  }
  char known[256] = "";
  size_t used = 0;
  for (size_t d = 0; d < ctx->ndevices && used < sizeof known; d++)
    if (xfer_device_listed(ctx->devices[d]))
      used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "",
                               ctx->devices[d]->name);
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_DEVICE, XFER_S_DEVICE_UNKNOWN, name, known);
}

/* A driver call, made only when asked (dev.free_memory): a device's other fields are what it
** found at open, so reading dev.name never fails nor costs a driver call. */
xfer_code xfer_device_free_memory(xfer_device *dev, uint64_t *free_bytes, xfer_error *err)
{
  uint64_t total = 0;
  *free_bytes = 0;
  xfer_device_lock(dev);
  xfer_code rc = xfer_be_memory(dev, free_bytes, &total, err);
  xfer_device_unlock(dev);
  return rc;
}

/* -- Closing a device ---------------------------------------------------------------- */

xfer_code xfer_device_close(xfer_device *dev, xfer_error *err)
{
  xfer_ctx *ctx = dev->ctx;
  if (xfer_is_host(dev))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CLOSE, XFER_S_HOST_NOT_CLOSED);
  /* the device's lock: no move runs on it now, and one that waits for it finds it closed */
  xfer_device_lock(dev);
  xfer_mem_quarantine_settle(dev, XFER_SETTLE_CLOSE); /* its work done first, as far as can be */
  pthread_mutex_lock(&ctx->lock);
  __atomic_store_n(&dev->closed, 1, __ATOMIC_RELEASE);
  size_t n = 0;
  for (xfer_tensor *t = dev->tensors; t; t = t->next_on_dev) n++;
  xfer_block **blocks = n ? calloc(n, sizeof *blocks) : NULL;
  size_t nblocks = 0, bytes = 0;
  for (xfer_tensor *t = dev->tensors; t; t = t->next_on_dev) {
    __atomic_store_n(&t->closed, 1, __ATOMIC_RELEASE);
    if (blocks && t->block && !t->freed) {
      blocks[nblocks++] = t->block;
      bytes += t->nbytes;
      t->block = NULL;
      t->buf = NULL;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  /* out of the context's lock: the allocator's comes first where both are taken */
  for (size_t i = 0; i < nblocks; i++) xfer_mem_free(blocks[i]);
  free(blocks);
  xfer_mem_tensor_dropped(ctx, bytes);
  xfer_empty_cache(ctx, dev);
  xfer_mem_host_unpin_device(ctx, dev); /* its imports and pins of host memory too */
  xfer_mem_drop_imports_by(ctx, dev);   /* and of other devices' memory */
  xfer_device_unlock(dev);
  /* without room to list them, the tensors keep their blocks until freed: said, not hidden */
  if (n && !blocks)
    return xfer_err_op(err, XFER_E_ALLOC, XFER_OP_CLOSE, XFER_S_CLOSED_TENSORS_KEEP_MEMORY,
                       dev->name);
  return XFER_E_OK;
}
