/*
** cuda_call.c -- the CUDA runtime's checked calls (CU() of cuda_host.h): a failure as an
** error naming the call, CUDA's code and text, fault injection before each call, a sticky
** error losing the device, and entering a device's primary context. Below every other file of
** the runtime: each of them calls these, and these call only cuda_load.c (CUDA's words).
*/
#include <stdio.h>

#include "cuda_host.h"

/* -- The checked wrapper ----------------------------------------------------------- */

/* Errors after which the context is unusable: every later call fails the same way. */
static int is_sticky(CUresult r)
{
  switch (r) {
  case CUDA_ERROR_ILLEGAL_ADDRESS: case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_HARDWARE_STACK_ERROR: case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS: case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC: case CUDA_ERROR_ECC_UNCORRECTABLE: case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED: case CUDA_ERROR_ILLEGAL_STATE:
    return 1;
  default:
    return 0;
  }
}

xfer_code xfer_cu_fail(xfer_device *dev, xfer_op op, const char *fn, CUresult r, int injected,
                       xfer_error *err)
{
  const char *name, *text;
  xfer_cu_describe(cu_api_of(dev), r, &name, &text);
  xfer_code code = xfer_op_failure(op);
  if (is_sticky(r)) { /* the context is gone: so is the device, for this process */
    dev->lost = 1;
    code = XFER_E_DEVICE_LOST;
  }
  char what[200];
  snprintf(what, sizeof what, "%s: %s", fn, text);
  int retryable = r == CUDA_ERROR_OUT_OF_MEMORY;
  return xfer_err_native(err, code, op, r, name, what, retryable, injected);
}

xfer_code xfer_cu_check(xfer_device *dev, xfer_op op, const char *fn, CUresult r,
                        xfer_error *err)
{
  return r == CUDA_SUCCESS ? XFER_E_OK : xfer_cu_fail(dev, op, fn, r, 0, err);
}

/* per thread: moves on two devices may fail at once */
static _Thread_local CUresult injected_code;

CUresult xfer_cu_injected_code(void) { return injected_code; }

int xfer_cu_injected(xfer_device *dev, xfer_op op)
{
  long long native;
  if (!xfer_fault_hit(dev->ctx, "cuda", op, &native)) return 0;
  injected_code = native ? (CUresult)native
                  : op == XFER_OP_ALLOC ? CUDA_ERROR_OUT_OF_MEMORY
                                         : CUDA_ERROR_UNKNOWN;
  return 1;
}

/* Every call below runs in the device's primary context. */
xfer_code xfer_cu_enter(xfer_device *dev, xfer_op op, xfer_error *err)
{
  /* checked, but not a fault-injection point: a fault aimed at an op should hit the
  ** call that does the op's work */
  return xfer_cu_check(dev, op, "cuCtxSetCurrent",
                       cu_api_of(dev)->cuCtxSetCurrent(cu_of(dev)->context), err);
}

/* -- Waits that end at the move's deadline ---------------------------------------------------- */

typedef struct cu_waited {
  cu_api *api;
  CUstream stream;
  CUevent event;
  CUresult r;
} cu_waited;

static int cu_ready(void *arg)
{
  cu_waited *w = arg;
  w->r = w->event ? w->api->cuEventQuery(w->event) : w->api->cuStreamQuery(w->stream);
  return w->r != CUDA_ERROR_NOT_READY;
}

xfer_code xfer_cu_wait(xfer_device *dev, xfer_op op, CUstream stream, CUevent event, xfer_error *err)
{
  long long native = 0;
  int stalled = xfer_fault_hit(dev->ctx, "cuda", XFER_OP_STALL, &native);
  if (!stalled && !xfer_watch_deadline()) /* no deadline: the driver's own wait */
    return event ? CU(dev, op, err, cuEventSynchronize, event) : CU(dev, op, err, cuStreamSynchronize, stream);
  if (xfer_cu_injected(dev, op))
    return xfer_cu_fail(dev, op, event ? "cuEventQuery" : "cuStreamQuery", xfer_cu_injected_code(), 1, err);
  cu_waited w = {cu_api_of(dev), stream, event, CUDA_SUCCESS};
  double start = xfer_now();
  if (!xfer_wait_until(cu_ready, &w, stalled)) {
    return xfer_device_stalled(dev, op, event ? "cuEventQuery" : "cuStreamQuery", xfer_now() - start, stalled, err);
  }
  return xfer_cu_check(dev, op, event ? "cuEventQuery" : "cuStreamQuery", w.r, err);
}

int xfer_cu_idle(xfer_device *dev)
{
  xfer_error ignored;
  if (xfer_cu_enter(dev, XFER_OP_SYNC, &ignored)) return 0;
  double asked = xfer_now(); /* done: so is all the streams had by now (the sums' too) */
  if (cu_api_of(dev)->cuStreamQuery(cu_of(dev)->stream) != CUDA_SUCCESS ||
      cu_api_of(dev)->cuStreamQuery(cu_of(dev)->sum_stream) != CUDA_SUCCESS)
    return 0;
  dev->idle_upto = asked;
  return 1;
}

xfer_code xfer_cu_room(xfer_device *dev, CUdeviceptr *at, size_t *room, size_t bytes, xfer_error *err)
{
  if (*room >= bytes) return XFER_E_OK;
  if (*at) cu_api_of(dev)->cuMemFree(*at);
  *at = 0;
  *room = 0;
  size_t grown = bytes < 65536 ? 65536 : bytes * 2;
  xfer_code rc = CU(dev, XFER_OP_ALLOC, err, cuMemAlloc, at, grown);
  if (!rc) *room = grown;
  return rc;
}
