/*
** hold.h -- what a move holds while it runs (hold.c): the devices it runs on, locked, and the
** tensors it reads and writes, busy (freeing one waits until the move lets go). The one way
** every move, batch group and job takes them. Layer 3 of docs/architecture.md, beside
** device.c: it calls only device.c and util.h.
*/
#ifndef XFER_HOLD_H
#define XFER_HOLD_H

#include "device.h"

/* The most distinct devices one hold takes: a move's two ends, the interop pair and a batch
** group's runners are at most 6. */
#define XFER_HOLD_DEVICES 8

typedef struct xfer_hold {
  xfer_device *devs[XFER_HOLD_DEVICES]; /* distinct, sorted by address: one order for all */
  int ndevs;
  xfer_tensor *const *tensors;          /* the caller's array, until the hold is dropped */
  size_t ntensors;
} xfer_hold;

/* Locks `devs` (NULLs and repeats skipped) in the one global order, by address, so that two
** moves sharing devices never each hold one and wait for the other, then marks `tensors`
** (NULLs skipped) busy. More than XFER_HOLD_DEVICES distinct devices: XFER_E_INVALID, nothing
** taken (never a silent cut). */
xfer_code xfer_hold_take(xfer_hold *h, xfer_device *const *devs, int ndevs,
                         xfer_tensor *const *tensors, size_t ntensors, xfer_error *err);
void xfer_hold_drop(xfer_hold *h);
/* Tensors busy (by = 1) or not (by = -1) without a device lock: a job's source from its start
** call, a batch's tensors from its claim. A drop wakes whoever waits to free one. */
void xfer_tensors_busy(xfer_tensor *const *tensors, size_t n, int by);

#endif
