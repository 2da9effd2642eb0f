/*
** context.c -- the context: which runtimes opened, their devices, memory accounting,
** and the context's lifetime (reference counted, so tensors outlive a closed binding).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_call.h"

#ifdef XFER_WITH_OPENCL
#define OPENCL_BACKEND &xfer_backend_opencl
#else
#define OPENCL_BACKEND NULL
#endif
#ifdef XFER_WITH_VULKAN
#define VULKAN_BACKEND &xfer_backend_vulkan
#else
#define VULKAN_BACKEND NULL
#endif
#ifdef XFER_WITH_CUDA
#define CUDA_BACKEND &xfer_backend_cuda
#else
#define CUDA_BACKEND NULL
#endif
#ifdef XFER_WITH_UCX
#define REMOTE_BACKEND &xfer_backend_remote
#else
#define REMOTE_BACKEND NULL
#endif

/* The runtimes in the order xfer.runtimes() lists them. A NULL backend is a runtime
** this build does not include (its headers were missing when it was built); it is
** listed as unavailable with that reason. */
static const struct {
  const char *name;
  const xfer_backend *backend;
  const char *missing; /* why a NULL backend is missing */
} runtime_table[XFER_RUNTIMES] = {
  {"host", &xfer_backend_host, NULL},
  {"cuda", CUDA_BACKEND, "built without cuda.h (install the CUDA Toolkit and rebuild)"},
  {"vulkan", VULKAN_BACKEND, "built without Vulkan headers (install libvulkan-dev and rebuild)"},
  {"opencl", OPENCL_BACKEND, "built without OpenCL headers (install opencl-headers and rebuild)"},
  /* last: its devices come with xfer_connect, after every other runtime's */
  {"remote", REMOTE_BACKEND, "built without UCX headers (install libucx-dev and rebuild)"},
};

static void open_runtime(xfer_ctx *ctx, size_t i)
{
  xfer_runtime *rt = &ctx->runtimes[i];
  rt->name = runtime_table[i].name;
  rt->backend = runtime_table[i].backend;
  rt->ctx = ctx;
  rt->first_device = ctx->ndevices;
  if (!rt->backend) {
    snprintf(rt->reason, sizeof rt->reason, "%s", runtime_table[i].missing);
    return;
  }
  if (rt->backend->version != XFER_BACKEND_VERSION) { /* built against another core */
    snprintf(rt->reason, sizeof rt->reason, "its backend table is version %d, the core's %d",
             rt->backend->version, XFER_BACKEND_VERSION);
    return;
  }
  xfer_error err;
  char **env = xfer_env_snapshot(); /* see env_guard.c: drivers that edit the environment */
  xfer_code opened = rt->backend->open(rt, &err);
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
  /* the remote runtime's devices come later, with xfer_connect: it works with none yet */
  rt->available = rt->ndevices > 0 || rt->backend == REMOTE_BACKEND;
  if (!rt->available) snprintf(rt->reason, sizeof rt->reason, "no %s device found", rt->name);
  else if (!rt->ndevices)
    snprintf(rt->reason, sizeof rt->reason, "no peer connected (xfer.connect, xferlua --serve)");
}

/* The switches xferlua reads from the environment: unset or empty is the default, "0" off,
** "1" on, and anything else ("yes", "2") an error, not a guess. */
static const struct {
  const char *name;
  int def;
} env_flags[] = {
  {"XFER_TRACE", 0}, {"XFER_CACHE", 1}, {"XFER_SHARED_MEMORY", 1}, {"XFER_VULKAN_NO_MAP", 0},
  {"XFER_UCX_REGISTER", 1}, {"XFER_HUGE_PAGES", 1},
  {"XFER_UCX_CUDA", 2}, /* unset: where an endpoint has a cuda_ipc lane (ucx_api.h) */
};

int xfer_env_flag(const char *name)
{
  const char *v = getenv(name);
  for (size_t i = 0; i < sizeof env_flags / sizeof env_flags[0]; i++)
    if (!strcmp(env_flags[i].name, name)) return v && *v ? !strcmp(v, "1") : env_flags[i].def;
  return 0;
}

static xfer_code check_env_flags(xfer_error *err)
{
  for (size_t i = 0; i < sizeof env_flags / sizeof env_flags[0]; i++) {
    const char *v = getenv(env_flags[i].name);
    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
      return xfer_err_set(err, XFER_E_INVALID, "open", "%s must be 0 or 1, not '%.40s'",
                          env_flags[i].name, v);
  }
  return XFER_E_OK;
}

xfer_code xfer_ctx_open(xfer_ctx **out, xfer_error *err)
{
  *out = NULL;
  xfer_code bad = check_env_flags(err);
  if (bad) return bad;
  xfer_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return xfer_err_set(err, XFER_E_ALLOC, "open", "out of host memory");
  ctx->refs = 1;
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_cond_init(&ctx->idle, NULL);
  xfer_mem_config_init(ctx);
  ctx->trace = xfer_env_flag("XFER_TRACE");
  for (size_t i = 0; i < XFER_RUNTIMES; i++) {
    ctx->nruntimes++;
    open_runtime(ctx, i);
  }
  xfer_mem_link_backing(ctx);
  const char *at = getenv("XFER_FAIL_AT");
  if (at && *at) {
    char *end = NULL;
    errno = 0;
    unsigned long long k = strtoull(at, &end, 10);
    if (*end || errno == ERANGE || at[0] == '-') {
      xfer_err_set(err, XFER_E_INVALID, "open", "XFER_FAIL_AT must be a call number >= 0, not '%.40s'",
                   at);
      xfer_ctx_release(ctx);
      return XFER_E_INVALID;
    }
    xfer_fault_fail_at(ctx, k);
  }
  const char *spec = getenv("XFER_FAULTS");
  if (spec) {
    xfer_code rc = xfer_fault_parse(ctx, spec, err);
    if (rc) {
      char why[sizeof err->message];
      snprintf(why, sizeof why, "%s", err->message);
      xfer_err_set(err, rc, "open", "XFER_FAULTS: %s", why);
      xfer_ctx_release(ctx);
      return rc;
    }
  }
  /* the measured figures of earlier calibrations: a cache that cannot be read is no reason to
  ** refuse to open (the planner chooses as without it; xfer.costs_load says why) */
  xfer_costs_load(ctx, NULL, NULL, NULL);
  *out = ctx;
  return XFER_E_OK;
}

xfer_ctx *xfer_ctx_retain(xfer_ctx *ctx)
{
  __atomic_add_fetch(&ctx->refs, 1, __ATOMIC_RELAXED); /* jobs retain from their threads */
  return ctx;
}

void xfer_ctx_release(xfer_ctx *ctx)
{
  if (!ctx || __atomic_sub_fetch(&ctx->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  xfer_mem_release_all(ctx); /* pinned and imported memory: before the runtimes close */
  for (size_t i = ctx->nruntimes; i-- > 0;) {
    xfer_runtime *rt = &ctx->runtimes[i];
    if (rt->opened && rt->backend->close) rt->backend->close(rt);
  }
  for (size_t d = 0; d < ctx->ndevices; d++) xfer_device_destroy(ctx->devices[d]);
  free(ctx->devices);
  xfer_stats_clear(ctx);
  xfer_health_fini(ctx);
  xfer_costs_fini(ctx);
  pthread_mutex_destroy(&ctx->lock);
  pthread_cond_destroy(&ctx->idle);
  free(ctx);
}

/* -- Runtimes ------------------------------------------------------------------ */

size_t xfer_runtime_count(const xfer_ctx *ctx) { return ctx->nruntimes; }

xfer_code xfer_runtime_get(const xfer_ctx *ctx, size_t index, xfer_runtime_info *out,
                           xfer_error *err)
{
  if (index >= ctx->nruntimes)
    return xfer_err_set(err, XFER_E_INVALID, "runtime", "no runtime #%zu (there are %zu)",
                        index, ctx->nruntimes);
  const xfer_runtime *rt = &ctx->runtimes[index];
  out->name = rt->name;
  out->available = rt->available;
  out->reason = rt->reason;
  out->device_count = 0; /* those listed: a lost peer's are not */
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices; d++)
    out->device_count += (size_t)xfer_device_listed(ctx->devices[d]);
  out->objects = __atomic_load_n(&rt->objects, __ATOMIC_RELAXED);
  return XFER_E_OK;
}

void xfer_device_retain(xfer_device *dev) { __atomic_add_fetch(&dev->refs, 1, __ATOMIC_ACQ_REL); }
void xfer_device_release(xfer_device *dev) { __atomic_sub_fetch(&dev->refs, 1, __ATOMIC_ACQ_REL); }

/* A new device of rt at place `slot` of the context's list (not stored there yet). */
static xfer_device *new_device(xfer_runtime *rt, size_t slot, xfer_error *err)
{
  xfer_ctx *ctx = rt->ctx;
  xfer_device *dev = calloc(1, sizeof *dev);
  if (!dev || xfer_mem_device_init(dev, !strcmp(rt->name, "host")) != XFER_E_OK) {
    free(dev);
    xfer_err_set(err, XFER_E_ALLOC, "open", "out of host memory listing devices");
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
      xfer_err_set(err, XFER_E_ALLOC, "open", "out of host memory listing devices");
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

/* -- Devices -------------------------------------------------------------------- */

xfer_code xfer_device_lost_error(const xfer_device *dev, const char *op, xfer_error *err)
{
  xfer_code code = dev->lost_code ? dev->lost_code : XFER_E_DEVICE_LOST;
  return xfer_err_set(err, code, op, "device %s was lost%s%s", dev->name, dev->lost_note[0] ? ": " : "",
                      dev->lost_note);
}

void xfer_device_destroy(xfer_device *dev)
{
  xfer_mem_device_fini(dev);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

/* Moves may run on worker threads (to_async, the staged reader): a device's driver state
** is used by one move at a time. Host memory needs no lock: its backend is stateless. */
void xfer_device_lock(xfer_device *dev)
{
  if (!xfer_is_host(dev)) pthread_mutex_lock(&dev->lock);
}

void xfer_device_unlock(xfer_device *dev)
{
  if (!xfer_is_host(dev)) pthread_mutex_unlock(&dev->lock);
}

/* Both, always in one order (by address), so two moves between the same pair in opposite
** directions cannot each hold one lock and wait for the other. */
void xfer_device_lock_pair(xfer_device *a, xfer_device *b)
{
  if (a == b) {
    xfer_device_lock(a);
    return;
  }
  if ((uintptr_t)a > (uintptr_t)b) {
    xfer_device *t = a;
    a = b;
    b = t;
  }
  xfer_device_lock(a);
  xfer_device_lock(b);
}

void xfer_device_unlock_pair(xfer_device *a, xfer_device *b)
{
  xfer_device_unlock(a);
  if (a != b) xfer_device_unlock(b);
}

void xfer_hold_take(xfer_hold *h, xfer_tensor *src, xfer_device *dst_dev, xfer_tensor *dst)
{
  xfer_device *cand[4] = {src->dev, dst_dev, NULL, NULL};
  xfer_interop_helpers(src->dev, dst_dev, &cand[2]);
  h->ndevs = 0;
  for (int i = 0; i < 4; i++) { /* unique, sorted by address: one order for everyone */
    if (!cand[i]) continue;
    int seen = 0;
    for (int j = 0; j < h->ndevs; j++) seen |= h->devs[j] == cand[i];
    if (seen) continue;
    int at = h->ndevs++;
    while (at > 0 && (uintptr_t)h->devs[at - 1] > (uintptr_t)cand[i]) {
      h->devs[at] = h->devs[at - 1];
      at--;
    }
    h->devs[at] = cand[i];
  }
  for (int i = 0; i < h->ndevs; i++) xfer_device_lock(h->devs[i]);
  xfer_ctx *ctx = src->dev->ctx;
  h->tensors[0] = src;
  h->tensors[1] = dst;
  pthread_mutex_lock(&ctx->lock);
  for (int i = 0; i < 2; i++)
    if (h->tensors[i]) h->tensors[i]->busy++;
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_hold_drop(xfer_hold *h)
{
  xfer_ctx *ctx = h->tensors[0]->dev->ctx;
  pthread_mutex_lock(&ctx->lock);
  for (int i = 0; i < 2; i++)
    if (h->tensors[i]) h->tensors[i]->busy--;
  pthread_cond_broadcast(&ctx->idle);
  pthread_mutex_unlock(&ctx->lock);
  for (int i = h->ndevs; i-- > 0;) xfer_device_unlock(h->devs[i]);
}

size_t xfer_device_count(const xfer_ctx *ctx) { return ctx->ndevices; }

xfer_device *xfer_device_at(xfer_ctx *ctx, size_t index)
{
  return index < ctx->ndevices ? ctx->devices[index] : NULL;
}

xfer_code xfer_device_find(xfer_ctx *ctx, const char *name, xfer_device **out,
                           xfer_error *err)
{
  *out = NULL;
  if (!strcmp(name, "cpu")) name = "host"; /* what PyTorch users call it */
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
  /* "cuda" alone means its first device */
  for (size_t r = 0; r < ctx->nruntimes; r++) {
    const xfer_runtime *rt = &ctx->runtimes[r];
    if (strcmp(rt->name, name)) continue;
    if (rt->ndevices) {
      *out = ctx->devices[rt->first_device];
      __atomic_store_n(&(*out)->closed, 0, __ATOMIC_RELEASE);
      return XFER_E_OK;
    }
    return xfer_err_set(err, XFER_E_UNAVAILABLE, "device", "no %s device: %s", name,
                        rt->reason);
  }
  char known[256] = "";
  size_t used = 0;
  for (size_t d = 0; d < ctx->ndevices && used < sizeof known; d++)
    if (xfer_device_listed(ctx->devices[d]))
      used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "",
                               ctx->devices[d]->name);
  return xfer_err_set(err, XFER_E_INVALID, "device", "unknown device '%s' (devices here: %s)",
                      name, known);
}

xfer_code xfer_device_get_info(xfer_device *dev, xfer_device_info *out, xfer_error *err)
{
  memset(out, 0, sizeof *out);
  out->name = dev->name;
  out->runtime = dev->rt->name;
  out->index = dev->index;
  out->label = dev->label;
  out->platform = dev->platform;
  out->vendor = dev->vendor;
  out->total_memory = dev->total_memory;
  out->max_alloc = dev->max_alloc ? dev->max_alloc : dev->total_memory;
  out->max_import = dev->max_import;
  out->unified = dev->unified;
  out->has_uuid = dev->has_uuid;
  memcpy(out->uuid, dev->uuid, sizeof out->uuid);
  out->pci_bus_id = dev->pci_bus_id;
  out->cc_major = dev->cc_major;
  out->cc_minor = dev->cc_minor;
  out->has_driver_uuid = dev->has_driver_uuid;
  memcpy(out->driver_uuid, dev->driver_uuid, sizeof out->driver_uuid);
  out->backing = dev->backing ? dev->backing->name : "";
  out->closed = xfer_device_is_closed(dev);
  (void)err;
  return XFER_E_OK;
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

xfer_ctx *xfer_device_ctx(const xfer_device *dev) { return dev->ctx; }

/* -- Closing a device ---------------------------------------------------------------- */

int xfer_device_is_lost(const xfer_device *dev) { return __atomic_load_n(&dev->lost, __ATOMIC_RELAXED); }

void xfer_uuid_text(const uint8_t u[16], char *out, size_t cap)
{
  snprintf(out, cap, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
           u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
           u[15]);
}

int xfer_device_listed(const xfer_device *dev)
{
  return !(dev->remote && xfer_device_is_lost(dev));
}

int xfer_device_is_closed(const xfer_device *dev)
{
  return __atomic_load_n(&dev->closed, __ATOMIC_ACQUIRE);
}

xfer_code xfer_device_close(xfer_device *dev, xfer_error *err)
{
  xfer_ctx *ctx = dev->ctx;
  if (xfer_is_host(dev))
    return xfer_err_set(err, XFER_E_INVALID, "close", "host memory cannot be closed");
  /* the device's lock: no move runs on it now, and one that waits for it finds it closed */
  xfer_device_lock(dev);
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
    return xfer_err_set(err, XFER_E_ALLOC, "close",
                        "%s is closed, but out of host memory its tensors keep theirs until freed",
                        dev->name);
  return XFER_E_OK;
}
