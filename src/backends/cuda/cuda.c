/*
** cuda.c -- the CUDA runtime: devices on their primary contexts, tensors in cuMemAlloc
** memory, a stream per device, peer copies between devices; host memory moves in
** cuda_host.c. Every call is checked (cuda_call.c); a sticky error loses the device for good.
*/
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_host.h"

/* -- Devices ----------------------------------------------------------------------------- */

static void leave_out(xfer_runtime *rt, int ordinal, const char *fn, CUresult r)
{
  const char *name, *text;
  xfer_cu_describe(rt->impl, r, &name, &text);
  size_t used = strlen(rt->reason);
  snprintf(rt->reason + used, sizeof rt->reason - used, "%sleft out device %d: %s failed: %s (%d)",
           used ? "; " : "", ordinal, fn, name, (int)r);
}

static void release_device(cu_api *api, cu_dev *cd)
{
  if (cd->context) {
    api->cuCtxSetCurrent(cd->context);
    xfer_cu_staging_release(api, cd);
    xfer_cu_many_release(api, cd);
    xfer_cu_crc_release(api, cd);
    if (cd->stream) api->cuStreamDestroy(cd->stream);
    if (cd->sum_stream) api->cuStreamDestroy(cd->sum_stream);
    api->cuDevicePrimaryCtxRelease(cd->device);
  }
  free(cd);
}

static void add_device(xfer_runtime *rt, int ordinal)
{
  cu_api *api = rt->impl;
  cu_dev *cd = calloc(1, sizeof *cd);
  if (!cd) {
    leave_out(rt, ordinal, "calloc", CUDA_ERROR_OUT_OF_MEMORY);
    return;
  }
  cd->ordinal = ordinal;
  CUresult r;
  const char *fn = NULL;
  if ((r = api->cuDeviceGet(&cd->device, ordinal)) != CUDA_SUCCESS)
    fn = "cuDeviceGet";
  else if ((r = api->cuDevicePrimaryCtxRetain(&cd->context, cd->device)) != CUDA_SUCCESS)
    fn = "cuDevicePrimaryCtxRetain";
  else if ((r = api->cuCtxSetCurrent(cd->context)) != CUDA_SUCCESS)
    fn = "cuCtxSetCurrent";
  else if ((r = api->cuStreamCreate(&cd->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS ||
           (r = api->cuStreamCreate(&cd->sum_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
    fn = "cuStreamCreate";
  xfer_error err;
  xfer_device *dev = fn ? NULL : xfer_runtime_add_device(rt, &err);
  if (!dev) {
    leave_out(rt, ordinal, fn ? fn : "adding the device", fn ? r : CUDA_ERROR_OUT_OF_MEMORY);
    release_device(api, cd);
    return;
  }
  dev->impl = cd;
  if (api->cuDeviceGetName(dev->label, sizeof dev->label, cd->device) != CUDA_SUCCESS)
    dev->label[0] = '\0';
  xfer_copy_text(dev->vendor, sizeof dev->vendor, "NVIDIA");
  int version = 0;
  api->cuDriverGetVersion(&version);
  snprintf(dev->platform, sizeof dev->platform, "CUDA %d.%d", version / 1000, version % 1000 / 10);
  CUuuid uuid;
  if (api->cuDeviceGetUuid(&uuid, cd->device) == CUDA_SUCCESS) {
    memcpy(dev->uuid, uuid.bytes, sizeof dev->uuid);
    dev->has_uuid = 1;
  }
  size_t total = 0;
  if (api->cuDeviceTotalMem(&total, cd->device) == CUDA_SUCCESS) dev->total_memory = total;
  dev->max_alloc = 0; /* cuMemAlloc takes all there is */
  api->cuDeviceGetAttribute(&dev->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                            cd->device);
  api->cuDeviceGetAttribute(&dev->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                            cd->device);
  if (api->cuDeviceGetPCIBusId(dev->pci_bus_id, (int)sizeof dev->pci_bus_id, cd->device) !=
      CUDA_SUCCESS)
    dev->pci_bus_id[0] = '\0';
  int integrated = 0;
  api->cuDeviceGetAttribute(&integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED, cd->device);
  dev->unified = integrated;
  dev->can_import = !integrated; /* opaque fds from Vulkan on the same GPU */
  xfer_cu_shared_probe(dev);
}

/* Peer access both ways between every pair that can: peer copies then go over NVLink or
** PCIe directly (measured 396 GB/s against 37 GB/s without, on two H200s). */
static void enable_peer_access(xfer_runtime *rt)
{
  cu_api *api = rt->impl;
  xfer_ctx *ctx = rt->ctx;
  for (size_t i = rt->first_device; i < ctx->ndevices; i++)
    for (size_t j = rt->first_device; j < ctx->ndevices; j++) {
      if (i == j) continue;
      cu_dev *a = ctx->devices[i]->impl, *b = ctx->devices[j]->impl;
      int can = 0;
      if (api->cuDeviceCanAccessPeer(&can, a->device, b->device) != CUDA_SUCCESS || !can) continue;
      if (api->cuCtxSetCurrent(a->context) != CUDA_SUCCESS) continue;
      CUresult r = api->cuCtxEnablePeerAccess(b->context, 0);
      /* a kernel of a's reads and writes b's memory only with access on (already on is fine) */
      if ((r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) &&
          b->ordinal >= 0 && b->ordinal < XFER_CU_PEER_BITS)
        a->peer_access |= (uint64_t)1 << b->ordinal;
    }
}

/* Whether dev's batch kernel reaches other's memory in place: peer access on, from dev's
** context to other's (the pointers are unified: one address space over every GPU). */
static int cuda_many_reaches(const xfer_device *dev, const xfer_device *other)
{
  const cu_dev *a = dev->impl, *b = other->impl;
  return b->ordinal >= 0 && b->ordinal < XFER_CU_PEER_BITS &&
         (a->peer_access >> b->ordinal & 1) != 0;
}

static void cuda_close(xfer_runtime *rt);

static xfer_code cuda_open(xfer_runtime *rt, xfer_error *err)
{
  cu_api *api = calloc(1, sizeof *api);
  if (!api) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  rt->impl = api;
  xfer_code rc = xfer_cu_load(api, err);
  int count = 0;
  if (!rc) {
    CUresult r = api->cuDeviceGetCount(&count);
    if (r == CUDA_SUCCESS && count == 0) r = CUDA_ERROR_NO_DEVICE;
    if (r != CUDA_SUCCESS) {
      const char *name, *text;
      xfer_cu_describe(api, r, &name, &text);
      rc = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "no CUDA device: %s (%d): %s", name,
                        (int)r, text);
    }
  }
  for (int i = 0; !rc && i < count; i++) add_device(rt, i);
  if (!rc) enable_peer_access(rt);
  if (rc) cuda_close(rt);
  return rc;
}

static void cuda_close(xfer_runtime *rt)
{
  cu_api *api = rt->impl;
  if (!api) return;
  xfer_ctx *ctx = rt->ctx;
  for (size_t d = rt->first_device; d < ctx->ndevices; d++) {
    xfer_device *dev = ctx->devices[d];
    if (dev->rt != rt || !dev->impl) continue;
    release_device(api, dev->impl);
    dev->impl = NULL;
  }
  /* libcuda stays loaded: the driver keeps threads that do not survive unmapping */
  free(api);
  rt->impl = NULL;
}

/* -- Device memory ------------------------------------------------------------------------ */

static xfer_code cuda_alloc(xfer_device *dev, size_t nbytes, void **buf, xfer_error *err)
{
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_ALLOC, err);
  CUdeviceptr ptr = 0;
  if (!rc) rc = CU(dev, XFER_OP_ALLOC, err, cuMemAlloc, &ptr, nbytes);
  if (!rc) *buf = (void *)(uintptr_t)ptr;
  if (!rc) xfer_objects(dev, 1);
  return rc;
}

static void cuda_free(xfer_device *dev, void *buf, size_t nbytes)
{
  (void)nbytes;
  cu_api *api = cu_api_of(dev);
  xfer_objects(dev, -1);
  if (api->cuCtxSetCurrent(cu_of(dev)->context) == CUDA_SUCCESS)
    api->cuMemFree((CUdeviceptr)(uintptr_t)buf);
}

/* Waits for what the device's stream holds. An injected failure of the wait still waits (as a
** real failure of it is sticky, the context is then gone): the caller gives the memory of the
** copy back on an error, and another runtime -- OpenCL or Vulkan on memory CUDA allocated --
** would reuse it while the copy still lands there (the likely cause of wrong bytes in one
** torture run on an H200: a view moved into opencl:0, whose memory is CUDA's). */
static xfer_code stream_wait(xfer_device *dev, xfer_op op, xfer_error *err)
{
  CUstream s = cu_of(dev)->stream;
  xfer_code rc = xfer_cu_wait(dev, op, s, NULL, err);
  /* (past the deadline the copy is left to land: the core holds its target meanwhile) */
  if (rc && rc != XFER_E_TIMEOUT) cu_api_of(dev)->cuStreamSynchronize(s);
  return rc;
}

static xfer_code cuda_copy(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                           size_t src_offset, size_t n, xfer_error *err)
{
  CUstream s = cu_of(dev)->stream;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_COPY, err);
  if (!rc)
    rc = CU(dev, XFER_OP_COPY, err, cuMemcpyDtoDAsync, xfer_cu_ptr(dst) + dst_offset,
            xfer_cu_ptr(src) + src_offset, n, s);
  if (!rc) rc = stream_wait(dev, XFER_OP_COPY, err);
  return rc;
}

/* A view's rows within the device: one cuMemcpy2DAsync. */
static xfer_code cuda_copy_rows(xfer_device *dev, void *dst, size_t dst_offset, size_t dst_pitch,
                                void *src, size_t src_offset, size_t src_pitch, size_t run,
                                size_t rows, xfer_error *err)
{
  CUstream s = cu_of(dev)->stream;
  CUDA_MEMCPY2D copy;
  memset(&copy, 0, sizeof copy);
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = xfer_cu_ptr(src) + src_offset;
  copy.srcPitch = src_pitch;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = xfer_cu_ptr(dst) + dst_offset;
  copy.dstPitch = dst_pitch;
  copy.WidthInBytes = run;
  copy.Height = rows;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_COPY, err);
  if (!rc) rc = CU(dev, XFER_OP_COPY, err, cuMemcpy2DAsync, &copy, s);
  if (!rc) rc = stream_wait(dev, XFER_OP_COPY, err);
  return rc;
}

static xfer_code cuda_peer(xfer_device *dst_dev, void *dst, size_t dst_offset,
                           xfer_device *src_dev, void *src, size_t src_offset, size_t n,
                           xfer_error *err)
{
  CUstream s = cu_of(src_dev)->stream;
  xfer_code rc = xfer_cu_enter(src_dev, XFER_OP_PEER, err);
  if (!rc)
    rc = CU(src_dev, XFER_OP_PEER, err, cuMemcpyPeerAsync, xfer_cu_ptr(dst) + dst_offset,
            cu_of(dst_dev)->context, xfer_cu_ptr(src) + src_offset, cu_of(src_dev)->context, n, s);
  if (!rc) rc = stream_wait(src_dev, XFER_OP_PEER, err);
  return rc;
}

/* -- Interop: memory another runtime exported as an opaque fd ---------------------------- */

/* The driver gets a duplicate: it owns that one once the import succeeds, and the
** caller's fd is then ours to close. */
static xfer_code cuda_import_fd(xfer_device *dev, int fd, uint64_t memory_size, size_t nbytes,
                                xfer_op op, void **buf, void **handle, xfer_error *err)
{
  xfer_code rc = xfer_cu_enter(dev, op, err);
  if (rc) return rc;
  /* close-on-exec: the driver keeps it open as long as the import lives, and a child
  ** process (a script's os.execute) must not inherit it */
  int given = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (given < 0) return xfer_err_op(err, xfer_op_failure(op), op, "cannot duplicate the fd");
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc;
  memset(&desc, 0, sizeof desc);
  desc.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
  desc.handle.fd = given;
  desc.size = memory_size;
  CUexternalMemory ext = NULL;
  rc = CU(dev, op, err, cuImportExternalMemory, &ext, &desc);
  if (rc) {
    close(given);
    return rc;
  }
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC view;
  memset(&view, 0, sizeof view);
  view.size = nbytes;
  CUdeviceptr ptr = 0;
  rc = CU(dev, XFER_OP_MAP, err, cuExternalMemoryGetMappedBuffer, &ptr, ext, &view);
  if (rc) {
    cu_api_of(dev)->cuDestroyExternalMemory(ext); /* closes the duplicate with it */
    return rc;
  }
  close(fd);
  *buf = (void *)(uintptr_t)ptr;
  *handle = ext;
  xfer_objects(dev, 1);
  return XFER_E_OK;
}

static void cuda_release_import(xfer_device *dev, void *buf, void *handle)
{
  cu_api *api = cu_api_of(dev);
  xfer_objects(dev, -1);
  if (api->cuCtxSetCurrent(cu_of(dev)->context) != CUDA_SUCCESS) return;
  api->cuMemFree(xfer_cu_ptr(buf)); /* a mapped buffer is freed like any allocation */
  api->cuDestroyExternalMemory((CUexternalMemory)handle);
}

static xfer_code cuda_copy_imported(xfer_device *dev, void *buf, size_t offset, void *imported,
                                    size_t imported_offset, size_t n, int into_imported,
                                    xfer_error *err)
{
  return into_imported ? cuda_copy(dev, imported, imported_offset, buf, offset, n, err)
                       : cuda_copy(dev, buf, offset, imported, imported_offset, n, err);
}

static xfer_code cuda_memory(xfer_device *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                             xfer_error *err)
{
  size_t f = 0, t = 0;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_MEMORY, err);
  if (!rc) rc = CU(dev, XFER_OP_MEMORY, err, cuMemGetInfo, &f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return rc;
}

/* A buffer handle is its CUdeviceptr. */
static void *cuda_native(xfer_device *dev, void *buf)
{
  (void)dev;
  return buf;
}

/* For a transport that moves CUDA memory itself (UCX): the CUdeviceptr, and the device's
** context current on this thread, where the transport's copies of it run. */
static xfer_code cuda_device_memory(xfer_device *dev, void *buf, size_t offset, xfer_memory *out,
                                    xfer_error *err)
{
  out->address = (char *)buf + offset;
  out->kind = XFER_MEMORY_CUDA;
  return xfer_cu_enter(dev, XFER_OP_DIRECT, err);
}

/* A CUdeviceptr the application owns is the buffer every op takes. */
static xfer_code cuda_wrap(xfer_device *dev, const xfer_external *mem, void **buf, xfer_error *err)
{
  (void)dev;
  (void)err;
  *buf = mem->ptr;
  return XFER_E_OK;
}

static xfer_code cuda_host_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                                int to_device, xfer_error *err)
{
  return to_device ? xfer_cu_write(dev, buf, offset, host, n, err)
                   : xfer_cu_read(dev, buf, offset, host, n, err);
}

static const xfer_runtime_ops cuda_runtime = {
  .open = cuda_open,
  .close = cuda_close,
};
static const xfer_memory_ops cuda_memory_ops = {
  .alloc = cuda_alloc,
  .free = cuda_free,
  .native = cuda_native,
  .wrap = cuda_wrap,
  .host_unpin = xfer_cu_host_unpin,
  .info = cuda_memory,
};
static const xfer_copy_ops cuda_copies = {
  .host = cuda_host_move,
  .host_rows = xfer_cu_rows,
  .start = xfer_cu_start,
  .finish = xfer_cu_finish,
  .within = cuda_copy,
  .many = xfer_cu_many,
  .many_again = xfer_cu_many_again,
  .crc32c = xfer_cu_crc32c,
  .crc32c_begin = xfer_cu_crc32c_begin,
  .crc32c_end = xfer_cu_crc32c_end,
  .idle = xfer_cu_idle,
  .many_forget = xfer_cu_many_forget,
  .within_rows = cuda_copy_rows,
  .peer = cuda_peer,
  .many_reaches = cuda_many_reaches,
};
static const xfer_share_ops cuda_share = {
  .import_fd = cuda_import_fd,
  .release_import = cuda_release_import,
  .copy_imported = cuda_copy_imported,
  .alloc_shared = xfer_cu_alloc_shared,
  .free_shared = xfer_cu_free_shared,
  .memory_kind = XFER_MEMORY_CUDA,
  .lend = cuda_device_memory,
};
const xfer_backend xfer_backend_cuda = {
  .version = XFER_BACKEND_VERSION,
  .name = "cuda",
  .alias = NULL,
  .external_kind = XFER_EXTERNAL_CUDA,
  .dlpack_device_type = 2 /* kDLCUDA */,
  .runtime = &cuda_runtime,
  .memory = &cuda_memory_ops,
  .copy = &cuda_copies,
  .share = &cuda_share,
};
