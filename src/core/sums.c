/*
** sums.c -- the CRC32C of byte ranges where they lie. Host memory is summed by the sum pool
** (half the CPUs): a large range cut into pieces of XFER_SUM_PIECE bytes and their sums joined,
** a batch's small ranges in bundles of about that many bytes. A device sums its own memory
** (copy->crc32c, a batch's ranges in one call; beside the caller where it can, crc32c_begin),
** else its bytes are read back in chunks. A verified move's ends are summed beside the move:
** the source's as it starts, the target's as its steps land (the runner lands it in steps for
** that), so that a sum costs the move little more than its last step's.
*/
#include <stdlib.h>

#include "sums.h"

/* What a checksum of device memory reads at a time, into host memory of the pool. */
#define READ_CHUNK ((size_t)4 << 20)
/* What a batch of small ranges reads back at a time (device_sums), into host memory of the pool. */
#define READ_BATCH ((size_t)16 << 20)
/* The steps a verified move's host target lands in: each step's pieces are summed while the
** next step moves. */
#define LAND_STEP ((size_t)32 << 20)

/* -- Tasks of the sum pool ------------------------------------------------------------------ */

/* A stretch of host memory. */
typedef struct xfer_sum_seg seg;
struct xfer_sum_seg {
  const char *at;
  size_t n;
};

/* A task: the sums of segs[first .. last), into crc[first .. last). */
struct xfer_sum_task {
  const seg *segs;
  uint32_t *crc;
  size_t first, last;
  int spawned;
  xfer_spawned task;
};

static void *sum_segs(void *arg)
{
  xfer_sum_task *t = arg;
  for (size_t i = t->first; i < t->last; i++) t->crc[i] = xfer_crc32c(0, t->segs[i].at, t->segs[i].n);
  return NULL;
}

static void task_set(xfer_sum_task *t, const seg *segs, uint32_t *crc, size_t first, size_t last)
{
  t->segs = segs;
  t->crc = crc;
  t->first = first;
  t->last = last;
  t->spawned = 0;
}

/* tasks[0..n) given to the pool at once (xfer_spawn_all: one wake-up for them all); summed here
** and now when no thread can be had. */
#define SPAWN_AT_ONCE 16
static void tasks_spawn(xfer_sum_task *tasks, size_t n)
{
  for (size_t from = 0; from < n; from += SPAWN_AT_ONCE) {
    size_t m = n - from < SPAWN_AT_ONCE ? n - from : SPAWN_AT_ONCE;
    void *args[SPAWN_AT_ONCE];
    xfer_spawned *handles[SPAWN_AT_ONCE];
    for (size_t k = 0; k < m; k++) {
      args[k] = &tasks[from + k];
      handles[k] = &tasks[from + k].task;
    }
    int spawned = xfer_spawn_all(XFER_POOL_SUMS, sum_segs, args, handles, m) == m;
    for (size_t k = 0; k < m; k++) {
      tasks[from + k].spawned = spawned;
      if (!spawned) sum_segs(&tasks[from + k]);
    }
  }
}

static void task_wait(xfer_sum_task *t)
{
  if (t->spawned) xfer_spawned_join(&t->task);
  t->spawned = 0;
}

/* Pieces [first, last) of segs[] given to the pool in as many tasks as it has threads at most
** (tasks[*ntasks..] filled): a task per piece made 64 tasks of a 64 MiB batch's sources, and a
** wake-up and a lock's round each cost more than its piece's sum. */
static void tasks_start(xfer_sum_task *tasks, size_t *ntasks, const seg *segs, uint32_t *crc, size_t first,
                        size_t last)
{
  size_t threads = xfer_pool_sum_threads(), n = last - first, from = *ntasks;
  size_t parts = n < threads ? n : threads;
  for (size_t p = 0; p < parts; p++) {
    size_t a = first + n * p / parts, b = first + n * (p + 1) / parts;
    task_set(&tasks[(*ntasks)++], segs, crc, a, b);
  }
  tasks_spawn(tasks + from, parts);
}

/* n bytes cut into pieces of XFER_SUM_PIECE: their segments, sums and a task each (NULL when
** out of memory: the caller sums in one). */
static seg *pieces_of(const char *at, size_t n, size_t *count, uint32_t **crc, xfer_sum_task **tasks)
{
  *count = (n + XFER_SUM_PIECE - 1) / XFER_SUM_PIECE;
  seg *segs = calloc(*count, sizeof *segs);
  *crc = calloc(*count, sizeof **crc);
  *tasks = calloc(*count, sizeof **tasks);
  if (!segs || !*crc || !*tasks) {
    free(segs), free(*crc), free(*tasks);
    *tasks = NULL;
    *crc = NULL;
    return NULL;
  }
  for (size_t i = 0; i < *count; i++) {
    segs[i].at = at + i * XFER_SUM_PIECE;
    segs[i].n = n - i * XFER_SUM_PIECE < XFER_SUM_PIECE ? n - i * XFER_SUM_PIECE : XFER_SUM_PIECE;
  }
  return segs;
}

/* The sum of n bytes of host memory: by the pool's threads in pieces where that pays. */
static uint32_t host_sum(const char *at, size_t n)
{
  size_t count = 0;
  xfer_sum_task *tasks = NULL;
  uint32_t *sums = NULL;
  seg *segs = n >= 2 * XFER_SUM_PIECE ? pieces_of(at, n, &count, &sums, &tasks) : NULL;
  if (!segs) return xfer_crc32c(0, at, n);
  size_t ntasks = 0;
  tasks_start(tasks, &ntasks, segs, sums, 0, count);
  for (size_t i = 0; i < ntasks; i++) task_wait(&tasks[i]);
  uint32_t crc = xfer_crc32c_of_stretches(sums, count, XFER_SUM_PIECE, n);
  free(tasks), free(sums), free(segs);
  return crc;
}

/* -- Device memory --------------------------------------------------------------------------- */

/* Whether the device is asked to sum its memory: a GPU of its own memory is (a kernel sums
** hundreds of GB/s where it lies); one whose memory is the host's (PoCL, lavapipe: a kernel
** run by the CPU, byte by byte) is read and summed by the CPU's instruction, many times
** faster. XFER_DEVICE_SUMS=1 asks every device, 0 none. */
static int sums_itself(const xfer_device *dev)
{
  int asked = xfer_env_flag("XFER_DEVICE_SUMS");
  return asked == 2 ? !dev->unified : asked;
}

/* The sum of a range of device memory read back in chunks. */
static xfer_code read_back_sum(xfer_tensor *t, size_t offset, size_t n, uint32_t *crc, xfer_error *err)
{
  xfer_device *host_dev = xfer_host_of(t->dev->ctx);
  size_t chunk = n < READ_CHUNK ? n : READ_CHUNK;
  xfer_block *scratch = NULL;
  xfer_code rc = xfer_mem_alloc(host_dev, chunk, &scratch, err);
  char *bytes = rc ? NULL : xfer_be_host_address(host_dev, scratch->buf, scratch->offset);
  for (size_t at = 0; !rc && at < n; at += chunk) {
    size_t len = n - at < chunk ? n - at : chunk;
    rc = xfer_be_read(t->dev, t->buf, t->offset + offset + at, bytes, len, err);
    if (!rc) *crc = xfer_crc32c(*crc, bytes, len);
  }
  xfer_mem_free(scratch);
  return rc;
}

xfer_code xfer_range_crc32c(xfer_tensor *t, size_t offset, size_t n, uint32_t *crc,
                            xfer_error *err)
{
  *crc = 0;
  const char *host = n ? xfer_be_host_address(t->dev, t->buf, t->offset) : NULL;
  if (!n || host) {
    if (n) *crc = host_sum(host + offset, n);
    return XFER_E_OK;
  }
  xfer_sum_piece piece = {t->buf, t->offset + offset, n};
  xfer_code own = sums_itself(t->dev) ? xfer_be_crc32c(t->dev, &piece, 1, crc, err) : XFER_E_UNSUPPORTED;
  if (own != XFER_E_UNSUPPORTED) return own; /* summed by the device */
  return read_back_sum(t, offset, n, crc, err);
}

/* The k ranges ranges[index[..]] of one device read back and summed on the host: in batches of
** the device's (copy->many) of up to READ_BATCH bytes, each range then summed from the batch's
** scratch; a range larger than that, or a device with no batches, a range at a time. A batch's
** 4096 ranges of 16 KiB were 4096 reads: its verify cost +1700% on PoCL. */
static xfer_code read_back_sums(xfer_device *dev, const xfer_sum_range *ranges, const size_t *index,
                                size_t k, uint32_t *sums, xfer_error *err)
{
  xfer_device *host_dev = xfer_host_of(dev->ctx);
  xfer_block *scratch = NULL;
  xfer_piece *pieces = k > 1 && xfer_be_has_many(dev) ? malloc(k * sizeof *pieces) : NULL;
  xfer_code rc = pieces ? xfer_mem_alloc(host_dev, READ_BATCH, &scratch, err) : XFER_E_OK;
  char *bytes = scratch ? xfer_be_host_address(host_dev, scratch->buf, scratch->offset) : NULL;
  for (size_t j = 0; !rc && j < k;) {
    size_t used = 0, np = 0, first = j;
    for (; bytes && j < k && used + ranges[index[j]].n <= READ_BATCH; j++) {
      const xfer_sum_range *r = &ranges[index[j]];
      sums[j] = 0;
      if (!r->n) continue; /* (no piece is empty) */
      pieces[np++] = (xfer_piece){.dst = {NULL, 0, bytes + used}, .src = {r->t->buf, r->t->offset + r->at, NULL},
                                  .n = r->n};
      used += r->n;
    }
    xfer_code many = np ? xfer_be_many(dev, pieces, np, 0, err) : XFER_E_UNSUPPORTED;
    if (many == XFER_E_OK) {
      for (size_t q = first, at = 0; q < j; at += ranges[index[q]].n, q++)
        if (ranges[index[q]].n) sums[q] = xfer_crc32c(0, bytes + at, ranges[index[q]].n);
      continue;
    }
    if (many != XFER_E_UNSUPPORTED) {
      rc = many;
      break;
    }
    if (j == first) j++; /* a range too large for a batch: alone */
    for (size_t q = first; !rc && q < j; q++) {
      sums[q] = 0;
      rc = read_back_sum(ranges[index[q]].t, ranges[index[q]].at, ranges[index[q]].n, &sums[q], err);
    }
  }
  xfer_mem_free(scratch);
  free(pieces);
  return rc;
}

/* One device's ranges of a xfer_sums, summed beside the caller (copy->crc32c_begin): pieces[j]
** is ranges[index[j]], its sum into sums[j]; ticket names them to the device; failed: the
** begin's failure, said by the end. */
struct xfer_sum_dev {
  xfer_device *dev;
  xfer_sum_piece *pieces;
  size_t *index;
  uint32_t *sums;
  size_t k;
  int ticket;
  xfer_code failed;
  xfer_error failure;
};

/* The ranges of ranges[first]'s device not yet seen, from `first` on, gathered into d (its
** pieces, their index and room for their sums; nothing marked seen); 0 when out of memory. */
static int device_gather(const xfer_sum_range *ranges, size_t count, size_t first, const unsigned char *seen,
                         xfer_sum_dev *d)
{
  *d = (xfer_sum_dev){.dev = ranges[first].t->dev, .ticket = -1};
  d->pieces = malloc((count - first) * sizeof *d->pieces);
  d->index = malloc((count - first) * sizeof *d->index);
  d->sums = malloc((count - first) * sizeof *d->sums);
  if (!d->pieces || !d->index || !d->sums) {
    free(d->pieces), free(d->index), free(d->sums);
    *d = (xfer_sum_dev){0};
    return 0;
  }
  for (size_t i = first; i < count; i++) {
    const xfer_sum_range *r = &ranges[i];
    if (seen[i] || r->t->dev != d->dev) continue;
    d->index[d->k] = i;
    d->pieces[d->k++] = (xfer_sum_piece){r->t->buf, r->t->offset + r->at, r->n};
  }
  return 1;
}

static void device_let_go(xfer_sum_dev *d)
{
  free(d->pieces), free(d->index), free(d->sums);
  *d = (xfer_sum_dev){0};
}

/* The device ranges of ranges[] on ranges[first]'s device, from `first` on, summed by one call
** of the device where it sums its own (else each read back); *seen marks them. */
static xfer_code device_sums(const xfer_sum_range *ranges, size_t count, size_t first,
                             unsigned char *seen, uint32_t *crc, xfer_error *err)
{
  xfer_sum_dev d;
  if (!device_gather(ranges, count, first, seen, &d)) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  for (size_t j = 0; j < d.k; j++) seen[d.index[j]] = 1;
  xfer_code own = sums_itself(d.dev) ? xfer_be_crc32c(d.dev, d.pieces, d.k, d.sums, err) : XFER_E_UNSUPPORTED;
  if (own == XFER_E_UNSUPPORTED) own = read_back_sums(d.dev, ranges, d.index, d.k, d.sums, err);
  for (size_t j = 0; !own && j < d.k; j++) crc[d.index[j]] = d.sums[j];
  device_let_go(&d);
  return own;
}


int xfer_sums_beside(const xfer_device *dev) { return sums_itself(dev) && xfer_be_has_crc32c_begin(dev); }

/* The device ranges not summed by the pool, each device's begun on it where it sums beside the
** caller (marked in seen[]); the rest are left for xfer_sums_end (out of memory: all of them). */
static void devices_begin(xfer_sums *s)
{
  /* (a device is asked once for a run of its ranges: the ask reads the environment, and one
  ** that declines now declines the rest of them too) */
  const xfer_device *declined = NULL;
  for (size_t i = 0; i < s->count; i++) {
    xfer_device *dev = s->ranges[i].t->dev;
    if (s->seen[i] || dev == declined) continue;
    if (!xfer_sums_beside(dev)) {
      declined = dev;
      continue;
    }
    if (s->ndevs == s->room) { /* (a few devices at most: a slot per range was 1 MB a batch) */
      size_t room = s->room ? 2 * s->room : 2;
      xfer_sum_dev *grown = realloc(s->devs, room * sizeof *grown);
      if (!grown) return;
      s->devs = grown;
      s->room = room;
    }
    xfer_sum_dev *d = &s->devs[s->ndevs];
    if (!device_gather(s->ranges, s->count, i, s->seen, d)) return;
    d->failed = xfer_be_crc32c_begin(dev, d->pieces, d->k, &d->ticket, &d->failure);
    if (d->failed == XFER_E_UNSUPPORTED) { /* not now: summed by the end, as a device that cannot */
      device_let_go(d);
      declined = dev;
      continue;
    }
    for (size_t j = 0; j < d->k; j++) s->seen[d->index[j]] = 1;
    s->ndevs++;
  }
}

/* A device's sums begun, ended (wanted: into crc[]), its memory freed. */
static xfer_code device_end(xfer_sum_dev *d, int wanted, uint32_t *crc, xfer_error *err)
{
  xfer_code rc = d->failed;
  if (rc && wanted && err) *err = d->failure;
  if (!rc) rc = xfer_be_crc32c_end(d->dev, d->pieces, d->k, d->ticket, d->sums, wanted, err);
  for (size_t j = 0; !rc && wanted && j < d->k; j++) crc[d->index[j]] = d->sums[j];
  device_let_go(d);
  return rc;
}

/* The host ranges of ranges[] in bundles, a task each: as many as the pool has threads (a
** bundle 256 KiB at least) -- a batch's 4096 ranges of 16 KiB in 8 tasks. segs[] and tasks[]
** (as many as ranges, at most) filled, *nsegs and *ntasks said. */
#define BUNDLE_LEAST ((size_t)256 << 10)
static void host_bundles(const xfer_sum_range *ranges, size_t count, unsigned char *seen,
                         size_t *index, seg *segs, uint32_t *sums, size_t *nsegs, xfer_sum_task *tasks,
                         size_t *ntasks)
{
  size_t k = 0, total = 0;
  *ntasks = 0;
  for (size_t i = 0; i < count; i++) {
    const char *host = ranges[i].n ? xfer_be_host_address(ranges[i].t->dev, ranges[i].t->buf,
                                                          ranges[i].t->offset) : NULL;
    if (!host && ranges[i].n) continue;
    seen[i] = 1;
    index[k] = i;
    segs[k++] = (seg){host ? host + ranges[i].at : NULL, ranges[i].n};
    total += ranges[i].n;
  }
  size_t threads = xfer_pool_sum_threads(), bundle = (total + threads - 1) / threads;
  if (bundle < BUNDLE_LEAST) bundle = BUNDLE_LEAST;
  size_t first = 0, bytes = 0;
  for (size_t j = 0; j < k; j++) {
    bytes += segs[j].n;
    if (bytes >= bundle) {
      task_set(&tasks[(*ntasks)++], segs, sums, first, j + 1);
      first = j + 1;
      bytes = 0;
    }
  }
  if (first < k) task_set(&tasks[(*ntasks)++], segs, sums, first, k);
  tasks_spawn(tasks, *ntasks);
  *nsegs = k;
}

xfer_code xfer_sums_begin(xfer_sums *s, const xfer_sum_range *ranges, size_t count, uint32_t *crc,
                          xfer_error *err)
{
  *s = (xfer_sums){.ranges = ranges, .count = count, .crc = crc};
  if (!count) return XFER_E_OK;
  s->seen = calloc(count, 1);
  s->index = malloc(count * sizeof *s->index);
  s->segs = malloc(count * sizeof *s->segs);
  s->sums = malloc(count * sizeof *s->sums);
  size_t most_tasks = xfer_pool_sum_threads() + 1; /* (host_bundles makes no more) */
  s->tasks = calloc(count < most_tasks ? count : most_tasks, sizeof *s->tasks);
  if (!s->seen || !s->index || !s->segs || !s->sums || !s->tasks) {
    free(s->seen), free(s->index), free(s->segs), free(s->sums), free(s->tasks);
    *s = (xfer_sums){0};
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  }
  host_bundles(ranges, count, s->seen, s->index, s->segs, s->sums, &s->nsegs, s->tasks, &s->ntasks);
  devices_begin(s);
  return XFER_E_OK;
}

xfer_code xfer_sums_end(xfer_sums *s, int wanted, xfer_error *err)
{
  if (!s->seen) return XFER_E_OK; /* none begun (none asked, or out of memory, said then) */
  xfer_code rc = XFER_E_OK; /* the devices sum theirs while the pool sums the host's */
  double start = xfer_now();
  for (size_t j = 0; j < s->ndevs; j++) { /* every one begun is ended */
    xfer_code ended = device_end(&s->devs[j], wanted && !rc, s->crc, rc ? NULL : err);
    if (wanted && !rc) rc = ended;
  }
  for (size_t i = 0; wanted && i < s->count && !rc; i++)
    if (!s->seen[i]) rc = device_sums(s->ranges, s->count, i, s->seen, s->crc, err);
  double devices_done = xfer_now();
  for (size_t j = 0; j < s->ntasks; j++) task_wait(&s->tasks[j]);
  if (s->waits) {
    s->waits->devices += devices_done - start;
    s->waits->pool += xfer_now() - devices_done;
  }
  for (size_t j = 0; j < s->nsegs; j++) s->crc[s->index[j]] = s->sums[j];
  free(s->seen), free(s->index), free(s->segs), free(s->sums), free(s->tasks), free(s->devs);
  *s = (xfer_sums){0};
  return rc;
}

xfer_code xfer_sums_of(const xfer_sum_range *ranges, size_t count, uint32_t *crc, xfer_error *err)
{
  xfer_sums s;
  xfer_code rc = xfer_sums_begin(&s, ranges, count, crc, err);
  return rc ? rc : xfer_sums_end(&s, 1, err);
}

/* -- A move verified as it runs ---------------------------------------------------------------- */

static void end_begin(xfer_verify_side *e, xfer_tensor *t, size_t at, size_t n)
{
  e->t = t;
  e->at = at;
  const char *host = xfer_be_host_address(t->dev, t->buf, t->offset);
  e->host = host ? host + at : NULL;
  e->segs = NULL;
  e->sums = NULL;
  e->tasks = NULL;
  e->count = e->started = e->ntasks = 0;
  e->beside = !e->host && xfer_sums_beside(t->dev);
  e->summing = (xfer_sums){0};
  e->part_crc = e->crc = 0;
  e->upto = 0;
  if (e->host && n >= 2 * XFER_SUM_PIECE)
    e->segs = pieces_of(e->host, n, &e->count, &e->sums, &e->tasks);
}

/* A device end's bytes [upto, to) given to its device to sum beside the move (out of memory:
** they are summed with the rest at the end). */
static void part_begin(xfer_verify_side *e, size_t to)
{
  xfer_error ignored;
  e->part = (xfer_sum_range){e->t, e->at + e->upto, to - e->upto};
  if (e->part.n && xfer_sums_begin(&e->summing, &e->part, 1, &e->part_crc, &ignored)) e->summing = (xfer_sums){0};
}

/* The sum of the end's next `len` bytes joined into its sum so far. */
static void end_append(xfer_verify_side *e, uint32_t crc, size_t len)
{
  e->crc = e->upto ? xfer_crc32c_join(e->crc, crc, len) : crc;
  e->upto += len;
}

/* The part begun ended (wanted: joined into the end's sum). */
static xfer_code part_end(xfer_verify_side *e, int wanted, xfer_error *err)
{
  if (!e->summing.seen) return XFER_E_OK;
  xfer_code rc = xfer_sums_end(&e->summing, wanted, err);
  if (!rc && wanted) end_append(e, e->part_crc, e->part.n);
  return rc;
}

void xfer_verify_begin(xfer_verify *v, int on, xfer_tensor *src, size_t src_at, xfer_tensor *dst,
                       size_t dst_at, size_t n)
{
  v->on = on && n;
  v->waits = (xfer_sum_waits){0, 0};
  v->n = n;
  v->landed = 0;
  if (!v->on) return;
  end_begin(&v->ends[0], src, src_at, n);
  end_begin(&v->ends[1], dst, dst_at, n);
}

/* An end's pieces that lie wholly in [0, upto) given to the sum pool, those not given yet. */
static void end_start_upto(xfer_verify_side *e, size_t upto)
{
  size_t first = e->started;
  for (; e->segs && e->started < e->count && e->started * XFER_SUM_PIECE + e->segs[e->started].n <= upto;
       e->started++)
    continue;
  if (e->started > first) tasks_start(e->tasks, &e->ntasks, e->segs, e->sums, first, e->started);
}

void xfer_verify_source_upto(xfer_verify *v, size_t upto)
{
  if (!v->on) return;
  xfer_verify_side *e = &v->ends[0];
  end_start_upto(e, upto);
  /* a device source is summed whole from the start: its bytes do not change while it moves */
  if (e->beside && upto && !e->upto && !e->summing.seen) part_begin(e, v->n);
}

void xfer_verify_source(xfer_verify *v) { xfer_verify_source_upto(v, v->n); }

size_t xfer_verify_step(const xfer_verify *v, size_t n)
{
  return v->on && v->ends[1].segs && n > LAND_STEP ? LAND_STEP : n;
}

void xfer_verify_landed(xfer_verify *v, size_t upto)
{
  v->landed = upto;
  if (!v->on) return;
  xfer_verify_side *e = &v->ends[1];
  end_start_upto(e, upto);
  if (!e->beside) return;
  /* a device target: the step before summed by now (the device sums many times faster than a
  ** link moves), this one given to it while the next one moves; a failure sums it all at the end */
  xfer_error ignored;
  if (part_end(e, 1, &ignored)) {
    e->beside = 0;
    e->upto = 0;
    return;
  }
  if (upto > e->upto) part_begin(e, upto);
}

/* A device end's sum: what it summed beside the move, and the rest now. */
static xfer_code device_end_sum(xfer_verify_side *e, size_t n, uint32_t *crc, xfer_error *err)
{
  xfer_code rc = part_end(e, 1, err);
  if (!rc && e->upto < n) {
    uint32_t rest = 0;
    rc = xfer_range_crc32c(e->t, e->at + e->upto, n - e->upto, &rest, err);
    if (!rc) end_append(e, rest, n - e->upto);
  }
  *crc = e->crc;
  return rc;
}

/* An end's sum: a device's (device_end_sum), or its host pieces' joined, or summed in one now;
** what it waited for added to *waits. */
static xfer_code end_sum(xfer_verify_side *e, size_t n, uint32_t *crc, xfer_sum_waits *waits, xfer_error *err)
{
  double start = xfer_now();
  xfer_code rc = XFER_E_OK;
  if (!e->host) {
    rc = device_end_sum(e, n, crc, err);
    waits->devices += xfer_now() - start;
    return rc;
  }
  if (!e->segs) {
    rc = xfer_range_crc32c(e->t, e->at, n, crc, err);
  } else {
    for (size_t i = 0; i < e->ntasks; i++) task_wait(&e->tasks[i]);
    *crc = xfer_crc32c_of_stretches(e->sums, e->count, XFER_SUM_PIECE, n);
  }
  waits->pool += xfer_now() - start;
  return rc;
}

static void end_release(xfer_verify_side *e)
{
  part_end(e, 0, NULL);
  for (size_t i = 0; e->segs && i < e->ntasks; i++) task_wait(&e->tasks[i]);
  free(e->tasks), free(e->sums), free(e->segs);
  e->segs = NULL;
  e->sums = NULL;
  e->tasks = NULL;
}

xfer_code xfer_verify_end(xfer_verify *v, int moved, xfer_error *err)
{
  if (!v->on) return XFER_E_OK;
  xfer_code rc = XFER_E_OK;
  uint32_t sent = 0, arrived = 0;
  if (moved) {
    xfer_verify_source(v); /* (where no runner said so) */
    xfer_verify_landed(v, v->n);
    /* the ends summed in one (a device's) first: the pool's pieces run meanwhile */
    rc = v->ends[0].segs ? XFER_E_OK : end_sum(&v->ends[0], v->n, &sent, &v->waits, err);
    if (!rc && !v->ends[1].segs) rc = end_sum(&v->ends[1], v->n, &arrived, &v->waits, err);
    if (!rc && v->ends[0].segs) rc = end_sum(&v->ends[0], v->n, &sent, &v->waits, err);
    if (!rc && v->ends[1].segs) rc = end_sum(&v->ends[1], v->n, &arrived, &v->waits, err);
  }
  end_release(&v->ends[0]);
  end_release(&v->ends[1]);
  if (!rc && moved && sent != arrived)
    rc = xfer_err_op(err, XFER_E_CORRUPT, XFER_OP_VERIFY, XFER_S_CORRUPT, v->n, (unsigned)sent,
                     v->ends[0].t->dev->name, (unsigned)arrived, v->ends[1].t->dev->name);
  return rc;
}
