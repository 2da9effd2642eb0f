/*
** device.h -- a device's own state (device.c): its locks, its references, and the error of a
** lost one. Layer 3 of docs/architecture.md: it calls only util.h.
*/
#ifndef XFER_DEVICE_H
#define XFER_DEVICE_H

#include "util.h"

/* One move at a time uses a device's driver state (the host needs no lock). A move takes
** its devices through a hold (hold.h), which locks them in one order. */
void xfer_device_lock(xfer_device *dev);
void xfer_device_unlock(xfer_device *dev);
/* The lock if it is free now (1), else 0: for settling a stalled device in passing. */
int xfer_device_trylock(xfer_device *dev);
/* Device locks the calling thread holds. */
int xfer_device_locks_held(void);
/* Whether a and b are one physical GPU of this machine (equal device UUIDs; a device that
** shares nothing here -- another machine's, even this very GPU served back over the network --
** is on no GPU of ours). The one test of it: interop, backing and the routes ask it. */
int xfer_same_gpu(const xfer_device *a, const xfer_device *b);
/* A lost device's error, for op: its code and "device X was lost[: why]". */
xfer_code xfer_device_lost_error(const xfer_device *dev, xfer_op op, xfer_error *err);
/* A backend's wait (`fn`, `waited` seconds) ended at the move's deadline before the device did
** its work: the device marked stalled (its work may still use memory: memory.c holds what is
** freed) and XFER_E_TIMEOUT in op `op`, retryable (a device late once is not a broken path).
** `faulted`: the stall fault made it -- the device is then not done (copy->idle is not asked)
** until the fault rules change, as a device whose work truly never ends. */
xfer_code xfer_device_stalled(xfer_device *dev, xfer_op op, const char *fn, double waited,
                              int faulted, xfer_error *err);

#endif
