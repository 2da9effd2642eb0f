/*
** opencl.c -- the OpenCL runtime: every device of every platform, one context and
** in-order queue each; buffers in device memory, or host-shared memory that is mapped
** instead of copied where the device shares memory with the host (PoCL).
*/
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opencl_call.h"

/* -- Opening: platforms and devices -------------------------------------------------- */

static void info_string(cl_api *api, cl_device_id id, cl_device_info what, char *out, size_t cap)
{
  out[0] = '\0';
  if (api->clGetDeviceInfo(id, what, cap, out, NULL) != CL_SUCCESS) out[0] = '\0';
  out[cap - 1] = '\0';
}

static uint64_t info_u64(cl_api *api, cl_device_id id, cl_device_info what)
{
  cl_ulong v = 0;
  return api->clGetDeviceInfo(id, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static int has_extension(cl_api *api, cl_device_id id, const char *name)
{
  size_t len = 0;
  if (api->clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len)
    return 0;
  char *list = malloc(len + 2);
  if (!list) return 0;
  list[0] = ' ';
  int found = 0;
  if (api->clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, len, list + 1, NULL) == CL_SUCCESS) {
    list[len] = ' ';
    list[len + 1] = '\0';
    char pattern[96];
    snprintf(pattern, sizeof pattern, " %s ", name);
    found = strstr(list, pattern) != NULL;
  }
  free(list);
  return found;
}

/* Notes a device that could not be used in the runtime's reason, so that it is not
** silently missing from the list. */
static void leave_out(xfer_runtime *rt, cl_device_id id, const char *fn, cl_int rc)
{
  cl_api *api = rt->impl;
  char name[96] = "";
  if (api->clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof name, name, NULL) != CL_SUCCESS) name[0] = 0;
  name[sizeof name - 1] = '\0';
  size_t used = strlen(rt->reason);
  snprintf(rt->reason + used, sizeof rt->reason - used, "%sleft out %s: %s failed: %s (%d)",
           used ? "; " : "", name, fn, xfer_cl_error_name(rc), rc);
}

/* Adds one device: its context and queue first, so a device that cannot get them is
** left out (and said so) rather than listed unusable. */
static void add_device(xfer_runtime *rt, cl_platform_id platform, cl_device_id id)
{
  cl_api *api = rt->impl;
  cl_int rc;
  cl_context context = api->clCreateContext(NULL, 1, &id, NULL, NULL, &rc);
  if (rc != CL_SUCCESS) {
    leave_out(rt, id, "clCreateContext", rc);
    return;
  }
  cl_command_queue queue = api->clCreateCommandQueue(context, id, 0, &rc);
  if (rc != CL_SUCCESS) {
    leave_out(rt, id, "clCreateCommandQueue", rc);
    api->clReleaseContext(context);
    return;
  }
  cl_dev *cd = calloc(1, sizeof *cd);
  xfer_error err;
  xfer_device *dev = cd ? xfer_runtime_add_device(rt, &err) : NULL;
  if (!dev) {
    leave_out(rt, id, "malloc", CL_OUT_OF_HOST_MEMORY);
    api->clReleaseCommandQueue(queue);
    api->clReleaseContext(context);
    free(cd);
    return;
  }
  cd->id = id;
  pthread_mutex_init(&cd->externals_lock, NULL);
  cd->context = context;
  cd->queue = queue;
  dev->impl = cd;
  info_string(api, id, CL_DEVICE_NAME, dev->label, sizeof dev->label);
  info_string(api, id, CL_DEVICE_VENDOR, dev->vendor, sizeof dev->vendor);
  if (api->clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof dev->platform, dev->platform,
                             NULL) != CL_SUCCESS)
    dev->platform[0] = '\0';
  dev->platform[sizeof dev->platform - 1] = '\0';
  dev->total_memory = info_u64(api, id, CL_DEVICE_GLOBAL_MEM_SIZE);
  dev->max_alloc = info_u64(api, id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  cl_bool unified = CL_FALSE;
  if (api->clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) ==
      CL_SUCCESS)
    dev->unified = unified == CL_TRUE;
  if (api->create_with_properties && has_extension(api, id, "cl_khr_external_memory") &&
      has_extension(api, id, "cl_khr_external_memory_opaque_fd")) {
    *(void **)&cd->acquire = api->clGetExtensionFunctionAddressForPlatform(
        platform, "clEnqueueAcquireExternalMemObjectsKHR");
    *(void **)&cd->release = api->clGetExtensionFunctionAddressForPlatform(
        platform, "clEnqueueReleaseExternalMemObjectsKHR");
    dev->can_import = cd->acquire && cd->release && !dev->unified;
    /* NVIDIA's OpenCL (the H200 machine's driver) writes through NULL inside
    ** clCreateBufferWithProperties importing an opaque fd of 512 MiB or more; 256 MiB
    ** imports work (measured, 2026-11-30). Larger buffers are its own, and move by staging. */
    if (dev->can_import && strstr(dev->vendor, "NVIDIA")) dev->max_import = (uint64_t)256 << 20;
  }
  if (has_extension(api, id, "cl_khr_device_uuid") &&
      api->clGetDeviceInfo(id, CL_DEVICE_UUID_KHR, sizeof dev->uuid, dev->uuid, NULL) ==
          CL_SUCCESS)
    dev->has_uuid = 1;
}

typedef struct named_platform {
  cl_platform_id id;
  char name[128];
} named_platform;

static int by_name(const void *a, const void *b)
{
  return strcmp(((const named_platform *)a)->name, ((const named_platform *)b)->name);
}

static xfer_code add_platform_devices(xfer_runtime *rt, cl_platform_id platform, xfer_error *err)
{
  cl_api *api = rt->impl;
  cl_uint n = 0;
  cl_int rc = api->clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, NULL, &n);
  if (rc == CL_DEVICE_NOT_FOUND || (rc == CL_SUCCESS && n == 0)) {
    /* said, not hidden: a GPU in exclusive-process mode that another process holds
    ** shows up exactly so */
    char name[96] = "";
    if (api->clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof name, name, NULL) != CL_SUCCESS)
      name[0] = '\0';
    name[sizeof name - 1] = '\0';
    size_t used = strlen(rt->reason);
    snprintf(rt->reason + used, sizeof rt->reason - used,
             "%splatform %s has no device it can give this process (CL_DEVICE_NOT_FOUND)",
             used ? "; " : "", name);
    return XFER_E_OK;
  }
  if (rc != CL_SUCCESS) return xfer_cl_fail(XFER_OP_OPEN, "clGetDeviceIDs", rc, 0, err);
  cl_device_id *ids = calloc(n, sizeof *ids);
  if (!ids) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  rc = api->clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n, ids, NULL);
  for (cl_uint i = 0; rc == CL_SUCCESS && i < n; i++) add_device(rt, platform, ids[i]);
  free(ids);
  return rc == CL_SUCCESS ? XFER_E_OK : xfer_cl_fail(XFER_OP_OPEN, "clGetDeviceIDs", rc, 0, err);
}

static void opencl_close(xfer_runtime *rt);

static xfer_code opencl_open(xfer_runtime *rt, xfer_error *err)
{
  cl_api *api = calloc(1, sizeof *api);
  if (!api) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  rt->impl = api;
  xfer_code code = xfer_cl_load(api, err);
  cl_uint n = 0;
  cl_int rc = CL_SUCCESS;
  if (!code) {
    rc = api->clGetPlatformIDs(0, NULL, &n);
    if (rc == CL_SUCCESS && n == 0) rc = CL_PLATFORM_NOT_FOUND_KHR;
    if (rc != CL_SUCCESS)
      code = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "no OpenCL platform: %s (%d)",
                          xfer_cl_error_name(rc), rc);
  }
  if (code || n == 0) { /* n == 0 is CL_PLATFORM_NOT_FOUND_KHR, said above */
    opencl_close(rt);
    return code ? code : XFER_E_UNAVAILABLE;
  }
  named_platform *platforms = calloc(n, sizeof *platforms);
  cl_platform_id *ids = calloc(n, sizeof *ids);
  if (!platforms || !ids) {
    free(platforms);
    free(ids);
    opencl_close(rt);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  }
  if ((rc = api->clGetPlatformIDs(n, ids, NULL)) != CL_SUCCESS)
    code = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "clGetPlatformIDs failed: %s (%d)",
                        xfer_cl_error_name(rc), rc);
  /* platforms in name order: the ICD loader's order follows the file system's */
  for (cl_uint i = 0; !code && i < n; i++) {
    platforms[i].id = ids[i];
    if (api->clGetPlatformInfo(ids[i], CL_PLATFORM_NAME, sizeof platforms[i].name,
                               platforms[i].name, NULL) != CL_SUCCESS)
      platforms[i].name[0] = '\0';
    platforms[i].name[sizeof platforms[i].name - 1] = '\0';
  }
  if (!code) qsort(platforms, n, sizeof *platforms, by_name);
  for (cl_uint i = 0; !code && i < n; i++) code = add_platform_devices(rt, platforms[i].id, err);
  free(platforms);
  free(ids);
  if (code) opencl_close(rt);
  return code;
}

static void opencl_close(xfer_runtime *rt)
{
  cl_api *api = rt->impl;
  if (!api) return;
  xfer_ctx *ctx = rt->ctx;
  for (size_t d = rt->first_device; d < ctx->ndevices; d++) {
    xfer_device *dev = ctx->devices[d];
    cl_dev *cd = dev->rt == rt ? dev->impl : NULL;
    if (!cd) continue;
    pthread_mutex_destroy(&cd->externals_lock);
    free(cd->externals);
    xfer_cl_crc_release(api, cd);
    if (cd->idle_marker) api->clReleaseEvent(cd->idle_marker);
    api->clReleaseCommandQueue(cd->queue);
    api->clReleaseContext(cd->context);
    free(cd);
    dev->impl = NULL;
  }
  /* The ICD loader stays loaded: drivers register exit handlers and threads that do not
  ** survive being unmapped (PoCL among them). */
  free(api);
  rt->impl = NULL;
}

/* -- Buffers --------------------------------------------------------------------------- */

static xfer_code opencl_alloc(xfer_device *dev, size_t nbytes, void **buf, xfer_error *err)
{
  if (dev->max_alloc && nbytes > dev->max_alloc) {
    char why[200];
    snprintf(why, sizeof why, "a tensor of %zu bytes is larger than the largest buffer %s allows "
             "(%llu bytes)", nbytes, dev->name, (unsigned long long)dev->max_alloc);
    return xfer_err_native(err, XFER_E_ALLOC, XFER_OP_ALLOC, CL_INVALID_BUFFER_SIZE,
                           "CL_INVALID_BUFFER_SIZE", why, 0, 0);
  }
  /* Host-shared devices get host memory the CPU maps in place: no copy on map. */
  cl_mem_flags flags = CL_MEM_READ_WRITE | (dev->unified ? CL_MEM_ALLOC_HOST_PTR : 0);
  cl_mem mem = NULL;
  CL_CREATE(dev, XFER_OP_ALLOC, err, mem, clCreateBuffer, cl_of(dev)->context, flags, nbytes, NULL);
  *buf = mem;
  xfer_objects(dev, 1);
  return XFER_E_OK;
}

static void opencl_free(xfer_device *dev, void *buf, size_t nbytes)
{
  (void)nbytes;
  xfer_objects(dev, -1);
  api_of(dev)->clReleaseMemObject((cl_mem)buf);
}

/* On a device that shares memory with the host, large moves map the buffer and copy once;
** below this a blocking read or write costs less (PoCL, measured here: 4 KiB 70 us against
** 95 us mapped, 4 MiB 22 against 19 GB/s; 64 MiB 13 against 14 GB/s). */
#define MAP_MIN ((size_t)16 << 20)

/* Host-shared memory: map the region, copy once, unmap, wait. */
static xfer_code mapped_copy(xfer_device *dev, cl_mem mem, size_t offset, void *host, size_t n,
                             int to_device, xfer_op op, xfer_error *err)
{
  cl_command_queue q = cl_of(dev)->queue;
  void *mapped = NULL;
  cl_map_flags flags = to_device ? CL_MAP_WRITE_INVALIDATE_REGION : CL_MAP_READ;
  CL_CREATE(dev, op, err, mapped, clEnqueueMapBuffer, q, mem, CL_TRUE, flags, offset, n, 0, NULL,
            NULL);
  if (!mapped) /* success without a pointer: a driver's bug, not a crash here */
    return xfer_cl_fail(op, "clEnqueueMapBuffer", CL_MAP_FAILURE, 0, err);
  if (to_device)
    memcpy(mapped, host, n);
  else
    memcpy(host, mapped, n);
  CL_CALL(dev, op, err, clEnqueueUnmapMemObject, q, mem, mapped, 0, NULL, NULL);
  /* an injected failure of the wait still waits: the unmap lands before the memory is reused */
  return xfer_cl_wait(dev, op, NULL, 1, err);
}

static xfer_code opencl_write(xfer_device *dev, void *buf, size_t offset, const void *src,
                              size_t n, xfer_error *err)
{
  if (dev->unified && n >= MAP_MIN)
    return mapped_copy(dev, buf, offset, (void *)src, n, 1, XFER_OP_WRITE, err);
  xfer_cl_pin(dev, src, n);
  cl_mem mem = buf, ext[1] = {NULL};
  cl_uint next = xfer_cl_externals_of(cl_of(dev), &mem, 1, ext);
  xfer_code code = xfer_cl_externals_acquire(dev, ext, next, err);
  if (code) return code;
  cl_event done = NULL; /* waited for below: until the deadline at most */
  CL_STEP(code, dev, XFER_OP_WRITE, err, clEnqueueWriteBuffer, cl_of(dev)->queue, mem, CL_FALSE, offset,
          n, src, 0, NULL, &done);
  if (!code) code = xfer_cl_wait(dev, XFER_OP_WRITE, done, 0, err);
  if (done) api_of(dev)->clReleaseEvent(done);
  return xfer_cl_externals_release(dev, ext, next, 0, code, err);
}

static xfer_code opencl_read(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                             xfer_error *err)
{
  if (dev->unified && n >= MAP_MIN) return mapped_copy(dev, buf, offset, dst, n, 0, XFER_OP_READ, err);
  xfer_cl_pin(dev, dst, n);
  cl_mem mem = buf, ext[1] = {NULL};
  cl_uint next = xfer_cl_externals_of(cl_of(dev), &mem, 1, ext);
  xfer_code code = xfer_cl_externals_acquire(dev, ext, next, err);
  if (code) return code;
  cl_event done = NULL; /* waited for below: until the deadline at most */
  CL_STEP(code, dev, XFER_OP_READ, err, clEnqueueReadBuffer, cl_of(dev)->queue, mem, CL_FALSE, offset, n,
          dst, 0, NULL, &done);
  if (!code) code = xfer_cl_wait(dev, XFER_OP_READ, done, 0, err);
  if (done) api_of(dev)->clReleaseEvent(done);
  return xfer_cl_externals_release(dev, ext, next, 0, code, err);
}

/* A view's rows in one rectangle copy: clEnqueue{Read,Write}BufferRect with the buffer's rows
** `pitch` apart and the host's packed. */
static xfer_code rows_move(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                           size_t rows, void *host, int to_device, xfer_error *err)
{
  xfer_op op = to_device ? XFER_OP_WRITE : XFER_OP_READ;
  xfer_cl_pin(dev, host, run * rows);
  cl_mem mem = buf, ext[1] = {NULL};
  cl_uint next = xfer_cl_externals_of(cl_of(dev), &mem, 1, ext);
  xfer_code code = xfer_cl_externals_acquire(dev, ext, next, err);
  if (code) return code;
  const size_t origin[3] = {offset % pitch, offset / pitch, 0}, at_host[3] = {0, 0, 0};
  const size_t region[3] = {run, rows, 1};
  if (to_device)
    CL_STEP(code, dev, op, err, clEnqueueWriteBufferRect, cl_of(dev)->queue, mem, CL_FALSE, origin,
            at_host, region, pitch, 0, run, 0, host, 0, NULL, NULL);
  else
    CL_STEP(code, dev, op, err, clEnqueueReadBufferRect, cl_of(dev)->queue, mem, CL_FALSE, origin,
            at_host, region, pitch, 0, run, 0, host, 0, NULL, NULL);
  if (!code) code = xfer_cl_wait(dev, op, NULL, 0, err); /* until the deadline at most */
  return xfer_cl_externals_release(dev, ext, next, 0, code, err);
}



/* -- Queued moves (the staged pipeline) ---------------------------------------------- */

/* A read or write enqueued without blocking, its event kept for finish. On a device that
** shares memory with the host the move is a memcpy, done in full now by the calling thread:
** handed to PoCL's worker it ran slower (4 MiB chunks: 9.8 against 15 GB/s blocking). */
static xfer_code queue_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                            int to_device, int slot, int *queued, xfer_error *err)
{
  *queued = 0;
  xfer_op op = to_device ? XFER_OP_WRITE : XFER_OP_READ;
  cl_dev *cd = cl_of(dev);
  cl_mem mem = buf, ext[1] = {NULL};
  /* an imported buffer is moved in full: the other runtime may use it once the move ends */
  if (dev->unified || xfer_cl_externals_of(cd, &mem, 1, ext))
    return to_device ? opencl_write(dev, mem, offset, host, n, err)
                     : opencl_read(dev, mem, offset, host, n, err);
  cl_event done = NULL;
  xfer_cl_pin(dev, host, n);
  if (to_device)
    CL_CALL(dev, op, err, clEnqueueWriteBuffer, cd->queue, mem, CL_FALSE, offset, n, host, 0, NULL,
            &done);
  else
    CL_CALL(dev, op, err, clEnqueueReadBuffer, cd->queue, mem, CL_FALSE, offset, n, host, 0, NULL,
            &done);
  cd->queued[slot] = done;
  cd->queued_op[slot] = op;
  *queued = 1;
  return XFER_E_OK;
}



static xfer_code opencl_finish(xfer_device *dev, int slot, xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  cl_event done = cd->queued[slot];
  if (!done) return XFER_E_OK;
  cd->queued[slot] = NULL;
  /* an injected failure still waits: the host memory is the caller's again only after */
  xfer_code rc = xfer_cl_wait(dev, cd->queued_op[slot], done, 1, err);
  api_of(dev)->clReleaseEvent(done);
  return rc;
}

static xfer_code opencl_copy(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                             size_t src_offset, size_t n, xfer_error *err)
{
  cl_mem mems[2] = {src, dst}, ext[2] = {NULL, NULL};
  cl_uint next = xfer_cl_externals_of(cl_of(dev), mems, 2, ext);
  xfer_code code = xfer_cl_externals_acquire(dev, ext, next, err);
  if (code) return code;
  CL_STEP(code, dev, XFER_OP_COPY, err, clEnqueueCopyBuffer, cl_of(dev)->queue, mems[0], mems[1],
          src_offset, dst_offset, n, 0, NULL, NULL);
  return xfer_cl_externals_release(dev, ext, next, 1, code, err);
}

/* A view's rows within the device: one clEnqueueCopyBufferRect. */
static xfer_code opencl_copy_rows(xfer_device *dev, void *dst, size_t dst_offset, size_t dst_pitch,
                                  void *src, size_t src_offset, size_t src_pitch, size_t run,
                                  size_t rows, xfer_error *err)
{
  cl_mem mems[2] = {src, dst}, ext[2] = {NULL, NULL};
  cl_uint next = xfer_cl_externals_of(cl_of(dev), mems, 2, ext);
  xfer_code code = xfer_cl_externals_acquire(dev, ext, next, err);
  if (code) return code;
  if (mems[0] != mems[1]) {
    const size_t from[3] = {src_offset % src_pitch, src_offset / src_pitch, 0};
    const size_t to[3] = {dst_offset % dst_pitch, dst_offset / dst_pitch, 0};
    const size_t region[3] = {run, rows, 1};
    CL_STEP(code, dev, XFER_OP_COPY, err, clEnqueueCopyBufferRect, cl_of(dev)->queue, mems[0], mems[1],
            from, to, region, src_pitch, 0, dst_pitch, 0, 0, NULL, NULL);
  } else {
    /* two blocks of one cached segment: a rectangle copy within one buffer needs equal pitches
    ** (CL_INVALID_VALUE otherwise), so a copy a row, all queued before the one wait */
    for (size_t i = 0; i < rows && !code; i++)
      CL_STEP(code, dev, XFER_OP_COPY, err, clEnqueueCopyBuffer, cl_of(dev)->queue, mems[0], mems[1],
              src_offset + i * src_pitch, dst_offset + i * dst_pitch, run, 0, NULL, NULL);
  }
  return xfer_cl_externals_release(dev, ext, next, 1, code, err);
}

/* -- Interop: memory another runtime exported (cl_khr_external_memory_opaque_fd) ------- */

typedef struct cl_import {
  int fd; /* the descriptor the driver was given, when it left it open: closed on release */
} cl_import;

/* The driver gets a duplicate, so that the caller's fd is ours to close whatever the
** driver does with the one it is given. The buffer is OpenCL's only between an acquire
** and a release: it is listed as external, and every op on it hands it over. */
static xfer_code opencl_import_fd(xfer_device *dev, int fd, uint64_t memory_size, size_t nbytes,
                                  xfer_op op, void **buf, void **handle, xfer_error *err)
{
  (void)memory_size;
  cl_dev *cd = cl_of(dev);
  if (dev->max_import && nbytes > dev->max_import) /* the planner keeps such moves away */
    return xfer_err_op(err, XFER_E_UNSUPPORTED, op, "%s imports buffers of at most %llu bytes "
                        "(its driver fails on larger ones), not %zu", dev->name,
                        (unsigned long long)dev->max_import, nbytes);
  cl_import *im = malloc(sizeof *im);
  int given = im ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1; /* kept while imported: not for children */
  if (given < 0) {
    free(im);
    return xfer_err_op(err, xfer_op_failure(op), op, "cannot duplicate the memory's fd");
  }
  cl_properties props[] = {
    CL_EXTERNAL_MEMORY_HANDLE_OPAQUE_FD_KHR, (cl_properties)given,
    CL_DEVICE_HANDLE_LIST_KHR, (cl_properties)(uintptr_t)cd->id,
    CL_DEVICE_HANDLE_LIST_END_KHR, 0,
  };
  cl_mem mem = NULL;
  cl_int rc = CL_SUCCESS;
  int injected = xfer_cl_injected(dev, op, &rc);
  if (!injected)
    mem = api_of(dev)->create_with_properties(cd->context, props, CL_MEM_READ_WRITE, nbytes, NULL,
                                              &rc);
  if (rc != CL_SUCCESS) {
    close(given);
    free(im);
    return xfer_cl_fail(op, "clCreateBufferWithProperties", rc, injected, err);
  }
  im->fd = fcntl(given, F_GETFD) == -1 ? -1 : given; /* a driver that took it closed it */
  close(fd);
  xfer_cl_externals_add(cd, mem);
  xfer_objects(dev, 1);
  *buf = mem;
  *handle = im;
  return XFER_E_OK;
}

static void opencl_release_import(xfer_device *dev, void *buf, void *handle)
{
  cl_import *im = handle;
  xfer_objects(dev, -1);
  xfer_cl_externals_remove(cl_of(dev), (cl_mem)buf);
  api_of(dev)->clReleaseMemObject((cl_mem)buf);
  if (im && im->fd >= 0) close(im->fd);
  free(im);
}

static xfer_code opencl_copy_imported(xfer_device *dev, void *buf, size_t offset, void *imported,
                                      size_t imported_offset, size_t n, int into_imported,
                                      xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  cl_mem mems[2] = {imported, buf}, ext[2] = {NULL, NULL};
  /* the acquire/release pair hands the memory between OpenCL and the exporter; the
  ** device's own buffer too, where it was imported as well */
  cl_uint next = xfer_cl_externals_of(cd, mems, 2, ext);
  xfer_code code = xfer_cl_externals_acquire(dev, ext, next, err);
  if (code) return code;
  if (into_imported)
    CL_STEP(code, dev, XFER_OP_COPY, err, clEnqueueCopyBuffer, cd->queue, mems[1], mems[0], offset,
            imported_offset, n, 0, NULL, NULL);
  else
    CL_STEP(code, dev, XFER_OP_COPY, err, clEnqueueCopyBuffer, cd->queue, mems[0], mems[1],
            imported_offset, offset, n, 0, NULL, NULL);
  return xfer_cl_externals_release(dev, ext, next, 1, code, err);
}

/* A cl_mem the application owns (of this device's context) is the buffer every op takes. */
static xfer_code opencl_wrap(xfer_device *dev, const xfer_external *mem, void **buf,
                             xfer_error *err)
{
  (void)dev;
  if (!mem->ptr) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP, "wrap: a NULL cl_mem");
  *buf = mem->ptr;
  return XFER_E_OK;
}

static xfer_code opencl_host_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                                  int to_device, xfer_error *err)
{
  return to_device ? opencl_write(dev, buf, offset, host, n, err)
                   : opencl_read(dev, buf, offset, host, n, err);
}

static const xfer_runtime_ops opencl_runtime = {
  .open = opencl_open,
  .close = opencl_close,
};
static const xfer_memory_ops opencl_memory_ops = {
  .alloc = opencl_alloc,
  .free = opencl_free,
  .wrap = opencl_wrap,
  .host_unpin = xfer_cl_host_unpin,
};
static const xfer_copy_ops opencl_copies = {
  .host = opencl_host_move,
  .host_rows = rows_move,
  .start = queue_move,
  .finish = opencl_finish,
  .within = opencl_copy,
  .many = xfer_cl_many,
  .within_rows = opencl_copy_rows,
  .crc32c = xfer_cl_crc32c,
  .idle = xfer_cl_idle,
};
static const xfer_share_ops opencl_share = {
  .import_fd = opencl_import_fd,
  .release_import = opencl_release_import,
  .copy_imported = opencl_copy_imported,
};
const xfer_backend xfer_backend_opencl = {
  .version = XFER_BACKEND_VERSION,
  .name = "opencl",
  .alias = NULL,
  .external_kind = XFER_EXTERNAL_OPENCL,
  .dlpack_device_type = -1,
  .runtime = &opencl_runtime,
  .memory = &opencl_memory_ops,
  .copy = &opencl_copies,
  .share = &opencl_share,
};
