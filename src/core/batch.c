/*
** batch.c -- many copies as one: the one place that decides how a batch moves. Prepared once:
** every element checked (tensors alive, ranges inside them, no two destinations overlapping),
** the elements grouped by (from, to), each group's route made once and, where one device
** runs the whole group (host <-> device, or within a device) and its runtime takes a batch
** (copy->many), the group's pieces built for it. Run many times: each group's devices held
** and its tensors checked under those locks, then one submission, or the group's copies one
** by one on its route. A failure names the element; the elements done are known.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "batch_through.h"
#include "batch_uses.h"
#include "ledger.h"

/* The tensors of another runtime whose memory one group reaches through imports. */
#define VIEWS_MAX 8

/* One way a group may run, all of it at once: `many` takes its pieces in one submission (over
** imports of the other runtime's memory: imports), or `through` packs it into host chunks that
** `many` scatters; `many` NULL: element by element on the group's route. */
typedef struct group_way {
  xfer_device *many, *through;
  int imports;
} group_way;
#define GROUP_WAYS 3

typedef struct group {
  xfer_device *from, *to;
  size_t part;                  /* the part its elements are in (xfer_batch_prepare_parts) */
  size_t first, count;          /* the group's elements: order[first .. first+count) */
  size_t bytes;
  xfer_route route;             /* made once, at prepare */
  xfer_code planned;            /* its error, reported when the group runs */
  xfer_error planning;
  int general;                  /* one element moved as xfer_transfer_copy moves it, by */
  xfer_move_plan *plan;         /* ... its plan, made once at prepare (planned: its error), or
                                ** the one before's where their elements are alike: */
  int owns_plan;
  size_t sample;                /* a general group's element (its only one) */
  group_way ways[GROUP_WAYS];   /* the ways it may run, best first, decided at prepare; the
                                ** last is element by element. A way whose memory a runner
                                ** cannot reach, or that a driver refuses, gives way to the
                                ** next, for good: */
  int nways, way;               /* ... how many, and the one in use, whose parts follow */
  xfer_device *many;            /* the device that takes the group at once, or NULL */
  xfer_piece *pieces;           /* ... and its pieces, in the group's order */
  xfer_device *through;         /* a group through host memory in two submissions: the device
                                ** that packs the sources into it (`many` then scatters it) */
  xfer_through staged;          /* ... and its parts, chunk by chunk (batch_through.c) */
  uint64_t keep;                /* names the pieces to `many` from the second run on (a runtime
                                ** may keep what it made of them: CUDA its descriptor table on
                                ** the device); a new name whenever the pieces change */
  unsigned runs;                /* runs at once in this way (the first passes no name: a batch
                                ** made for one run keeps nothing) */
  xfer_use *uses;               /* the group's tensors, each once, checked once per run */
  size_t nuses;
  int imports;                  /* the runner reaches ends of another runtime through imports
                                ** of their memory, one per tensor: */
  size_t nviews;
  struct {
    const xfer_tensor *t;
    void *view;                 /* t's segment as the runner sees it when the pieces were made */
  } views[VIEWS_MAX];
} group;

struct xfer_batch {
  int refs;                     /* the caller's, and a job's while it runs it (atomic) */
  int running;                  /* a run is under way (ctx->lock): another is refused */
  xfer_ctx *ctx;
  size_t n, bytes;
  xfer_batch_item *items;       /* the tensors retained */
  xfer_tensor **tensors;        /* the elements' tensors, each once: busy from a claim to the
                                ** run's end */
  size_t ntensors;
  unsigned char *done;          /* per element, in the last run */
  size_t *order;                /* element indexes grouped */
  size_t *idle, nidle;          /* elements that move nothing (0 bytes, or bytes onto
                                ** themselves): no route, no group, no runner -- checked and
                                ** done at once */
  group *groups;
  size_t ngroups;
  size_t *part_end, nparts;     /* parts: elements [part_end[k-1], part_end[k]) (none: one) */
  xfer_transfer_opts opts;
  int has_opts;
};

/* An element moved as xfer_transfer_copy moves it (whole tensors with views or dtypes), not
** in a group. */
static int is_general(const xfer_batch_item *it)
{
  return it->nbytes == 0 &&
         (!it->src->contiguous || !it->dst->contiguous || it->src->dtype != it->dst->dtype);
}

static size_t length_of(const xfer_batch_item *it)
{
  return it->nbytes ? it->nbytes : it->src->nbytes;
}

/* The part element i is in (0 where the batch has no parts). */
static size_t part_of(const xfer_batch *b, size_t i)
{
  size_t lo = 0, hi = b->nparts;
  while (lo < hi) { /* the first part that ends after i */
    size_t mid = lo + (hi - lo) / 2;
    if (b->part_end[mid] > i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* An element copying bytes onto themselves: nothing to move (a driver may refuse the copy). */
static int onto_itself(const xfer_batch_item *it)
{
  return it->src->buf == it->dst->buf &&
         it->src->offset + it->src_offset == it->dst->offset + it->dst_offset;
}

/* An element with nothing to move -- 0 bytes (an empty tensor has no memory at all), or bytes
** copied onto themselves -- is decided here, once: it joins no group, so no route is made for
** it, no runner is asked to reach its memory and no piece or chunk is sized by it. */
static int moves_nothing(const xfer_batch_item *it)
{
  return length_of(it) == 0 || (!is_general(it) && onto_itself(it));
}

/* An element's failure: numbered (from 1) in the record, and its message led by which one it
** was (the checks of prepare say it in their own words). */
static xfer_code element_error(xfer_error *err, size_t i, size_t n, xfer_code rc)
{
  if (!err || !rc) return rc;
  err->element = (long long)i + 1;
  if (strncmp(err->message, "batch: ", 7)) {
    char said[sizeof err->message];
    memcpy(said, err->message, sizeof said);
    snprintf(err->message, sizeof err->message, "batch element %zu of %zu: %.440s", i + 1, n, said);
  }
  return rc;
}

/* One element's own checks (its tensors checked already, once each): the range inside both, one
** shape for whole tensors. */
static xfer_code check_item(const xfer_batch_item *it, size_t i, size_t n, xfer_error *err)
{
  if (it->nbytes == 0) {
    if (it->dst_offset || it->src_offset)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_OFFSETS_NEED_BYTES, i + 1,
                         n);
    if (it->dst->numel != it->src->numel || it->dst->shape.ndim != it->src->shape.ndim ||
        memcmp(it->dst->shape.dims, it->src->shape.dims,
               sizeof it->dst->shape.dims[0] * (size_t)it->dst->shape.ndim)) {
      char want[96], got[96];
      xfer_shape_format(it->dst->dtype, &it->dst->shape, want, sizeof want);
      xfer_shape_format(it->src->dtype, &it->src->shape, got, sizeof got);
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_SHAPES_DIFFER, i + 1, n,
                         want, got);
    }
    return XFER_E_OK;
  }
  if (!it->dst->contiguous || !it->src->contiguous)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_RANGE_OF_VIEW, i + 1, n);
  const xfer_tensor *ends[2] = {it->dst, it->src};
  size_t offs[2] = {it->dst_offset, it->src_offset};
  for (int e = 0; e < 2; e++)
    if (offs[e] > ends[e]->nbytes || it->nbytes > ends[e]->nbytes - offs[e])
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_RANGE_OUTSIDE, i + 1, n,
                         offs[e], offs[e] + it->nbytes, e ? "source" : "target", ends[e]->nbytes);
  return XFER_E_OK;
}

/* What an element touches: the memory (the owner's buffer) and the range, read or written. */
typedef struct span {
  const void *memory;
  size_t lo, hi, index;
  int writes;
} span;

static int by_memory(const void *a, const void *b)
{
  const span *x = a, *y = b;
  if (x->memory != y->memory) return (uintptr_t)x->memory < (uintptr_t)y->memory ? -1 : 1;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The bytes one end of an element reaches (a view: its covering range from its first element). */
static span span_of(const xfer_tensor *t, size_t offset, size_t len, size_t index, int writes)
{
  size_t lo = t->offset + offset;
  if (!t->contiguous)
    len = (size_t)xfer_layout_extent(&t->shape, t->strides) * xfer_dtype_size(t->dtype);
  return (span){t->buf, lo, lo + len, index, writes};
}

/* A block batch -- every element between one pair of tensors in different memory, one length,
** the targets' offsets on one grid of that length -- overlaps only where two elements write one
** block: a bitmap of the target's blocks finds it in one pass (sorting 8192 spans cost more
** than the copy of 4096 blocks of 16 KiB on a GPU). 0: not such a batch, or a block written
** twice (the general check then says which). */
static int blocks_disjoint(const xfer_batch_item *items, size_t n)
{
  if (n < 2 || !items) return 0;
  const xfer_batch_item *a = &items[0];
  size_t len = a->nbytes;
  if (!len || !a->dst->contiguous || !a->src->contiguous || a->dst->buf == a->src->buf) return 0;
  size_t phase = a->dst_offset % len, slots = a->dst->nbytes / len + 1;
  unsigned char *seen = calloc((slots + 7) / 8, 1);
  if (!seen) return 0;
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++) {
    const xfer_batch_item *it = &items[i];
    size_t slot = it->dst_offset / len;
    ok = it->dst == a->dst && it->src == a->src && it->nbytes == len &&
         it->dst_offset % len == phase && slot < slots && !(seen[slot / 8] & (1u << slot % 8));
    if (ok) seen[slot / 8] |= (unsigned char)(1u << slot % 8);
  }
  free(seen);
  return ok;
}

/* The elements of one submission run in no order: two that write the same bytes, or one that
** reads what another writes, would race. Refused (a view counts as its covering range, so two
** interleaved views of one tensor are refused too); an element whose source is its own target
** exactly is a copy onto itself, allowed. */
static xfer_code check_overlaps(const xfer_batch_item *items, size_t n, xfer_error *err)
{
  if (blocks_disjoint(items, n)) return XFER_E_OK;
  span *s = malloc((n ? 2 * n : 1) * sizeof *s);
  if (!s) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = length_of(&items[i]);
    if (!len) continue;
    s[k++] = span_of(items[i].dst, items[i].dst_offset, len, i, 1);
    s[k++] = span_of(items[i].src, items[i].src_offset, len, i, 0);
  }
  qsort(s, k, sizeof *s, by_memory);
  xfer_code rc = XFER_E_OK;
  for (size_t x = 0; x < k && !rc; x++)
    for (size_t y = x + 1; y < k && !rc && s[y].memory == s[x].memory && s[y].lo < s[x].hi; y++) {
      const span *p = &s[x], *q = &s[y];
      if (!p->writes && !q->writes) continue;
      if (p->index == q->index && p->lo == q->lo && p->hi == q->hi) continue;
      size_t a = p->index < q->index ? p->index : q->index;
      size_t b = p->index < q->index ? q->index : p->index;
      const xfer_batch_item *it = &items[b];
      if (p->writes && q->writes)
        rc = xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_WRITES_OVERLAP, a + 1,
                         b + 1, n, it->dst->dev->name);
      else if (a == b)
        rc = xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_READS_OWN_WRITES, a + 1,
                         n);
      else
        rc = xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_READS_OTHERS_WRITES,
                         a + 1, b + 1, n);
      if (err) err->element = (long long)b + 1;
    }
  free(s);
  return rc;
}

/* Paths on which one device's runtime can run a whole group: within a device, host <-> device,
** two runtimes in one device's memory. */
static int one_device_path(xfer_path p)
{
  return p == XFER_PATH_SAME_DEVICE || p == XFER_PATH_HOST || p == XFER_PATH_INTEROP;
}

/* The device that runs a whole group at once, when there is one: the device end of a host <->
** device group, the device of a group within it, or the device whose memory both ends of an
** interop group live in -- where its runtime takes batches (copy->many). Where one end's memory
** is exported to the other's runtime (Vulkan's to CUDA on one GPU), the importer runs the group
** over the import; and a host <-> device group whose device's memory a runtime of its GPU
** imports and runs batches over (CUDA for Vulkan on NVIDIA: one kernel where Vulkan would make
** a copy-engine region a block) goes to that runtime too (*imports set). */
static xfer_device *many_device(const group *g, int *imports)
{
  *imports = 0;
  if (g->planned) return NULL;
  xfer_path p = g->route.path;
  if (p == XFER_PATH_INTEROP &&
      (g->route.share == XFER_SHARE_SRC_EXPORTS || g->route.share == XFER_SHARE_DST_EXPORTS)) {
    xfer_device *importer = g->route.share == XFER_SHARE_SRC_EXPORTS ? g->to : g->from;
    *imports = xfer_be_has_many(importer);
    return *imports ? importer : NULL;
  }
  if (p == XFER_PATH_HOST) {
    xfer_device *importer = xfer_route_many_importer(xfer_is_host(g->from) ? g->to : g->from);
    if (importer) {
      *imports = 1;
      return importer;
    }
  }
  return one_device_path(p) ? xfer_many_runner(g->from, g->to) : NULL;
}

/* A host <-> device or within-a-device group's runner among the devices themselves, for memory
** a backing device does not hold. */
static xfer_device *own_runner(const group *g)
{
  return one_device_path(g->route.path) ? xfer_many_runner_own(g->from, g->to) : NULL;
}

/* Two devices that share no memory (staged, or through the host): where each end's runtime takes
** batches with host memory, the group is packed into host memory by one submission of the
** source's runner and scattered from it by one of the target's (*through: the packer). */
static xfer_device *through_host(const group *g, xfer_device **through, int own)
{
  *through = NULL;
  xfer_path p = g->route.path;
  if (g->planned || (p != XFER_PATH_STAGED && p != XFER_PATH_HOST) || xfer_is_host(g->from) ||
      xfer_is_host(g->to))
    return NULL;
  xfer_device *host = xfer_host_of(g->from->ctx);
  xfer_device *(*runner)(xfer_device *, xfer_device *) = own ? xfer_many_runner_own : xfer_many_runner;
  xfer_device *packer = runner(g->from, host), *scatterer = runner(host, g->to);
  if (!packer || !scatterer) return NULL;
  *through = packer;
  return scatterer;
}

/* A window: a byte range of a tensor as a shallow copy (transfer.h). */
static xfer_tensor window(const xfer_tensor *t, size_t offset, size_t n)
{
  xfer_tensor w = *t;
  w.offset += offset;
  w.nbytes = n;
  w.numel = n;
  w.dtype = XFER_U8;
  w.shape = (xfer_shape){1, {(int64_t)n}};
  return w;
}

/* Whether two routes move alike: one path, one way of sharing, the same helpers (chunk sizes
** differ with the tensors' sizes and do not matter). */
static int same_route(const xfer_route *x, xfer_code xc, const xfer_route *y, xfer_code yc)
{
  if (xc || yc) return xc == yc;
  return x->path == y->path && x->share == y->share && x->nhelpers == y->nhelpers &&
         x->helpers[0] == y->helpers[0] && x->helpers[1] == y->helpers[1];
}

/* A route made at prepare, shared by the elements between one pair of tensors. */
typedef struct made_route {
  xfer_route route;
  xfer_code code;
  xfer_error planning;
} made_route;

/* Each element's route, of its whole tensors (what their memory allows: a buffer too large to
** share between runtimes is not shared for a piece of it either): routes[which[i]]. Made once
** per run of elements between the same pair of tensors, as a block batch's elements all are.
** NULL: out of memory. */
static made_route *element_routes(const xfer_batch *b, size_t *which, size_t *nroutes)
{
  size_t cap = 4, count = 0;
  made_route *routes = malloc(cap * sizeof *routes);
  const xfer_batch_item *last = NULL;
  for (size_t i = 0; routes && i < b->n; i++) {
    const xfer_batch_item *it = &b->items[i];
    which[i] = count ? count - 1 : 0;
    if (moves_nothing(it) || is_general(it) || (last && last->src == it->src && last->dst == it->dst))
      continue;
    if (count == cap) {
      made_route *more = realloc(routes, 2 * cap * sizeof *routes);
      if (!more) {
        free(routes);
        return NULL;
      }
      routes = more;
      cap *= 2;
    }
    made_route *r = &routes[count];
    r->code = xfer_route_make(it->src, it->dst->dev, it->dst, b->has_opts ? &b->opts : NULL,
                              &r->route, NULL, 0, &r->planning);
    which[i] = count++;
    last = it;
  }
  *nroutes = count;
  return routes;
}

/* Two ends a plan cannot tell apart: one device, the same memory (buffer and block: what a
** route asks of memory), one dtype, shape and layout -- the plan reads no offset. */
static int plans_alike(const xfer_tensor *x, const xfer_tensor *y)
{
  size_t dims = (size_t)x->shape.ndim * sizeof x->shape.dims[0];
  return x->dev == y->dev && x->buf == y->buf && xfer_tensor_block(x) == xfer_tensor_block(y) &&
         x->dtype == y->dtype && x->contiguous == y->contiguous && x->nbytes == y->nbytes &&
         x->shape.ndim == y->shape.ndim && !memcmp(x->shape.dims, y->shape.dims, dims) &&
         !memcmp(x->strides, y->strides, (size_t)x->shape.ndim * sizeof x->strides[0]);
}

/* A general element's plan: the group before's where its element is alike (a list of views of
** one tensor into another, as a KV cache's blocks are: planned once, 4 KB kept once), else made
** now. */
static void plan_general(xfer_batch *b, group *gr, const xfer_batch_item *it)
{
  const group *before = b->ngroups ? &b->groups[b->ngroups - 1] : NULL;
  const xfer_batch_item *was = before && before->general && before->plan
                                   ? &b->items[before->sample] : NULL;
  if (was && plans_alike(was->src, it->src) && plans_alike(was->dst, it->dst)) {
    gr->plan = before->plan;
    gr->planned = before->planned;
    gr->planning = before->planning;
    return;
  }
  gr->owns_plan = (gr->plan = malloc(sizeof *gr->plan)) != NULL;
  if (gr->plan)
    gr->planned = xfer_plan_copy(it->dst, it->src, b->has_opts ? &b->opts : NULL, gr->plan,
                                 &gr->planning);
}

/* The group an element of `part` joins: one of its part and pair of devices moving alike, or a
** new one (NULL: no memory for it). Groups are made in the order of their elements, so a part's
** are the last ones made. */
static group *group_for(xfer_batch *b, const xfer_batch_item *it, size_t part,
                        const made_route *r, size_t *cap)
{
  if (!is_general(it) && r) /* (r: the element's route; every element not general has one) */
    for (size_t g = b->ngroups; g-- > 0 && b->groups[g].part == part;) {
      group *gr = &b->groups[g];
      if (!gr->general && gr->from == it->src->dev && gr->to == it->dst->dev &&
          same_route(&gr->route, gr->planned, &r->route, r->code))
        return gr;
    }
  if (!b->groups) return NULL;
  if (b->ngroups == *cap) {
    size_t grown = *cap ? 2 * *cap : 4;
    group *more = realloc(b->groups, grown * sizeof *more);
    if (!more) return NULL;
    memset(more + *cap, 0, (grown - *cap) * sizeof *more);
    b->groups = more;
    *cap = grown;
  }
  group *gr = &b->groups[b->ngroups];
  *gr = (group){.from = it->src->dev, .to = it->dst->dev, .part = part, .general = is_general(it),
                .sample = (size_t)(it - b->items)};
  if (gr->general) { /* a view or a dtype change: the whole plan of its copy, kept */
    plan_general(b, gr, it);
    if (!gr->plan) return NULL;
  }
  b->ngroups++;
  if (!gr->general && r) {
    gr->route = r->route;
    gr->planned = r->code;
    if (r->code) gr->planning = r->planning;
  }
  return gr;
}

/* One end of a piece as the group's runner reaches it: in place (its own memory, host memory,
** the memory it backs), or -- a group over imports -- through the import of the tensor's
** segment, made now and remembered in the group. 0: it cannot be reached. */
static int piece_end(group *gr, const xfer_tensor *t, size_t at, xfer_piece_end *out,
                     xfer_error *err)
{
  if (xfer_piece_end_of(t, at, gr->many, out)) return 1;
  if (!gr->imports) return 0;
  size_t v = 0;
  while (v < gr->nviews && gr->views[v].t != t) v++;
  if (v == gr->nviews) {
    if (v == VIEWS_MAX || xfer_interop_view(t, gr->many, &gr->views[v].view, err)) return 0;
    gr->views[v].t = t;
    gr->nviews++;
  }
  *out = (xfer_piece_end){gr->views[v].view, t->offset + at, NULL};
  return 1;
}

/* The devices a group's run holds: its route's, and a runner that is neither end. */
static int group_devices(const group *gr, xfer_device *devs[6])
{
  int n = xfer_route_devices(&gr->route, devs);
  if (gr->many && gr->many != gr->from && gr->many != gr->to) devs[n++] = gr->many;
  if (gr->through && gr->through != gr->from && gr->through != gr->many) devs[n++] = gr->through;
  return n;
}

/* The pieces of a group one device runs at once, or none (memory the runner cannot reach: a
** segment not backed, an import refused), when it runs one by one. */
static xfer_code group_pieces(const xfer_batch *b, group *gr, xfer_error *err)
{
  free(gr->pieces); /* a try before, with another runner */
  gr->pieces = malloc((gr->count ? gr->count : 1) * sizeof *gr->pieces);
  if (!gr->pieces) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  xfer_device *devs[6];
  xfer_hold h;
  xfer_code rc = xfer_hold_take(&h, devs, gr->imports ? group_devices(gr, devs) : 0, NULL, 0, err);
  if (rc) return rc;
  for (size_t k = 0; k < gr->count; k++) {
    const xfer_batch_item *e = &b->items[b->order[gr->first + k]];
    xfer_piece *p = &gr->pieces[k];
    p->n = length_of(e); /* never 0: such an element is in no group (moves_nothing) */
    xfer_error ignored; /* an import refused is no error: the group runs one by one */
    if (!piece_end(gr, e->dst, e->dst_offset, &p->dst, &ignored) ||
        !piece_end(gr, e->src, e->src_offset, &p->src, &ignored)) {
      free(gr->pieces);
      gr->pieces = NULL;
      gr->many = NULL;
      break;
    }
  }
  xfer_hold_drop(&h);
  return XFER_E_OK;
}

/* A group through host memory: each element's source end as the packer reaches it and its
** target end as the scatterer does, cut into chunks (batch_through.c). */
static xfer_code staged_pieces(const xfer_batch *b, group *gr, xfer_error *err)
{
  xfer_through_free(&gr->staged); /* a try before, with other runners */
  xfer_piece *ends = malloc((gr->count ? gr->count : 1) * sizeof *ends);
  if (!ends) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  xfer_code rc = XFER_E_OK;
  for (size_t k = 0; k < gr->count; k++) {
    const xfer_batch_item *e = &b->items[b->order[gr->first + k]];
    ends[k].n = length_of(e); /* never 0 (moves_nothing) */
    if (!xfer_piece_end_of(e->src, e->src_offset, gr->through, &ends[k].src) ||
        !xfer_piece_end_of(e->dst, e->dst_offset, gr->many, &ends[k].dst)) {
      gr->many = gr->through = NULL; /* memory a runner cannot reach: one by one */
      break;
    }
  }
  if (gr->many) {
    gr->staged.packer = gr->through;
    gr->staged.scatterer = gr->many;
    rc = xfer_through_make(&gr->staged, ends, gr->count, xfer_route_through_chunk(), err);
  }
  free(ends);
  return rc;
}

/* What the group's runner kept of its pieces is let go: they are changing, or going. */
static void forget_pieces(group *gr)
{
  if (gr->keep && gr->many) xfer_be_many_forget(gr->many, gr->keep);
  gr->keep = 0;
  gr->runs = 0;
}

/* Before a run over imports (devices held): an import the pieces were made with may have gone
** with its importer's close and been made anew -- the pieces then point at the new one. */
static xfer_code views_current(group *gr, xfer_error *err)
{
  for (size_t v = 0; v < gr->nviews; v++) {
    void *now = NULL, *then = gr->views[v].view;
    xfer_code rc = xfer_interop_view(gr->views[v].t, gr->many, &now, err);
    if (rc) return rc;
    if (now == then) continue;
    forget_pieces(gr);
    for (size_t k = 0; k < gr->count; k++) {
      if (gr->pieces[k].dst.buf == then) gr->pieces[k].dst.buf = now;
      if (gr->pieces[k].src.buf == then) gr->pieces[k].src.buf = now;
    }
    for (size_t w = 0; w < gr->nviews; w++)
      if (gr->views[w].view == then) gr->views[w].view = now;
  }
  return XFER_E_OK;
}

/* Adds a way unless it is the last one again (two choices that came to the same runner). */
static void add_way(group *gr, xfer_device *many, xfer_device *through, int imports)
{
  if (!many) return;
  const group_way *last = gr->nways ? &gr->ways[gr->nways - 1] : NULL;
  if (last && last->many == many && last->through == through && last->imports == imports) return;
  gr->ways[gr->nways++] = (group_way){many, through, imports};
}

/* The ways a group may run, best first, once: at once by the device many_device names (an
** importer of the other runtime's memory, or the devices' own runner), then -- after an
** importer -- by the device's own runtime (memory the importer cannot take: host memory CUDA
** does not pin); or packed through host chunks by the runners of each end (those of a backing
** device first, then the ends' own); and always, last, element by element. */
static void group_ways(group *gr)
{
  gr->nways = 0;
  int imports = 0;
  xfer_device *many = many_device(gr, &imports);
  if (many) {
    add_way(gr, many, NULL, imports);
    add_way(gr, own_runner(gr), NULL, 0);
  } else {
    xfer_device *packer = NULL;
    xfer_device *scatterer = through_host(gr, &packer, 0);
    add_way(gr, scatterer, packer, 0);
    scatterer = through_host(gr, &packer, 1);
    add_way(gr, scatterer, packer, 0);
  }
  gr->ways[gr->nways++] = (group_way){NULL, NULL, 0}; /* element by element */
}

/* The group's next way whose parts can be made (memory its runner reaches): the runner asks
** this when a way is refused, and takes what the plan lists -- it chooses nothing itself. */
static xfer_code next_way(const xfer_batch *b, group *gr, xfer_error *err)
{
  xfer_code rc = XFER_E_OK;
  forget_pieces(gr);
  while (!rc && gr->way + 1 < gr->nways) {
    const group_way *w = &gr->ways[++gr->way];
    gr->many = w->many, gr->through = w->through, gr->imports = w->imports;
    gr->nviews = 0;
    if (!gr->many) break; /* element by element: nothing to make */
    rc = gr->through ? staged_pieces(b, gr, err) : group_pieces(b, gr, err);
    if (!rc && gr->many) break; /* its parts made (else memory it cannot reach: the next) */
  }
  return rc;
}

/* Elements grouped by (from, to, how they move), in the order groups first appear. */
static xfer_code plan_groups(xfer_batch *b, xfer_error *err)
{
  size_t n = b->n ? b->n : 1, cap = 4, nroutes = 0;
  b->order = calloc(n, sizeof *b->order);
  b->groups = calloc(cap, sizeof *b->groups);
  size_t *of = malloc(n * sizeof *of); /* each element's route, then its group */
  b->idle = malloc(n * sizeof *b->idle);
  made_route *routes = of ? element_routes(b, of, &nroutes) : NULL;
  if (!b->order || !b->groups || !b->idle || !of || !routes) {
    free(of);
    free(routes);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  }
  xfer_code rc = XFER_E_OK;
  for (size_t i = 0; !rc && i < b->n; i++) {
    const xfer_batch_item *it = &b->items[i];
    if (moves_nothing(it)) {
      b->idle[b->nidle++] = i;
      of[i] = SIZE_MAX;
      continue;
    }
    group *gr = group_for(b, it, part_of(b, i), nroutes ? &routes[of[i]] : NULL, &cap);
    if (!gr) {
      rc = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
      break;
    }
    gr->count++;
    gr->bytes += length_of(it);
    of[i] = (size_t)(gr - b->groups);
  }
  free(routes);
  size_t at = 0;
  for (size_t g = 0; !rc && g < b->ngroups; g++) {
    b->groups[g].first = at;
    at += b->groups[g].count;
    b->groups[g].count = 0;
  }
  for (size_t i = 0; !rc && of && i < b->n; i++) {
    if (of[i] == SIZE_MAX) continue; /* moves nothing: in no group */
    group *g = &b->groups[of[i]];
    b->order[g->first + g->count++] = i;
  }
  free(of);
  for (size_t g = 0; !rc && g < b->ngroups; g++) {
    group *gr = &b->groups[g];
    if (gr->general) continue;
    gr->uses = xfer_batch_uses(b->items, &b->order[gr->first], gr->count, &gr->nuses);
    if (!gr->uses) rc = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
    if (rc) break;
    group_ways(gr);
    gr->way = -1;
    rc = next_way(b, gr, err);
  }
  return rc;
}

/* Every element's checks, in element order: its tensors where it is their first use (each
** tensor is checked once: alive, its device open), then its own ranges. *uses: the distinct
** tensors (the caller frees them). */
static xfer_code check_items(const xfer_batch_item *items, size_t n, xfer_use **uses,
                             size_t *nuses, xfer_error *err)
{
  for (size_t i = 0; i < n; i++) /* a missing tensor, said before any is looked into */
    if (!items[i].dst || !items[i].src)
      return element_error(err, i, n, xfer_err_code(err, XFER_E_FREED, XFER_OP_BATCH));
  *uses = xfer_batch_uses(items, NULL, n, nuses);
  if (!*uses) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  size_t u = 0;
  for (size_t i = 0; i < n; i++) {
    xfer_code rc = XFER_E_OK;
    for (; !rc && u < *nuses && (*uses)[u].first / 2 == i; u++)
      rc = xfer_tensor_usable((*uses)[u].t, XFER_OP_BATCH, err);
    if (!rc) rc = check_item(&items[i], i, n, err);
    if (rc) return element_error(err, i, n, rc);
  }
  return XFER_E_OK;
}

/* Parts that end in ascending order, the last with the last element. */
static xfer_code check_parts(const size_t *part_end, size_t nparts, size_t n, xfer_error *err)
{
  if (!nparts || !part_end)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_NO_PART_ENDS);
  for (size_t k = 0; k < nparts; k++)
    if (part_end[k] > n || (k && part_end[k] < part_end[k - 1]))
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_PART_ENDS_ORDER, k + 1,
                         part_end[k], n);
  if (part_end[nparts - 1] != n)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_PARTS_SHORT,
                       part_end[nparts - 1], n);
  return XFER_E_OK;
}

xfer_code xfer_batch_prepare(const xfer_batch_item *items, size_t n,
                             const xfer_transfer_opts *opts, xfer_batch **out, xfer_error *err)
{
  return xfer_batch_prepare_parts(items, n, &n, 1, opts, out, err);
}

xfer_code xfer_batch_prepare_parts(const xfer_batch_item *items, size_t n, const size_t *part_end,
                                   size_t nparts, const xfer_transfer_opts *opts,
                                   xfer_batch **out, xfer_error *err)
{
  *out = NULL;
  if (n && !items) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_EMPTY);
  xfer_code checked = check_parts(part_end, nparts, n, err);
  if (checked) return checked;
  if (opts && opts->convert)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_CONVERT_OPTION);
  size_t nuses = 0;
  xfer_use *uses = NULL;
  xfer_code rc = check_items(items, n, &uses, &nuses, err);
  if (!rc) rc = check_overlaps(items, n, err);
  xfer_batch *b = rc ? NULL : calloc(1, sizeof *b);
  if (!b) {
    free(uses);
    return rc ? rc : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  }
  b->refs = 1;
  b->n = n;
  /* the batch holds each tensor once: a block batch of 4096 elements retains two */
  b->tensors = malloc((nuses ? nuses : 1) * sizeof *b->tensors);
  for (size_t i = 0; b->tensors && i < nuses; i++)
    b->tensors[b->ntensors++] = xfer_tensor_retain(uses[i].t);
  free(uses);
  b->items = calloc(n ? n : 1, sizeof *b->items);
  b->done = calloc(n ? n : 1, 1);
  b->part_end = malloc(nparts * sizeof *b->part_end);
  if (b->part_end) memcpy(b->part_end, part_end, nparts * sizeof *part_end);
  b->nparts = nparts;
  if (opts) b->opts = *opts, b->has_opts = 1;
  if (!b->tensors || !b->items || !b->done || !b->part_end) {
    xfer_batch_release(b);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
  }
  for (size_t i = 0; i < n; i++) {
    b->items[i] = items[i];
    b->bytes += length_of(&items[i]);
  }
  b->ctx = n ? xfer_ctx_retain(items[0].src->dev->ctx) : NULL;
  rc = plan_groups(b, err);
  if (rc) {
    xfer_batch_release(b);
    return rc;
  }
  *out = b;
  return XFER_E_OK;
}

/* -- Running ----------------------------------------------------------------------------- */

/* The group at once in its way in use: through host chunks, or one submission of `many`
** (over imports: an import no longer to be had refuses it, as a driver would). */
static xfer_code run_way(xfer_batch *b, group *g, xfer_error *err)
{
  if (g->through) return xfer_through_run(&g->staged, b->ctx, err);
  xfer_error ignored;
  if (g->nviews && views_current(g, &ignored)) return XFER_E_UNSUPPORTED;
  static uint64_t names; /* of pieces, process-wide: never one name for two lists */
  if (g->runs++ && !g->keep) g->keep = __atomic_add_fetch(&names, 1, __ATOMIC_RELAXED);
  return xfer_be_many(g->many, g->pieces, g->count, g->keep, err);
}

/* One group: its devices held, its tensors checked, then at once or one by one. */
static xfer_code run_group(xfer_batch *b, group *g, xfer_error *err)
{
  xfer_device *devs[6];
  xfer_hold h; /* its tensors are busy already: the run's claim marked every element's */
  size_t bad = b->order[g->first];
  xfer_code rc = xfer_hold_take(&h, devs, group_devices(g, devs), NULL, 0, err);
  for (size_t u = 0; u < g->nuses && !rc; u++) { /* each tensor once, in the order of use */
    rc = xfer_tensor_usable(g->uses[u].t, XFER_OP_BATCH, err);
    bad = b->order[g->first + g->uses[u].first / 2];
  }
  if (!rc && g->planned) {
    if (err) *err = g->planning;
    rc = g->planned;
    bad = b->order[g->first];
  }
  double start = xfer_now();
  /* its runner set aside for this pair and path (it kept failing, or failed for good): element
  ** by element on the group's route, until the ledger forgets (faults cleared, or forgotten) */
  int aside = !rc && g->many &&
              xfer_ledger_set_aside(b->ctx, g->from, g->to, g->route.path, g->many, NULL, 0);
  if (aside) xfer_ledger_note_decision(b->ctx);
  if (!rc && g->many && !aside) {
    rc = run_way(b, g, err);
    /* refused (an importer that cannot take these pieces, runtimes that will not take them
    ** after all): the plan's next way, for this run and every later one */
    while (rc == XFER_E_UNSUPPORTED && !(rc = next_way(b, g, err)) && g->many) rc = run_way(b, g, err);
    if (!rc && !g->many) {
      rc = XFER_E_OK; /* element by element, below */
    } else {
      if (rc) xfer_err_frame(err, g->from, g->to, g->bytes);
      xfer_ledger_record(b->ctx, g->from, g->to, g->route.path, g->many, g->bytes,
                         xfer_now() - start, rc, err);
      for (size_t k = 0; k < g->count && !rc; k++) b->done[b->order[g->first + k]] = 1;
      bad = b->order[g->first]; /* a submission fails whole: its first element is named */
      goto out;
    }
  }
  for (size_t k = 0; k < g->count && !rc; k++) {
    size_t i = b->order[g->first + k];
    const xfer_batch_item *it = &b->items[i];
    size_t len = length_of(it); /* never 0: such an element is in no group */
    xfer_tensor src = window(it->src, it->src_offset, len);
    xfer_tensor dst = window(it->dst, it->dst_offset, len);
    xfer_route route = g->route; /* the group's, sized for this element's bytes */
    xfer_route_resize(&route, len);
    rc = xfer_transfer_run(&route, &src, &dst, err);
    if (!rc) b->done[i] = 1;
    bad = i;
  }
out:
  xfer_hold_drop(&h);
  return element_error(err, bad, b->n, rc);
}

/* One run at a time: its done flags and the pieces are the run's. A claimed batch's tensors
** are busy from the claim -- made on the caller's thread, before a job's thread has taken
** anything -- to the run's end: freeing one right after b:run_async() waits for the run, as it
** does for any move using the tensor (it failed the run with `freed` before). */
static int run_begin(xfer_batch *b, int by)
{
  if (!b || !b->ctx) return 1; /* empty: nothing is shared */
  if (by < 0) xfer_tensors_busy(b->tensors, b->ntensors, by);
  pthread_mutex_lock(&b->ctx->lock);
  int ok = by < 0 || !b->running;
  b->running += ok ? by : 0;
  pthread_mutex_unlock(&b->ctx->lock);
  if (ok && by > 0) xfer_tensors_busy(b->tensors, b->ntensors, by);
  return ok;
}

static xfer_code run_all(xfer_batch *b, size_t part, xfer_error *err);
#define ALL_PARTS SIZE_MAX

xfer_code xfer_batch_claim(xfer_batch *b, xfer_error *err)
{
  if (!b) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_NULL);
  if (!run_begin(b, 1))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_RUNNING);
  return XFER_E_OK;
}

void xfer_batch_unclaim(xfer_batch *b) { run_begin(b, -1); }

xfer_code xfer_batch_run_claimed(xfer_batch *b, xfer_error *err)
{
  xfer_code rc = run_all(b, ALL_PARTS, err);
  run_begin(b, -1);
  return rc;
}

xfer_code xfer_batch_run(xfer_batch *b, xfer_error *err)
{
  xfer_code rc = xfer_batch_claim(b, err);
  return rc ? rc : xfer_batch_run_claimed(b, err);
}

xfer_code xfer_batch_run_part(xfer_batch *b, size_t part, xfer_error *err)
{
  if (b && part >= b->nparts)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_NO_PART, part + 1,
                       b->nparts);
  xfer_code rc = xfer_batch_claim(b, err);
  if (rc) return rc;
  rc = run_all(b, part, err);
  run_begin(b, -1);
  return rc;
}

xfer_batch *xfer_batch_retain(xfer_batch *b)
{
  if (b) __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
  return b;
}

/* The elements that move nothing: done once their tensors check out (under the context's
** lock, which a free takes to mark a tensor freed). */
static xfer_code run_idle(xfer_batch *b, size_t part, xfer_error *err)
{
  xfer_code rc = XFER_E_OK;
  size_t bad = 0;
  if (!b->ctx) return XFER_E_OK; /* an empty batch */
  pthread_mutex_lock(&b->ctx->lock);
  for (size_t k = 0; k < b->nidle && !rc; k++) {
    if (part != ALL_PARTS && part_of(b, b->idle[k]) != part) continue;
    const xfer_batch_item *it = &b->items[bad = b->idle[k]];
    rc = xfer_tensor_usable(it->dst, XFER_OP_BATCH, err);
    if (!rc) rc = xfer_tensor_usable(it->src, XFER_OP_BATCH, err);
    if (!rc) b->done[bad] = 1;
  }
  pthread_mutex_unlock(&b->ctx->lock);
  return element_error(err, bad, b->n, rc);
}

/* A general element whose plan could not be made: its error once its tensors check out (a
** freed tensor is said first, as a copy says it). */
static xfer_code planned_copy_error(const group *gr, const xfer_batch_item *it, xfer_error *err)
{
  xfer_code rc = xfer_tensor_usable(it->dst, XFER_OP_COPY, err);
  if (!rc) rc = xfer_tensor_usable(it->src, XFER_OP_COPY, err);
  if (!rc && err) *err = gr->planning;
  return rc ? rc : gr->planned;
}

/* The whole batch (ALL_PARTS), or one part of it. */
static xfer_code run_all(xfer_batch *b, size_t part, xfer_error *err)
{
  if (!b) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_NULL);
  size_t lo = part == ALL_PARTS || !part ? 0 : b->part_end[part - 1];
  size_t hi = part == ALL_PARTS ? b->n : b->part_end[part];
  if (hi > lo) memset(b->done + lo, 0, hi - lo);
  xfer_code idle = b->nidle ? run_idle(b, part, err) : XFER_E_OK;
  if (idle) return idle;
  for (size_t g = 0; g < b->ngroups; g++) {
    group *gr = &b->groups[g];
    if (part != ALL_PARTS && gr->part != part) continue;
    const xfer_batch_item *it = &b->items[b->order[gr->first]];
    xfer_code rc;
    if (gr->general) {
      rc = gr->planned ? planned_copy_error(gr, it, err)
                       : xfer_plan_run(gr->plan, it->src, it->dst, b->has_opts ? &b->opts : NULL,
                                       NULL, err);
      if (!rc) b->done[b->order[gr->first]] = 1;
      rc = element_error(err, b->order[gr->first], b->n, rc);
    } else {
      rc = run_group(b, gr, err);
    }
    if (rc) return rc;
  }
  return XFER_E_OK;
}

size_t xfer_batch_count(const xfer_batch *b) { return b ? b->n : 0; }
xfer_ctx *xfer_batch_ctx(const xfer_batch *b) { return b ? b->ctx : NULL; }
size_t xfer_batch_bytes(const xfer_batch *b) { return b ? b->bytes : 0; }
int xfer_batch_done(const xfer_batch *b, size_t i) { return b && i < b->n && b->done[i]; }

void xfer_batch_groups(const xfer_batch *b, size_t *groups, size_t *submitted_at_once)
{
  size_t at_once = 0;
  for (size_t g = 0; b && g < b->ngroups; g++) at_once += b->groups[g].many != NULL;
  if (groups) *groups = b ? b->ngroups : 0;
  if (submitted_at_once) *submitted_at_once = at_once;
}

/* A group that moves contiguous bytes, in words: at once (by whom, over whose memory),
** through host chunks, or one element at a time on its route. */
static void group_words(const group *g, xfer_plan *words)
{
  const char *from = g->from->name, *to = g->to->name;
  words->path = g->route.path;
  if (g->through) {
    snprintf(words->reason, sizeof words->reason, "%zu element%s (%zu bytes) from %s to %s "
             "through host chunks: packed by one submission, scattered by another", g->count,
             g->count == 1 ? "" : "s", g->bytes, from, to);
    xfer_plan_say(words, "pack the sources into host chunks, a batch by %s", g->through->name);
    xfer_plan_say(words, "scatter each chunk into the targets, a batch by %s", g->many->name);
  } else if (g->many) {
    snprintf(words->reason, sizeof words->reason, "%zu element%s (%zu bytes) from %s to %s in "
             "one submission of %s", g->count, g->count == 1 ? "" : "s", g->bytes, from, to,
             g->many->name);
    if (g->imports)
      xfer_plan_say(words, "%s imports the memory of the other runtime's tensors, once each",
                    g->many->name);
    xfer_plan_say(words, "one batch of %zu cop%s by %s", g->count, g->count == 1 ? "y" : "ies",
                  g->many->name);
  } else {
    snprintf(words->reason, sizeof words->reason, "%zu element%s (%zu bytes) from %s to %s one "
             "at a time on the group's route", g->count, g->count == 1 ? "" : "s", g->bytes, from,
             to);
    xfer_plan words_of_route;
    memset(&words_of_route, 0, sizeof words_of_route);
    xfer_route_words(&g->route, NULL, NULL, &words_of_route);
    for (int i = 0; i < words_of_route.nsteps; i++)
      xfer_plan_say(words, "each element: %s", words_of_route.steps[i]);
  }
  words->nmoves = 1;
  snprintf(words->moves[0].from, sizeof words->moves[0].from, "%s", from);
  snprintf(words->moves[0].to, sizeof words->moves[0].to, "%s", to);
  words->moves[0].path = g->route.path;
  if (g->many) /* at once: recorded as its runner's (set aside there, element by element) */
    snprintf(words->moves[0].runner, sizeof words->moves[0].runner, "%s", g->many->name);
  for (int w = g->way + 1; g->many && w < g->nways; w++) { /* what the runner tries next */
    const group_way *next = &g->ways[w];
    int m = words->nmoves++; /* ... and how the ledger records it then */
    words->moves[m] = words->moves[0];
    words->moves[m].fallback = 1;
    snprintf(words->moves[m].runner, sizeof words->moves[m].runner, "%s",
             next->many ? next->many->name : "");
    if (!next->many)
      xfer_plan_say(words, "if refused: element by element on the group's route");
    else if (next->through)
      xfer_plan_say(words, "if refused: through host chunks, packed by %s, scattered by %s",
                    next->through->name, next->many->name);
    else
      xfer_plan_say(words, "if refused: one batch by %s%s", next->many->name,
                    next->imports ? " over imports" : "");
  }
}

xfer_code xfer_batch_plan(const xfer_batch *b, size_t index, xfer_plan *words, xfer_error *err)
{
  memset(words, 0, sizeof *words);
  if (!b || index >= b->ngroups)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_PLAN, XFER_S_BATCH_NO_GROUP, index + 1,
                       b ? b->ngroups : 0);
  const group *g = &b->groups[index];
  const xfer_batch_item *it = &b->items[b->order[g->first]];
  if (g->planned) {
    if (err) *err = g->planning;
    return g->planned;
  }
  if (g->general) return xfer_plan_words(g->plan, it->src, words, err);
  group_words(g, words);
  return XFER_E_OK;
}

void xfer_batch_release(xfer_batch *b)
{
  if (!b || __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  for (size_t i = 0; i < b->ntensors; i++) xfer_tensor_release(b->tensors[i]);
  for (size_t g = 0; b->groups && g < b->ngroups; g++) {
    forget_pieces(&b->groups[g]);
    free(b->groups[g].pieces);
    free(b->groups[g].uses);
    if (b->groups[g].owns_plan) free(b->groups[g].plan);
    xfer_through_free(&b->groups[g].staged);
  }
  free(b->groups);
  free(b->order);
  free(b->idle);
  free(b->part_end);
  free(b->items);
  free(b->tensors);
  free(b->done);
  if (b->ctx) xfer_ctx_release(b->ctx);
  free(b);
}

xfer_code xfer_transfer_batch(const xfer_batch_item *items, size_t n,
                              const xfer_transfer_opts *opts, xfer_error *err)
{
  xfer_batch *b = NULL;
  xfer_code rc = xfer_batch_prepare(items, n, opts, &b, err);
  if (!rc) rc = xfer_batch_run(b, err);
  xfer_batch_release(b);
  return rc;
}
