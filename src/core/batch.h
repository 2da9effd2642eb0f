/*
** batch.h -- what batch.c offers the layer beside it (jobs.c): a batch kept alive while a job
** runs it. Layer 12 of docs/architecture.md.
*/
#ifndef XFER_BATCH_H
#define XFER_BATCH_H

#include "transfer.h"

/* Another reference to the batch (xfer_batch_release drops one). */
xfer_batch *xfer_batch_retain(xfer_batch *b);
/* A run claimed now (another is refused until it ends), and made later (a job's thread). */
xfer_code xfer_batch_claim(xfer_batch *b, xfer_error *err);
xfer_code xfer_batch_run_claimed(xfer_batch *b, xfer_error *err);
void xfer_batch_unclaim(xfer_batch *b); /* the claim given back unused */
/* The context of its tensors (NULL for an empty batch). */
xfer_ctx *xfer_batch_ctx(const xfer_batch *b);
/* The run's timeout its options ask for (0: the context's). */
double xfer_batch_timeout(const xfer_batch *b);

#endif
