/*
** opencl_pin.c -- the host arena for OpenCL devices that do not share memory with the
** host. OpenCL has no call that pins host memory, but a CL_MEM_USE_HOST_PTR buffer over it
** does so on NVIDIA's driver: moves from and to those pages then run at DMA speed (measured
** on an H200: 7.5 GB/s pageable, 55 GB/s once wrapped; the wrapper, never used on the
** device, takes no device memory). Host buffers xferlua owns are wrapped once, on their
** first large move, and unwrapped before they are freed. Where a driver does not pin so,
** nothing is lost: the move runs as it would have.
**
** Devices that share memory with the host (PoCL) are left alone: their tensors are host
** memory already, mapped in place, so a move is one memcpy whatever the host pages are.
*/
#include <stdlib.h>

#include "opencl_api.h"

/* Host segments at least this large are worth pinning for the rest of their lives. */
#define PIN_MIN ((size_t)1 << 20)

static cl_api *api_of(const xfer_device *dev) { return dev->rt->impl; }

void xfer_cl_pin(xfer_device *dev, const void *ptr, size_t n)
{
  cl_dev *cd = dev->impl;
  xfer_host_span span;
  long long native;
  /* the segment's size, not the move's, says whether it is worth pinning: a batch's pieces are
  ** small moves out of one large host buffer (16 KiB blocks of a 1 GiB one stayed pageable) */
  if (dev->unified || !xfer_host_span_of(dev->ctx, ptr, n, &span) || span.size < PIN_MIN ||
      xfer_host_pin(dev->ctx, span.base, dev) ||
      xfer_fault_hit(dev->ctx, "opencl", XFER_OP_REGISTER, &native))
    return;
  cl_int rc = CL_SUCCESS;
  cl_mem mem = api_of(dev)->clCreateBuffer(cd->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                                           span.size, span.base, &rc);
  /* a failed pin is no error: the move runs from pageable memory; one another move made a
  ** moment ago, or no room to keep it, is dropped */
  if (rc != CL_SUCCESS) return;
  if (xfer_host_pin_keep(dev->ctx, span.base, dev, mem))
    xfer_objects(dev, 1);
  else
    api_of(dev)->clReleaseMemObject(mem);
}

void xfer_cl_host_unpin(xfer_device *dev, void *base, size_t size, void *pin)
{
  (void)base;
  (void)size;
  xfer_objects(dev, -1);
  api_of(dev)->clReleaseMemObject((cl_mem)pin);
}
