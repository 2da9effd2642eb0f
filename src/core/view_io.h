/*
** view_io.h -- a view's elements moved in and out (view_io.c): packed into host memory or
** scattered from it, on its own device, or as one batch of the runtime that reaches both ends.
** Layer 8 of docs/architecture.md, its first file: it calls the context, memory and the
** backends.
*/
#ifndef XFER_VIEW_IO_H
#define XFER_VIEW_IO_H

#include "backend_call.h"
#include "memory.h"

/* The block a tensor's memory lies in: its own, or its base's for a view. */
static inline const xfer_block *xfer_tensor_block(const xfer_tensor *t)
{
  return t->base ? t->base->block : t->block;
}

/* -- view_io.c ------------------------------------------------------------------------- */

/* A view's elements packed into host memory or scattered from it (device locked, tensor
** checked). */
xfer_code xfer_view_move(xfer_tensor *t, char *packed, int to_packed, xfer_error *err);
/* Whether a view can be packed or scattered on its own device (copy_rows, a layout of rows),
** and doing it between the view and `packed`, a contiguous tensor on the same device
** (device locked, both checked). */
int xfer_view_on_device(const xfer_tensor *t);
xfer_code xfer_view_device_move(xfer_tensor *t, xfer_tensor *packed, int to_packed,
                                xfer_error *err);
/* A view's runs moved to or from `packed` (contiguous, as many elements) as one batch of the
** runtime that runs it (the device end's, or the view's own device; copy->many): no pack on
** the CPU. XFER_E_UNSUPPORTED, nothing said, when that runtime takes no such batch (none,
** runs too short to be worth it, host memory it cannot reach). Devices locked, both checked. */
xfer_code xfer_view_many(xfer_tensor *view, xfer_tensor *packed, int to_packed, xfer_error *err);
/* Whether a view's runs are long enough for a batch of them (512 bytes; shorter, the pack on
** the CPU is faster) and it has any: the plan asks (plan.c) before it plans one. */
int xfer_view_many_worth(const xfer_tensor *view);
/* The same run by `runner`, which reaches the tensor whose memory is block `imported` through
** `view`, that block's segment as the runner imported it (transfer.c: CUDA over Vulkan's
** memory). */
typedef struct xfer_many_via {
  xfer_device *runner;
  const xfer_block *imported;
  void *view;
} xfer_many_via;
xfer_code xfer_view_many_via(xfer_tensor *view, xfer_tensor *packed, int to_packed,
                             const xfer_many_via *via, xfer_error *err);
/* The device that runs a batch between a and b at once: a device whose runtime takes
** batches, at the device end (host <-> device), the one device, or the device whose memory
** both live in -- itself or through the memory a device lives in (dev->backing); NULL: none. */
xfer_device *xfer_many_runner(xfer_device *a, xfer_device *b);
/* The same among the devices themselves, not the memory they live in (for memory a backing
** device does not hold: a segment larger than its driver imports). */
xfer_device *xfer_many_runner_own(xfer_device *a, xfer_device *b);
/* Two GPUs: the device that runs a batch between a and b at once over both memories -- a's
** (or the device a's memory lives in) where its batches reach b's GPU in place (CUDA with peer
** access on: its kernel writes the other's memory over NVLink); NULL: none. */
xfer_device *xfer_many_across(xfer_device *a, xfer_device *b);
/* Byte `at` of a tensor as `runner` addresses it in a batch: host memory in place, its own
** buffer, the backing device's view of it, or another GPU's memory the runner reaches in
** place (xfer_be_many_reaches). 0: runner cannot reach it. */
int xfer_piece_end_of(const xfer_tensor *t, size_t at, const xfer_device *runner,
                      xfer_piece_end *out);

#endif
