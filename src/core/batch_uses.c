/*
** batch_uses.c -- the distinct tensors of batch elements (batch_uses.h): one pass over the
** elements, each end looked up in a small open-addressing set of the tensors seen (grown as it
** fills), and an end that is the same tensor as the one before it skipped at once -- a block
** batch's 8192 ends cost two lookups. O(n), no sort: a batch made for one run (copy_blocks)
** pays this in its preparation (two qsorts of 8192 ends cost 1-2 ms on the H200's CPU, more
** than the copy of 4096 blocks of 16 KiB between two GPUs' memory).
*/
#include <stdint.h>
#include <stdlib.h>

#include "batch_uses.h"

typedef struct seen_set {
  const xfer_tensor **slot;
  size_t cap, n; /* cap: a power of two */
} seen_set;

static size_t slot_of(const seen_set *s, const xfer_tensor *t)
{
  uintptr_t h = (uintptr_t)t;
  h ^= h >> 17;
  h *= (uintptr_t)0x9E3779B97F4A7C15ull;
  size_t at = (size_t)(h >> 7) & (s->cap - 1);
  while (s->slot[at] && s->slot[at] != t) at = (at + 1) & (s->cap - 1);
  return at;
}

/* 1: t added (not seen before); 0: seen; -1: out of memory. */
static int add(seen_set *s, const xfer_tensor *t)
{
  if (2 * (s->n + 1) > s->cap) { /* at most half full */
    seen_set bigger = {calloc(s->cap * 2, sizeof *s->slot), s->cap * 2, 0};
    if (!bigger.slot) return -1;
    for (size_t i = 0; i < s->cap; i++)
      if (s->slot[i]) bigger.slot[slot_of(&bigger, s->slot[i])] = s->slot[i], bigger.n++;
    free(s->slot);
    *s = bigger;
  }
  size_t at = slot_of(s, t);
  if (s->slot[at]) return 0;
  s->slot[at] = t;
  s->n++;
  return 1;
}

xfer_use *xfer_batch_uses(const xfer_batch_item *items, const size_t *order, size_t count,
                          size_t *nuses)
{
  *nuses = 0;
  seen_set seen = {calloc(16, sizeof *seen.slot), 16, 0};
  size_t cap = 4, n = 0;
  xfer_use *uses = malloc(cap * sizeof *uses);
  if (!seen.slot || !uses) goto fail;
  const xfer_tensor *last[2] = {NULL, NULL}; /* the previous element's ends, both seen */
  for (size_t k = 0; k < count; k++) {
    const xfer_batch_item *it = &items[order ? order[k] : k];
    xfer_tensor *ends[2] = {it->dst, it->src};
    for (int e = 0; e < 2; e++) {
      if (ends[e] == last[0] || ends[e] == last[1]) continue;
      int added = add(&seen, ends[e]);
      if (added < 0) goto fail;
      if (!added) continue;
      if (n == cap) {
        xfer_use *more = realloc(uses, 2 * cap * sizeof *uses);
        if (!more) goto fail;
        uses = more;
        cap *= 2;
      }
      uses[n++] = (xfer_use){ends[e], 2 * k + (size_t)e};
    }
    last[0] = it->dst;
    last[1] = it->src;
  }
  free(seen.slot);
  *nuses = n;
  return uses;
fail:
  free(seen.slot);
  free(uses);
  return NULL;
}
