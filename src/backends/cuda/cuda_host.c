/*
** cuda_host.c -- moving bytes between host memory and a CUDA device. Small moves are one
** copy on the device's stream. Moves from or to a host segment xferlua owns register that
** segment once (cuMemHostRegister, kept with the segment until it goes back to the system)
** and DMA at pinned speed, as do moves over memory the driver says someone else page-locked
** (PyTorch's pin_memory()); large moves from other memory go through two staging chunks of the
** host pool (registered the same way), the CPU filling one while the copy engine drains the
** other: never a pageable DMA on the hot path.
*/
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_host.h"

/* At or below this, one copy on the stream costs least: the driver stages a host-to-device
** copy itself, and a device-to-host one lands in a pinned chunk. Every move is complete
** when it returns: each one ends by synchronising the device's stream. */
#define DIRECT_MAX (256u << 10)
/* Host buffers at least this large are worth pinning for the rest of their lives. */
#define PIN_MIN (1u << 20)

static size_t page_round(size_t n)
{
  long page = sysconf(_SC_PAGESIZE);
  size_t p = page > 0 ? (size_t)page : 4096;
  return (n + p - 1) / p * p;
}

/* -- Pinned registrations ----------------------------------------------------------------- */

/* A registration is portable, the runtime's not one device's: it is kept with the host
** segment under the runtime's first device. */
static xfer_device *registrar(const xfer_device *dev)
{
  return dev->ctx->devices[dev->rt->first_device];
}

/* What the driver says of the byte at ptr: the attributes in what[] into out[], in one call.
** cuPointerGetAttributes, not the singular call: memory the driver never saw (pageable)
** answers zeros and CUDA_SUCCESS there -- an answer, where the singular call reports an error
** (CUDA_ERROR_INVALID_VALUE) that compute-sanitizer counts on every pageable move. */
static int pointer_attributes(const cu_api *api, unsigned int count, CUpointer_attribute *what, void **out,
                              const void *ptr)
{
  return api->cuPointerGetAttributes(count, what, out, (CUdeviceptr)(uintptr_t)ptr) == CUDA_SUCCESS;
}

/* 1 when [ptr, ptr+n) is host memory someone else page-locked (PyTorch's pin_memory(),
** cudaHostAlloc, a registration not ours) within one allocation of this device's context that
** its kernels reach at the same address; *span: that allocation where the driver says, else
** [ptr, ptr+n). Asked of the driver each time, never remembered: the owner may free it
** without our knowing, and a kernel must not be given pageable memory. */
static int pinned_elsewhere(xfer_device *dev, const void *ptr, size_t n, xfer_host_span *span)
{
  const cu_api *api = cu_api_of(dev);
  const char *first = ptr, *last = first + (n ? n - 1 : 0);
  unsigned int type = 0, last_type = 0;
  unsigned long long id = 0, last_id = 0;
  CUcontext owner = NULL;
  CUdeviceptr seen_at = 0, start = 0;
  size_t size = 0;
  CUpointer_attribute of_first[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                    CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *first_out[] = {&type, &owner, &seen_at, &id, &start, &size};
  CUpointer_attribute of_last[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void *last_out[] = {&last_type, &last_id};
  if (!pointer_attributes(api, 6, of_first, first_out, first) || type != CU_MEMORYTYPE_HOST ||
      owner != cu_of(dev)->context || seen_at != (CUdeviceptr)(uintptr_t)first ||
      !pointer_attributes(api, 2, of_last, last_out, last) || last_type != CU_MEMORYTYPE_HOST ||
      last_id != id)
    return 0;
  span->base = (void *)(uintptr_t)first;
  span->size = n;
  if (start && start <= (CUdeviceptr)(uintptr_t)first && (uintptr_t)last < start + size) {
    span->base = (void *)(uintptr_t)start;
    span->size = size;
  }
  return 1;
}

int xfer_cu_pinned(xfer_device *dev, const void *ptr, size_t n)
{
  xfer_host_span span;
  return xfer_cu_pinned_span(dev, ptr, n, &span);
}

/* Nonzero when [ptr, ptr+n) lies in a host segment that is registered now (registering it if
** need be; the registration stays with the segment): 2 when the registration is kept with the
** segment (it lasts while xfer_mem_mappings_undone() stays), 1 when someone else's -- a
** segment another registered, or memory xferlua does not own that the driver says is
** page-locked (pinned_elsewhere). *span: the segment or allocation. A registration that fails
** is no error: the move is staged instead. */
int xfer_cu_pinned_span(xfer_device *dev, const void *ptr, size_t n, xfer_host_span *span_out)
{
  xfer_host_span span;
  if (!xfer_host_span_of(dev->ctx, ptr, n, &span)) {
    xfer_error ignored;
    return !xfer_cu_enter(dev, XFER_OP_REGISTER, &ignored) && pinned_elsewhere(dev, ptr, n, span_out);
  }
  *span_out = span;
  if (span.size < PIN_MIN) return 0;
  xfer_device *key = registrar(dev);
  if (xfer_host_pin(dev->ctx, span.base, key)) return 2;
  xfer_error err;
  /* a staged pipeline's reader or writer thread may have no context current yet */
  if (xfer_cu_enter(dev, XFER_OP_REGISTER, &err)) return 0;
  if (CU(dev, XFER_OP_REGISTER, &err, cuMemHostRegister, span.base, page_round(span.size),
         CU_MEMHOSTREGISTER_PORTABLE))
    /* another move registered it a moment ago: it is pinned all the same */
    return err.native == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (xfer_host_pin_keep(dev->ctx, span.base, key, span.base)) {
    xfer_objects(key, 1); /* the registrar's: host_unpin is called on it */
    return 2;
  }
  cu_api_of(dev)->cuMemHostUnregister(span.base); /* no room to keep it: not kept at all */
  return 0;
}

/* Any context will do for unregistering a portable registration: the first device's. */
static int enter_any(xfer_runtime *rt)
{
  cu_api *api = rt->impl;
  xfer_ctx *ctx = rt->ctx;
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices && d < ctx->ndevices; d++)
    if (ctx->devices[d]->impl &&
        api->cuCtxSetCurrent(((cu_dev *)ctx->devices[d]->impl)->context) == CUDA_SUCCESS)
      return 1;
  return 0;
}

void xfer_cu_host_unpin(xfer_device *dev, void *base, size_t size, void *pin)
{
  (void)size;
  (void)pin;
  xfer_objects(dev, -1);
  if (enter_any(dev->rt)) cu_api_of(dev)->cuMemHostUnregister(base);
}

/* -- Pinned staging ------------------------------------------------------------------------- */

/* A move's staging chunks: blocks of the host pool, whose segments are registered on first
** use and stay so with them, so a chunk costs no registration after the first; handed
** back when the move has landed. */
typedef struct chunks {
  xfer_block *block[XFER_CU_STAGING_SLOTS];
  char *at[XFER_CU_STAGING_SLOTS];
} chunks;

static void chunks_give(chunks *c)
{
  for (int s = 0; s < XFER_CU_STAGING_SLOTS; s++) xfer_mem_free(c->block[s]);
}

/* `count` chunks of `len` bytes, and the events that tell when each is free again (made once;
** XFER_OP_ALLOC for fault injection: a fault aimed at a read or write should fail the copy). */
static xfer_code chunks_take(xfer_device *dev, size_t len, int count, chunks *c, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  xfer_device *host = xfer_host_of(dev->ctx);
  xfer_code rc = XFER_E_OK;
  memset(c, 0, sizeof *c);
  for (int s = 0; s < count && !rc; s++) {
    if (!cd->staged[s])
      rc = CU(dev, XFER_OP_ALLOC, err, cuEventCreate, &cd->staged[s], CU_EVENT_DISABLE_TIMING);
    if (!rc) rc = xfer_mem_alloc(host, len, &c->block[s], err);
    if (!rc) {
      c->at[s] = (char *)c->block[s]->buf + c->block[s]->offset; /* host blocks are addresses */
      xfer_cu_pinned(dev, c->at[s], len);
    }
  }
  if (rc) chunks_give(c);
  return rc;
}

void xfer_cu_staging_release(cu_api *api, cu_dev *cd)
{
  for (int q = 0; q < XFER_QUEUE_SLOTS; q++) {
    if (cd->queued[q]) api->cuEventDestroy(cd->queued[q]);
    cd->queued[q] = NULL;
  }
  for (int s = 0; s < XFER_CU_STAGING_SLOTS; s++) {
    if (cd->staged[s]) api->cuEventDestroy(cd->staged[s]);
    cd->staged[s] = NULL;
  }
}

/* After a failure part way: let what was queued finish before the chunks are reused -- or,
** past the move's deadline, leave them to the device's quarantine (memory.c holds what is freed
** while a device is stalled). */
static xfer_code settle(xfer_device *dev, xfer_op op, xfer_code rc, xfer_error *err)
{
  xfer_error ignored;
  xfer_code s = xfer_cu_wait(dev, op, cu_of(dev)->stream, NULL, rc ? &ignored : err);
  /* an injected failure of the wait still waits: host memory of a copy in flight is the
  ** caller's again only once the copy has landed */
  if (s && s != XFER_E_TIMEOUT) cu_api_of(dev)->cuStreamSynchronize(cu_of(dev)->stream);
  return rc ? rc : s;
}

static size_t chunk_len(size_t n, size_t off)
{
  return n - off < XFER_CU_STAGING_CHUNK ? n - off : XFER_CU_STAGING_CHUNK;
}

static xfer_code staged_write(xfer_device *dev, CUdeviceptr dst, const char *src, size_t n,
                              xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  chunks c;
  xfer_code rc = chunks_take(dev, XFER_CU_STAGING_CHUNK, XFER_CU_STAGING_SLOTS, &c, err);
  if (rc) return rc;
  int used[XFER_CU_STAGING_SLOTS] = {0};
  for (size_t off = 0, k = 0; off < n && !rc; off += chunk_len(n, off), k++) {
    int s = (int)(k % XFER_CU_STAGING_SLOTS);
    size_t len = chunk_len(n, off);
    if (used[s] && (rc = xfer_cu_wait(dev, XFER_OP_WRITE, NULL, cd->staged[s], err))) break;
    memcpy(c.at[s], src + off, len);
    rc = CU(dev, XFER_OP_WRITE, err, cuMemcpyHtoDAsync, dst + off, c.at[s], len, cd->stream);
    if (!rc) rc = CU(dev, XFER_OP_WRITE, err, cuEventRecord, cd->staged[s], cd->stream);
    used[s] = 1;
  }
  rc = settle(dev, XFER_OP_WRITE, rc, err);
  chunks_give(&c); /* every copy out of them has landed (or they are held) */
  return rc;
}

static xfer_code staged_read(xfer_device *dev, CUdeviceptr src, char *dst, size_t n,
                             xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  chunks c;
  xfer_code rc = chunks_take(dev, XFER_CU_STAGING_CHUNK, XFER_CU_STAGING_SLOTS, &c, err);
  if (rc) return rc;
  size_t chunks = (n + XFER_CU_STAGING_CHUNK - 1) / XFER_CU_STAGING_CHUNK;
  /* queue the first chunks, then empty each as the next is queued behind it */
  for (size_t k = 0; k < chunks && k < XFER_CU_STAGING_SLOTS && !rc; k++) {
    size_t off = k * XFER_CU_STAGING_CHUNK;
    rc = CU(dev, XFER_OP_READ, err, cuMemcpyDtoHAsync, c.at[k], src + off, chunk_len(n, off),
            cd->stream);
    if (!rc) rc = CU(dev, XFER_OP_READ, err, cuEventRecord, cd->staged[k], cd->stream);
  }
  for (size_t k = 0; k < chunks && !rc; k++) {
    int s = (int)(k % XFER_CU_STAGING_SLOTS);
    size_t off = k * XFER_CU_STAGING_CHUNK;
    if ((rc = xfer_cu_wait(dev, XFER_OP_READ, NULL, cd->staged[s], err))) break;
    memcpy(dst + off, c.at[s], chunk_len(n, off));
    size_t next = k + XFER_CU_STAGING_SLOTS;
    if (next < chunks) {
      size_t noff = next * XFER_CU_STAGING_CHUNK;
      rc = CU(dev, XFER_OP_READ, err, cuMemcpyDtoHAsync, c.at[s], src + noff, chunk_len(n, noff),
              cd->stream);
      if (!rc) rc = CU(dev, XFER_OP_READ, err, cuEventRecord, cd->staged[s], cd->stream);
    }
  }
  rc = settle(dev, XFER_OP_READ, rc, err);
  chunks_give(&c);
  return rc;
}

/* -- Host copies (xfer_copy_ops.host) ------------------------------------------------------ */

xfer_code xfer_cu_write(xfer_device *dev, void *buf, size_t offset, const void *src, size_t n,
                        xfer_error *err)
{
  CUdeviceptr dst = xfer_cu_ptr(buf) + offset;
  CUstream stream = cu_of(dev)->stream;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_WRITE, err);
  if (rc) return rc;
  if (n <= DIRECT_MAX) {
    /* on our stream and waited for: cuMemcpyHtoD from pageable memory returns before its
    ** DMA lands, and our (non-blocking) stream would not wait for it */
    rc = CU(dev, XFER_OP_WRITE, err, cuMemcpyHtoDAsync, dst, src, n, stream);
    return settle(dev, XFER_OP_WRITE, rc, err);
  }
  if (xfer_cu_pinned(dev, src, n)) {
    rc = CU(dev, XFER_OP_WRITE, err, cuMemcpyHtoDAsync, dst, src, n, stream);
    return settle(dev, XFER_OP_WRITE, rc, err);
  }
  return staged_write(dev, dst, src, n, err);
}

xfer_code xfer_cu_read(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                       xfer_error *err)
{
  CUdeviceptr src = xfer_cu_ptr(buf) + offset;
  CUstream stream = cu_of(dev)->stream;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_READ, err);
  if (rc) return rc;
  if (n <= DIRECT_MAX && !xfer_cu_pinned(dev, dst, n)) {
    /* a device-to-host copy into pageable memory waits for a bounce the driver makes;
    ** into a pinned chunk it is one DMA (measured 11.4 against 7.6 us for 4 KiB) */
    chunks c;
    xfer_error ignored; /* no chunk: a copy straight into pageable memory still works */
    int staged = !chunks_take(dev, n, 1, &c, &ignored);
    void *into = staged ? c.at[0] : dst;
    rc = CU(dev, XFER_OP_READ, err, cuMemcpyDtoHAsync, into, src, n, stream);
    rc = settle(dev, XFER_OP_READ, rc, err);
    if (!rc && staged) memcpy(dst, into, n);
    if (staged) chunks_give(&c);
    return rc;
  }
  if (xfer_cu_pinned(dev, dst, n)) {
    rc = CU(dev, XFER_OP_READ, err, cuMemcpyDtoHAsync, dst, src, n, stream);
    return settle(dev, XFER_OP_READ, rc, err);
  }
  return staged_read(dev, src, dst, n, err);
}

/* -- A view's rows ----------------------------------------------------------------------------- */

/* `rows` runs of `run` bytes, `pitch` apart on the device, packed in host memory: one
** cuMemcpy2DAsync (into pinned memory one DMA; pageable memory the driver bounces). */
xfer_code xfer_cu_rows(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                        size_t rows, void *host, int to_device, xfer_error *err)
{
  xfer_op op = to_device ? XFER_OP_WRITE : XFER_OP_READ;
  xfer_code rc = xfer_cu_enter(dev, op, err);
  if (rc) return rc;
  (void)xfer_cu_pinned(dev, host, run * rows); /* registered when its host segment is large enough */
  CUDA_MEMCPY2D copy;
  memset(&copy, 0, sizeof copy);
  CUdeviceptr at = xfer_cu_ptr(buf) + offset;
  if (to_device) {
    copy.srcMemoryType = CU_MEMORYTYPE_HOST;
    copy.srcHost = host;
    copy.srcPitch = run;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = at;
    copy.dstPitch = pitch;
  } else {
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = at;
    copy.srcPitch = pitch;
    copy.dstMemoryType = CU_MEMORYTYPE_HOST;
    copy.dstHost = host;
    copy.dstPitch = run;
  }
  copy.WidthInBytes = run;
  copy.Height = rows;
  rc = CU(dev, op, err, cuMemcpy2DAsync, &copy, cu_of(dev)->stream);
  return settle(dev, op, rc, err);
}



/* -- Queued moves (the staged pipeline) ------------------------------------------------------ */

/* A large move from or to pinned memory is queued on the stream with an event behind it;
** anything else is done in full now. */
xfer_code xfer_cu_start(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                        int to_device, int slot, int *queued, xfer_error *err)
{
  *queued = 0;
  xfer_op op = to_device ? XFER_OP_WRITE : XFER_OP_READ;
  if (n <= DIRECT_MAX || !xfer_cu_pinned(dev, host, n))
    return to_device ? xfer_cu_write(dev, buf, offset, host, n, err)
                     : xfer_cu_read(dev, buf, offset, host, n, err);
  cu_dev *cd = cu_of(dev);
  CUdeviceptr at = xfer_cu_ptr(buf) + offset;
  xfer_code rc = xfer_cu_enter(dev, op, err);
  if (!rc && !cd->queued[slot])
    rc = CU(dev, XFER_OP_ALLOC, err, cuEventCreate, &cd->queued[slot], CU_EVENT_DISABLE_TIMING);
  if (!rc)
    rc = to_device ? CU(dev, op, err, cuMemcpyHtoDAsync, at, host, n, cd->stream)
                   : CU(dev, op, err, cuMemcpyDtoHAsync, host, at, n, cd->stream);
  if (!rc) rc = CU(dev, op, err, cuEventRecord, cd->queued[slot], cd->stream);
  if (rc) return settle(dev, op, rc, err); /* a copy queued before a failed record lands first */
  cd->pending[slot] = 1;
  cd->queued_op[slot] = op;
  *queued = 1;
  return XFER_E_OK;
}



xfer_code xfer_cu_finish(xfer_device *dev, int slot, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  if (!cd->pending[slot]) return XFER_E_OK;
  cd->pending[slot] = 0;
  xfer_op op = cd->queued_op[slot];
  xfer_code rc = xfer_cu_enter(dev, op, err);
  if (!rc) rc = xfer_cu_wait(dev, op, NULL, cd->queued[slot], err);
  /* failed (an injected fault, or a context that was not made current): the copy may
  ** still be landing in host memory the caller is about to reuse, so wait for it anyway --
  ** but past the deadline (the staged pipeline holds its chunks then) */
  if (rc && rc != XFER_E_TIMEOUT) cu_api_of(dev)->cuEventSynchronize(cd->queued[slot]);
  return rc;
}
