/*
** runtime.c -- the runtimes' device lists: a backend's open adds each of its devices, with its
** lock and its caching allocator; the remote runtime puts a new device in the place of a lost
** peer's. The context (context.c) opens the runtimes and lists them.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_call.h"
#include "runtime.h"

/* A new device of rt at place `slot` of the context's list (not stored there yet). */
static xfer_device *new_device(xfer_runtime *rt, size_t slot, xfer_error *err)
{
  xfer_ctx *ctx = rt->ctx;
  xfer_device *dev = calloc(1, sizeof *dev);
  if (!dev || xfer_mem_device_init(dev, !strcmp(rt->name, "host")) != XFER_E_OK) {
    free(dev);
    xfer_err_op(err, XFER_E_ALLOC, XFER_OP_OPEN, XFER_S_RUNTIME_LISTING,
                xfer_code_what(XFER_E_ALLOC));
    return NULL;
  }
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&dev->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  dev->ctx = ctx;
  dev->rt = rt;
  dev->index = (int)(slot - rt->first_device);
  if (!strcmp(rt->name, "host"))
    snprintf(dev->name, sizeof dev->name, "host");
  else
    snprintf(dev->name, sizeof dev->name, "%s:%d", rt->name, dev->index);
  return dev;
}

xfer_device *xfer_runtime_add_device(xfer_runtime *rt, xfer_error *err)
{
  xfer_ctx *ctx = rt->ctx;
  if (ctx->ndevices == ctx->cap) {
    size_t cap = ctx->cap ? ctx->cap * 2 : 8;
    xfer_device **grown = realloc(ctx->devices, cap * sizeof *grown);
    if (!grown) {
      xfer_err_op(err, XFER_E_ALLOC, XFER_OP_OPEN, XFER_S_RUNTIME_LISTING,
                  xfer_code_what(XFER_E_ALLOC));
      return NULL;
    }
    ctx->devices = grown;
    ctx->cap = cap;
  }
  xfer_device *dev = new_device(rt, ctx->ndevices, err);
  if (dev) ctx->devices[ctx->ndevices++] = dev;
  return dev;
}

xfer_device *xfer_runtime_replace_device(xfer_runtime *rt, size_t slot, xfer_error *err)
{
  xfer_device *dev = new_device(rt, slot, err);
  if (dev) __atomic_store_n(&rt->ctx->devices[slot], dev, __ATOMIC_RELEASE);
  return dev;
}

void xfer_device_destroy(xfer_device *dev)
{
  xfer_mem_device_fini(dev);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

size_t xfer_runtime_count(const xfer_ctx *ctx) { return ctx->nruntimes; }

xfer_code xfer_runtime_get(const xfer_ctx *ctx, size_t index, xfer_runtime_info *out,
                           xfer_error *err)
{
  if (index >= ctx->nruntimes)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_RUNTIME, XFER_S_RUNTIME_NO_INDEX, index,
                       ctx->nruntimes);
  const xfer_runtime *rt = &ctx->runtimes[index];
  out->name = rt->name;
  out->available = rt->available;
  out->reason = rt->reason;
  out->device_count = 0; /* those listed: a lost peer's are not */
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices; d++)
    out->device_count += (size_t)xfer_device_listed(ctx->devices[d]);
  out->objects = __atomic_load_n(&rt->objects, __ATOMIC_RELAXED);
  out->alias = xfer_rt_alias(rt) ? xfer_rt_alias(rt) : "";
  return XFER_E_OK;
}
