/*
** file_io.h -- reading and writing files for the file endpoints (file_io.c): one open file
** (buffered or O_DIRECT), whole reads and writes with their faults, and a queue of requests in
** flight -- io_uring (liburing, linked in where the build found it) or a pool of threads.
** Layer 2 of docs/architecture.md: it calls faults.c and util.h.
*/
#ifndef XFER_FILE_IO_H
#define XFER_FILE_IO_H

#include "../core/service.h"
#include "xfer_files.h"

/* O_DIRECT wants the buffer, the offset and the length aligned to the logical block; 4096
** covers every device the machines have (512 and 4096). */
#define XFER_FIO_ALIGN 4096u

typedef struct xfer_fio {
  xfer_ctx *ctx;     /* for the fault rules (not a reference) */
  int fd;
  int direct;        /* opened with O_DIRECT */
  const char *path;  /* the caller's, for messages */
} xfer_fio;

/* Whole reads and writes at an offset (short transfers and EINTR resumed); a failure is an
** error of op read/write with errno as the native code, the file and the offset filled in.
** A read that meets the end of the file early is XFER_E_INVALID ("the file is truncated"). */
xfer_code xfer_fio_read(const xfer_fio *f, void *buf, size_t len, uint64_t offset,
                        xfer_error *err);
xfer_code xfer_fio_write(const xfer_fio *f, const void *buf, size_t len, uint64_t offset,
                         xfer_error *err);
/* fdatasync, op "sync" (a fault rule "file:sync" fails it). */
xfer_code xfer_fio_sync(const xfer_fio *f, xfer_error *err);
/* The file error: `code` and `op`, errno `native` (0: none), the file, the offset (-1: none). */
xfer_code xfer_fio_error(xfer_error *err, xfer_code code, xfer_op op, int native,
                         const char *path, long long offset, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;

/* -- requests in flight --------------------------------------------------------------- */

typedef enum { XFER_FIO_THREADS = 0, XFER_FIO_URING } xfer_fio_engine;
/* The queue a route's engine (XFER_FILE_ENGINE_*) takes. */
static inline xfer_fio_engine xfer_fio_engine_of(int engine)
{
  return engine == XFER_FILE_ENGINE_URING ? XFER_FIO_URING : XFER_FIO_THREADS;
}

typedef struct xfer_fio_queue xfer_fio_queue;

/* The stall guard of an io_uring queue: a local read or write completes in milliseconds, so
** a minute with requests in flight and no completion is a lost completion or a stuck device;
** the wait then cancels them and they fail (op read/write, ETIMEDOUT), never hang. */
#define XFER_FIO_STALL_MS 60000

/* A queue of at most `slots` requests in flight over `f` (its fd stays the caller's, who may
** close it once the queue is open: the queue reads and writes through a duplicate of its own):
** io_uring with that depth and stall guard (`stall_ms`, XFER_FIO_STALL_MS), or `threads`
** workers (a read of theirs blocks as pread does). An io_uring that cannot be set up (old
** kernel, a seccomp filter, a build without liburing) is XFER_E_UNAVAILABLE saying why. */
xfer_code xfer_fio_queue_open(const xfer_fio *f, xfer_fio_engine engine, int slots, int threads,
                              int stall_ms, xfer_fio_queue **out, xfer_error *err);
/* Starts a read (write = 0) or write of `len` bytes at `offset` into/from `buf` on `slot`
** (free: never submitted, or waited for). `need` bytes must arrive: a read may stop at the end
** of the file past them (O_DIRECT reads whole blocks). */
void xfer_fio_submit(xfer_fio_queue *q, int slot, int write, void *buf, size_t len, size_t need,
                     uint64_t offset);
/* Waits for the slot's request: XFER_E_OK, or its error (op read/write, errno, offset). */
xfer_code xfer_fio_wait(xfer_fio_queue *q, int slot, xfer_error *err);
/* Waits for the slot's request as long as this thread's move is watched and goes on (its
** deadline not passed, not canceled): 1 when the request is done (or the move is not watched:
** xfer_fio_wait waits), 0 when the watch ended first -- the caller stops (xfer_watch_check
** says why), drops the queue and waits for what runs, each request within a step. */
int xfer_fio_await(xfer_fio_queue *q, int slot);
/* Waits for every request in flight, then frees the queue. */
void xfer_fio_queue_close(xfer_fio_queue *q);
/* The requests not started yet never start (ECANCELED, what their waits then give); those the
** kernel or a worker runs already stop at the end of their step (2 MiB: a worker's requests
** always go in steps, the ring's when it was opened under a watch) and end ECANCELED. For a
** load or a save that stopped: what it waits for before its buffers go is a step a worker. */
void xfer_fio_drop(xfer_fio_queue *q);
/* Waits at most `seconds` for every request of a dropped queue to end: 1 when none runs any
** more, 0 when some still run (a slow or stuck device: a read or write in the kernel cannot be
** interrupted). */
int xfer_fio_settle(xfer_fio_queue *q, double seconds);
/* Closes a stopped load's or save's queue whose requests still run (xfer_fio_settle said so)
** off the caller's thread, so that it returns at its deadline: a helper thread waits for them,
** closes the queue and releases the `n` tensors in `held` (retained here: the memory they read
** into or write from, quarantined until then -- never another tensor's); where no helper can
** be had, all of it here. The caller releases its own references either way. */
void xfer_fio_queue_close_holding(xfer_fio_queue *q, xfer_ctx *ctx, xfer_tensor *const *held, size_t n);
/* Whether io_uring can be set up here: 1, or 0 with the reason in why. */
int xfer_fio_uring_usable(char *why, size_t cap);
const char *xfer_fio_engine_name(xfer_fio_engine engine);

#endif
