/*
** batch.c -- many copies as one: a batch's elements checked once at prepare (tensors alive,
** ranges inside them, no two destinations overlapping), grouped by (from, to) and how they
** move, each group's route made once and its plan made by group.c (the ways it may run, the
** pieces of the way in use); a view or dtype element keeps its move's plan (plan.c). Run many
** times: each group and each element's plan handed to the runner (transfer.c) in order. A
** failure names the element; the elements done are known.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "ledger.h"

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
  xfer_group *groups;
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
  return xfer_item_bytes(it) == 0 || (!is_general(it) && onto_itself(it));
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
    size_t len = xfer_item_bytes(&items[i]);
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
static void plan_general(xfer_batch *b, xfer_group *gr, const xfer_batch_item *it)
{
  const xfer_group *before = b->ngroups ? &b->groups[b->ngroups - 1] : NULL;
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
static xfer_group *group_for(xfer_batch *b, const xfer_batch_item *it, size_t part,
                        const made_route *r, size_t *cap)
{
  if (!is_general(it) && r) /* (r: the element's route; every element not general has one) */
    for (size_t g = b->ngroups; g-- > 0 && b->groups[g].part == part;) {
      xfer_group *gr = &b->groups[g];
      if (!gr->general && gr->from == it->src->dev && gr->to == it->dst->dev &&
          same_route(&gr->route, gr->planned, &r->route, r->code))
        return gr;
    }
  if (!b->groups) return NULL;
  if (b->ngroups == *cap) {
    size_t grown = *cap ? 2 * *cap : 4;
    xfer_group *more = realloc(b->groups, grown * sizeof *more);
    if (!more) return NULL;
    memset(more + *cap, 0, (grown - *cap) * sizeof *more);
    b->groups = more;
    *cap = grown;
  }
  xfer_group *gr = &b->groups[b->ngroups];
  *gr = (xfer_group){.from = it->src->dev, .to = it->dst->dev, .part = part,
                     .general = is_general(it), .sample = (size_t)(it - b->items),
                     .items = b->items, .order = b->order,
                     .verify = b->has_opts ? b->opts.verify : 0};
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

/* Elements grouped by (from, to, how they move), in the order groups first appear. */
static xfer_code plan_groups(xfer_batch *b, xfer_error *err)
{
  size_t n = b->n ? b->n : 1, cap = 4, nroutes = 0;
  b->order = calloc(n, sizeof *b->order);
  b->groups = calloc(cap, sizeof *b->groups);
  size_t *of = malloc(n * sizeof *of); /* each element's route, then its xfer_group */
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
    xfer_group *gr = group_for(b, it, part_of(b, i), nroutes ? &routes[of[i]] : NULL, &cap);
    if (!gr) {
      rc = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
      break;
    }
    gr->count++;
    gr->bytes += xfer_item_bytes(it);
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
    if (of[i] == SIZE_MAX) continue; /* moves nothing: in no xfer_group */
    xfer_group *g = &b->groups[of[i]];
    b->order[g->first + g->count++] = i;
  }
  free(of);
  for (size_t g = 0; !rc && g < b->ngroups; g++) {
    xfer_group *gr = &b->groups[g];
    if (gr->general) continue;
    gr->uses = xfer_batch_uses(b->items, &b->order[gr->first], gr->count, &gr->nuses);
    if (!gr->uses) rc = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_BATCH);
    if (rc) break;
    xfer_group_ways(gr);
    rc = xfer_group_next_way(gr, err);
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
    b->bytes += xfer_item_bytes(&items[i]);
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
static xfer_code planned_copy_error(const xfer_group *gr, const xfer_batch_item *it, xfer_error *err)
{
  xfer_code rc = xfer_tensor_usable(it->dst, XFER_OP_COPY, err);
  if (!rc) rc = xfer_tensor_usable(it->src, XFER_OP_COPY, err);
  if (!rc && err) *err = gr->planning;
  return rc ? rc : gr->planned;
}

/* The whole batch (ALL_PARTS), or one part of it. */
/* The targets of the run's elements: written (done) are valid; a run that timed out or was
** canceled leaves the others not valid. */
static void marked_valid(xfer_batch *b, size_t part, xfer_code rc)
{
  for (size_t i = 0; i < b->n; i++) {
    if (part != ALL_PARTS && part_of(b, i) != part) continue;
    if (b->done[i]) xfer_tensor_set_valid(b->items[i].dst, XFER_E_OK);
    else xfer_tensor_set_valid(b->items[i].dst, rc);
  }
}

static xfer_code run_all(xfer_batch *b, size_t part, xfer_error *err)
{
  if (!b) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_NULL);
  size_t lo = part == ALL_PARTS || !part ? 0 : b->part_end[part - 1];
  size_t hi = part == ALL_PARTS ? b->n : b->part_end[part];
  if (hi > lo) memset(b->done + lo, 0, hi - lo);
  xfer_code idle = b->nidle ? run_idle(b, part, err) : XFER_E_OK;
  if (idle) return idle;
  xfer_watch outer = xfer_transfer_watch(b->ctx, b->has_opts ? &b->opts : NULL);
  xfer_code rc = XFER_E_OK;
  uint64_t moved = 0;
  for (size_t g = 0; g < b->ngroups && !rc; g++) {
    xfer_group *gr = &b->groups[g];
    if (part != ALL_PARTS && gr->part != part) continue;
    const xfer_batch_item *it = &b->items[b->order[gr->first]];
    /* canceled or past its deadline: the groups left do not start */
    if ((rc = xfer_watch_check(moved, b->bytes, err))) {
      rc = element_error(err, b->order[gr->first], b->n, rc);
      break;
    }
    moved += gr->general ? xfer_item_bytes(it) : gr->bytes;
    if (gr->general) {
      rc = gr->planned ? planned_copy_error(gr, it, err)
                       : xfer_plan_run(gr->plan, it->src, it->dst, b->has_opts ? &b->opts : NULL,
                                       NULL, err);
      if (!rc) b->done[b->order[gr->first]] = 1;
      rc = element_error(err, b->order[gr->first], b->n, rc);
    } else {
      size_t failed;
      rc = xfer_group_run(gr, b->done, &failed, err);
      rc = element_error(err, failed, b->n, rc);
    }
  }
  xfer_watch_restore(outer);
  marked_valid(b, part, rc);
  return rc;
}

size_t xfer_batch_count(const xfer_batch *b) { return b ? b->n : 0; }
xfer_ctx *xfer_batch_ctx(const xfer_batch *b) { return b ? b->ctx : NULL; }
size_t xfer_batch_bytes(const xfer_batch *b) { return b ? b->bytes : 0; }
double xfer_batch_timeout(const xfer_batch *b) { return b && b->has_opts ? b->opts.timeout : 0; }
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
static void group_words(const xfer_group *g, xfer_plan *words)
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
    const xfer_group_way *next = &g->ways[w];
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
  const xfer_group *g = &b->groups[index];
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
    xfer_group_free(&b->groups[g]);
    if (b->groups[g].owns_plan) free(b->groups[g].plan);
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
