/*
** cuda_api.h -- the CUDA driver entry points xferlua uses, resolved at run time through
** cuGetProcAddress with an explicit CUDA version (so each name gets its _v2 variant, as
** cuda.h's macros would), and the backend's runtime and per-device state.
*/
#ifndef XFER_CUDA_API_H
#define XFER_CUDA_API_H

#include <cuda.h>

#include "../../core/backend.h"

/* The API version the entry points are asked for: 12.0 signatures, which cuda.h's
** names (cuMemAlloc -> cuMemAlloc_v2, ...) match. */
#define XFER_CUDA_API_VERSION 12000

#define XFER_CU_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)    \
  X(cuDeviceGetUuid) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId)    \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)              \
  X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree)                                                \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemcpyPeerAsync)      \
  X(cuMemcpy2DAsync)                                                                        \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate)             \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuMemHostRegister)              \
  X(cuMemHostUnregister) X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess)                  \
  X(cuGetErrorName) X(cuGetErrorString) X(cuImportExternalMemory)                          \
  X(cuExternalMemoryGetMappedBuffer) X(cuDestroyExternalMemory) X(cuMemCreate) X(cuMemRelease) \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)    \
  X(cuMemGetAllocationGranularity) X(cuMemExportToShareableHandle) X(cuModuleLoadData)       \
  X(cuModuleGetFunction) X(cuModuleUnload) X(cuLaunchKernel) X(cuStreamQuery) X(cuEventQuery) \
  X(cuPointerGetAttributes) X(cuMemHostAlloc) X(cuMemHostGetDevicePointer) X(cuMemFreeHost)

typedef struct cu_api {
  void *lib;
#define XFER_CU_POINTER(name) __typeof__(name) *name;
  XFER_CU_FUNCTIONS(XFER_CU_POINTER)
#undef XFER_CU_POINTER
} cu_api;

/* Pinned staging: chunks of the host pool the CPU fills (or empties) while the GPU copies
** another; an event per chunk says when it is free again. */
#define XFER_CU_STAGING_SLOTS 2
#define XFER_CU_STAGING_CHUNK (4u << 20)
/* Descriptor tables of prepared batches kept on a device at once. */
#define XFER_CU_KEPT 8

/* Slots for the CRC kernel's descriptors and sums (cuda_crc.c): one a call, and one more for
** each sum whose wait ended at a deadline while its kernel may still run. */
#define XFER_CU_SUM_SLOTS 8

/* The CUDA devices whose peer access a device's context has (a bit per CUdevice ordinal). */
#define XFER_CU_PEER_BITS 64

typedef struct cu_dev {
  CUdevice device;
  CUcontext context;            /* the primary context, retained */
  int ordinal;                  /* its number among the process's CUDA devices */
  uint64_t peer_access;         /* bit j: cuCtxEnablePeerAccess to device j succeeded */
  CUstream stream;
  CUstream sum_stream;          /* the CRC kernel's (cuda_crc.c): beside the copies on `stream` */
  CUevent staged[XFER_CU_STAGING_SLOTS];
  /* the staged pipeline's queued moves: an event recorded behind each, made on first use */
  CUevent queued[XFER_QUEUE_SLOTS];
  xfer_op queued_op[XFER_QUEUE_SLOTS];
  int pending[XFER_QUEUE_SLOTS];
  size_t share_granularity;     /* cuMemCreate's, where shared memory works (else 0) */
  /* batches (cuda_many.c): the copy kernel, loaded on first use, and its descriptors' room */
  CUmodule many_module;
  CUfunction many_fn;
  CUdeviceptr many_desc;
  size_t many_room;
  /* ... and the descriptor tables of prepared batches, kept on the device between runs (the
  ** least recently run goes when all are taken); kept_lock guards the list, not the runs */
  struct cu_kept {
    uint64_t keep;              /* the pieces' name (xfer_copy_ops.many_again), 0: free */
    CUdeviceptr table;
    size_t count;               /* descriptors in it */
    uint64_t pins;              /* xfer_mem_mappings_undone() when it was made */
    int made;                   /* the table holds the pieces' descriptors */
    uint64_t used;              /* when last run (kept_clock) */
  } kept[XFER_CU_KEPT];
  uint64_t kept_clock;
  int kept_lock;
  /* sums (cuda_crc.c): the kernel and its table, loaded on first use, and room for the
  ** descriptors and sums of a call */
  CUmodule crc_module;
  CUfunction crc_fn;
  unsigned crc_grid;          /* blocks the CRC kernel runs in: as many as run at once */
  CUdeviceptr crc_table;
  /* ... and a call's descriptors and sums in a slot of pinned host memory the kernel reads and
  ** writes in place, taken again once the event behind its kernel is done -- never while a
  ** kernel whose wait ended at a deadline may still use it */
  struct cu_sum_slot {
    void *host;                 /* cuMemHostAlloc'd, mapped: descriptors, then sums */
    CUdeviceptr mapped;         /* its address on the device */
    size_t bytes;
    size_t blocks;              /* its kernel's: the sums lie past their descriptors */
    CUevent done;               /* recorded behind the slot's kernel (made with the kernel) */
    int taken;                  /* its call not yet over */
  } sum_slots[XFER_CU_SUM_SLOTS];
} cu_dev;

/* cuda_load.c */
xfer_code xfer_cu_load(cu_api *api, xfer_error *err);
/* "CUDA_ERROR_ILLEGAL_ADDRESS" and its sentence, from the driver when it can say */
void xfer_cu_describe(const cu_api *api, CUresult r, const char **name, const char **text);

#endif
