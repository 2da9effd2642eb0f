/*
** device.h -- a device's own state (device.c): its locks, its references, and the error of a
** lost one. Layer 3 of docs/architecture.md: it calls only util.h.
*/
#ifndef XFER_DEVICE_H
#define XFER_DEVICE_H

#include "util.h"

/* One move at a time uses a device's driver state (the host needs no lock). */
void xfer_device_lock(xfer_device *dev);
void xfer_device_unlock(xfer_device *dev);
/* Both, always in one order (by address), so two moves between the same pair in opposite
** directions cannot each hold one lock and wait for the other. */
void xfer_device_lock_pair(xfer_device *a, xfer_device *b);
void xfer_device_unlock_pair(xfer_device *a, xfer_device *b);
/* A lost device's error, for op: its code and "device X was lost[: why]". */
xfer_code xfer_device_lost_error(const xfer_device *dev, xfer_op op, xfer_error *err);
/* Locks up to four devices (NULLs and repeats skipped) in the one global order, by address,
** so that two moves sharing devices never each hold one and wait for the other: the devices
** locked, sorted, in held (how many returned). */
int xfer_device_lock_all(xfer_device *const *devs, int n, xfer_device *held[4]);
void xfer_device_unlock_all(xfer_device *const *held, int n);

#endif
