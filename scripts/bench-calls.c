/*
** bench-calls.c -- the C side of scripts/bench's "python" table: what a call costs from C, the
** floor a binding is measured against. For every device but the host (the host too where it is
** the only one): a 4 KiB copy_from from host memory (xfer_transfer_copy) and a prepared batch of
** BLOCKS blocks of 16 KiB scattered from a host buffer (xfer_batch_run), each the median of 7
** rounds. Prints "calls DEVICE copy4k SECONDS" and "calls DEVICE batch SECONDS BYTES" lines.
** Usage: bench-calls [BLOCKS (4096)]
*/
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfer.h"

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* the median over 7 rounds of one call's seconds, `reps` calls a round; -1 on a failed call */
static double median_of(xfer_code (*call)(void *), void *arg, int reps)
{
  double rounds[7];
  for (int i = 0; i < 20; i++)
    if (call(arg)) return -1; /* warm: caches, pins, imports made */
  for (int r = 0; r < 7; r++) {
    double t0 = now();
    for (int i = 0; i < reps; i++)
      if (call(arg)) return -1;
    rounds[r] = (now() - t0) / reps;
  }
  qsort(rounds, 7, sizeof rounds[0], by_value);
  return rounds[3];
}

typedef struct {
  xfer_tensor *dst, *src;
  xfer_batch *batch;
  xfer_error err;
} pair;

static xfer_code copy4k(void *arg)
{
  pair *p = arg;
  return xfer_transfer_copy(p->dst, p->src, NULL, &p->err);
}

static xfer_code run_batch(void *arg)
{
  pair *p = arg;
  return xfer_batch_run(p->batch, &p->err);
}

int main(int argc, char **argv)
{
  size_t blocks = argc > 1 ? (size_t)atol(argv[1]) : 4096, block = 16384;
  xfer_ctx *ctx;
  xfer_error err;
  if (xfer_ctx_open(&ctx, &err)) {
    fprintf(stderr, "bench-calls: %s\n", err.message);
    return 1;
  }
  xfer_device *host;
  xfer_device_find(ctx, "host", &host, &err);
  size_t ndev = xfer_device_count(ctx);
  for (size_t d = 0; d < ndev; d++) {
    xfer_device *dev = xfer_device_at(ctx, d);
    if (!dev || (dev == host && ndev > 1)) continue;
    const char *name = xfer_device_name(dev);
    pair p = {0};
    xfer_shape small = {1, {4096}}, big = {1, {(int64_t)(blocks * block)}};
    if (xfer_tensor_empty(host, XFER_U8, &small, &p.src, &err) || xfer_tensor_empty(dev, XFER_U8, &small, &p.dst, &err)) {
      printf("calls %s failed %s\n", name, err.message);
      continue;
    }
    double s = median_of(copy4k, &p, 2000);
    if (s >= 0) printf("calls %s copy4k %.9f\n", name, s);
    else printf("calls %s failed %s\n", name, p.err.message);
    xfer_tensor_release(p.src);
    xfer_tensor_release(p.dst);
    /* the batch: block i of the source into block (i * 7919) mod blocks of the target, as a
    ** paged cache's scattered blocks */
    xfer_batch_item *items = calloc(blocks, sizeof *items);
    if (!items || xfer_tensor_empty(host, XFER_U8, &big, &p.src, &err) ||
        xfer_tensor_empty(dev, XFER_U8, &big, &p.dst, &err))
      return 1;
    for (size_t i = 0; i < blocks; i++)
      items[i] = (xfer_batch_item){p.dst, p.src, ((i * 7919) % blocks) * block, i * block, block};
    if (xfer_batch_prepare(items, blocks, NULL, &p.batch, &err)) {
      printf("calls %s failed %s\n", name, err.message);
    } else {
      s = median_of(run_batch, &p, 10);
      if (s >= 0) printf("calls %s batch %.9f %zu\n", name, s, blocks * block);
      else printf("calls %s failed %s\n", name, p.err.message);
      xfer_batch_release(p.batch);
    }
    free(items);
    xfer_tensor_release(p.src);
    xfer_tensor_release(p.dst);
    fflush(stdout);
  }
  xfer_ctx_release(ctx);
  return 0;
}
