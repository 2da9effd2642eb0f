/*
** runtime.h -- the runtimes' device lists (runtime.c): a backend's open adds its devices, the
** remote runtime replaces a lost peer's. Layer 5 of docs/architecture.md, beside memory.c
** (a device comes with its caching allocator): it calls util.h, device.h and memory.h.
*/
#ifndef XFER_RUNTIME_H
#define XFER_RUNTIME_H

#include "memory.h"

xfer_device *xfer_runtime_add_device(xfer_runtime *rt, xfer_error *err);
/* A new device in place `slot` of the context's list, whose device the runtime retired (it
** keeps that one until it closes: a reader may still hold it). */
xfer_device *xfer_runtime_replace_device(xfer_runtime *rt, size_t slot, xfer_error *err);
void xfer_device_destroy(xfer_device *dev);

#endif
