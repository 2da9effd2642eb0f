/*
** staged.c -- the staged path: a move between two devices that cannot share memory runs
** through a ring of host chunks, a helper thread reading chunk k+1 off the source while
** the calling thread writes chunk k to the target. The chunks are blocks of the host pool
** (memory.c), as many and as large as the route says: runtimes pin or import their segments once, and moves
** between disjoint devices run at once, each with chunks of its own.
*/
#include <stdlib.h>
#include <string.h>

#include "paths.h"

#define MAX_DEPTH 16
_Static_assert(MAX_DEPTH <= XFER_QUEUE_SLOTS / 2, "a read and a write slot for each chunk");

/* A move's chunks. */
typedef struct xfer_staging {
  int depth;
  size_t chunk;
  xfer_block *block[MAX_DEPTH];
  char *slot[MAX_DEPTH];
} xfer_staging;

static void staging_free(xfer_staging *st)
{
  for (int s = 0; s < st->depth; s++) xfer_mem_free(st->block[s]);
}

static xfer_code staging_take(xfer_ctx *ctx, int depth, size_t chunk, xfer_staging *st,
                              xfer_error *err)
{
  memset(st, 0, sizeof *st);
  st->chunk = chunk;
  xfer_device *host = xfer_host_of(ctx);
  for (st->depth = 0; st->depth < depth; st->depth++) {
    xfer_code rc = xfer_mem_alloc(host, st->chunk, &st->block[st->depth], err);
    if (rc) {
      staging_free(st);
      return rc;
    }
    st->slot[st->depth] = xfer_be_host_address(host, st->block[st->depth]->buf,
                                               st->block[st->depth]->offset);
  }
  return XFER_E_OK;
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
  xfer_watch watch;             /* the move's deadline and cancel flag, for the reader */
  xfer_code read_rc;
  xfer_error read_err;
} pipeline;

/* One side of the pipeline: its device and what it has started and finished. */
typedef struct side {
  pipeline *p;
  int reading;
  xfer_device *dev;
  void *buf;
  size_t base;                  /* the tensor's offset in buf */
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
  const pipeline *p = s->p;
  size_t off = s->base + k * p->pool->chunk, len = chunk_len(p, k);
  void *host = p->pool->slot[k % (size_t)p->pool->depth];
  return xfer_be_start(s->dev, !s->reading, s->buf, off, host, len, slot_of(s, k), queued, err);
}

/* Waits for chunk k's move, when it was queued. */
static xfer_code side_finish(side *s, size_t k, xfer_error *err)
{
  if (!s->queued[k % (size_t)s->p->pool->depth]) return XFER_E_OK;
  return xfer_be_finish(s->dev, slot_of(s, k), err);
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

/* The writing side runs on the moving thread: the chunks it wrote are the move's progress. */
static xfer_code written(const side *s, xfer_error *err)
{
  if (s->reading) return XFER_E_OK;
  size_t done = s->finished * s->p->pool->chunk, total = s->p->src->nbytes;
  return xfer_progress(done < total ? done : total, total, err);
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
        if ((rc = written(s, err))) break;
      }
      continue;
    }
    rc = side_finish(s, s->finished, err);
    if (rc) break;
    s->finished++;
    publish(s);
    if ((rc = written(s, err))) break;
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
  xfer_watch outer = xfer_watch_install(s->p->watch.deadline_at, s->p->watch.timeout, s->p->watch.canceled);
  s->p->read_rc = side_run(s, &s->p->read_err);
  xfer_watch_restore(outer);
  return NULL;
}

static xfer_code pipelined(const xfer_staging *st, xfer_tensor *src, xfer_tensor *dst,
                           xfer_error *err);

xfer_code xfer_staged_run(const xfer_route *route, xfer_tensor *src, xfer_tensor *dst,
                          xfer_error *err)
{
  /* the ring's chunks hold the move however the route was sized: one chunk only when the
  ** whole move fits in it (a route sized for fewer bytes pipelines the move through its
  ** chunks instead of overrunning one) */
  if (!route->chunk || route->depth < 1)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_PLAN, XFER_S_STAGED_NO_CHUNKS, route->nbytes,
                       src->nbytes);
  xfer_staging st;
  int depth = route->depth < MAX_DEPTH ? route->depth : MAX_DEPTH;
  xfer_code rc = staging_take(src->dev->ctx, depth, route->chunk, &st, err);
  if (rc) return rc;
  int whole = src->nbytes <= st.chunk; /* one chunk: nothing to overlap, no thread to pay for */
  if (whole) rc = xfer_be_read(src->dev, src->buf, src->offset, st.slot[0], src->nbytes, err);
  if (whole && !rc) rc = xfer_be_write(dst->dev, dst->buf, dst->offset, st.slot[0], src->nbytes, err);
  if (whole && !rc) rc = xfer_progress(src->nbytes, src->nbytes, err);
  if (!whole) rc = pipelined(&st, src, dst, err);
  /* every queued move on the chunks has finished -- or, past the deadline, a stalled device
  ** holds them (memory.c's quarantine takes what is freed while a device is stalled) */
  staging_free(&st);
  return rc;
}

static xfer_code pipelined(const xfer_staging *st, xfer_tensor *src, xfer_tensor *dst,
                           xfer_error *err)
{
  xfer_code rc;
  pipeline p = {.src = src, .pool = st, .watch = xfer_watch_current()};
  p.chunks = (src->nbytes + st->chunk - 1) / st->chunk;
  side in = {.p = &p, .reading = 1, .dev = src->dev, .buf = src->buf, .base = src->offset};
  side out = {.p = &p, .reading = 0, .dev = dst->dev, .buf = dst->buf, .base = dst->offset};
  pthread_mutex_init(&p.lock, NULL);
  pthread_cond_init(&p.moved, NULL);
  xfer_spawned thread; /* a helper of the pool: made once, reused by every staged move */
  if (xfer_spawn(XFER_POOL_HELPERS, reader, &in, &thread)) {
    rc = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_READ, XFER_S_STAGING_READER_NOT_STARTED);
  } else {
    rc = side_run(&out, err);
    xfer_spawned_join(&thread);
    if (p.read_rc) { /* the read failed first, or the write stopped because it did */
      *err = p.read_err;
      rc = p.read_rc;
    }
  }
  pthread_cond_destroy(&p.moved);
  pthread_mutex_destroy(&p.lock);
  return rc;
}
