/*
** staged.c -- the staged path: a move between two devices that cannot share memory runs
** through a ring of host chunks, a helper thread reading chunk k+1 off the source while
** the calling thread writes chunk k to the target. The chunks are made once (host buffers
** xferlua owns, so runtimes pin or import them once) and kept until the settings change
** or the context closes.
*/
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 16

typedef struct xfer_staging {
  int depth;
  size_t chunk;
  void *slot[MAX_DEPTH];
} xfer_staging;

static void staging_free(xfer_ctx *ctx);

void xfer_staging_release(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->staging_lock);
  staging_free(ctx);
  pthread_mutex_unlock(&ctx->staging_lock);
}

static void staging_free(xfer_ctx *ctx)
{
  xfer_staging *st = ctx->staging;
  if (!st) return;
  xfer_device *host = xfer_host_of(ctx);
  for (int s = 0; s < st->depth; s++)
    if (st->slot[s]) host->rt->backend->free(host, st->slot[s], st->chunk);
  free(st);
  ctx->staging = NULL;
}

/* The pool is the host runtime's memory but no tensor's: it is reported as cached. */
static xfer_code staging_ready(xfer_ctx *ctx, xfer_error *err)
{
  if (ctx->staging) return XFER_E_OK;
  xfer_staging *st = calloc(1, sizeof *st);
  if (!st) return xfer_err_set(err, XFER_E_ALLOC, "alloc", "out of host memory");
  st->depth = ctx->config.staging_depth;
  st->chunk = ctx->config.staging_chunk;
  ctx->staging = st;
  xfer_device *host = xfer_host_of(ctx);
  for (int s = 0; s < st->depth; s++) {
    xfer_code rc = host->rt->backend->alloc(host, st->chunk, &st->slot[s], err);
    if (rc) {
      staging_free(ctx);
      return rc;
    }
  }
  return XFER_E_OK;
}

uint64_t xfer_staging_bytes(const xfer_ctx *ctx)
{
  return ctx->staging ? (uint64_t)ctx->staging->chunk * (uint64_t)ctx->staging->depth : 0;
}

/* -- The pipeline -------------------------------------------------------------------------- */

typedef struct pipeline {
  pthread_mutex_t lock;
  pthread_cond_t moved;
  xfer_tensor *src;
  const xfer_staging *pool;
  size_t chunks;
  size_t read;                  /* chunks read into the ring so far */
  size_t written;               /* chunks written out of it so far */
  int stop;                     /* a side failed: the other stops too */
  xfer_code read_rc;
  xfer_error read_err;
} pipeline;

static size_t chunk_len(const pipeline *p, size_t k)
{
  size_t off = k * p->pool->chunk, n = p->src->nbytes;
  return n - off < p->pool->chunk ? n - off : p->pool->chunk;
}

static void *reader(void *arg)
{
  pipeline *p = arg;
  const xfer_backend *be = p->src->dev->rt->backend;
  for (size_t k = 0; k < p->chunks; k++) {
    pthread_mutex_lock(&p->lock);
    while (k - p->written >= (size_t)p->pool->depth && !p->stop)
      pthread_cond_wait(&p->moved, &p->lock);
    int stop = p->stop;
    pthread_mutex_unlock(&p->lock);
    if (stop) break;
    xfer_code rc = be->read(p->src->dev, p->src->buf, k * p->pool->chunk,
                            p->pool->slot[k % (size_t)p->pool->depth], chunk_len(p, k),
                            &p->read_err);
    pthread_mutex_lock(&p->lock);
    if (rc) {
      p->read_rc = rc;
      p->stop = 1;
    } else {
      p->read = k + 1;
    }
    pthread_cond_broadcast(&p->moved);
    pthread_mutex_unlock(&p->lock);
    if (rc) break;
  }
  return NULL;
}

static xfer_code write_all(pipeline *p, xfer_tensor *dst, xfer_error *err)
{
  const xfer_backend *be = dst->dev->rt->backend;
  xfer_code rc = XFER_E_OK;
  for (size_t k = 0; k < p->chunks && !rc; k++) {
    pthread_mutex_lock(&p->lock);
    while (p->read <= k && !p->stop) pthread_cond_wait(&p->moved, &p->lock);
    int ready = p->read > k;
    pthread_mutex_unlock(&p->lock);
    if (!ready) break; /* the reader failed */
    rc = be->write(dst->dev, dst->buf, k * p->pool->chunk,
                   p->pool->slot[k % (size_t)p->pool->depth], chunk_len(p, k), err);
    pthread_mutex_lock(&p->lock);
    if (rc)
      p->stop = 1;
    else
      p->written = k + 1;
    pthread_cond_broadcast(&p->moved);
    pthread_mutex_unlock(&p->lock);
  }
  return rc;
}

static xfer_code staged_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err);

/* One staged move at a time uses the chunks. */
xfer_code xfer_staged_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  xfer_ctx *ctx = src->dev->ctx;
  pthread_mutex_lock(&ctx->staging_lock);
  xfer_code rc = staging_ready(ctx, err);
  if (!rc) rc = staged_run(src, dst, err);
  pthread_mutex_unlock(&ctx->staging_lock);
  return rc;
}

static xfer_code staged_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err)
{
  xfer_ctx *ctx = src->dev->ctx;
  xfer_code rc;
  pipeline p = {.src = src, .pool = ctx->staging};
  p.chunks = (src->nbytes + p.pool->chunk - 1) / p.pool->chunk;
  if (p.chunks == 1) { /* one chunk: nothing to overlap, no thread to pay for */
    rc = src->dev->rt->backend->read(src->dev, src->buf, 0, p.pool->slot[0], src->nbytes, err);
    return rc ? rc : dst->dev->rt->backend->write(dst->dev, dst->buf, 0, p.pool->slot[0],
                                                   src->nbytes, err);
  }
  pthread_mutex_init(&p.lock, NULL);
  pthread_cond_init(&p.moved, NULL);
  pthread_t thread;
  if (pthread_create(&thread, NULL, reader, &p)) {
    rc = xfer_err_set(err, XFER_E_UNAVAILABLE, "read", "cannot start the staging reader thread");
  } else {
    rc = write_all(&p, dst, err);
    pthread_join(thread, NULL);
    if (p.read_rc) { /* the read failed first, or the write stopped because it did */
      *err = p.read_err;
      rc = p.read_rc;
    }
  }
  pthread_cond_destroy(&p.moved);
  pthread_mutex_destroy(&p.lock);
  return rc;
}
