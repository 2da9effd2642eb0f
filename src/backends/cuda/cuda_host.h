/*
** cuda_host.h -- what cuda.c and cuda_host.c share: the checked wrapper and host memory
** moves (pinned registrations, pinned staging).
*/
#ifndef XFER_CUDA_HOST_H
#define XFER_CUDA_HOST_H

#include "cuda_api.h"

static inline cu_api *cu_api_of(const xfer_device *dev) { return dev->rt->impl; }
static inline cu_dev *cu_of(const xfer_device *dev) { return dev->impl; }
static inline CUdeviceptr xfer_cu_ptr(void *buf) { return (CUdeviceptr)(uintptr_t)buf; }

/* The checked wrapper: a failure (or an injected one) becomes an error record. */
xfer_code xfer_cu_fail(xfer_device *dev, xfer_op op, const char *fn, CUresult r, int injected,
                       xfer_error *err);
xfer_code xfer_cu_check(xfer_device *dev, xfer_op op, const char *fn, CUresult r,
                        xfer_error *err);
int xfer_cu_injected(xfer_device *dev, xfer_op op);
/* The code the last injected fault of this thread reports. */
CUresult xfer_cu_injected_code(void);

/* CU(dev, op, err, cuFn, args...): the call's xfer_code, XFER_E_OK on success. */
#define CU(dev, op, err, fn, ...)                                                         \
  (xfer_cu_injected((dev), (op))                                                          \
       ? xfer_cu_fail((dev), (op), #fn, xfer_cu_injected_code(), 1, (err))                 \
       : xfer_cu_check((dev), (op), #fn, cu_api_of(dev)->fn(__VA_ARGS__), (err)))

/* Waits for the device's stream (event NULL) or an event: the driver's blocking wait when the
** move has no deadline, else polled until the deadline -- XFER_E_TIMEOUT then, the device marked
** stalled (its work may still write: the caller must not reuse that memory, and the core
** holds the move's target until xfer_cu_idle). A stall fault never sees it done. */
xfer_code xfer_cu_wait(xfer_device *dev, xfer_op op, CUstream stream, CUevent event, xfer_error *err);
/* copy->idle: whether the stream's work is done, asked without waiting. */
int xfer_cu_idle(xfer_device *dev);

/* Device memory kept with the device and grown to at least `bytes` (twice what is asked, 64 KiB
** at least): a kernel's descriptors and sums. */
xfer_code xfer_cu_room(xfer_device *dev, CUdeviceptr *at, size_t *room, size_t bytes, xfer_error *err);

/* Makes the device's primary context current. */
xfer_code xfer_cu_enter(xfer_device *dev, xfer_op op, xfer_error *err);

/* cuda_host.c: host memory <-> device memory */
xfer_code xfer_cu_write(xfer_device *dev, void *buf, size_t offset, const void *src, size_t n,
                        xfer_error *err);
xfer_code xfer_cu_read(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                       xfer_error *err);
/* a view's rows: rows x run bytes, pitch apart on the device, packed on the host
** (xfer_copy_ops.host_rows) */
xfer_code xfer_cu_rows(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                       size_t rows, void *host, int to_device, xfer_error *err);
/* queued moves for the staged pipeline (xfer_copy_ops.start, finish) */
xfer_code xfer_cu_start(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                        int to_device, int slot, int *queued, xfer_error *err);
xfer_code xfer_cu_finish(xfer_device *dev, int slot, xfer_error *err);
void xfer_cu_host_unpin(xfer_device *dev, void *base, size_t size, void *pin);
/* nonzero when [ptr, ptr+n) lies in a host segment registered now (registering it if need
** be) or in memory the driver says someone else page-locked: 2 when the registration is
** ours, kept with the segment; *span (xfer_cu_pinned_span) the segment or allocation */
int xfer_cu_pinned(xfer_device *dev, const void *ptr, size_t n);
int xfer_cu_pinned_span(xfer_device *dev, const void *ptr, size_t n, xfer_host_span *span);
/* cuda_many.c: a batch of copies as one kernel (xfer_copy_ops.many, many_again, many_forget),
** and what it keeps */
xfer_code xfer_cu_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err);
xfer_code xfer_cu_many_again(xfer_device *dev, const xfer_piece *pieces, size_t n, uint64_t keep,
                             xfer_error *err);
void xfer_cu_many_forget(xfer_device *dev, uint64_t keep);
void xfer_cu_many_release(cu_api *api, cu_dev *cd);
/* cuda_crc.c: the CRC32C of ranges of device memory by a kernel (xfer_copy_ops.crc32c), and
** what it keeps */
xfer_code xfer_cu_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err);
xfer_code xfer_cu_crc32c_begin(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, int *ticket,
                               xfer_error *err);
xfer_code xfer_cu_crc32c_end(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, int ticket,
                             uint32_t *crc, int wanted, xfer_error *err);
void xfer_cu_crc_release(cu_api *api, cu_dev *cd);
/* cuda_shared.c: memory other runtimes of the GPU import (xfer_backend.alloc_shared) */
void xfer_cu_shared_probe(xfer_device *dev);
xfer_code xfer_cu_alloc_shared(xfer_device *dev, size_t n, void **buf, int *fd,
                               uint64_t *memory_size, xfer_error *err);
void xfer_cu_free_shared(xfer_device *dev, void *buf, size_t n);
void xfer_cu_staging_release(cu_api *api, cu_dev *cd);

#endif
