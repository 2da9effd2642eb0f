/*
** cuda_shared.c -- memory CUDA allocates for another runtime on its GPU to import: a
** cuMemCreate allocation exported as a POSIX fd, mapped where every CUDA device that can
** reach this one may use it. NVIDIA's OpenCL imports such an fd as an opaque fd (seen on
** an H200: the import took 0.16 ms, and host moves through it ran at 54.9 GB/s like native
** buffers), so an OpenCL tensor that lives here is one CUDA copy away from any CUDA tensor
** of its GPU (1.9 TB/s) and one peer copy from the other GPU's (387 GB/s over NVLink).
*/
#include <string.h>
#include <unistd.h>

#include "cuda_host.h"

static CUmemAllocationProp shared_prop(const cu_dev *cd)
{
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)cd->device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

/* At open: whether the device can make such memory, and in what granularity. */
void xfer_cu_shared_probe(xfer_device *dev)
{
  cu_api *api = cu_api_of(dev);
  cu_dev *cd = cu_of(dev);
  int vmm = 0, fd = 0;
  api->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                            cd->device);
  api->cuDeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            cd->device);
  CUmemAllocationProp prop = shared_prop(cd);
  size_t granularity = 0;
  if (vmm && fd &&
      api->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
          CUDA_SUCCESS)
    cd->share_granularity = granularity;
  dev->can_share = cd->share_granularity > 0 && !dev->unified;
}

static size_t shared_size(const cu_dev *cd, size_t n)
{
  size_t g = cd->share_granularity;
  return (n + g - 1) / g * g;
}

/* Every CUDA device that may use the memory: its own, and those with peer access to it. */
static xfer_code grant_access(xfer_device *dev, CUdeviceptr ptr, size_t size, xfer_error *err)
{
  cu_api *api = cu_api_of(dev);
  xfer_runtime *rt = dev->rt;
  CUmemAccessDesc access[16];
  unsigned count = 0;
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices && count < 16; d++) {
    cu_dev *other = dev->ctx->devices[d]->impl;
    int can = other == cu_of(dev);
    if (!can && api->cuDeviceCanAccessPeer(&can, other->device, cu_of(dev)->device) != CUDA_SUCCESS)
      can = 0;
    if (!can) continue;
    memset(&access[count], 0, sizeof access[count]);
    access[count].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[count].location.id = (int)other->device;
    access[count].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    count++;
  }
  return CU(dev, XFER_OP_ALLOC, err, cuMemSetAccess, ptr, size, access, count);
}

xfer_code xfer_cu_alloc_shared(xfer_device *dev, size_t n, void **buf, int *fd,
                               uint64_t *memory_size, xfer_error *err)
{
  cu_api *api = cu_api_of(dev);
  cu_dev *cd = cu_of(dev);
  *buf = NULL;
  *fd = -1;
  if (!cd->share_granularity)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_ALLOC,
                        "%s cannot make memory other runtimes import (no cuMemCreate with POSIX fds)",
                        dev->name);
  size_t size = shared_size(cd, n);
  CUmemAllocationProp prop = shared_prop(cd);
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr ptr = 0;
  int reserved = 0, mapped = 0;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_ALLOC, err);
  if (!rc) rc = CU(dev, XFER_OP_ALLOC, err, cuMemCreate, &handle, size, &prop, 0);
  if (!rc) reserved = !(rc = CU(dev, XFER_OP_ALLOC, err, cuMemAddressReserve, &ptr, size, 0, 0, 0));
  if (!rc) mapped = !(rc = CU(dev, XFER_OP_ALLOC, err, cuMemMap, ptr, size, 0, handle, 0));
  if (!rc) rc = grant_access(dev, ptr, size, err);
  if (!rc)
    rc = CU(dev, XFER_OP_EXPORT, err, cuMemExportToShareableHandle, fd, handle,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (rc) { /* undone in reverse; the handle's last reference goes with the mapping */
    if (mapped) api->cuMemUnmap(ptr, size);
    if (reserved) api->cuMemAddressFree(ptr, size);
    if (handle) api->cuMemRelease(handle);
    *fd = -1;
    return rc;
  }
  api->cuMemRelease(handle); /* the mapping keeps the memory alive until it is unmapped */
  *buf = (void *)(uintptr_t)ptr;
  *memory_size = size;
  xfer_objects(dev, 1);
  return XFER_E_OK;
}

void xfer_cu_free_shared(xfer_device *dev, void *buf, size_t n)
{
  cu_api *api = cu_api_of(dev);
  cu_dev *cd = cu_of(dev);
  if (!buf) return;
  xfer_objects(dev, -1);
  if (api->cuCtxSetCurrent(cd->context) != CUDA_SUCCESS) return;
  size_t size = shared_size(cd, n);
  CUdeviceptr ptr = xfer_cu_ptr(buf);
  api->cuMemUnmap(ptr, size); /* the last reference to the memory: it is freed */
  api->cuMemAddressFree(ptr, size);
}
