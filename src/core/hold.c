/*
** hold.c -- a move's hold: its devices locked in one global order, its tensors busy.
*/
#include "hold.h"
#include "memory.h"

static xfer_ctx *ctx_of(xfer_tensor *const *tensors, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (tensors[i]) return tensors[i]->dev->ctx;
  return NULL;
}

void xfer_tensors_busy(xfer_tensor *const *tensors, size_t n, int by)
{
  xfer_ctx *ctx = ctx_of(tensors, n);
  if (!ctx) return;
  pthread_mutex_lock(&ctx->lock);
  for (size_t i = 0; i < n; i++)
    if (tensors[i]) tensors[i]->busy += by;
  if (by < 0) pthread_cond_broadcast(&ctx->idle);
  pthread_mutex_unlock(&ctx->lock);
}

xfer_code xfer_hold_take(xfer_hold *h, xfer_device *const *devs, int ndevs,
                         xfer_tensor *const *tensors, size_t ntensors, xfer_error *err)
{
  h->ndevs = 0;
  h->tensors = NULL;
  h->ntensors = 0;
  for (int i = 0; i < ndevs; i++) {
    if (!devs[i]) continue;
    int seen = 0;
    for (int j = 0; j < h->ndevs; j++) seen |= h->devs[j] == devs[i];
    if (seen) continue;
    if (h->ndevs == XFER_HOLD_DEVICES) {
      h->ndevs = 0;
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_HOLD, XFER_S_HOLD_TOO_MANY_DEVICES,
                         XFER_HOLD_DEVICES);
    }
    int at = h->ndevs++;
    while (at > 0 && (uintptr_t)h->devs[at - 1] > (uintptr_t)devs[i]) {
      h->devs[at] = h->devs[at - 1];
      at--;
    }
    h->devs[at] = devs[i];
  }
  for (int i = 0; i < h->ndevs; i++) xfer_device_lock(h->devs[i]);
  h->tensors = tensors;
  h->ntensors = ntensors;
  xfer_tensors_busy(tensors, ntensors, 1);
  return XFER_E_OK;
}

void xfer_hold_drop(xfer_hold *h)
{
  xfer_tensors_busy(h->tensors, h->ntensors, -1);
  xfer_ctx *ctx = h->ndevs ? h->devs[0]->ctx : NULL;
  for (int i = h->ndevs; i-- > 0;) xfer_device_unlock(h->devs[i]);
  h->ndevs = 0;
  if (ctx) xfer_mem_settle_stalled(ctx); /* what stalled devices hold, let go once they are done */
  h->ntensors = 0;
}
