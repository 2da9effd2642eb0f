/*
** batch_uses.h -- the distinct tensors a list of batch elements uses, each once. A block batch
** of 4096 elements between two tensors uses two: a run checks two tensors and marks two busy,
** where it checked and marked 8192 (a third of a prepared run's time on the CPU, measured).
** Found in one pass (batch_uses.c): a batch made for one run pays it in its preparation.
** Layer 11 of docs/architecture.md, below the runner.
*/
#ifndef XFER_BATCH_USES_H
#define XFER_BATCH_USES_H

#include "plan.h"

/* A tensor the elements use, and where it is first used: 2k for the target of the k-th element
** of the list, 2k + 1 for its source. */
typedef struct xfer_use {
  xfer_tensor *t;
  size_t first;
} xfer_use;

/* The distinct tensors of items[order[0]], ..., items[order[count - 1]] (order NULL: items[0]
** to items[count - 1]) in the order of their first use, so that checking them in this order
** finds the first element a failing check would have named; NULL when out of memory. */
xfer_use *xfer_batch_uses(const xfer_batch_item *items, const size_t *order, size_t count,
                          size_t *nuses);

#endif
