/*
** batch_uses.c -- the distinct tensors of batch elements (batch_uses.h): every end listed with
** where it is used, sorted by tensor, the first use of each kept, sorted back into use order.
** O(n log n) at prepare, so that a run does O(tensors) work, not O(elements).
*/
#include <stdint.h>
#include <stdlib.h>

#include "batch_uses.h"

static int by_tensor(const void *a, const void *b)
{
  const xfer_use *x = a, *y = b;
  if (x->t != y->t) return (uintptr_t)x->t < (uintptr_t)y->t ? -1 : 1;
  return (x->first > y->first) - (x->first < y->first);
}

static int by_first(const void *a, const void *b)
{
  const xfer_use *x = a, *y = b;
  return (x->first > y->first) - (x->first < y->first);
}

xfer_use *xfer_batch_uses(const xfer_batch_item *items, const size_t *order, size_t count,
                          size_t *nuses)
{
  *nuses = 0;
  xfer_use *uses = malloc((count ? 2 * count : 1) * sizeof *uses);
  if (!uses) return NULL;
  for (size_t k = 0; k < count; k++) {
    const xfer_batch_item *it = &items[order ? order[k] : k];
    uses[2 * k] = (xfer_use){it->dst, 2 * k};
    uses[2 * k + 1] = (xfer_use){it->src, 2 * k + 1};
  }
  qsort(uses, 2 * count, sizeof *uses, by_tensor);
  size_t n = 0;
  for (size_t i = 0; i < 2 * count; i++)
    if (!n || uses[n - 1].t != uses[i].t) uses[n++] = uses[i];
  qsort(uses, n, sizeof *uses, by_first);
  *nuses = n;
  return uses;
}
