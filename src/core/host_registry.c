/*
** host_registry.c -- the live host buffers, sorted by address, so that a runtime can
** tell memory xferlua owns (and may pin or import once, for as long as it lives) from
** memory it must not keep hold of, and is told before such a buffer is freed.
*/
#include <stdlib.h>
#include <string.h>

#include "backend_call.h"

/* Index of the first span whose base is above `ptr`. */
static size_t upper_bound(const xfer_ctx *ctx, const char *ptr)
{
  size_t lo = 0, hi = ctx->nhost_spans;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ctx->host_spans[mid].base <= ptr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void xfer_host_registry_add(xfer_ctx *ctx, void *base, size_t size)
{
  pthread_mutex_lock(&ctx->lock);
  if (ctx->nhost_spans == ctx->host_spans_cap) {
    size_t cap = ctx->host_spans_cap ? ctx->host_spans_cap * 2 : 64;
    xfer_host_span *grown = realloc(ctx->host_spans, cap * sizeof *grown);
    if (!grown) { /* unknown to the registry: runtimes just won't pin it */
      pthread_mutex_unlock(&ctx->lock);
      return;
    }
    ctx->host_spans = grown;
    ctx->host_spans_cap = cap;
  }
  size_t at = upper_bound(ctx, base);
  memmove(&ctx->host_spans[at + 1], &ctx->host_spans[at],
          (ctx->nhost_spans - at) * sizeof ctx->host_spans[0]);
  ctx->host_spans[at].base = base;
  ctx->host_spans[at].size = size;
  ctx->nhost_spans++;
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_host_registry_remove(xfer_ctx *ctx, void *base, size_t size)
{
  /* out of the registry first, so no move starts using it; then the runtimes let go, each
  ** under its devices' locks (never under the registry's: a move holds a device lock and
  ** asks the registry) */
  pthread_mutex_lock(&ctx->lock);
  size_t at = upper_bound(ctx, base);
  if (at > 0 && ctx->host_spans[at - 1].base == (char *)base) {
    memmove(&ctx->host_spans[at - 1], &ctx->host_spans[at],
            (ctx->nhost_spans - at) * sizeof ctx->host_spans[0]);
    ctx->nhost_spans--;
  }
  pthread_mutex_unlock(&ctx->lock);
  for (size_t r = 0; r < ctx->nruntimes; r++) xfer_be_host_forget(&ctx->runtimes[r], base, size);
}

int xfer_host_registry_find(xfer_ctx *ctx, const void *ptr, size_t n, xfer_host_span *out)
{
  pthread_mutex_lock(&ctx->lock);
  size_t at = upper_bound(ctx, ptr);
  int found = 0;
  if (at > 0) {
    const xfer_host_span *span = &ctx->host_spans[at - 1];
    const char *p = ptr;
    found = p + n <= span->base + span->size;
    if (found) *out = *span;
  }
  pthread_mutex_unlock(&ctx->lock);
  return found;
}

void xfer_host_registry_clear(xfer_ctx *ctx)
{
  free(ctx->host_spans);
  ctx->host_spans = NULL;
  ctx->nhost_spans = ctx->host_spans_cap = 0;
}
