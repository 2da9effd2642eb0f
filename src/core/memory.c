/*
** memory.c -- the caching allocator that owns every buffer: tensors, staging chunks,
** interop scratch, on every device, host memory included. Each device keeps the segments
** its driver gave; a freed block goes back to the device's cache, not to the driver.
** Modelled on PyTorch's CUDA caching allocator: sizes rounded up, a small pool (blocks of
** at most 1 MiB carved from 2 MiB segments) and a large one, best fit, blocks split and
** merged again with their free neighbours. Also the settings, empty_cache, the accounting
** (as torch.cuda.memory_stats), and what the garbage collector of the host application is
** told: when a driver refuses, and when tensor bytes it cannot see have piled up.
*/
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_call.h"
#include "memory.h"
#include "faults.h"
#include "device.h"

#define SMALL_SIZE ((size_t)1 << 20)      /* the largest block of the small pool */
#define SMALL_SEGMENT ((size_t)2 << 20)   /* what the small pool asks the driver for */
#define MID_SIZE ((size_t)10 << 20)       /* large blocks below this share ... */
#define LARGE_SEGMENT ((size_t)20 << 20)  /* ... segments of this size */
#define SEGMENT_ROUND ((size_t)2 << 20)   /* larger ones get a segment of their own, rounded */
#define DEVICE_MIN_BLOCK ((size_t)512)    /* block sizes and offsets on devices */
#define GC_MIN_THRESHOLD ((uint64_t)64 << 20)

/* An array of pointers kept in an order: the pools' free blocks, the host segments. */
typedef struct ordered {
  void **items;
  size_t n, cap;
} ordered;

/* 0 when there was no room: the caller says what being unlisted means. */
static int ordered_insert(ordered *o, size_t at, void *item)
{
  if (o->n == o->cap) {
    size_t cap = o->cap ? o->cap * 2 : 32;
    void **grown = realloc(o->items, cap * sizeof *grown);
    if (!grown) return 0;
    o->items = grown;
    o->cap = cap;
  }
  memmove(&o->items[at + 1], &o->items[at], (o->n - at) * sizeof o->items[0]);
  o->items[at] = item;
  o->n++;
  return 1;
}

static void *ordered_take(ordered *o, size_t at)
{
  void *item = o->items[at];
  memmove(&o->items[at], &o->items[at + 1], (o->n - at - 1) * sizeof o->items[0]);
  o->n--;
  return item;
}

/* Free blocks ordered by (size, segment, offset): the first at least as large as asked is
** the best fit, and of equal fits the same one comes back each time (its segment's pins
** and imports with it). */
typedef ordered pool;

typedef struct xfer_allocator {
  pthread_mutex_t lock;         /* a leaf, but for the driver calls made under it */
  pool small, large;
  xfer_segment *segments;
  size_t min_block;             /* host: a page, so every host block can be pinned in place */
  int host;
  ordered by_addr;              /* host: the segments by address, for xfer_host_span_of */
  xfer_memory_info stats;       /* cached is worked out when asked */
} xfer_allocator;

/* Pins of host memory and imports of device memory undone in this process, ever: what a runtime
** found pinned or imported before is so still while this has not moved
** (xfer_mem_mappings_undone: CUDA's kept descriptor tables hold such addresses). */
static uint64_t mappings_undone;

uint64_t xfer_mem_mappings_undone(void)
{
  return __atomic_load_n(&mappings_undone, __ATOMIC_ACQUIRE);
}

/* Before a pin or an import is undone: a reader then sees the count moved. */
static void mapping_undone(void) { __atomic_add_fetch(&mappings_undone, 1, __ATOMIC_ACQ_REL); }

/* -- Pools --------------------------------------------------------------------------- */

static int block_before(const xfer_block *x, const xfer_block *y)
{
  if (x->size != y->size) return x->size < y->size;
  if (x->seg != y->seg) return (uintptr_t)x->seg < (uintptr_t)y->seg;
  return x->offset < y->offset;
}

/* Index of the first block not before `key`. */
static size_t pool_lower(const pool *p, const xfer_block *key)
{
  size_t lo = 0, hi = p->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (block_before(p->items[mid], key))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* 0 when there was no room to list it: the block stays in its segment, unlisted, and is
** found again through its neighbours when they are freed. */
static int pool_insert(pool *p, xfer_block *b) { return ordered_insert(p, pool_lower(p, b), b); }

static void pool_remove(pool *p, const xfer_block *b)
{
  size_t at = pool_lower(p, b);
  if (at < p->n && p->items[at] == b) ordered_take(p, at); /* else unlisted */
}

/* backed_only: a block of a segment in the backing device's memory (see backs) */
static xfer_block *pool_best_fit(pool *p, size_t size, int backed_only)
{
  xfer_block key = {.size = size};
  for (size_t at = pool_lower(p, &key); at < p->n; at++) {
    const xfer_block *b = p->items[at];
    if (!backed_only || b->seg->backing_buf) return ordered_take(p, at);
  }
  return NULL;
}

static pool *pool_of(xfer_allocator *a, const xfer_segment *seg)
{
  return seg->small ? &a->small : &a->large;
}

/* -- Sizes ----------------------------------------------------------------------------- */

/* 0 when n cannot be rounded without overflowing. */
static size_t round_size(const xfer_allocator *a, size_t n)
{
  if (n > SIZE_MAX - a->min_block) return 0;
  return (n + a->min_block - 1) / a->min_block * a->min_block;
}

static size_t segment_size(const xfer_device *dev, size_t size)
{
  size_t seg;
  if (size <= SMALL_SIZE)
    seg = SMALL_SEGMENT;
  else if (size < MID_SIZE)
    seg = LARGE_SEGMENT;
  else
    seg = size > SIZE_MAX - SEGMENT_ROUND ? size : (size + SEGMENT_ROUND - 1) / SEGMENT_ROUND * SEGMENT_ROUND;
  /* a device whose driver caps single allocations gets no more than it asked for */
  if (dev->max_alloc && seg > dev->max_alloc && size <= dev->max_alloc) seg = size;
  return seg;
}

static int caching(const xfer_ctx *ctx) { return __atomic_load_n(&ctx->config.cache, __ATOMIC_RELAXED); }

static uint64_t cache_limit(const xfer_ctx *ctx)
{
  return __atomic_load_n(&ctx->config.cache_limit, __ATOMIC_RELAXED);
}

/* -- Segments ---------------------------------------------------------------------------- */

/* What the driver gave for a segment: the buffer the device's runtime uses, and for a
** device backed by another runtime's memory, that memory and the import's handle. */
typedef struct seg_memory {
  void *buf, *handle, *backing_buf;
} seg_memory;

/* A segment of `dev` in memory its backing device shares: allocated there, imported here
** (op "alloc", so an alloc fault on the device fails it as it would a plain allocation).
** Measured on an H200: cuMemCreate + map + export of 256 MiB 3.2 ms, OpenCL's import 0.16. */
static xfer_code backed_alloc(xfer_device *dev, size_t size, seg_memory *m, xfer_error *err)
{
  xfer_device *backing = dev->backing;
  int fd = -1;
  uint64_t memory_size = 0;
  xfer_code rc = xfer_be_alloc_shared(backing, size, &m->backing_buf, &fd, &memory_size, err);
  if (rc && rc != XFER_E_DEVICE_LOST) { /* the backing runtime's words, as an allocation */
    rc = XFER_E_ALLOC;
    if (err) err->code = rc;
  }
  if (rc) return rc;
  rc = xfer_be_import_fd(dev, fd, memory_size, size, XFER_OP_ALLOC, &m->buf, &m->handle, err);
  if (rc) {
    close(fd);
    xfer_be_free_shared(backing, m->backing_buf, size);
    m->backing_buf = NULL;
  }
  return rc;
}

/* 1 when a segment of `size` bytes of `dev` lies in its backing device's memory: beyond the
** device's largest buffer its own refusal says so best, and beyond its largest import
** (max_import) the buffer is the driver's own. */
static int backs(const xfer_device *dev, size_t size)
{
  return dev->backing && !dev->backing->lost && !(dev->max_alloc && size > dev->max_alloc) &&
         !(dev->max_import && size > dev->max_import);
}

static xfer_code raw_alloc(xfer_device *dev, size_t size, seg_memory *m, xfer_error *err)
{
  memset(m, 0, sizeof *m);
  if (backs(dev, size)) return backed_alloc(dev, size, m, err);
  return xfer_be_alloc(dev, size, &m->buf, err);
}

static void raw_free(xfer_device *dev, const seg_memory *m, size_t size)
{
  if (!m->backing_buf) {
    xfer_be_free(dev, m->buf, size);
    return;
  }
  mapping_undone();
  xfer_be_release_import(dev, m->buf, m->handle); /* the importer first, then the memory */
  xfer_be_free_shared(dev->backing, m->backing_buf, size);
}

static void note_peak(uint64_t *peak, uint64_t now)
{
  if (now > *peak) *peak = now;
}

/* -- Host segments by address -------------------------------------------------------- */

/* Index of the first host segment whose base is above `ptr`. */
static size_t addr_upper(const xfer_allocator *a, const char *ptr)
{
  size_t lo = 0, hi = a->by_addr.n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((const char *)((xfer_segment *)a->by_addr.items[mid])->buf <= ptr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Unlisted when there is no room: runtimes then just don't use it in place. */
static void addr_insert(xfer_allocator *a, xfer_segment *seg)
{
  ordered_insert(&a->by_addr, addr_upper(a, seg->buf), seg);
}

static void addr_remove(xfer_allocator *a, const xfer_segment *seg)
{
  size_t at = addr_upper(a, seg->buf);
  if (at > 0 && a->by_addr.items[at - 1] == seg) ordered_take(&a->by_addr, at - 1);
}

/* The host segment holding [ptr, ptr+n). (a->lock held) */
static xfer_segment *host_segment(const xfer_allocator *a, const void *ptr, size_t n)
{
  size_t at = addr_upper(a, ptr);
  if (at == 0) return NULL;
  xfer_segment *seg = a->by_addr.items[at - 1];
  const char *p = ptr, *base = seg->buf;
  return n <= seg->size && (size_t)(p - base) <= seg->size - n ? seg : NULL;
}

int xfer_host_span_of(xfer_ctx *ctx, const void *ptr, size_t n, xfer_host_span *out)
{
  xfer_allocator *a = xfer_host_of(ctx)->alloc;
  pthread_mutex_lock(&a->lock);
  xfer_segment *seg = host_segment(a, ptr, n);
  if (seg) {
    out->base = seg->buf;
    out->size = seg->size;
  }
  pthread_mutex_unlock(&a->lock);
  return seg != NULL;
}

void *xfer_host_pin(xfer_ctx *ctx, const char *base, const void *key)
{
  xfer_allocator *a = xfer_host_of(ctx)->alloc;
  void *pin = NULL;
  pthread_mutex_lock(&a->lock);
  xfer_segment *seg = host_segment(a, base, 1);
  for (int i = 0; seg && seg->buf == base && i < seg->npins && !pin; i++)
    if (seg->pins[i].key == key) pin = seg->pins[i].pin;
  pthread_mutex_unlock(&a->lock);
  return pin;
}

static int pin_keep(xfer_ctx *ctx, const char *base, xfer_pin kept_pin)
{
  xfer_allocator *a = xfer_host_of(ctx)->alloc;
  int kept = 0;
  pthread_mutex_lock(&a->lock);
  xfer_segment *seg = host_segment(a, base, 1);
  if (seg && seg->buf == base && seg->npins < XFER_MAX_PINS) {
    int taken = 0;
    for (int i = 0; i < seg->npins; i++) taken |= seg->pins[i].key == kept_pin.key;
    if (!taken) {
      seg->pins[seg->npins++] = kept_pin;
      kept = 1;
    }
  }
  pthread_mutex_unlock(&a->lock);
  return kept;
}

int xfer_host_pin_keep(xfer_ctx *ctx, const char *base, xfer_device *dev, void *pin)
{
  return pin_keep(ctx, base, (xfer_pin){.key = dev, .pin = pin});
}

int xfer_host_pin_keep_owned(xfer_ctx *ctx, const char *base, void *owner, void *pin,
                             xfer_pin_undo undo)
{
  return pin_keep(ctx, base, (xfer_pin){.key = owner, .pin = pin, .undo = undo});
}


/* (a->lock held) What a pin made for the segment is undone. */
static void pin_undo(const xfer_segment *seg, const xfer_pin *pin)
{
  mapping_undone();
  if (pin->undo)
    pin->undo(pin->key, seg->buf, seg->size, pin->pin);
  else
    xfer_be_host_unpin(pin->key, seg->buf, seg->size, pin->pin); /* a device's pin */
}

/* Every pin kept under `key` is undone. */
static void unpin_key(xfer_ctx *ctx, const void *key)
{
  xfer_allocator *a = xfer_host_of(ctx)->alloc;
  pthread_mutex_lock(&a->lock);
  for (size_t at = 0; at < a->by_addr.n; at++) { /* pinned segments are all listed there */
    xfer_segment *seg = a->by_addr.items[at];
    int kept = 0;
    for (int i = 0; i < seg->npins; i++) {
      if (seg->pins[i].key == key)
        pin_undo(seg, &seg->pins[i]);
      else
        seg->pins[kept++] = seg->pins[i];
    }
    seg->npins = kept;
  }
  pthread_mutex_unlock(&a->lock);
}

/* Everything `dev` made for host segments (its imports or pins of them) is undone: the device
** is closing. (No move uses the device: its lock is held.) */
void xfer_mem_host_unpin_device(xfer_ctx *ctx, xfer_device *dev)
{
  unpin_key(ctx, dev);
}

void xfer_host_unpin_owner(xfer_ctx *ctx, void *owner)
{
  unpin_key(ctx, owner);
}

/* Memory an application wrapped with pin = true, listed with the host segments so that the
** runtimes pin or import it as they do xferlua's own; NULL (no pinning, moves still work) when
** it overlaps a host segment or there is no room. Never freed by xferlua: dropping it only
** lets go of the pins. */
xfer_segment *xfer_mem_host_external(xfer_ctx *ctx, void *base, size_t size)
{
  xfer_allocator *a = xfer_host_of(ctx)->alloc;
  xfer_segment *seg = calloc(1, sizeof *seg);
  if (!seg || !size) {
    free(seg);
    return NULL;
  }
  seg->dev = xfer_host_of(ctx);
  seg->buf = base;
  seg->size = size;
  pthread_mutex_lock(&a->lock);
  size_t at = addr_upper(a, base);
  const xfer_segment *below = at ? a->by_addr.items[at - 1] : NULL;
  const xfer_segment *above = at < a->by_addr.n ? a->by_addr.items[at] : NULL;
  int overlaps = (below && (const char *)below->buf + below->size > (const char *)base) ||
                 (above && (const char *)base + size > (const char *)above->buf);
  int listed = !overlaps && ordered_insert(&a->by_addr, at, seg);
  pthread_mutex_unlock(&a->lock);
  if (!listed) {
    free(seg);
    return NULL;
  }
  return seg;
}

void xfer_mem_host_external_drop(xfer_ctx *ctx, xfer_segment *seg)
{
  if (!seg) return;
  xfer_allocator *a = xfer_host_of(ctx)->alloc;
  pthread_mutex_lock(&a->lock);
  addr_remove(a, seg);
  for (int i = 0; i < seg->npins; i++) /* the moves through it have ended */
    pin_undo(seg, &seg->pins[i]);
  pthread_mutex_unlock(&a->lock);
  free(seg);
}

void *xfer_mem_import_find(xfer_segment *seg, const xfer_device *importer, int *room)
{
  xfer_allocator *a = seg->dev->alloc;
  void *buf = NULL;
  pthread_mutex_lock(&a->lock);
  for (int i = 0; i < seg->nimports && !buf; i++)
    if (seg->imports[i].dev == importer) buf = seg->imports[i].buf;
  *room = seg->nimports < XFER_MAX_IMPORTS;
  pthread_mutex_unlock(&a->lock);
  return buf;
}

int xfer_mem_import_keep(xfer_segment *seg, xfer_device *importer, void *buf, void *handle)
{
  xfer_allocator *a = seg->dev->alloc;
  pthread_mutex_lock(&a->lock);
  int kept = seg->nimports < XFER_MAX_IMPORTS;
  if (kept) seg->imports[seg->nimports++] = (xfer_import){importer, buf, handle};
  pthread_mutex_unlock(&a->lock);
  return kept;
}

/* Every import `dev` made of another device's segment is released: the device is closing.
** (A move that uses an import holds the importer's lock, which the closer holds.) */
void xfer_mem_drop_imports_by(xfer_ctx *ctx, xfer_device *dev)
{
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_allocator *a = ctx->devices[d]->alloc;
    pthread_mutex_lock(&a->lock);
    for (xfer_segment *seg = a->segments; seg; seg = seg->next) {
      int kept = 0;
      for (int i = 0; i < seg->nimports; i++) {
        if (seg->imports[i].dev == dev) {
          mapping_undone();
          xfer_be_release_import(dev, seg->imports[i].buf, seg->imports[i].handle);
        }
        else
          seg->imports[kept++] = seg->imports[i];
      }
      seg->nimports = kept;
    }
    pthread_mutex_unlock(&a->lock);
  }
}

/* A new segment around `buf`, one free block covering it (NULL when out of host memory). */
static xfer_block *segment_add(xfer_allocator *a, xfer_device *dev, const seg_memory *m,
                               size_t size, int small)
{
  xfer_segment *seg = calloc(1, sizeof *seg);
  xfer_block *b = calloc(1, sizeof *b);
  if (!seg || !b) {
    free(seg);
    free(b);
    return NULL;
  }
  seg->dev = dev;
  seg->buf = m->buf;
  seg->handle = m->handle;
  seg->backing_buf = m->backing_buf;
  seg->size = size;
  seg->small = small;
  seg->first = b;
  seg->next = a->segments;
  if (a->segments) a->segments->prev = seg;
  a->segments = seg;
  if (a->host) addr_insert(a, seg);
  b->seg = seg;
  b->buf = m->buf;
  b->size = size;
  a->stats.reserved += size;
  a->stats.segments++;
  note_peak(&a->stats.peak_reserved, a->stats.reserved);
  return b;
}

/* Back to the driver, with everything it cost: other runtimes' imports of it first. Its
** one block is free and out of the pools. */
static void segment_release(xfer_allocator *a, xfer_segment *seg)
{
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    a->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  xfer_imports_release(seg->imports, &seg->nimports);
  if (a->host) addr_remove(a, seg);
  for (int i = 0; i < seg->npins; i++) /* no move uses it: runtimes let go before it is gone */
    pin_undo(seg, &seg->pins[i]);
  seg_memory m = {seg->buf, seg->handle, seg->backing_buf};
  raw_free(seg->dev, &m, seg->size);
  a->stats.reserved -= seg->size;
  a->stats.segments--;
  a->stats.driver_frees++;
  free(seg->first);
  free(seg);
}

static int segment_is_free(const xfer_segment *seg)
{
  return !seg->first->allocated && !seg->first->next;
}

/* Every segment no block is using goes back to the driver, while more than `keep` bytes
** are cached. (a->lock held) */
static void release_cached(xfer_allocator *a, uint64_t keep)
{
  xfer_segment *seg = a->segments;
  while (seg && a->stats.reserved - a->stats.allocated > keep) {
    xfer_segment *next = seg->next;
    if (segment_is_free(seg)) {
      pool_remove(pool_of(a, seg), seg->first);
      segment_release(a, seg);
    }
    seg = next;
  }
}

/* The driver's allocation. When it refuses: the cache goes back, the host application
** collects what it no longer references (unlocked: its collector frees tensors here), the
** cache goes back again, and the allocation is tried once more -- only if memory did come
** back, so a refusal with nothing to give stays the first error. (a->lock held) */
static xfer_code driver_alloc(xfer_allocator *a, xfer_device *dev, size_t size, seg_memory *m,
                              xfer_error *err)
{
  a->stats.driver_allocs++;
  xfer_code rc = raw_alloc(dev, size, m, err);
  if (rc != XFER_E_ALLOC || dev->lost) return rc;
  uint64_t frees = a->stats.driver_frees;
  release_cached(a, 0);
  xfer_ctx *ctx = dev->ctx;
  pthread_mutex_lock(&ctx->lock);
  void (*reclaim)(void *) = ctx->reclaim;
  void *arg = ctx->reclaim_arg;
  pthread_mutex_unlock(&ctx->lock);
  if (reclaim) {
    pthread_mutex_unlock(&a->lock);
    reclaim(arg);
    pthread_mutex_lock(&a->lock);
    release_cached(a, 0);
  }
  if (a->stats.driver_frees == frees) return rc;
  a->stats.oom_retries++;
  a->stats.driver_allocs++;
  return raw_alloc(dev, size, m, err);
}

/* -- Blocks -------------------------------------------------------------------------------- */

/* Cuts `b` down to `size`, the rest a free block of its own -- where the rest is worth
** keeping apart (PyTorch's rule: any rest in the small pool, over 1 MiB in the large). */
static void split(xfer_allocator *a, xfer_block *b, size_t size)
{
  size_t rest = b->size - size;
  if (b->seg->small ? rest < a->min_block : rest <= SMALL_SIZE) return;
  xfer_block *r = calloc(1, sizeof *r);
  if (!r) return; /* the block stays larger than asked: no harm */
  r->seg = b->seg;
  r->buf = b->buf;
  r->offset = b->offset + size;
  r->size = rest;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  pool_insert(pool_of(a, b->seg), r);
}

/* `b` (free, unlisted) joined with its free neighbours; the joined block. */
static xfer_block *merge(xfer_allocator *a, xfer_block *b)
{
  pool *p = pool_of(a, b->seg);
  xfer_block *n = b->next;
  if (n && !n->allocated) {
    pool_remove(p, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
  }
  xfer_block *before = b->prev;
  if (before && !before->allocated) {
    pool_remove(p, before);
    before->size += b->size;
    before->next = b->next;
    if (b->next) b->next->prev = before;
    free(b);
    b = before;
  }
  return b;
}

/* (a->lock held) A new segment from the driver for a block of `size` (nbytes asked), the whole
** segment its one block (*b). */
static xfer_code new_segment(xfer_allocator *a, xfer_device *dev, size_t nbytes, size_t size,
                             int cache, xfer_block **b, xfer_error *err)
{
  size_t seg_size = cache ? segment_size(dev, size) : size;
  /* beyond what the driver allows in one allocation: asked as is, so that its refusal names
  ** the size the caller asked for; within it, never rounded past it */
  if (dev->max_alloc && size > dev->max_alloc) seg_size = nbytes;
  seg_memory m;
  xfer_code rc = driver_alloc(a, dev, seg_size, &m, err);
  if (!rc && !(*b = segment_add(a, dev, &m, seg_size, size <= SMALL_SIZE))) {
    raw_free(dev, &m, seg_size);
    a->stats.driver_frees++;
    rc = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_ALLOC);
  }
  return rc;
}

xfer_code xfer_mem_alloc(xfer_device *dev, size_t nbytes, xfer_block **out, xfer_error *err)
{
  *out = NULL;
  if (nbytes == 0) return XFER_E_OK; /* nothing to hold: no block, no driver call */
  xfer_allocator *a = dev->alloc;
  size_t size = round_size(a, nbytes);
  if (!size)
    return xfer_be_blame(dev, xfer_err_op(err, XFER_E_ALLOC, XFER_OP_ALLOC, XFER_S_ALLOC_TOO_LARGE,
                                          nbytes),
                         err);
  pthread_mutex_lock(&a->lock);
  if (dev->lost) {
    release_cached(a, 0);
    pthread_mutex_unlock(&a->lock);
    return xfer_be_blame(dev, xfer_device_lost_error(dev, XFER_OP_ALLOC, err), err);
  }
  if (xfer_device_is_closed(dev)) {
    pthread_mutex_unlock(&a->lock);
    return xfer_be_blame(dev, xfer_err_op(err, XFER_E_CLOSED, XFER_OP_ALLOC,
                                          XFER_S_DEVICE_CLOSED_REOPEN, dev->name, dev->name), err);
  }
  int cache = caching(dev->ctx);
  xfer_block *b = NULL;
  /* a block the device would back never comes from a segment of the driver's own (a large
  ** tensor's, cached): interop reaches a backed device's tensors through the backing memory,
  ** and the planner chose interop for this size (seen on the H200: a 4 MiB block cut from a
  ** freed 1 GiB OpenCL buffer, then a peer copy asked OpenCL, which exports nothing) */
  int backed_only = backs(dev, size);
  if (cache && (b = pool_best_fit(size <= SMALL_SIZE ? &a->small : &a->large, size, backed_only))) {
    a->stats.cache_hits++;
  } else {
    xfer_code rc = new_segment(a, dev, nbytes, size, cache, &b, err);
    if (rc) {
      pthread_mutex_unlock(&a->lock);
      return xfer_be_blame(dev, rc, err);
    }
    if (b->size < size) size = b->size;
  }
  if (cache) split(a, b, size);
  b->allocated = 1;
  b->requested = nbytes;
  a->stats.allocated += b->size;
  a->stats.in_use += nbytes;
  a->stats.buffers++;
  note_peak(&a->stats.peak_allocated, a->stats.allocated);
  note_peak(&a->stats.peak, a->stats.in_use);
  pthread_mutex_unlock(&a->lock);
  *out = b;
  return XFER_E_OK;
}

/* (a->lock held) */
static void block_free(xfer_allocator *a, xfer_block *b);

static void hold_for_stalled(xfer_block *b);

void xfer_mem_free(xfer_block *b)
{
  if (!b) return;
  hold_for_stalled(b); /* a stalled device's work may use any memory a move gave it */
  xfer_allocator *a = b->seg->dev->alloc;
  pthread_mutex_lock(&a->lock);
  if (b->held && !b->free_asked) { /* a stalled device may still use it: later */
    b->free_asked = 1;
    a->stats.held += b->requested;
  } else if (!b->held) {
    block_free(a, b);
  }
  pthread_mutex_unlock(&a->lock);
}

void xfer_mem_landing(xfer_device *dev, long long bytes)
{
  xfer_allocator *a = dev->alloc;
  pthread_mutex_lock(&a->lock);
  a->stats.held += (uint64_t)bytes; /* (a negative count wraps back: what was added) */
  pthread_mutex_unlock(&a->lock);
}

static void block_free(xfer_allocator *a, xfer_block *b)
{
  xfer_segment *seg = b->seg;
  xfer_device *dev = seg->dev;
  a->stats.allocated -= b->size;
  a->stats.in_use -= b->requested;
  a->stats.buffers--;
  b->allocated = 0;
  b->requested = 0;
  b = merge(a, b);
  int cache = caching(dev->ctx) && !dev->lost; /* a lost device's memory is not reused */
  /* a whole segment goes back when caching is off, or when its block cannot be listed */
  int listed = cache || !segment_is_free(seg) ? pool_insert(pool_of(a, seg), b) : 0;
  if (!listed && segment_is_free(seg)) segment_release(a, seg);
  uint64_t limit = cache_limit(dev->ctx);
  if (!cache)
    release_cached(a, 0);
  else if (limit)
    release_cached(a, limit);
}

/* -- Quarantine: memory a stalled device's work may still use ------------------------------ */

/* The devices' quarantine lists, taken before any allocator's lock: blocks are freed, and
** quarantined, from worker threads (jobs, the staged reader) as well as the caller's. */
static pthread_mutex_t quarantine_lock = PTHREAD_MUTEX_INITIALIZER;

/* (quarantine_lock held) */
static void hold_locked(xfer_device *stalled, xfer_block *b, double since)
{
  if (stalled->nquarantine == stalled->quarantine_cap) {
    size_t cap = stalled->quarantine_cap ? 2 * stalled->quarantine_cap : 8;
    xfer_block **grown = realloc(stalled->quarantine, cap * sizeof *grown);
    if (grown) stalled->quarantine = grown;
    double *times = grown ? realloc(stalled->quarantine_since, cap * sizeof *times) : NULL;
    if (!times) return; /* (out of memory: the block is not held -- the best left to do) */
    stalled->quarantine_since = times;
    stalled->quarantine_cap = cap;
  }
  xfer_allocator *a = b->seg->dev->alloc;
  pthread_mutex_lock(&a->lock);
  b->held++;
  pthread_mutex_unlock(&a->lock);
  stalled->quarantine_since[stalled->nquarantine] = since;
  stalled->quarantine[stalled->nquarantine++] = b;
}

/* A block freed while devices of its context are stalled is held by each: which memory their
** work was given -- a move's ends, its staging and scratch, a backend's chunks -- is not
** known here, and any of it freed and handed on (or its segment and import released, with
** caching off) is written, or read, by the driver after the fact: heap corruption under
** PoCL, a crash in lavapipe's queue thread (CI fuzz seeds 201-216). Held only while
** stalled: the first move on a device that finds its work done lets go (settle). */
static int any_stalled(xfer_ctx *ctx)
{
  size_t n = __atomic_load_n(&ctx->ndevices, __ATOMIC_ACQUIRE);
  for (size_t d = 0; d < n; d++)
    if (__atomic_load_n(&ctx->devices[d]->stalled, __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

static void hold_for_stalled(xfer_block *b)
{
  xfer_ctx *ctx = b->seg->dev->ctx;
  if (!any_stalled(ctx)) return;
  /* a device whose work is done by now holds nothing more: asked first, where this thread is
  ** in no move (memory freed with no move to follow -- a save's chunks, a device never used
  ** again -- was held for good: 12 GB in a loop of saves past their deadline) */
  xfer_mem_settle_stalled(ctx);
  if (!any_stalled(ctx)) return;
  size_t n = __atomic_load_n(&ctx->ndevices, __ATOMIC_ACQUIRE);
  double now = xfer_now();
  pthread_mutex_lock(&quarantine_lock);
  for (size_t d = 0; d < n; d++)
    if (__atomic_load_n(&ctx->devices[d]->stalled, __ATOMIC_ACQUIRE)) hold_locked(ctx->devices[d], b, now);
  pthread_mutex_unlock(&quarantine_lock);
}

/* Whether the device's work is done, asked for up to `seconds` (a millisecond apart). */
static int idle_within(xfer_device *dev, double seconds)
{
  double until = xfer_now() + seconds;
  uint64_t faulted = __atomic_load_n(&dev->stall_fault_epoch, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((!faulted || faulted != xfer_fault_epoch(dev->ctx) + 1) && xfer_be_idle(dev)) return 1;
    if (xfer_now() >= until) return 0;
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
}

/* (a->lock held) One hold of b let go: back to its pool if it was freed and none holds it. */
static void unhold_locked(xfer_allocator *a, xfer_block *b)
{
  if (--b->held == 0 && b->free_asked) {
    b->free_asked = 0;
    a->stats.held -= b->requested;
    block_free(a, b);
  }
}

void xfer_mem_quarantine_settle(xfer_device *dev, xfer_settle how)
{
  if (!__atomic_load_n(&dev->stalled, __ATOMIC_ACQUIRE)) return;
  /* closing: the driver's work is given a while to end; a device closed with its work still
  ** going keeps what it holds (the memory is lost rather than handed on while written) */
  int idle = idle_within(dev, how == XFER_SETTLE_NOW ? 0 : 2.0);
  if (!idle && how != XFER_SETTLE_END) return; /* its work goes on: held still */
  /* what was submitted before idle_upto is done: what was freed before then goes back (its
  ** users were submitted before it was freed); once that covers the last wait that ended at a
  ** deadline, the device is no longer stalled and everything goes back. Where stalls keep
  ** coming, memory still goes back as the markers pass it. */
  double stalled_at;
  __atomic_load(&dev->stalled_at, &stalled_at, __ATOMIC_ACQUIRE);
  int all = how == XFER_SETTLE_END || dev->idle_upto > stalled_at;
  xfer_block **released = NULL;
  size_t nreleased = 0;
  pthread_mutex_lock(&quarantine_lock);
  if (all) {
    __atomic_store_n(&dev->stalled, 0, __ATOMIC_RELEASE); /* a block freed from now on is not held */
    released = dev->quarantine;
    nreleased = dev->nquarantine;
    free(dev->quarantine_since);
    dev->quarantine = NULL;
    dev->quarantine_since = NULL;
    dev->nquarantine = dev->quarantine_cap = 0;
  } else {
    released = malloc((dev->nquarantine ? dev->nquarantine : 1) * sizeof *released);
    size_t kept = 0;
    for (size_t i = 0; released && i < dev->nquarantine; i++) {
      if (dev->quarantine_since[i] < dev->idle_upto) {
        released[nreleased++] = dev->quarantine[i];
      } else {
        dev->quarantine_since[kept] = dev->quarantine_since[i];
        dev->quarantine[kept++] = dev->quarantine[i];
      }
    }
    if (released) dev->nquarantine = kept;
  }
  pthread_mutex_unlock(&quarantine_lock);
  for (size_t i = 0; i < nreleased; i++) {
    xfer_allocator *a = released[i]->seg->dev->alloc;
    pthread_mutex_lock(&a->lock);
    unhold_locked(a, released[i]);
    pthread_mutex_unlock(&a->lock);
  }
  free(released);
}

void xfer_mem_settle_stalled(xfer_ctx *ctx)
{
  if (xfer_device_locks_held()) return; /* (inside a move: its own end settles) */
  size_t n = __atomic_load_n(&ctx->ndevices, __ATOMIC_ACQUIRE);
  for (size_t d = 0; d < n; d++) {
    xfer_device *dev = ctx->devices[d];
    if (!__atomic_load_n(&dev->stalled, __ATOMIC_ACQUIRE) || !xfer_device_trylock(dev)) continue;
    xfer_mem_quarantine_settle(dev, XFER_SETTLE_NOW);
    xfer_device_unlock(dev);
  }
}

/* -- Devices and the context ----------------------------------------------------------- */

/* After every runtime has opened: a device that imports, and whose GPU has a device of
** another runtime that makes memory to share (an OpenCL device on NVIDIA's GPU, CUDA), keeps
** its tensors there -- unless XFER_SHARED_MEMORY=0. */
void xfer_mem_link_backing(xfer_ctx *ctx)
{
  if (!xfer_env_flag("XFER_SHARED_MEMORY")) return;
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_device *dev = ctx->devices[d];
    if (!dev->can_import || dev->unified || !dev->has_uuid || !xfer_be_has_import(dev)) continue;
    for (size_t s = 0; s < ctx->ndevices && !dev->backing; s++) {
      xfer_device *sharer = ctx->devices[s];
      if (sharer->rt != dev->rt && xfer_be_can_share(sharer) && xfer_same_gpu(sharer, dev))
        dev->backing = sharer;
    }
  }
}

xfer_code xfer_mem_device_init(xfer_device *dev, int host)
{
  xfer_allocator *a = calloc(1, sizeof *a);
  if (!a) return XFER_E_ALLOC;
  pthread_mutex_init(&a->lock, NULL);
  long page = sysconf(_SC_PAGESIZE);
  a->min_block = host ? (page > 0 ? (size_t)page : 4096) : DEVICE_MIN_BLOCK;
  a->host = host;
  dev->alloc = a;
  return XFER_E_OK;
}

void xfer_mem_device_fini(xfer_device *dev)
{
  xfer_allocator *a = dev->alloc;
  if (!a) return;
  pthread_mutex_destroy(&a->lock);
  free(a->small.items);
  free(a->large.items);
  free(a->by_addr.items);
  free(a);
  dev->alloc = NULL;
}

void xfer_mem_release_all(xfer_ctx *ctx)
{
  /* every device's first: a segment may hold imports into another device's runtime */
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_allocator *a = ctx->devices[d]->alloc;
    pthread_mutex_lock(&a->lock);
    release_cached(a, 0);
    pthread_mutex_unlock(&a->lock);
  }
}

void xfer_empty_cache(xfer_ctx *ctx, xfer_device *dev)
{
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_allocator *a = ctx->devices[d]->alloc;
    if (dev && ctx->devices[d] != dev) continue;
    pthread_mutex_lock(&a->lock);
    release_cached(a, 0);
    pthread_mutex_unlock(&a->lock);
  }
}

void xfer_device_memory(const xfer_device *dev, xfer_memory_info *out)
{
  xfer_allocator *a = dev->alloc;
  pthread_mutex_lock(&a->lock);
  *out = a->stats;
  pthread_mutex_unlock(&a->lock);
  out->cached = out->reserved - out->allocated;
  out->objects = __atomic_load_n(&dev->objects, __ATOMIC_RELAXED);
}

/* -- Its settings (open.c keeps them; these are memory's own) ------------------------------ */

void xfer_mem_config_defaults(xfer_config *config)
{
  config->cache = xfer_env_flag("XFER_CACHE");
  config->cache_limit = 0;
}

xfer_code xfer_mem_config_check(const xfer_config *config, xfer_error *err)
{
  if (config->cache != 0 && config->cache != 1)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG, XFER_S_CONFIG_CACHE, config->cache);
  return XFER_E_OK;
}

void xfer_mem_config_applied(xfer_ctx *ctx, const xfer_config *config)
{
  /* what the new settings no longer allow goes back now */
  for (size_t d = 0; d < ctx->ndevices; d++) {
    xfer_allocator *a = ctx->devices[d]->alloc;
    pthread_mutex_lock(&a->lock);
    if (!config->cache)
      release_cached(a, 0);
    else if (config->cache_limit)
      release_cached(a, config->cache_limit);
    pthread_mutex_unlock(&a->lock);
  }
}

/* -- The host application's collector ---------------------------------------------------- */

void xfer_set_reclaim(xfer_ctx *ctx, void (*reclaim)(void *arg), void *arg)
{
  pthread_mutex_lock(&ctx->lock);
  ctx->reclaim = reclaim;
  ctx->reclaim_arg = arg;
  pthread_mutex_unlock(&ctx->lock);
}

void xfer_mem_tensor_made(xfer_ctx *ctx, size_t nbytes)
{
  __atomic_add_fetch(&ctx->gc_debt, nbytes, __ATOMIC_RELAXED);
  __atomic_add_fetch(&ctx->tensor_bytes, nbytes, __ATOMIC_RELAXED);
}

/* A tensor freed needs no collection to give its memory back: its bytes come off the
** debt too (a loop of to() and free() never makes the collector run; measured on the H200,
** a full collection after each 256 MiB to() cost 40 us against a 100 us device copy). */
void xfer_mem_tensor_dropped(xfer_ctx *ctx, size_t nbytes)
{
  __atomic_sub_fetch(&ctx->tensor_bytes, nbytes, __ATOMIC_RELAXED);
  uint64_t debt = __atomic_load_n(&ctx->gc_debt, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(&ctx->gc_debt, &debt, debt > nbytes ? debt - nbytes : 0, 1,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* Like Lua's own pause: a collection once as many bytes were made as were live after the
** last one (and never more often than every 64 MiB), so a loop that drops its tensors
** holds at most about twice what it keeps. */
int xfer_gc_due(xfer_ctx *ctx)
{
  uint64_t debt = __atomic_load_n(&ctx->gc_debt, __ATOMIC_RELAXED);
  uint64_t live = __atomic_load_n(&ctx->gc_baseline, __ATOMIC_RELAXED);
  return debt >= (live > GC_MIN_THRESHOLD ? live : GC_MIN_THRESHOLD);
}

void xfer_gc_done(xfer_ctx *ctx)
{
  __atomic_store_n(&ctx->gc_debt, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ctx->gc_baseline, __atomic_load_n(&ctx->tensor_bytes, __ATOMIC_RELAXED),
                   __ATOMIC_RELAXED);
}

void xfer_imports_release(xfer_import *imports, int *nimports)
{
  for (int i = 0; i < *nimports; i++) {
    mapping_undone();
    xfer_be_release_import(imports[i].dev, imports[i].buf, imports[i].handle);
  }
  *nimports = 0;
}
