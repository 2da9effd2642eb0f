/*
** batch_through.c -- a batch group between two devices that share no memory, through host
** memory: its pieces cut into chunks of at most t->chunk packed bytes (route.c's staging policy), a helper thread
** packing chunk k+1 into one host chunk (one submission of the source's runtime) while the
** calling thread scatters chunk k out of the other (one submission of the target's) -- the
** staged path's pipeline, for many pieces at once. Two chunks of the host pool, whatever the
** group's size. batch.c decides that a group goes this way; this file only runs it.
*/
#include <stdlib.h>
#include <string.h>

#include "batch_through.h"

/* Adds part [off, off+len) of one element's ends as chunk `c`'s next pieces. */
static void add_part(xfer_through *t, const xfer_piece_end *dst, const xfer_piece_end *src,
                     size_t off, size_t len, size_t at)
{
  size_t k = t->npieces++;
  xfer_piece_end s = *src, d = *dst, packed = {NULL, at, NULL}; /* placed at each run */
  if (s.buf) s.offset += off; else s.host += off;
  if (d.buf) d.offset += off; else d.host += off;
  t->packing[k] = (xfer_piece){packed, s, len};
  t->scattering[k] = (xfer_piece){d, packed, len};
}

xfer_code xfer_through_make(xfer_through *t, const xfer_piece *ends, size_t n, size_t chunk_bytes,
                            xfer_error *err)
{
  const size_t cut = chunk_bytes ? chunk_bytes : 1; /* a chunk's packed bytes */
  t->chunk = cut;
  size_t parts = 0, bytes = 0;
  for (size_t i = 0; i < n; i++) {
    /* the chunks a piece spans, from where the bytes before it end */
    size_t start = bytes % cut, len = ends[i].n;
    parts += len ? (start + len + cut - 1) / cut : 0;
    bytes += len;
  }
  t->nchunks = (bytes + cut - 1) / cut;
  t->packing = malloc((parts ? parts : 1) * sizeof *t->packing);
  t->scattering = malloc((parts ? parts : 1) * sizeof *t->scattering);
  t->first = malloc((t->nchunks + 1) * sizeof *t->first);
  t->npieces = 0;
  t->bytes = bytes;
  if (!t->packing || !t->scattering || !t->first) return xfer_err_code(err, XFER_E_ALLOC,
                                                                       XFER_OP_BATCH);
  size_t at = 0, chunk = 0; /* bytes packed so far; the chunk they fill */
  t->first[0] = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t off = 0; off < ends[i].n;) {
      size_t room = cut - at % cut;
      size_t len = ends[i].n - off < room ? ends[i].n - off : room;
      add_part(t, &ends[i].dst, &ends[i].src, off, len, at % cut);
      off += len;
      at += len;
      if (at % cut == 0 && at < bytes) t->first[++chunk] = t->npieces;
    }
  t->first[t->nchunks] = t->npieces;
  return XFER_E_OK;
}

void xfer_through_free(xfer_through *t)
{
  free(t->packing);
  free(t->scattering);
  free(t->first);
  memset(t, 0, sizeof *t);
}

/* -- Running: pack chunk k+1 while chunk k is scattered ----------------------------------- */

typedef struct run_state {
  xfer_through *t;
  char *slot[2];
  pthread_mutex_t lock;
  pthread_cond_t changed;
  size_t packed, scattered;     /* chunks done by each side */
  int stop;                     /* a side failed */
  xfer_code pack_rc;
  xfer_error pack_err;
  xfer_watch watch;             /* the run's deadline and cancel flag, for the packer */
} run_state;

/* Chunk c's pieces with their host ends in slot c % 2 (a host end's offset says where). */
static void place(run_state *r, size_t c)
{
  xfer_through *t = r->t;
  char *base = r->slot[c % 2];
  for (size_t k = t->first[c]; k < t->first[c + 1]; k++) {
    t->packing[k].dst.host = base + t->packing[k].dst.offset;
    t->scattering[k].src.host = base + t->scattering[k].src.offset;
  }
}

static xfer_code pack_chunk(run_state *r, size_t c, xfer_error *err)
{
  xfer_through *t = r->t;
  return xfer_be_many(t->packer, &t->packing[t->first[c]], t->first[c + 1] - t->first[c], 0,
                      err);
}

static xfer_code scatter_chunk(run_state *r, size_t c, xfer_error *err)
{
  xfer_through *t = r->t;
  return xfer_be_many(t->scatterer, &t->scattering[t->first[c]], t->first[c + 1] - t->first[c], 0,
                      err);
}

/* The helper thread: each chunk packed once its slot is free (the chunk two before it
** scattered). */
static void *packer_thread(void *arg)
{
  run_state *r = arg;
  xfer_watch outer = xfer_watch_install(r->watch.deadline_at, r->watch.timeout, r->watch.canceled);
  for (size_t c = 0; c < r->t->nchunks; c++) {
    pthread_mutex_lock(&r->lock);
    while (!r->stop && c >= r->scattered + 2) pthread_cond_wait(&r->changed, &r->lock);
    int stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    if (stop) break;
    place(r, c);
    xfer_code rc = pack_chunk(r, c, &r->pack_err);
    pthread_mutex_lock(&r->lock);
    if (rc) {
      r->pack_rc = rc;
      r->stop = 1;
    } else {
      r->packed = c + 1;
    }
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    if (rc) break;
  }
  xfer_watch_restore(outer);
  return NULL;
}

/* Both sides in one thread (a group of one chunk, or no thread to be had). */
static xfer_code run_serial(run_state *r, xfer_error *err)
{
  xfer_code rc = XFER_E_OK;
  for (size_t c = 0; c < r->t->nchunks && !rc; c++) {
    place(r, c);
    rc = pack_chunk(r, c, err);
    if (!rc) rc = scatter_chunk(r, c, err);
  }
  return rc;
}

static xfer_code run_pipelined(run_state *r, xfer_error *err)
{
  xfer_spawned thread; /* a helper of the pool */
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->changed, NULL);
  r->watch = xfer_watch_current();
  xfer_code rc = XFER_E_OK;
  if (xfer_spawn(XFER_POOL_HELPERS, packer_thread, r, &thread)) {
    rc = run_serial(r, err);
  } else {
    for (size_t c = 0; c < r->t->nchunks && !rc; c++) {
      pthread_mutex_lock(&r->lock);
      while (!r->stop && r->packed <= c) pthread_cond_wait(&r->changed, &r->lock);
      int stop = r->stop;
      pthread_mutex_unlock(&r->lock);
      if (stop) break;
      rc = scatter_chunk(r, c, err);
      pthread_mutex_lock(&r->lock);
      if (rc) r->stop = 1;
      else r->scattered = c + 1;
      pthread_cond_broadcast(&r->changed);
      pthread_mutex_unlock(&r->lock);
    }
    xfer_spawned_join(&thread);
    if (!rc && r->pack_rc) { /* the packer's failure is the run's */
      rc = r->pack_rc;
      if (err) *err = r->pack_err;
    }
  }
  pthread_cond_destroy(&r->changed);
  pthread_mutex_destroy(&r->lock);
  return rc;
}

xfer_code xfer_through_run(xfer_through *t, xfer_ctx *ctx, xfer_error *err)
{
  if (!t->nchunks) return XFER_E_OK;
  xfer_device *host = xfer_host_of(ctx);
  size_t chunk = t->bytes < t->chunk ? t->bytes : t->chunk;
  int slots = t->nchunks > 1 ? 2 : 1;
  xfer_block *block[2] = {NULL, NULL};
  run_state r;
  memset(&r, 0, sizeof r);
  r.t = t;
  xfer_code rc = XFER_E_OK;
  for (int s = 0; s < slots && !rc; s++) {
    rc = xfer_mem_alloc(host, chunk, &block[s], err);
    if (!rc) r.slot[s] = xfer_be_host_address(host, block[s]->buf, block[s]->offset);
  }
  if (slots == 1) r.slot[1] = r.slot[0];
  if (!rc) rc = slots == 1 ? run_serial(&r, err) : run_pipelined(&r, err);
  for (int s = 0; s < slots; s++) xfer_mem_free(block[s]);
  return rc;
}
