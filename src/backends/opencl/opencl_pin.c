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

/* Host buffers at least this large are worth pinning for the rest of their lives. */
#define PIN_MIN ((size_t)1 << 20)

static cl_api *api_of(const xfer_device *dev) { return dev->rt->impl; }

static int is_pinned(const cl_dev *cd, const char *base)
{
  for (size_t i = 0; i < cd->npins; i++)
    if (cd->pins[i].base == base) return 1;
  return 0;
}

void xfer_cl_pin(xfer_device *dev, const void *ptr, size_t n)
{
  cl_dev *cd = dev->impl;
  xfer_host_span span;
  if (dev->unified || n < PIN_MIN || !xfer_host_registry_find(dev->ctx, ptr, n, &span))
    return;
  pthread_mutex_lock(&cd->pins_lock);
  if (!is_pinned(cd, span.base) && cd->npins == cd->pins_cap) {
    size_t cap = cd->pins_cap ? cd->pins_cap * 2 : 16;
    cl_pin *grown = realloc(cd->pins, cap * sizeof *grown);
    if (grown) {
      cd->pins = grown;
      cd->pins_cap = cap;
    }
  }
  long long native;
  if (!is_pinned(cd, span.base) && cd->npins < cd->pins_cap &&
      !xfer_fault_hit(dev->ctx, "opencl", "register", &native)) {
    cl_int rc = CL_SUCCESS;
    cl_mem mem = api_of(dev)->clCreateBuffer(cd->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                                             span.size, span.base, &rc);
    if (rc == CL_SUCCESS) /* a failed pin is no error: the move runs from pageable memory */
      cd->pins[cd->npins++] = (cl_pin){.base = span.base, .size = span.size, .mem = mem};
  }
  pthread_mutex_unlock(&cd->pins_lock);
}

void xfer_cl_host_forget(xfer_runtime *rt, void *base, size_t size)
{
  (void)size;
  xfer_ctx *ctx = rt->ctx;
  cl_api *api = rt->impl;
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices && d < ctx->ndevices; d++) {
    cl_dev *cd = ctx->devices[d]->impl;
    if (!cd) continue;
    pthread_mutex_lock(&cd->pins_lock);
    for (size_t i = 0; i < cd->npins; i++)
      if (cd->pins[i].base == (char *)base) {
        /* no move uses it: the host buffer is being freed, which waits for moves */
        api->clReleaseMemObject(cd->pins[i].mem);
        cd->pins[i] = cd->pins[--cd->npins];
        break;
      }
    pthread_mutex_unlock(&cd->pins_lock);
  }
}

void xfer_cl_unpin_all(xfer_device *dev)
{
  cl_dev *cd = dev->impl;
  for (size_t i = 0; i < cd->npins; i++) api_of(dev)->clReleaseMemObject(cd->pins[i].mem);
  free(cd->pins);
  cd->pins = NULL;
  cd->npins = cd->pins_cap = 0;
}
