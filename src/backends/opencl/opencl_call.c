/*
** opencl_call.c -- the OpenCL runtime's checked calls (opencl_call.h's CL()): a failure as an
** error naming the call and OpenCL's code, fault injection before each call; and the buffers
** other runtimes own (cl_khr_external_memory), acquired and released around the ops that use
** them. Below the runtime's other files, which call these; these call only opencl_load.c.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "opencl_call.h"

/* -- The checked wrapper (opencl_call.h) ------------------------------------------ */

xfer_code xfer_cl_fail(xfer_op op, const char *fn, cl_int rc, int injected, xfer_error *err)
{
  char what[64];
  snprintf(what, sizeof what, "%s failed", fn);
  /* out of memory may pass once memory is freed; CL_OUT_OF_RESOURCES is often a device
  ** that stopped working (NVIDIA reports a crashed context so) */
  int retryable = rc == CL_OUT_OF_HOST_MEMORY || rc == CL_MEM_OBJECT_ALLOCATION_FAILURE;
  return xfer_err_native(err, xfer_op_failure(op), op, rc, xfer_cl_error_name(rc), what, retryable,
                         injected);
}

int xfer_cl_injected(xfer_device *dev, xfer_op op, cl_int *rc)
{
  long long native;
  if (!xfer_fault_hit(dev->ctx, "opencl", op, &native)) return 0;
  *rc = native ? (cl_int)native
        : op == XFER_OP_ALLOC ? CL_MEM_OBJECT_ALLOCATION_FAILURE : CL_OUT_OF_RESOURCES;
  return 1;
}

/* -- Buffers other runtimes own (cl_khr_external_memory) ------------------------------ */

void xfer_cl_externals_add(cl_dev *cd, cl_mem mem)
{
  pthread_mutex_lock(&cd->externals_lock);
  if (cd->nexternals == cd->externals_cap) {
    size_t cap = cd->externals_cap ? cd->externals_cap * 2 : 16;
    cl_mem *grown = realloc(cd->externals, cap * sizeof *grown);
    if (grown) {
      cd->externals = grown;
      cd->externals_cap = cap;
    }
  }
  if (cd->nexternals < cd->externals_cap) cd->externals[cd->nexternals++] = mem;
  pthread_mutex_unlock(&cd->externals_lock);
}

void xfer_cl_externals_remove(cl_dev *cd, cl_mem mem)
{
  pthread_mutex_lock(&cd->externals_lock);
  for (size_t i = 0; i < cd->nexternals; i++)
    if (cd->externals[i] == mem) {
      cd->externals[i] = cd->externals[--cd->nexternals];
      break;
    }
  pthread_mutex_unlock(&cd->externals_lock);
}

/* The imported buffers among mems[0..n) (each once), into out; how many. */
cl_uint xfer_cl_externals_of(cl_dev *cd, const cl_mem *mems, cl_uint n, cl_mem *out)
{
  cl_uint found = 0;
  pthread_mutex_lock(&cd->externals_lock);
  for (cl_uint m = 0; m < n; m++) {
    int known = 0, seen = 0;
    for (size_t i = 0; i < cd->nexternals && !known; i++) known = cd->externals[i] == mems[m];
    for (cl_uint j = 0; j < found; j++) seen |= out[j] == mems[m];
    if (known && !seen) out[found++] = mems[m];
  }
  pthread_mutex_unlock(&cd->externals_lock);
  return found;
}

int xfer_cl_is_external(xfer_device *dev, void *buf)
{
  cl_mem mem = buf, out[1] = {NULL};
  return xfer_cl_externals_of(cl_of(dev), &mem, 1, out) > 0;
}

/* Hands imported buffers to OpenCL for an op (nothing to do for none). */
xfer_code xfer_cl_externals_acquire(xfer_device *dev, const cl_mem *list, cl_uint n, xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  if (!n) return XFER_E_OK;
  cl_int rc = CL_SUCCESS;
  int injected = xfer_cl_injected(dev, XFER_OP_SYNC, &rc);
  if (!injected) rc = cd->acquire(cd->queue, n, list, 0, NULL, NULL);
  return rc == CL_SUCCESS ? XFER_E_OK
                          : xfer_cl_fail(XFER_OP_SYNC, "clEnqueueAcquireExternalMemObjectsKHR", rc, injected, err);
}

/* ... and back when it has been queued, waiting for the queue when asked (or when there were
** any: the other runtime may use them as soon as the move returns). Keeps `code` first. */
xfer_code xfer_cl_externals_release(xfer_device *dev, const cl_mem *list, cl_uint n, int finish,
                                   xfer_code code, xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  cl_int released = n ? cd->release(cd->queue, n, list, 0, NULL, NULL) : CL_SUCCESS;
  if (!code && released != CL_SUCCESS)
    code = xfer_cl_fail(XFER_OP_SYNC, "clEnqueueReleaseExternalMemObjectsKHR", released, 0, err);
  /* (past the deadline already: not waited for again -- the device is stalled) */
  if ((n || finish) && code != XFER_E_TIMEOUT) {
    xfer_error ignored;
    xfer_code waited = xfer_cl_wait(dev, XFER_OP_SYNC, NULL, 0, code ? &ignored : err);
    if (!code) code = waited;
  }
  return code;
}

/* -- Waits that end at the move's deadline ---------------------------------------------------- */

static int cl_done(void *arg)
{
  void **a = arg;
  xfer_device *dev = a[0];
  cl_event ev = a[1];
  cl_int status = CL_QUEUED;
  cl_int rc = api_of(dev)->clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
  *(cl_int *)a[2] = rc != CL_SUCCESS ? rc : status < 0 ? status : CL_SUCCESS;
  return rc != CL_SUCCESS || status == CL_COMPLETE || status < 0;
}

xfer_code xfer_cl_wait(xfer_device *dev, xfer_op op, cl_event ev, int inject, xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  cl_api *api = api_of(dev);
  long long native = 0;
  int stalled = xfer_fault_hit(dev->ctx, "opencl", XFER_OP_STALL, &native);
  cl_int rc = CL_SUCCESS;
  int injected = inject && xfer_cl_injected(dev, op, &rc);
  const char *fn = ev ? "clWaitForEvents" : "clFinish";
  if (!stalled && !xfer_watch_deadline()) { /* no deadline: the driver's own wait */
    cl_int waited = ev ? api->clWaitForEvents(1, &ev) : api->clFinish(cd->queue);
    if (!injected) rc = waited;
    return rc == CL_SUCCESS ? XFER_E_OK : xfer_cl_fail(op, fn, rc, injected, err);
  }
  cl_event marker = NULL;
  if (!ev) { /* the queue's work: a marker behind it */
    cl_int made = api->clEnqueueMarkerWithWaitList(cd->queue, 0, NULL, &marker);
    if (made != CL_SUCCESS) return xfer_cl_fail(op, "clEnqueueMarkerWithWaitList", made, 0, err);
    ev = marker;
  }
  api->clFlush(cd->queue);
  cl_int status = CL_SUCCESS;
  void *arg[3] = {dev, ev, &status};
  double start = xfer_now();
  int done = xfer_wait_until(cl_done, arg, stalled);
  if (marker) api->clReleaseEvent(marker);
  if (!done) {
    return xfer_device_stalled(dev, op, "clGetEventInfo", xfer_now() - start, stalled, err);
  }
  if (!injected) rc = status;
  return rc == CL_SUCCESS ? XFER_E_OK : xfer_cl_fail(op, fn, rc, injected, err);
}

int xfer_cl_idle(xfer_device *dev)
{
  cl_dev *cd = cl_of(dev);
  cl_api *api = api_of(dev);
  if (!cd->idle_marker) { /* behind everything enqueued so far: done, so is all of that */
    double placed = xfer_now();
    if (api->clEnqueueMarkerWithWaitList(cd->queue, 0, NULL, &cd->idle_marker) != CL_SUCCESS) {
      cd->idle_marker = NULL;
      return 0;
    }
    cd->idle_placed = placed;
  }
  api->clFlush(cd->queue);
  cl_int status = CL_QUEUED;
  if (api->clGetEventInfo(cd->idle_marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) !=
      CL_SUCCESS)
    return 0;
  if (status != CL_COMPLETE && status >= 0) return 0;
  api->clReleaseEvent(cd->idle_marker);
  cd->idle_marker = NULL;
  dev->idle_upto = cd->idle_placed;
  return 1;
}
