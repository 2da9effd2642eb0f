/*
** file_load.c -- a file as the source of a move (xfer.h "Files as endpoints"): opening reads
** the header (file_format.c); a load allocates every target, then reads the file in large
** requests (file_route.c says how) and hands each chunk to the devices as one batch
** (batch.c decides how a batch moves), the next requests in flight meanwhile.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef XFER_WITH_ZLIB
#include <zlib.h>
#endif

#include "file_format.h"
#include "file_load.h"
#include "file_route.h"

struct xfer_file {
  xfer_ctx *ctx;
  char *path;
  int fd;
  uint64_t size;
  xfer_file_layout layout;
};

/* Puts the file, the tensor and the byte into an error a device or the file gave:
** "model.safetensors: tensor 'w' at byte 4096 onto cuda:0: <cause>". */
static xfer_code frame(xfer_error *err, const xfer_file *f, const char *tensor,
                       long long offset, const char *to)
{
  if (!err) return XFER_E_INVALID;
  char cause[sizeof err->message];
  xfer_copy_text(cause, sizeof cause, err->message);
  xfer_copy_text(err->file, sizeof err->file, f->path);
  if (tensor) xfer_copy_text(err->tensor, sizeof err->tensor, tensor);
  err->offset = offset;
  xfer_copy_text(err->from, sizeof err->from, "file");
  if (to) xfer_copy_text(err->to, sizeof err->to, to);
  if (strncmp(cause, f->path, strlen(f->path))) {
    char head[sizeof err->message];
    if (tensor && *tensor)
      snprintf(head, sizeof head, "Failed to load tensor '%s' of %s (byte %lld)%s%s: ", tensor,
               f->path, offset, to ? " onto " : "", to ? to : "");
    else /* a .npy's one array has no name */
      snprintf(head, sizeof head, "Failed to load %s (byte %lld)%s%s: ", f->path, offset,
               to ? " onto " : "", to ? to : "");
    xfer_err_join(err->message, sizeof err->message, head, cause);
  }
  return err->code;
}

xfer_code xfer_file_open(xfer_ctx *ctx, const char *path, xfer_file **out, xfer_error *err)
{
  *out = NULL;
  if (!path || !*path) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_OPEN, "no file name");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_OPEN, e, path, -1, "%s: %s", path,
                          strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_OPEN, 0, path, -1,
                          "%s: not a regular file", path);
  }
  xfer_file *f = calloc(1, sizeof *f);
  if (f) f->path = strdup(path);
  if (!f || !f->path) {
    if (f) free(f->path);
    free(f);
    close(fd);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  }
  f->ctx = xfer_ctx_retain(ctx);
  f->fd = fd;
  f->size = (uint64_t)st.st_size;
  xfer_fio io = { ctx, fd, 0, f->path };
  xfer_code code = xfer_format_read(&io, f->size, &f->layout, err);
  if (code) {
    xfer_file_close(f);
    return code;
  }
  *out = f;
  return XFER_E_OK;
}

void xfer_file_close(xfer_file *f)
{
  if (!f) return;
  xfer_format_free(&f->layout);
  if (f->fd >= 0) close(f->fd);
  xfer_ctx_release(f->ctx);
  free(f->path);
  free(f);
}

const char *xfer_file_format(const xfer_file *f) { return xfer_format_name(f->layout.format); }
const char *xfer_file_path(const xfer_file *f) { return f->path; }
xfer_ctx *xfer_file_context(const xfer_file *f) { return f->ctx; }
uint64_t xfer_file_size(const xfer_file *f) { return f->size; }
size_t xfer_file_count(const xfer_file *f) { return f->layout.count; }
size_t xfer_file_metadata_count(const xfer_file *f) { return f->layout.meta_count; }

int xfer_file_metadata(const xfer_file *f, size_t i, const char **key, const char **value)
{
  if (i >= f->layout.meta_count) return 0;
  *key = f->layout.meta_keys[i];
  *value = f->layout.meta_values[i];
  return 1;
}

xfer_code xfer_file_entry(const xfer_file *f, size_t i, xfer_file_info *out, xfer_error *err)
{
  if (i >= f->layout.count)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_ENTRY, "%s has %zu tensors, not %zu", f->path,
                        f->layout.count, i + 1);
  const xfer_format_entry *e = &f->layout.entries[i];
  *out = (xfer_file_info){ .name = e->name, .dtype = e->dtype, .shape = e->shape,
                           .offset = e->offset, .nbytes = e->nbytes, .deflated = e->deflated,
                           .fortran = e->fortran };
  return XFER_E_OK;
}

long xfer_file_find(const xfer_file *f, const char *name)
{
  for (size_t i = 0; i < f->layout.count; i++)
    if (!strcmp(f->layout.entries[i].name, name)) return (long)i;
  return -1;
}

/* -- the plan of a load ---------------------------------------------------------------- */

/* Bytes of one item read in one request: to `dst_off` of the item's tensor. */
typedef struct {
  size_t item;
  uint64_t file_off, len, dst_off;
} piece;

/* One request: [start, start + need) of the file (len: rounded up for O_DIRECT), into a
** chunk then scattered to its pieces, or (into != NULL) straight into a host tensor. */
typedef struct {
  uint64_t start;
  size_t len, need;
  size_t first, count; /* its pieces */
  void *into;
} request;

typedef struct {
  piece *pieces;
  size_t npieces, cap_pieces;
  request *reqs;
  size_t nreqs, cap_reqs;
  int failed;
} load_plan;

/* The next slot of a growing array of `size`-byte items (doubled as it fills, zeroed), or NULL
** with p->failed set when memory runs out. */
static void *grow(load_plan *p, void **items, size_t *n, size_t *cap, size_t size)
{
  if (*n == *cap) {
    size_t more = *cap ? 2 * *cap : 64;
    void *g = realloc(*items, more * size);
    if (!g) {
      p->failed = 1;
      return NULL;
    }
    *items = g;
    *cap = more;
  }
  void *slot = (char *)*items + (*n)++ * size;
  memset(slot, 0, size);
  return slot;
}

static piece *add_piece(load_plan *p)
{
  return grow(p, (void **)&p->pieces, &p->npieces, &p->cap_pieces, sizeof *p->pieces);
}

static request *add_request(load_plan *p)
{
  return grow(p, (void **)&p->reqs, &p->nreqs, &p->cap_reqs, sizeof *p->reqs);
}

/* Where an item's bytes lie in the file: `count` runs of `len` bytes, `stride` apart from byte
** `first`, landing one after another in its tensor (a whole entry, or a slice along a dimension
** of dimension 0: one run; a slice along a later one: a run per element of the dimensions
** before it). */
typedef struct {
  uint64_t first, len, stride, count;
} item_runs;

static item_runs runs_of(const xfer_format_entry *e, const xfer_load_item *it)
{
  if (!it->sliced) return (item_runs){ e->offset, e->nbytes, e->nbytes, e->nbytes ? 1 : 0 };
  uint64_t outer = 1, inner = xfer_dtype_size(e->dtype);
  for (int d = 0; d < it->dim; d++) outer *= (uint64_t)e->shape.dims[d];
  for (int d = it->dim + 1; d < e->shape.ndim; d++) inner *= (uint64_t)e->shape.dims[d];
  uint64_t stride = (uint64_t)e->shape.dims[it->dim] * inner;
  item_runs r = { e->offset + (uint64_t)it->begin * inner, (uint64_t)(it->end - it->begin) * inner,
                  stride, outer };
  if (r.len == stride) { /* the whole dimension: the runs touch, one run */
    r.len *= r.count;
    r.count = 1;
  }
  if (!r.len) r.count = 0;
  return r;
}

static uint64_t item_bytes(const xfer_format_entry *e, const xfer_load_item *it)
{
  item_runs r = runs_of(e, it);
  return r.len * r.count;
}

static int by_file_offset(const void *a, const void *b)
{
  const piece *x = a, *y = b;
  return x->file_off < y->file_off ? -1 : x->file_off > y->file_off;
}

static uint64_t align_down(uint64_t v) { return v / XFER_FIO_ALIGN * XFER_FIO_ALIGN; }
static uint64_t align_up(uint64_t v) { return (v + XFER_FIO_ALIGN - 1) / XFER_FIO_ALIGN * XFER_FIO_ALIGN; }

/* Whether an item is read straight into its tensor rather than through chunks: one run bound
** for host memory, in the page cache's mode (a compressed member is read apart, whole). */
static int read_straight(const xfer_format_entry *e, item_runs r, xfer_tensor *target,
                         const xfer_file_route *route)
{
  return !route->direct && !e->deflated && r.count == 1 && xfer_tensor_host_data(target);
}

/* An item read straight into its tensor, in chunk-sized requests. */
static void requests_into(load_plan *p, item_runs run, size_t item, void *host, uint64_t chunk)
{
  for (uint64_t at = 0; at < run.len && !p->failed; at += chunk) {
    request *r = add_request(p);
    if (!r) return;
    r->start = run.first + at;
    r->need = r->len = (size_t)(run.len - at < chunk ? run.len - at : chunk);
    r->into = (char *)host + at;
    r->first = p->npieces;
    piece *pc = add_piece(p);
    if (!pc) return;
    *pc = (piece){ item, r->start, r->need, at };
    r->count = 1;
  }
}

/* The runs of the items read through chunks, each a piece [file_off, +len) -> dst_off, sorted
** by their place in the file (the parts of a tensor split along a later dimension interleave
** there); NULL with p->failed set when memory runs out. */
static piece *spans_of(const xfer_file *f, const xfer_load_item *items, size_t n,
                       xfer_tensor *const *targets, const xfer_file_route *route, load_plan *p,
                       size_t *count)
{
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    const xfer_format_entry *e = &f->layout.entries[items[i].entry];
    item_runs r = runs_of(e, &items[i]);
    if (!e->deflated && !read_straight(e, r, targets[i], route)) m += (size_t)r.count;
  }
  piece *spans = malloc((m ? m : 1) * sizeof *spans);
  if (!spans) { p->failed = 1; return NULL; }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const xfer_format_entry *e = &f->layout.entries[items[i].entry];
    item_runs r = runs_of(e, &items[i]);
    if (e->deflated || read_straight(e, r, targets[i], route)) continue;
    for (uint64_t j = 0; j < r.count; j++) spans[k++] = (piece){ i, r.first + j * r.stride, r.len, j * r.len };
  }
  qsort(spans, m, sizeof *spans, by_file_offset);
  *count = m;
  return spans;
}

/* Cuts the items' bytes into requests, in file order: neighbours share a chunk (gaps under
** 1 MiB read through), a chunk holds at most route->chunk bytes; in the page cache's mode an
** item of one run bound for host memory is read straight into it. */
static void plan_requests(const xfer_file *f, const xfer_load_item *items, size_t n,
                          xfer_tensor *const *targets, const xfer_file_route *route,
                          load_plan *p)
{
  for (size_t i = 0; i < n && !p->failed; i++) {
    const xfer_format_entry *e = &f->layout.entries[items[i].entry];
    item_runs r = runs_of(e, &items[i]);
    if (read_straight(e, r, targets[i], route))
      requests_into(p, r, i, xfer_tensor_host_data(targets[i]), route->chunk);
  }
  size_t m = 0;
  piece *spans = p->failed ? NULL : spans_of(f, items, n, targets, route, p, &m);
  const uint64_t gap = 1u << 20, chunk = route->chunk;
  request *open_req = NULL;
  for (size_t k = 0; k < m && !p->failed; k++) {
    const piece *span = &spans[k];
    uint64_t at = 0;
    while (at < span->len && !p->failed) {
      uint64_t off = span->file_off + at;
      if (open_req && (off > open_req->start + open_req->need + gap ||
                       off >= open_req->start + chunk))
        open_req = NULL;
      if (!open_req) {
        open_req = add_request(p);
        if (!open_req) break;
        open_req->start = route->direct ? align_down(off) : off;
        open_req->first = p->npieces;
      }
      uint64_t limit = open_req->start + chunk;
      uint64_t take = span->len - at < limit - off ? span->len - at : limit - off;
      piece *pc = add_piece(p);
      if (!pc) break;
      *pc = (piece){ span->item, off, take, span->dst_off + at };
      open_req->count++;
      open_req->need = (size_t)(off + take - open_req->start);
      at += take;
      if (off + take >= limit) open_req = NULL;
    }
  }
  for (size_t i = 0; i < p->nreqs; i++)
    if (!p->reqs[i].into)
      p->reqs[i].len = route->direct ? (size_t)align_up(p->reqs[i].need) : p->reqs[i].need;
  free(spans);
}

/* -- running it -------------------------------------------------------------------------- */

typedef struct {
  xfer_file *f;
  const xfer_load_item *items;
  size_t nitems;
  xfer_tensor **targets;
  const xfer_file_opts *opts;
  xfer_file_route route;
  load_plan plan;
  xfer_fio io;
  xfer_fio_queue *queue;
  xfer_tensor **chunks; /* one host tensor per slot */
  int nslots;
  xfer_batch *scatters; /* every device piece, a part per request: prepared once, before the
                        ** first read (NULL: no piece goes to a device) */
  size_t *scattered;    /* the piece of each of its elements */
  uint64_t total, done;
  int adrift;           /* stopped with reads a slow device still runs: they land on a helper */
} loading;

static const char *item_name(const loading *l, size_t item)
{
  return l->f->layout.entries[l->items[item].entry].name;
}

static const char *device_name(xfer_tensor *t)
{
  return t && xfer_tensor_device(t) ? xfer_device_name(xfer_tensor_device(t)) : NULL;
}

static void submit(loading *l, size_t r)
{
  request *q = &l->plan.reqs[r];
  int slot = (int)(r % (size_t)l->nslots);
  void *buf = q->into ? q->into : xfer_tensor_host_data(l->chunks[slot]);
  xfer_fio_submit(l->queue, slot, 0, buf, q->len, q->need, q->start);
}

/* The pieces bound for devices as one batch prepared once for the whole load, in a part per
** request, each element reading its request's chunk: routes, groups and a runtime's pieces are
** made here, and a request's scatter is a run of its part. */
static xfer_code plan_scatters(loading *l, xfer_error *err)
{
  size_t n = 0;
  for (size_t r = 0; r < l->plan.nreqs; r++)
    for (size_t k = 0; !l->plan.reqs[r].into && k < l->plan.reqs[r].count; k++)
      n += !xfer_tensor_host_data(l->targets[l->plan.pieces[l->plan.reqs[r].first + k].item]);
  if (!n) return XFER_E_OK;
  xfer_batch_item *items = malloc(n * sizeof *items);
  size_t *part_end = malloc(l->plan.nreqs * sizeof *part_end);
  l->scattered = malloc(n * sizeof *l->scattered);
  if (!items || !part_end || !l->scattered || !l->chunks) {
    free(items);
    free(part_end);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_READ);
  }
  size_t m = 0;
  for (size_t r = 0; r < l->plan.nreqs; r++) {
    const request *q = &l->plan.reqs[r];
    for (size_t k = 0; !q->into && k < q->count; k++) {
      const piece *pc = &l->plan.pieces[q->first + k];
      xfer_tensor *t = l->targets[pc->item];
      if (xfer_tensor_host_data(t)) continue; /* a memcpy when the chunk is in */
      items[m] = (xfer_batch_item){ .dst = t, .src = l->chunks[r % (size_t)l->nslots],
                                    .dst_offset = (size_t)pc->dst_off,
                                    .src_offset = (size_t)(pc->file_off - q->start),
                                    .nbytes = (size_t)pc->len };
      l->scattered[m++] = q->first + k;
    }
    part_end[r] = m;
  }
  xfer_code code = xfer_batch_prepare_parts(items, n, part_end, l->plan.nreqs, NULL, &l->scatters, err);
  if (code && err && err->element > 0) { /* an element the checks refused: its piece named */
    const piece *pc = &l->plan.pieces[l->scattered[err->element - 1]];
    code = frame(err, l->f, item_name(l, pc->item), (long long)pc->file_off,
                 device_name(l->targets[pc->item]));
  }
  free(items);
  free(part_end);
  return code;
}

/* Scatters request r's chunk into its pieces' tensors: host ones by memcpy, the others by a
** run of the request's part of the load's batch. */
static xfer_code scatter(loading *l, size_t r, xfer_error *err)
{
  request *q = &l->plan.reqs[r];
  if (q->into) return XFER_E_OK;
  const char *bytes = xfer_tensor_host_data(l->chunks[r % (size_t)l->nslots]);
  for (size_t k = 0; k < q->count; k++) {
    const piece *pc = &l->plan.pieces[q->first + k];
    char *host = xfer_tensor_host_data(l->targets[pc->item]);
    if (host) memcpy(host + pc->dst_off, bytes + (pc->file_off - q->start), (size_t)pc->len);
  }
  xfer_code code = l->scatters ? xfer_batch_run_part(l->scatters, r, err) : XFER_E_OK;
  if (code) {
    size_t at = err && err->element > 0 ? (size_t)err->element - 1 : 0;
    const piece *pc = &l->plan.pieces[l->scattered[at]];
    return frame(err, l->f, item_name(l, pc->item), (long long)pc->file_off,
                 device_name(l->targets[pc->item]));
  }
  return XFER_E_OK;
}

/* How long a stopped load waits for its reads in flight to end, each within a step (a
** millisecond from the page cache), before it leaves them to a helper thread: a disk's read
** took 1.2 s here now and then, past a deadline of 0.26 s. */
#define SETTLE_SECONDS 0.002

static xfer_code run_requests(loading *l, xfer_error *err)
{
  size_t n = l->plan.nreqs;
  size_t ahead = (size_t)l->nslots < n ? (size_t)l->nslots : n;
  size_t submitted = 0, waited = 0; /* requests [waited, submitted) are in flight */
  while (submitted < ahead) submit(l, submitted++);
  xfer_code code = XFER_E_OK;
  while (waited < n && !code) {
    size_t r = waited++;
    request *q = &l->plan.reqs[r];
    const piece *pc = &l->plan.pieces[q->first];
    /* watched: the wait ends at the deadline or the cancel, not with the request */
    if (!xfer_fio_await(l->queue, (int)(r % (size_t)l->nslots)) &&
        (code = xfer_watch_check(l->done, l->total, err))) {
      frame(err, l->f, item_name(l, pc->item), (long long)q->start, NULL);
      waited--; /* still in flight: waited for below */
      break;
    }
    code = xfer_fio_wait(l->queue, (int)(r % (size_t)l->nslots), err);
    if (code) {
      code = frame(err, l->f, item_name(l, pc->item), err ? err->offset : (long long)q->start,
                   device_name(l->targets[pc->item]));
      break;
    }
    if ((code = scatter(l, r, err))) break;
    l->done += q->need;
    if ((code = xfer_watch_check(l->done, l->total, err))) { /* past the deadline, or canceled */
      frame(err, l->f, item_name(l, pc->item), (long long)q->start, NULL);
      break;
    }
    if (submitted < n) submit(l, submitted++);
    if (l->opts && l->opts->progress &&
        l->opts->progress(l->opts->progress_ud, l->done, l->total)) {
      xfer_err_op(err, XFER_E_INVALID, XFER_OP_PROGRESS, "the progress callback stopped the load");
      code = frame(err, l->f, item_name(l, pc->item), (long long)q->start, NULL);
    }
  }
  /* every request still in flight lands before its buffer goes (those not started: dropped);
  ** stopped with a watch (a deadline, a job that may be canceled), those a slow or stuck device
  ** still runs after SETTLE_SECONDS land on a helper thread that holds what they read into
  ** (close_queue); with none, the load waits for them -- it has no deadline to keep, and returns
  ** with nothing allocated (a helper still holding chunks is memory in use after the failure) */
  if (code) xfer_fio_drop(l->queue);
  if (code && xfer_watch_watched() && !xfer_fio_settle(l->queue, SETTLE_SECONDS)) {
    l->adrift = 1;
    return code;
  }
  for (; waited < submitted; waited++) {
    xfer_error ignored;
    xfer_fio_wait(l->queue, (int)(waited % (size_t)l->nslots), &ignored);
  }
  return code;
}

#ifdef XFER_WITH_ZLIB
static xfer_code load_deflated(loading *l, size_t item, xfer_error *err)
{
  const xfer_format_entry *e = &l->f->layout.entries[l->items[item].entry];
  xfer_tensor *t = l->targets[item];
  uint8_t *in = malloc(e->stored ? (size_t)e->stored : 1);
  /* the member inflates to its .npy header (inflated_skip bytes), then the elements */
  xfer_code code = in ? xfer_fio_read(&(xfer_fio){ l->f->ctx, l->f->fd, 0, l->f->path }, in,
                                      (size_t)e->stored, e->offset, err)
                      : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_READ);
  uint8_t *out = NULL;
  size_t total = 0;
  if (!code) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
      code = xfer_fio_error(err, XFER_E_ALLOC, XFER_OP_READ, 0, l->f->path,
                            (long long)e->offset, "inflateInit2 failed");
    } else {
      size_t cap = (size_t)(e->nbytes + e->inflated_skip);
      out = malloc(cap);
      z.next_in = in;
      z.avail_in = (uInt)e->stored;
      z.next_out = out;
      z.avail_out = (uInt)cap;
      int zr = out ? inflate(&z, Z_FINISH) : Z_MEM_ERROR;
      total = cap - z.avail_out;
      inflateEnd(&z);
      if (zr != Z_STREAM_END)
        code = xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, l->f->path,
                              (long long)e->offset, "the deflated member is corrupt (%s)",
                              z.msg ? z.msg : zr == Z_MEM_ERROR ? "out of memory" : "truncated");
    }
  }
  if (!code && total != e->nbytes + e->inflated_skip)
    code = xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, l->f->path, (long long)e->offset,
                          "the deflated member holds %zu bytes, its array %llu", total,
                          (unsigned long long)e->nbytes);
  if (!code) code = xfer_tensor_write(t, out + e->inflated_skip, (size_t)e->nbytes, err);
  free(in);
  free(out);
  return code ? frame(err, l->f, e->name, (long long)e->offset, device_name(t)) : XFER_E_OK;
}
#endif

/* A target for an item: on its device, or on the host where it is converted or transposed
** afterwards (an .npy array in Fortran order lands as its transpose). */
static xfer_code allocate(loading *l, size_t i, xfer_device *host, xfer_error *err)
{
  const xfer_load_item *it = &l->items[i];
  const xfer_format_entry *e = &l->f->layout.entries[it->entry];
  xfer_shape shape = e->shape;
  if (it->sliced) shape.dims[it->dim] = it->end - it->begin;
  if (e->fortran)
    for (int d = 0; d < shape.ndim; d++) shape.dims[d] = e->shape.dims[shape.ndim - 1 - d];
  int later = it->convert || e->fortran;
  xfer_device *dev = later ? host : it->dev;
  xfer_code code = xfer_tensor_empty(dev, e->dtype, &shape, &l->targets[i], err);
  return code ? frame(err, l->f, e->name, (long long)e->offset, xfer_device_name(it->dev))
              : XFER_E_OK;
}

/* Converted or transposed items, moved to their devices. */
static xfer_code finish_item(loading *l, size_t i, xfer_error *err)
{
  const xfer_load_item *it = &l->items[i];
  const xfer_format_entry *e = &l->f->layout.entries[it->entry];
  if (!it->convert && !e->fortran) return XFER_E_OK;
  xfer_tensor *src = l->targets[i], *view = NULL;
  xfer_code code = XFER_E_OK;
  if (e->fortran) {
    /* the bytes are the row-major transpose: a view with the strides reversed reads them */
    int64_t packed[XFER_MAX_DIMS], strides[XFER_MAX_DIMS];
    xfer_packed_strides(xfer_tensor_shape(src), packed);
    for (int d = 0; d < e->shape.ndim; d++) strides[d] = packed[e->shape.ndim - 1 - d];
    code = xfer_tensor_view(src, &e->shape, strides, 0, &view, err);
  }
  xfer_transfer_opts topts = { .convert = it->convert, .dtype = it->dtype };
  xfer_tensor *moved = NULL;
  if (!code) code = xfer_transfer_to(view ? view : src, it->dev, &topts, &moved, err);
  xfer_tensor_release(view);
  if (code) return frame(err, l->f, e->name, (long long)e->offset, xfer_device_name(it->dev));
  xfer_tensor_release(src);
  l->targets[i] = moved;
  return XFER_E_OK;
}

/* The CRC32C the file records for an entry ("crc32c.NAME" in safetensors' __metadata__, 8 hex
** digits); 0 when it records none. */
static int recorded_sum(const xfer_file *f, const char *name, uint32_t *sum)
{
  static const char key[] = "crc32c.";
  for (size_t m = 0; m < f->layout.meta_count; m++) {
    const char *k = f->layout.meta_keys[m], *v = f->layout.meta_values[m];
    char *end = NULL;
    if (strncmp(k, key, sizeof key - 1) || strcmp(k + sizeof key - 1, name)) continue;
    unsigned long x = strtoul(v, &end, 16);
    if (strlen(v) != 8 || *end) return 0;
    *sum = (uint32_t)x;
    return 1;
  }
  return 0;
}

/* Item i's bytes as they landed (before a dtype change or a transpose) against the sum the
** file records: XFER_E_CORRUPT where they differ. */
static xfer_code verify_item(loading *l, size_t i, xfer_error *err)
{
  const xfer_format_entry *e = &l->f->layout.entries[l->items[i].entry];
  uint32_t want = 0, got = 0;
  const char *on = xfer_device_name(xfer_tensor_device(l->targets[i]));
  if (!recorded_sum(l->f, e->name, &want)) {
    xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_VERIFY, "%s: '%s': the file records no CRC32C "
                "of it (crc32c.%s in __metadata__: xferlua's saves write one)", l->f->path,
                e->name, e->name);
    return frame(err, l->f, e->name, -1, on); /* the record names the file and the tensor */
  }
  xfer_code code = xfer_tensor_crc32c(l->targets[i], &got, err);
  if (!code && got != want) {
    xfer_err_op(err, XFER_E_CORRUPT, XFER_OP_VERIFY, "%s: '%s' landed changed: CRC32C %08x "
                "recorded, %08x on %s", l->f->path, e->name, (unsigned)want, (unsigned)got, on);
    code = frame(err, l->f, e->name, -1, on);
  }
  return code;
}

static int by_begin(const void *a, const void *b)
{
  const xfer_load_item *x = *(const xfer_load_item *const *)a, *y = *(const xfer_load_item *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The parts of a split entry (the sliced items of item i's entry, i the first) against the sum
** the file records for the whole: each part's runs summed on its device, joined in the file's
** order. Every part must be there, along one dimension, without overlap. */
static xfer_code verify_parts(loading *l, size_t i, xfer_error *err)
{
  const xfer_load_item *it = &l->items[i];
  const xfer_format_entry *e = &l->f->layout.entries[it->entry];
  uint32_t want = 0, got = 0;
  if (!recorded_sum(l->f, e->name, &want)) return verify_item(l, i, err); /* says so */
  size_t n = 0;
  for (size_t j = i; j < l->nitems; j++) n += l->items[j].sliced && l->items[j].entry == it->entry;
  /* (n >= 1: item i is one) */
  const xfer_load_item **parts = malloc(n * sizeof *parts);
  uint32_t **sums = calloc(n, sizeof *sums);
  item_runs *runs = calloc(n, sizeof *runs);
  if (!parts || !sums || !runs) {
    free(parts);
    free(sums);
    free(runs);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  }
  xfer_code code = XFER_E_OK;
  for (size_t j = i, m = 0; j < l->nitems && m < n; j++)
    if (l->items[j].sliced && l->items[j].entry == it->entry) parts[m++] = &l->items[j];
  qsort(parts, n, sizeof *parts, by_begin);
  int64_t upto = 0;
  for (size_t m = 0; m < n && parts[m]->dim == it->dim && parts[m]->begin == upto; m++)
    upto = parts[m]->end;
  if (upto != e->shape.dims[it->dim]) {
    xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_VERIFY, "%s: '%s': verify checks a split tensor "
                "whole (the file records one CRC32C of all of it): load every part of it along one "
                "dimension", l->f->path, e->name);
    code = frame(err, l->f, e->name, -1, NULL);
  }
  for (size_t m = 0; m < n && !code; m++) {
    runs[m] = runs_of(e, parts[m]);
    sums[m] = malloc((runs[m].count ? runs[m].count : 1) * sizeof **sums);
    xfer_tensor *t = l->targets[parts[m] - l->items];
    code = !sums[m] ? xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY)
         : runs[m].count ? xfer_tensor_crc32c_each(t, (size_t)runs[m].len, sums[m],
                                                   (size_t)runs[m].count, err)
                         : XFER_E_OK;
  }
  uint64_t rows = 0; /* the dimensions before the split one: a run each in every part */
  for (size_t m = 0; m < n && !code; m++) rows = runs[m].count > rows ? runs[m].count : rows;
  for (uint64_t row = 0; row < rows && !code; row++) /* part by part, each row of the file */
    for (size_t m = 0; m < n; m++)
      if (runs[m].count && sums[m]) got = xfer_crc32c_join(got, sums[m][row], (size_t)runs[m].len);
  if (!code && got != want) {
    xfer_err_op(err, XFER_E_CORRUPT, XFER_OP_VERIFY, "%s: '%s' landed changed in its %zu parts: "
                "CRC32C %08x recorded, %08x joined from them", l->f->path, e->name, n,
                (unsigned)want, (unsigned)got);
    code = frame(err, l->f, e->name, -1, NULL);
  }
  for (size_t m = 0; m < n; m++) free(sums[m]);
  free(sums);
  free(runs);
  free(parts);
  return code;
}

/* Every item's bytes as they landed: whole entries one by one, a split entry's parts together
** (at its first). */
static xfer_code verify_items(loading *l, xfer_error *err)
{
  xfer_code code = XFER_E_OK;
  for (size_t i = 0; i < l->nitems && !code; i++) {
    const xfer_load_item *it = &l->items[i];
    int first = 1;
    for (size_t j = 0; j < i && it->sliced && first; j++)
      first = !(l->items[j].sliced && l->items[j].entry == it->entry);
    if (!it->sliced) code = verify_item(l, i, err);
    else if (first) code = verify_parts(l, i, err);
  }
  return code;
}

void xfer_split_part(int64_t n, int parts, int part, int64_t *begin, int64_t *end)
{
  int64_t each = parts > 0 ? n / parts : 0, longer = parts > 0 ? n % parts : 0;
  *begin = part * each + (part < longer ? part : longer);
  *end = *begin + each + (part < longer);
}

/* A slice names a dimension of its entry and elements inside it; an entry stored compressed or
** in column-major order is not sliced in place (its bytes are not the row-major elements). */
static xfer_code check_slice(const xfer_file *f, const xfer_load_item *it, xfer_error *err)
{
  const xfer_format_entry *e = &f->layout.entries[it->entry];
  const char *why = NULL;
  char text[160];
  if (it->dim < 0 || it->dim >= e->shape.ndim) {
    snprintf(text, sizeof text, "it has %d dimension%s: no dimension %d to split", e->shape.ndim,
             e->shape.ndim == 1 ? "" : "s", it->dim);
    why = text;
  } else if (it->begin < 0 || it->end < it->begin || it->end > e->shape.dims[it->dim]) {
    snprintf(text, sizeof text, "elements [%lld, %lld) are not inside dimension %d (%lld)",
             (long long)it->begin, (long long)it->end, it->dim, (long long)e->shape.dims[it->dim]);
    why = text;
  }
  xfer_code code = XFER_E_OK;
  if (why)
    code = xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, f->path, (long long)e->offset,
                          "%s: tensor '%s': %s", f->path, e->name, why);
  else if (e->deflated || e->fortran)
    code = xfer_fio_error(err, XFER_E_UNSUPPORTED, XFER_OP_READ, 0, f->path, (long long)e->offset,
                          "%s: tensor '%s': a %s array is not split as it loads (load it whole, "
                          "then move views of it)", f->path, e->name,
                          e->deflated ? "compressed" : "column-major (fortran_order)");
  if (code && err) xfer_copy_text(err->tensor, sizeof err->tensor, e->name);
  return code;
}

static xfer_code check_items(xfer_file *f, const xfer_load_item *items, size_t n,
                             xfer_error *err)
{
  for (size_t i = 0; i < n; i++) {
    if (items[i].entry >= f->layout.count)
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, f->path, -1,
                            "%s has %zu tensors: no entry %zu", f->path, f->layout.count,
                            items[i].entry);
    if (!items[i].dev)
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, f->path, -1,
                            "item %zu has no device", i + 1);
    if (items[i].convert && (unsigned)items[i].dtype >= XFER_DTYPE__COUNT)
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_CONVERT, 0, f->path, -1,
                            "item %zu: no such dtype", i + 1);
    xfer_code code = items[i].sliced ? check_slice(f, &items[i], err) : XFER_E_OK;
    if (code) return code;
  }
  return XFER_E_OK;
}

static uint64_t items_bytes(const xfer_file *f, const xfer_load_item *items, size_t n)
{
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const xfer_format_entry *e = &f->layout.entries[items[i].entry];
    total += items[i].sliced ? item_bytes(e, &items[i]) : e->stored;
  }
  return total;
}

/* A device's step as the load's batch runs it, from its first group there (by whom, over whose
** memory: the group's own words); 0 when no group goes there. */
static int say_batch(const xfer_batch *scatters, const xfer_device *dev, xfer_file_route *route)
{
  size_t groups = 0;
  xfer_batch_groups(scatters, &groups, NULL);
  for (size_t g = 0; g < groups; g++) {
    xfer_plan words;
    xfer_error ignored;
    if (xfer_batch_plan(scatters, g, &words, &ignored) || !words.nmoves || !words.nsteps ||
        strcmp(words.moves[0].to, xfer_device_name(dev)))
      continue;
    /* its first step, and the one after where that one is an import */
    int two = words.nsteps > 1 && strstr(words.steps[0], "imports") != NULL;
    xfer_file_route_say(route, "into %.40s: each chunk's pieces by a part of the load's batch "
                        "(the first chunk's: %.64s%s%.64s)", xfer_device_name(dev), words.steps[0],
                        two ? "; " : "", two ? words.steps[1] : "");
    return 1;
  }
  return 0;
}

/* Where the bytes go, a step per destination after the reads: host tensors, then each device --
** as the plan will move its pieces, or (scatters: the load's batch, made) as that batch does. */
static void say_destinations(const xfer_load_item *items, size_t n, const xfer_batch *scatters,
                             xfer_file_route *route)
{
  route->nsteps = 1; /* the reads' */
  int host = 0;
  for (size_t i = 0; i < n; i++) host |= !items[i].dev || xfer_device_is_host(items[i].dev) ||
                                         items[i].convert;
  if (host)
    xfer_file_route_say(route, "into host tensors: %s", route->direct
                        ? "copied out of each chunk by the CPU"
                        : "read straight into them, no chunk between");
  for (size_t i = 0; i < n; i++) {
    const xfer_device *dev = items[i].dev;
    int seen = !dev || xfer_device_is_host(dev) || items[i].convert;
    for (size_t j = 0; j < i && !seen; j++) seen = items[j].dev == dev && !items[j].convert;
    if (!seen && !(scatters && say_batch(scatters, dev, route)))
      xfer_file_route_say(route, "into %s: each chunk's pieces by one part of the load's batch, "
                          "prepared once for the file", xfer_device_name(dev));
  }
}

xfer_code xfer_file_plan(xfer_file *f, const xfer_load_item *items, size_t n,
                         const xfer_file_opts *opts, xfer_file_route *out, xfer_error *err)
{
  xfer_code code = check_items(f, items, n, err);
  if (code) return code;
  int devices = 0, cuda = 0;
  for (size_t i = 0; i < n; i++) {
    const xfer_device *dev = items[i].dev; /* checked above; NULL: the host */
    devices |= dev && !xfer_device_is_host(dev);
    /* GPUDirect Storage reads into CUDA memory: a device whose memory is CUDA's */
    cuda |= dev && xfer_device_memory_kind(dev) == XFER_MEMORY_CUDA;
  }
  code = xfer_file_route_make(f->path, f->fd, f->size, items_bytes(f, items, n), 0, devices, opts,
                              out, err);
  if (!code && cuda) out->gds = xfer_file_gds(out->gds_reason, sizeof out->gds_reason);
  if (!code) say_destinations(items, n, NULL, out);
  return code;
}

/* Everything the requests need before the first read: the chunks of host memory they read
** into, the batch that scatters them (planned once), the queue that reads. */
static xfer_code prepare_requests(loading *l, xfer_device *host, xfer_error *err)
{
  if ((size_t)l->nslots > l->plan.nreqs) l->nslots = l->plan.nreqs < 2 ? 2 : (int)l->plan.nreqs;
  l->chunks = calloc((size_t)l->nslots, sizeof *l->chunks);
  xfer_code code = l->chunks ? XFER_E_OK : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_READ);
  int need_chunks = 0;
  for (size_t r = 0; r < l->plan.nreqs; r++) need_chunks |= !l->plan.reqs[r].into;
  xfer_shape cs = { 1, { (int64_t)l->route.chunk } };
  for (int s = 0; s < l->nslots && !code && need_chunks; s++)
    code = xfer_tensor_empty(host, XFER_U8, &cs, &l->chunks[s], err);
  if (!code) code = plan_scatters(l, err);
  if (!code && l->scatters) say_destinations(l->items, l->nitems, l->scatters, &l->route);
  if (code) return code;
  code = xfer_fio_queue_open(&l->io, xfer_fio_engine_of(l->route.engine), l->nslots,
                             l->route.threads ? l->route.threads : 2, XFER_FIO_STALL_MS, &l->queue,
                             err);
  if (code == XFER_E_UNAVAILABLE && l->route.engine == XFER_FILE_ENGINE_URING) {
    xfer_file_route_next(&l->route, XFER_FILE_REFUSED_URING, err ? err->message : "");
    code = xfer_fio_queue_open(&l->io, xfer_fio_engine_of(l->route.engine), l->nslots,
                               l->route.threads, XFER_FIO_STALL_MS, &l->queue, err);
  }
  return code;
}

static xfer_code load(xfer_file *f, const xfer_load_item *items, size_t n, const xfer_file_opts *opts,
                      xfer_tensor **out, xfer_error *err);

/* The queue closed once its reads ended -- or, adrift, by a helper thread that holds what they
** read into (the chunks, the host targets read straight into) until they have. */
static void close_queue(loading *l)
{
  xfer_tensor **held = l->adrift ? calloc((size_t)l->nslots + l->nitems, sizeof *held) : NULL;
  if (!held) {
    xfer_fio_queue_close(l->queue);
    return;
  }
  size_t n = 0;
  for (int s = 0; l->chunks && s < l->nslots; s++) held[n++] = l->chunks[s];
  for (size_t i = 0; i < l->nitems; i++)
    if (l->targets[i] && xfer_tensor_host_data(l->targets[i])) held[n++] = l->targets[i];
  xfer_fio_queue_close_holding(l->queue, l->f->ctx, held, n);
  free(held);
}

/* The deadline the load's options ask for (or xfer.config's), from now, over its reads and
** its device pieces' batch runs (which keep the earlier deadline of theirs and this). */
static xfer_watch watch_of(xfer_ctx *ctx, const xfer_file_opts *opts)
{
  xfer_config config;
  xfer_config_get(ctx, &config);
  return xfer_watch_for(opts ? opts->timeout : 0, config.timeout);
}

xfer_code xfer_file_load(xfer_file *f, const xfer_load_item *items, size_t n,
                         const xfer_file_opts *opts, xfer_tensor **out, xfer_error *err)
{
  for (size_t i = 0; i < n; i++) out[i] = NULL;
  xfer_watch outer = watch_of(f->ctx, opts);
  xfer_code code = load(f, items, n, opts, out, err);
  xfer_watch_restore(outer);
  return code;
}

static xfer_code load(xfer_file *f, const xfer_load_item *items, size_t n, const xfer_file_opts *opts,
                      xfer_tensor **out, xfer_error *err)
{
  loading l = { .f = f, .items = items, .nitems = n, .targets = out, .opts = opts, .io = { f->ctx, -1, 0, f->path } };
  xfer_code code = xfer_file_plan(f, items, n, opts, &l.route, err);
  if (code) return code;
  xfer_device *host = NULL;
  code = xfer_device_find(f->ctx, "host", &host, err);
  for (size_t i = 0; i < n && !code; i++) code = allocate(&l, i, host, err);
  if (!code && l.route.direct) {
    char why[160];
    l.io.fd = xfer_file_open_direct(f->path, 0, why, sizeof why);
    if (l.io.fd >= 0) l.io.direct = 1;
    else xfer_file_route_next(&l.route, XFER_FILE_REFUSED_DIRECT, why);
  }
  if (l.io.fd < 0) l.io.fd = f->fd;
  if (!code) {
    plan_requests(f, items, n, out, &l.route, &l.plan);
    if (l.plan.failed) code = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_READ);
  }
  for (size_t r = 0; r < l.plan.nreqs; r++) l.total += l.plan.reqs[r].need;
  l.nslots = l.route.depth;
  if (!code && l.plan.nreqs) code = prepare_requests(&l, host, err);
  if (!code && l.plan.nreqs) code = run_requests(&l, err);
  close_queue(&l);
  xfer_batch_release(l.scatters);
  free(l.scattered);
  for (int s = 0; l.chunks && s < l.nslots; s++) xfer_tensor_release(l.chunks[s]);
  free(l.chunks);
#ifdef XFER_WITH_ZLIB
  for (size_t i = 0; i < n && !code; i++)
    if (f->layout.entries[items[i].entry].deflated) code = load_deflated(&l, i, err);
#else
  for (size_t i = 0; i < n && !code; i++)
    if (f->layout.entries[items[i].entry].deflated)
      code = xfer_fio_error(err, XFER_E_UNSUPPORTED, XFER_OP_READ, 0, f->path, -1,
                            "a deflated member: this build has no zlib");
#endif
  if (opts && opts->verify && !code) code = verify_items(&l, err);
  for (size_t i = 0; i < n && !code; i++) code = finish_item(&l, i, err);
  if (l.io.fd >= 0 && l.io.fd != f->fd) close(l.io.fd);
  free(l.plan.pieces);
  free(l.plan.reqs);
  xfer_file_route_taken(&l.route);
  if (code) /* nothing half-loaded stays */
    for (size_t i = 0; i < n; i++) {
      xfer_tensor_release(out[i]);
      out[i] = NULL;
    }
  return code;
}
