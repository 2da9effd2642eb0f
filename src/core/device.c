/*
** device.c -- a device's own state: its references, its lock (one move at a time uses its
** driver state), whether it is lost or closed, and what it says of itself. The context lists
** devices (runtime.c); the allocator gives them memory (memory.c).
*/
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend_call.h"
#include "device.h"
#include "faults.h"

void xfer_device_retain(xfer_device *dev) { __atomic_add_fetch(&dev->refs, 1, __ATOMIC_ACQ_REL); }

void xfer_device_release(xfer_device *dev) { __atomic_sub_fetch(&dev->refs, 1, __ATOMIC_ACQ_REL); }

xfer_code xfer_device_lost_error(const xfer_device *dev, xfer_op op, xfer_error *err)
{
  xfer_code code = dev->lost_code ? dev->lost_code : XFER_E_DEVICE_LOST;
  return xfer_err_op(err, code, op, XFER_S_DEVICE_LOST, dev->name, dev->lost_note[0] ? ": " : "",
                     dev->lost_note);
}

/* Moves may run on worker threads (to_async, the staged reader): a device's driver state
** is used by one move at a time. Host memory needs no lock: its backend is stateless. */
xfer_code xfer_device_stalled(xfer_device *dev, xfer_op op, const char *fn, double waited,
                              int faulted, xfer_error *err)
{
  if (faulted) __atomic_store_n(&dev->stall_fault_epoch, xfer_fault_epoch(dev->ctx) + 1, __ATOMIC_RELEASE);
  double now = xfer_now();
  __atomic_store(&dev->stalled_at, &now, __ATOMIC_RELEASE);
  __atomic_store_n(&dev->stalled, 1, __ATOMIC_RELEASE);
  xfer_code rc = xfer_err_op(err, XFER_E_TIMEOUT, op, XFER_S_WAIT_DEADLINE, dev->name, fn, waited);
  if (err) err->retryable = 1;
  return rc;
}

/* Device locks this thread holds: none, and it may settle stalled devices (memory.c) without
** stepping into a move of its own that is under way. */
static _Thread_local int locks_held;

void xfer_device_lock(xfer_device *dev)
{
  if (xfer_is_host(dev)) return;
  pthread_mutex_lock(&dev->lock);
  locks_held++;
}

void xfer_device_unlock(xfer_device *dev)
{
  if (xfer_is_host(dev)) return;
  locks_held--;
  pthread_mutex_unlock(&dev->lock);
}

int xfer_device_locks_held(void) { return locks_held; }

int xfer_device_trylock(xfer_device *dev)
{
  if (xfer_is_host(dev)) return 1;
  if (pthread_mutex_trylock(&dev->lock)) return 0;
  locks_held++;
  return 1;
}

size_t xfer_device_count(const xfer_ctx *ctx) { return ctx->ndevices; }

xfer_device *xfer_device_at(xfer_ctx *ctx, size_t index)
{
  return index < ctx->ndevices ? ctx->devices[index] : NULL;
}

int xfer_same_gpu(const xfer_device *a, const xfer_device *b)
{
  return !xfer_be_shares_nothing(a) && !xfer_be_shares_nothing(b) && a->has_uuid && b->has_uuid &&
         !memcmp(a->uuid, b->uuid, sizeof a->uuid);
}

const char *xfer_device_name(const xfer_device *dev) { return dev->name; }

int xfer_device_is_host(const xfer_device *dev) { return xfer_is_host(dev); }

xfer_code xfer_device_get_info(xfer_device *dev, xfer_device_info *out, xfer_error *err)
{
  memset(out, 0, sizeof *out);
  out->name = dev->name;
  out->runtime = dev->rt->name;
  out->index = dev->index;
  out->label = dev->label;
  out->platform = dev->platform;
  out->vendor = dev->vendor;
  out->total_memory = dev->total_memory;
  out->max_alloc = dev->max_alloc ? dev->max_alloc : dev->total_memory;
  out->max_import = dev->max_import;
  out->unified = dev->unified;
  out->has_uuid = dev->has_uuid;
  memcpy(out->uuid, dev->uuid, sizeof out->uuid);
  out->pci_bus_id = dev->pci_bus_id;
  out->cc_major = dev->cc_major;
  out->cc_minor = dev->cc_minor;
  out->has_driver_uuid = dev->has_driver_uuid;
  memcpy(out->driver_uuid, dev->driver_uuid, sizeof out->driver_uuid);
  out->backing = dev->backing ? dev->backing->name : "";
  out->closed = xfer_device_is_closed(dev);
  out->external_kind = xfer_be_external_kind(dev);
  out->dlpack_device_type = xfer_be_dlpack_type(dev);
  out->remote = xfer_be_shares_nothing(dev);
  (void)err;
  return XFER_E_OK;
}

xfer_ctx *xfer_device_ctx(const xfer_device *dev) { return dev->ctx; }

int xfer_device_is_lost(const xfer_device *dev) { return __atomic_load_n(&dev->lost, __ATOMIC_RELAXED); }

void xfer_uuid_text(const uint8_t u[16], char *out, size_t cap)
{
  snprintf(out, cap, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
           u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
           u[15]);
}

int xfer_device_listed(const xfer_device *dev)
{
  return !(xfer_be_shares_nothing(dev) && xfer_device_is_lost(dev));
}

int xfer_device_is_closed(const xfer_device *dev)
{
  return __atomic_load_n(&dev->closed, __ATOMIC_ACQUIRE);
}

