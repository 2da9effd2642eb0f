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
_Static_assert(MAX_DEPTH <= XFER_QUEUE_SLOTS / 2, "a read and a write slot for each chunk");

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

/* Each side keeps its device's queue full: it starts the next chunk's move as soon as it
** may, and waits for the oldest one it started only when it can start no other. A side
** whose runtime cannot queue moves does each in full when it starts it. */
typedef struct pipeline {
  pthread_mutex_t lock;
  pthread_cond_t moved;
  xfer_tensor *src;
  const xfer_staging *pool;
  size_t chunks;
  size_t read;                  /* chunks read into the ring so far (finished) */
  size_t written;               /* chunks written out of it so far (finished) */
  int stop;                     /* a side failed: the other stops too */
  xfer_code read_rc;
  xfer_error read_err;
} pipeline;

/* One side of the pipeline: its device and what it has started and finished. */
typedef struct side {
  pipeline *p;
  int reading;
  xfer_device *dev;
  void *buf;
  size_t started, finished;
  unsigned char queued[MAX_DEPTH]; /* per ring position: that chunk's move is in flight */
} side;

static size_t chunk_len(const pipeline *p, size_t k)
{
  size_t off = k * p->pool->chunk, n = p->src->nbytes;
  return n - off < p->pool->chunk ? n - off : p->pool->chunk;
}

static int slot_of(const side *s, size_t k)
{
  int ring = (int)(k % (size_t)s->p->pool->depth);
  return s->reading ? ring : XFER_QUEUE_SLOTS / 2 + ring;
}

/* Starts chunk k's move; *queued says whether it is in flight (else it is done). */
static xfer_code side_start(side *s, size_t k, int *queued, xfer_error *err)
{
  const xfer_backend *be = s->dev->rt->backend;
  const pipeline *p = s->p;
  size_t off = k * p->pool->chunk, len = chunk_len(p, k);
  void *host = p->pool->slot[k % (size_t)p->pool->depth];
  int slot = slot_of(s, k);
  *queued = 0;
  if (s->reading)
    return be->read_start ? be->read_start(s->dev, s->buf, off, host, len, slot, queued, err)
                          : be->read(s->dev, s->buf, off, host, len, err);
  return be->write_start ? be->write_start(s->dev, s->buf, off, host, len, slot, queued, err)
                         : be->write(s->dev, s->buf, off, host, len, err);
}

/* Waits for chunk k's move, when it was queued. */
static xfer_code side_finish(side *s, size_t k, xfer_error *err)
{
  const xfer_backend *be = s->dev->rt->backend;
  if (!s->queued[k % (size_t)s->p->pool->depth]) return XFER_E_OK;
  return be->finish(s->dev, slot_of(s, k), err);
}

/* May this side start chunk k now? (p->lock held) */
static int may_start(const side *s, size_t k)
{
  const pipeline *p = s->p;
  if (k >= p->chunks) return 0;
  return s->reading ? k - p->written < (size_t)p->pool->depth : k < p->read;
}

/* Tells the other side how far this one has got. */
static void publish(side *s)
{
  pipeline *p = s->p;
  pthread_mutex_lock(&p->lock);
  if (s->reading)
    p->read = s->finished;
  else
    p->written = s->finished;
  pthread_cond_broadcast(&p->moved);
  pthread_mutex_unlock(&p->lock);
}

/* Waits for each move this side started and did not finish (a failed start queued
** nothing). Their errors are dropped: the move has failed already. */
static void drain(side *s)
{
  for (; s->finished < s->started; s->finished++) {
    xfer_error ignored;
    side_finish(s, s->finished, &ignored);
  }
}

/* Runs one side to its end; returns its first error. Whatever it started is finished
** before it returns, so the chunks are free when the move ends, failed or not. */
static xfer_code side_run(side *s, xfer_error *err)
{
  pipeline *p = s->p;
  xfer_code rc = XFER_E_OK;
  while (s->finished < p->chunks) {
    pthread_mutex_lock(&p->lock);
    while (!p->stop && !may_start(s, s->started) && s->finished == s->started)
      pthread_cond_wait(&p->moved, &p->lock);
    int stop = p->stop, start = may_start(s, s->started);
    pthread_mutex_unlock(&p->lock);
    if (stop) { /* the other side failed: its error is the move's */
      drain(s);
      return XFER_E_OK;
    }
    if (start) {
      int queued;
      rc = side_start(s, s->started, &queued, err);
      if (rc) break;
      s->queued[s->started++ % (size_t)p->pool->depth] = (unsigned char)queued;
      /* a move done in full, with none before it in flight, is there for the other side now */
      if (!queued && s->finished + 1 == s->started) {
        s->finished++;
        publish(s);
      }
      continue;
    }
    rc = side_finish(s, s->finished, err);
    if (rc) break;
    s->finished++;
    publish(s);
  }
  if (rc) {
    drain(s);
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->moved);
    pthread_mutex_unlock(&p->lock);
  }
  return rc;
}

static void *reader(void *arg)
{
  side *s = arg;
  s->p->read_rc = side_run(s, &s->p->read_err);
  return NULL;
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
  side in = {.p = &p, .reading = 1, .dev = src->dev, .buf = src->buf};
  side out = {.p = &p, .reading = 0, .dev = dst->dev, .buf = dst->buf};
  pthread_mutex_init(&p.lock, NULL);
  pthread_cond_init(&p.moved, NULL);
  pthread_t thread;
  if (pthread_create(&thread, NULL, reader, &in)) {
    rc = xfer_err_set(err, XFER_E_UNAVAILABLE, "read", "cannot start the staging reader thread");
  } else {
    rc = side_run(&out, err);
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
