/*
** backend.h -- what a backend sees of the core: the structures and its table (types.h),
** error records and switches (util.h), fault rules (faults.h), device locks and lost
** errors (device.h), memory and pins (memory.h), and the device lists it adds to
** (runtime.h). Layer 6 of docs/architecture.md: backends call nothing above it.
*/
#ifndef XFER_BACKEND_H
#define XFER_BACKEND_H

#include "faults.h"
#include "runtime.h"

extern const xfer_backend xfer_backend_host;
#ifdef XFER_WITH_OPENCL
extern const xfer_backend xfer_backend_opencl;
#endif
#ifdef XFER_WITH_VULKAN
extern const xfer_backend xfer_backend_vulkan;
#endif
#ifdef XFER_WITH_CUDA
extern const xfer_backend xfer_backend_cuda;
#endif
#ifdef XFER_WITH_UCX
extern const xfer_backend xfer_backend_remote;
#endif

#endif
