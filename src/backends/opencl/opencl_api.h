/*
** opencl_api.h -- the OpenCL entry points xferlua uses, resolved from libOpenCL.so.1 at
** run time (nothing links against OpenCL), and the backend's per-device state.
*/
#ifndef XFER_OPENCL_API_H
#define XFER_OPENCL_API_H

/* OpenCL 1.2 is all we need, and every ICD (PoCL, NVIDIA) offers it undeprecated. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include "../../core/backend.h"

#define XFER_CL_FUNCTIONS(X)                                                        \
  X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo)     \
  X(clCreateContext) X(clReleaseContext) X(clCreateCommandQueue)                     \
  X(clReleaseCommandQueue) X(clCreateBuffer) X(clReleaseMemObject)                   \
  X(clEnqueueReadBuffer) X(clEnqueueWriteBuffer) X(clEnqueueCopyBuffer)              \
  X(clEnqueueReadBufferRect) X(clEnqueueWriteBufferRect) X(clEnqueueCopyBufferRect)     \
  X(clEnqueueMapBuffer) X(clEnqueueUnmapMemObject) X(clFinish)                      \
  X(clGetExtensionFunctionAddressForPlatform) X(clWaitForEvents) X(clReleaseEvent)         \
  X(clGetMemObjectInfo) X(clCreateProgramWithSource) X(clBuildProgram) X(clReleaseProgram)  \
  X(clCreateKernel) X(clReleaseKernel) X(clSetKernelArg) X(clEnqueueNDRangeKernel)         \
  X(clFlush) X(clGetEventInfo) X(clEnqueueMarkerWithWaitList)

/* OpenCL 3.0's clCreateBufferWithProperties, for importing external memory; resolved
** only where the loader has it. */
typedef cl_mem (*cl_create_buffer_with_properties_fn)(cl_context, const cl_properties *,
                                                      cl_mem_flags, size_t, void *, cl_int *);

typedef struct cl_api {
  void *lib;
  cl_create_buffer_with_properties_fn create_with_properties;
#define XFER_CL_POINTER(name) __typeof__(name) *name;
  XFER_CL_FUNCTIONS(XFER_CL_POINTER)
#undef XFER_CL_POINTER
} cl_api;


/* One context and one in-order queue per device, made when the runtime opens. */
typedef struct cl_dev {
  cl_device_id id;
  cl_context context;
  cl_command_queue queue;
  /* cl_khr_external_memory_opaque_fd, where offered */
  clEnqueueAcquireExternalMemObjectsKHR_fn acquire;
  clEnqueueReleaseExternalMemObjectsKHR_fn release;
  /* the staged pipeline's queued moves: each one's event until it is waited for */
  cl_event queued[XFER_QUEUE_SLOTS];
  xfer_op queued_op[XFER_QUEUE_SLOTS];
  cl_mem *externals;            /* buffers imported from another runtime: OpenCL's only
                                ** between an acquire and a release on the queue */
  size_t nexternals, externals_cap;
  pthread_mutex_t externals_lock; /* a leaf lock */
  /* opencl_crc.c: the CRC32C kernel and its table, built on first use (runs hold the device) */
  cl_program crc_program;
  cl_kernel crc_kernel;
  cl_mem crc_table;
  int crc_refused;              /* building it failed once: sums are read back instead */
  size_t crc_groups;            /* work-groups the CRC kernel runs in: as many as run at once */
  cl_event idle_marker;         /* copy->idle's marker behind the queue's work, until it is done */
  double idle_placed;           /* xfer_now() when it was placed */
} cl_dev;

/* opencl_crc.c: copy->crc32c, and what it made, let go when the device closes */
xfer_code xfer_cl_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err);
void xfer_cl_crc_release(cl_api *api, cl_dev *cd);

/* opencl_pin.c: host buffers pinned for a device that does not share memory with the host */
void xfer_cl_pin(xfer_device *dev, const void *ptr, size_t n);
/* The pin goes when the host segment does (xfer_backend.host_unpin). */
void xfer_cl_host_unpin(xfer_device *dev, void *base, size_t size, void *pin);

/* Loads libOpenCL.so.1 and resolves XFER_CL_FUNCTIONS; XFER_E_UNAVAILABLE saying why. */
xfer_code xfer_cl_load(cl_api *api, xfer_error *err);

/* "CL_OUT_OF_RESOURCES" for -5; "CL_UNKNOWN_ERROR" for codes it does not know. */
const char *xfer_cl_error_name(cl_int code);

#endif
