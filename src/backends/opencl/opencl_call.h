/*
** opencl_call.h -- what the OpenCL backend's files share: the device's state and the checked
** wrapper every cl* call of a device op goes through (a failure, or an injected one, becomes
** an error record naming the call and its cl_int).
*/
#ifndef XFER_OPENCL_CALL_H
#define XFER_OPENCL_CALL_H

#include "opencl_api.h"

static inline cl_api *api_of(const xfer_device *dev) { return dev->rt->impl; }
static inline cl_dev *cl_of(const xfer_device *dev) { return dev->impl; }

xfer_code xfer_cl_fail(xfer_op op, const char *fn, cl_int rc, int injected, xfer_error *err);
/* An injected fault fails a call before the driver sees it, with the code the driver
** would give; both kinds of failure leave through xfer_cl_fail. */
int xfer_cl_injected(xfer_device *dev, xfer_op op, cl_int *rc);

/* Every cl* call of a device op: CL_CALL(dev, op, err, clFinish, queue) returns the
** error from the enclosing function on failure. */
#define CL_CALL(dev, op, err, fn, ...)                                                 \
  do {                                                                                 \
    cl_int rc_ = CL_SUCCESS;                                                           \
    int injected_ = xfer_cl_injected((dev), (op), &rc_);                               \
    if (!injected_) rc_ = api_of(dev)->fn(__VA_ARGS__);                                \
    if (rc_ != CL_SUCCESS) return xfer_cl_fail((op), #fn, rc_, injected_, (err));      \
  } while (0)
/* The same for calls that return an object and their status through a last argument. */
#define CL_CREATE(dev, op, err, result, fn, ...)                                       \
  do {                                                                                 \
    cl_int rc_ = CL_SUCCESS;                                                           \
    int injected_ = xfer_cl_injected((dev), (op), &rc_);                               \
    if (!injected_) (result) = api_of(dev)->fn(__VA_ARGS__, &rc_);                     \
    if (rc_ != CL_SUCCESS) return xfer_cl_fail((op), #fn, rc_, injected_, (err));      \
  } while (0)
/* The same, for a step of an op that must not return before a later step has run: sets
** `code` unless it was set already. */
#define CL_STEP(code, dev, op, err, fn, ...)                                           \
  do {                                                                                 \
    if (!(code)) {                                                                     \
      cl_int rc_ = CL_SUCCESS;                                                         \
      int injected_ = xfer_cl_injected((dev), (op), &rc_);                             \
      if (!injected_) rc_ = api_of(dev)->fn(__VA_ARGS__);                              \
      if (rc_ != CL_SUCCESS) (code) = xfer_cl_fail((op), #fn, rc_, injected_, (err));  \
    }                                                                                  \
  } while (0)

/* Waits for an event (NULL: everything queued so far): the driver's blocking wait when the move
** has no deadline, else polled until the deadline -- XFER_E_TIMEOUT then, the device marked
** stalled (its work may still write). A stall fault never sees it done; `inject`: a fault rule
** of `op` may fail the wait (which still waits). */
xfer_code xfer_cl_wait(xfer_device *dev, xfer_op op, cl_event ev, int inject, xfer_error *err);
/* copy->idle: whether the queue's work is done, asked without waiting. */
int xfer_cl_idle(xfer_device *dev);

/* Whether a buffer was imported from another runtime (acquired and released around use). */
int xfer_cl_is_external(xfer_device *dev, void *buf);
/* The list of buffers imported from other runtimes (a device's, under its lock). */
void xfer_cl_externals_add(cl_dev *cd, cl_mem mem);
void xfer_cl_externals_remove(cl_dev *cd, cl_mem mem);
/* The imported buffers among mems[0..n) (each once), into out; how many. */
cl_uint xfer_cl_externals_of(cl_dev *cd, const cl_mem *mems, cl_uint n, cl_mem *out);
/* Hands imported buffers to OpenCL for an op (nothing to do for none) ... */
xfer_code xfer_cl_externals_acquire(xfer_device *dev, const cl_mem *list, cl_uint n, xfer_error *err);
/* ... and back when it has been queued, waiting for the queue when asked (or when there were
** any: the other runtime may use them as soon as the move returns). Keeps `code` first. */
xfer_code xfer_cl_externals_release(xfer_device *dev, const cl_mem *list, cl_uint n, int finish,
                                    xfer_code code, xfer_error *err);
/* opencl_many.c: a batch of copies (xfer_copy_ops.many) */
xfer_code xfer_cl_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err);

#endif
