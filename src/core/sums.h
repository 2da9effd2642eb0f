/*
** sums.h -- checksums (CRC32C) of byte ranges where they lie, for `verify` (sums.c): host
** memory summed by the sum pool's threads in parallel, a device's memory by the device itself
** (copy->crc32c: all of a batch's ranges in one submission) or read back; and a move's two
** ends summed while it moves. Layer 7 of docs/architecture.md, after context.c.
*/
#ifndef XFER_SUMS_H
#define XFER_SUMS_H

#include "backend_call.h"
#include "memory.h"

/* Bytes one sum task covers: host ranges are cut into these (and joined again), so that the
** sum pool's threads share a large range, and a move's target is summed as it lands. 1 MiB:
** what is summed after a move's last step is a step's pieces on all the pool's threads (4 MiB
** pieces left an 8 MiB step to two threads, 0.2 ms after the move on an H100). */
#define XFER_SUM_PIECE ((size_t)1 << 20)

/* The CRC32C of bytes [offset, offset+n) of a contiguous tensor (a window; its device held by
** the caller): in place in host memory (by the sum pool when large), by the device, or read to
** the host in chunks. */
xfer_code xfer_range_crc32c(xfer_tensor *t, size_t offset, size_t n, uint32_t *crc,
                            xfer_error *err);

/* A range of a tensor to be summed. */
typedef struct xfer_sum_range {
  xfer_tensor *t;
  size_t at, n;
} xfer_sum_range;

typedef struct xfer_sum_task xfer_sum_task;
typedef struct xfer_sum_seg xfer_sum_seg;

/* What a check waited for at its end, in seconds (XFER_TRACE's verify line): its devices' sums
** (begun beside the move, or made then) and the sum pool's tasks. */
typedef struct xfer_sum_waits {
  double devices, pool;
} xfer_sum_waits;
typedef struct xfer_sum_dev xfer_sum_dev;

/* The CRC32C of each of `count` ranges into crc[], their devices held by the caller: host
** ranges by the sum pool at once, each device's ranges by one call of its own (copy->crc32c),
** the rest read back. */
xfer_code xfer_sums_of(const xfer_sum_range *ranges, size_t count, uint32_t *crc, xfer_error *err);

/* The same in two halves, so that ranges are summed while something else runs (a batch's
** sources while it moves): xfer_sums_begin gives the host ranges to the sum pool at once, and
** each device that sums beside its caller (copy->crc32c_begin) its own; xfer_sums_end (wanted:
** 0 when the sums are no longer needed) has each other device sum its ranges, waits for the
** rest and frees. The ranges' bytes must not change from the begin on. ranges[] and crc[] live
** until the end; every begun s is ended, whatever happened between. */
typedef struct xfer_sums {
  const xfer_sum_range *ranges;
  size_t count;
  uint32_t *crc;
  unsigned char *seen;      /* summed by the pool (the rest: by their devices at the end) */
  size_t *index;            /* the range of each host segment */
  xfer_sum_seg *segs;
  uint32_t *sums;
  xfer_sum_task *tasks;
  size_t nsegs, ntasks;
  xfer_sum_dev *devs;       /* the devices summing beside the caller */
  size_t ndevs, room;
  xfer_sum_waits *waits;    /* NULL, or where the end adds what it waited for (set after the begin) */
} xfer_sums;
xfer_code xfer_sums_begin(xfer_sums *s, const xfer_sum_range *ranges, size_t count, uint32_t *crc,
                          xfer_error *err);
xfer_code xfer_sums_end(xfer_sums *s, int wanted, xfer_error *err);

/* Whether xfer_sums_begin has the device sum its ranges beside the caller (its runtime can
** begin a sum without waiting for it, and it is asked to sum its own memory). */
int xfer_sums_beside(const xfer_device *dev);

/* A move's verification while it runs: each end's host memory summed by the sum pool beside
** the move (the source's at once, the target's as its bytes land); a device end by the device,
** beside the move where it can (the source's from the start, the target's each step as it
** lands while the next one moves), else once the move is done; then both compared. */
typedef struct xfer_verify_side {
  xfer_tensor *t;
  size_t at;
  const char *host;         /* the range in host memory, or NULL: summed at the end */
  xfer_sum_seg *segs;       /* its pieces (NULL: summed at the end, in one), their sums and */
  uint32_t *sums;           /* ... the tasks that make them */
  xfer_sum_task *tasks;
  size_t count, started;    /* pieces, and those given to the pool */
  size_t ntasks;            /* the tasks they were given in */
  int beside;               /* a device end its device sums beside the move, a part at a time: */
  xfer_sum_range part;      /* the part being summed, */
  xfer_sums summing;        /* its sum (begun: summing.seen != NULL), */
  uint32_t part_crc, crc;   /* ... into part_crc, and the sum of the end's bytes [0, upto) */
  size_t upto;
} xfer_verify_side;
typedef struct xfer_verify {
  int on;
  xfer_sum_waits waits;     /* what its end waited for */
  size_t n, landed;         /* bytes moved, and those of the target known to have landed */
  xfer_verify_side ends[2];  /* source, target */
} xfer_verify;

/* Starts verifying n bytes from src_at of src to dst_at of dst (on: whether to at all);
** nothing is summed until the runner says its move starts (xfer_verify_source). */
void xfer_verify_begin(xfer_verify *v, int on, xfer_tensor *src, size_t src_at, xfer_tensor *dst,
                       size_t dst_at, size_t n);
/* The move starts: the source's host pieces given to the sum pool, summed beside it. */
void xfer_verify_source(xfer_verify *v);
/* The same for the source's bytes [0, upto) alone: a runner that moves in steps says so as
** each step has been read. */
void xfer_verify_source_upto(xfer_verify *v, size_t upto);
/* The steps a runner moving n bytes should land in for the target's sums to run beside the
** move (n: no reason to step). */
size_t xfer_verify_step(const xfer_verify *v, size_t n);
/* The target's bytes [0, upto) have landed: their pieces may be summed. */
void xfer_verify_landed(xfer_verify *v, size_t upto);
/* The move is over (moved: it succeeded): XFER_E_CORRUPT (op verify) where the ends' sums
** differ; nothing summed still runs when it returns. */
xfer_code xfer_verify_end(xfer_verify *v, int moved, xfer_error *err);

#endif
