/*
** file_io.c -- the file endpoints' reads and writes (file_io.h): whole transfers at an offset,
** and a queue of requests in flight on io_uring or on a pool of threads.
**
** Why both: a read from the page cache is a memory copy the calling thread makes, so several
** threads copy at once where one io_uring submitter would copy alone; a read that goes to the
** disk (O_DIRECT) is DMA the kernel queues, which io_uring keeps deep without a thread a
** request. file_route.c picks one (and says why).
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef XFER_WITH_URING
#include <liburing.h>
#endif

#include "file_io.h"

static const char *errno_name(int e)
{
  const char *name = e ? strerrorname_np(e) : NULL;
  return name ? name : "";
}

xfer_code xfer_fio_error(xfer_error *err, xfer_code code, xfer_op op, int native,
                         const char *path, long long offset, const char *fmt, ...)
{
  if (!err) return code;
  char cause[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cause, sizeof cause, fmt, ap);
  va_end(ap);
  if (native)
    xfer_err_native(err, code, op, native, errno_name(native), cause, native == EINTR ||
                    native == EAGAIN, 0);
  else
    xfer_err_op(err, code, op, "%s", cause);
  xfer_copy_text(err->file, sizeof err->file, path);
  err->offset = offset;
  return code;
}

/* A fault rule "file:<op>" hit: the failure a real one would be (EIO unless the rule says). */
static int injected(const xfer_fio *f, xfer_op op, int *native)
{
  long long code = 0;
  if (!f->ctx || !xfer_fault_hit(f->ctx, "file", op, &code)) return 0;
  *native = code ? (int)code : EIO;
  return 1;
}

/* A fault rule "file:corrupt" hit: one bit flipped in the bytes a queued read brought or a
** queued write takes (a load's or a save's request, not a header's: what a disk or a bus that
** corrupts would give), for `verify` to be seen to catch. */
static void corrupt_if_asked(const xfer_fio *f, void *buf, size_t len)
{
  int native;
  if (len && injected(f, XFER_OP_CORRUPT, &native)) ((unsigned char *)buf)[len / 2] ^= 0x10;
}

/* An injected failure says what it failed, in the words of a real one ("read of 8 bytes at
** byte 0: ..."; a sync: "fdatasync: ..."), so that its message reads alone too. */
static xfer_code injected_error(const xfer_fio *f, xfer_op op, int native, size_t len,
                                long long offset, xfer_error *err)
{
  xfer_code code = xfer_op_failure(op);
  if (op == XFER_OP_SYNC)
    xfer_fio_error(err, code, op, native, f->path, offset, "fdatasync: %s (injected)", strerror(native));
  else
    xfer_fio_error(err, code, op, native, f->path, offset, "%s of %zu bytes at byte %lld: %s (injected)",
                   op == XFER_OP_WRITE ? "write" : "read", len, offset, strerror(native));
  if (err) err->injected = 1;
  return code;
}

/* What a queued request moves per syscall (a worker's pread, a watched ring's read): a request
** dropped while it runs (a load or save past its deadline, or canceled) stops at the end of
** its step, not of its chunk -- a 16 MiB read from the page cache of a loaded VM takes 8 ms,
** from a disk hundreds; a step of 2 MiB about one, and costs one syscall more per 2 MiB. */
#define STEP_BYTES ((size_t)2 << 20)

/* One transfer, resumed over short counts; *done: the bytes moved. 0 or an errno; ECANCELED
** when `dropped` (NULL: never) went up between two steps of STEP_BYTES. */
static int transfer(int fd, int write, void *buf, size_t len, size_t need, uint64_t offset,
                    const int *dropped, size_t *done)
{
  size_t at = 0;
  while (at < len) {
    if (dropped && at && __atomic_load_n(dropped, __ATOMIC_ACQUIRE)) {
      *done = at;
      return ECANCELED;
    }
    size_t step = len - at;
    if (dropped && step > STEP_BYTES) step = STEP_BYTES;
    ssize_t n = write ? pwrite(fd, (char *)buf + at, step, (off_t)(offset + at))
                      : pread(fd, (char *)buf + at, step, (off_t)(offset + at));
    if (n < 0) {
      if (errno == EINTR) continue;
      *done = at;
      return errno;
    }
    if (n == 0) break; /* end of file (reads); a write of 0 does not happen for len > 0 */
    at += (size_t)n;
  }
  *done = at;
  return at >= need ? 0 : write ? EIO : -1; /* -1: the file ended before `need` bytes */
}

static xfer_code transfer_error(const xfer_fio *f, int write, int e, size_t len, size_t done,
                                uint64_t offset, xfer_error *err)
{
  xfer_op op = write ? XFER_OP_WRITE : XFER_OP_READ;
  if (e == -1)
    return xfer_fio_error(err, XFER_E_INVALID, op, 0, f->path, (long long)offset + (long long)done,
                          "the file is truncated: it ends %zu bytes into a read of %zu at byte "
                          "%llu", done, len, (unsigned long long)offset);
  return xfer_fio_error(err, xfer_op_failure(op), op, e, f->path, (long long)offset,
                        "%s of %zu bytes at byte %llu: %s", write ? "write" : "read", len,
                        (unsigned long long)offset, strerror(e));
}

xfer_code xfer_fio_read(const xfer_fio *f, void *buf, size_t len, uint64_t offset,
                        xfer_error *err)
{
  int native;
  if (injected(f, XFER_OP_READ, &native))
    return injected_error(f, XFER_OP_READ, native, len, (long long)offset, err);
  size_t done;
  int e = transfer(f->fd, 0, buf, len, len, offset, NULL, &done);
  return e ? transfer_error(f, 0, e, len, done, offset, err) : XFER_E_OK;
}

xfer_code xfer_fio_write(const xfer_fio *f, const void *buf, size_t len, uint64_t offset,
                         xfer_error *err)
{
  int native;
  if (injected(f, XFER_OP_WRITE, &native))
    return injected_error(f, XFER_OP_WRITE, native, len, (long long)offset, err);
  size_t done;
  int e = transfer(f->fd, 1, (void *)buf, len, len, offset, NULL, &done);
  return e ? transfer_error(f, 1, e, len, done, offset, err) : XFER_E_OK;
}

xfer_code xfer_fio_sync(const xfer_fio *f, xfer_error *err)
{
  int native;
  if (injected(f, XFER_OP_SYNC, &native)) return injected_error(f, XFER_OP_SYNC, native, 0, -1, err);
  if (fdatasync(f->fd) == 0) return XFER_E_OK;
  int e = errno;
  return xfer_fio_error(err, XFER_E_WRITE, XFER_OP_SYNC, e, f->path, -1, "fdatasync: %s",
                        strerror(e));
}

const char *xfer_fio_engine_name(xfer_fio_engine engine)
{
  return engine == XFER_FIO_URING ? "io_uring" : "threads";
}

/* -- the queue ---------------------------------------------------------------------------- */

typedef enum { SLOT_FREE, SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE } slot_state;

typedef struct {
  slot_state state;
  int write;
  void *buf;
  size_t len, need, done;
  uint64_t offset;
  int result;     /* 0, an errno, or -1 (ended early) */
  int injected;
  int stalled;    /* failed by the stall guard: no completion came in stall_ms */
  int stall;      /* the fault "file:stall": it runs only once the queue is dropped, late */
} fio_slot;

struct xfer_fio_queue {
  xfer_fio file;
  xfer_fio_engine engine;
  int nslots;
  fio_slot *slots;
  /* threads: a FIFO of slot numbers */
  pthread_mutex_t lock;
  pthread_cond_t work, finished;
  int *fifo, head, count;
  pthread_t *workers;
  int nworkers, stopping;
  int dropped;    /* xfer_fio_drop was called: running requests stop at their next step */
#ifdef XFER_WITH_URING
  struct io_uring ring;
  int inflight;   /* reads and writes the kernel holds (the cancel is not counted) */
  int cancelling; /* a cancel of everything in flight is on the ring */
  int dropping;   /* ... asked by xfer_fio_drop: a request it cancels is dropped, not stalled */
  int stall_ms;
  int stepped;    /* opened watched: requests go to the kernel in steps of STEP_BYTES */
#endif
};

/* How long after its load or save stopped a stalled request (the fault) still runs: its
** first step then lands in the memory the move left to a helper. */
#define STALL_LANDS_NS 300000000L

static void *worker_main(void *arg)
{
  xfer_fio_queue *q = arg;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (!q->count && !q->stopping) pthread_cond_wait(&q->work, &q->lock);
    if (!q->count) break; /* stopping, nothing left */
    int s = q->fifo[q->head];
    q->head = (q->head + 1) % q->nslots;
    q->count--;
    fio_slot *slot = &q->slots[s];
    slot->state = SLOT_RUNNING;
    /* the stall fault: a device that answers only after the move gave up on it, and late */
    while (slot->stall && !q->dropped && !q->stopping) pthread_cond_wait(&q->finished, &q->lock);
    pthread_mutex_unlock(&q->lock);
    if (slot->stall) nanosleep(&(struct timespec){ 0, STALL_LANDS_NS }, NULL);
    size_t done = 0;
    int e = transfer(q->file.fd, slot->write, slot->buf, slot->len, slot->need, slot->offset,
                     &q->dropped, &done);
    pthread_mutex_lock(&q->lock);
    slot->done = done;
    slot->result = e;
    slot->state = SLOT_DONE;
    pthread_cond_broadcast(&q->finished);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

#ifdef XFER_WITH_URING
/* Whether the kernel sets up a ring here, asked once per process: every load's route asks,
** and the answer (a seccomp filter, an old kernel) does not change while it runs. */
static pthread_once_t uring_once = PTHREAD_ONCE_INIT;
static int uring_error; /* 0, or io_uring_queue_init's negative errno */

static void uring_probe(void)
{
  struct io_uring ring;
  uring_error = io_uring_queue_init(4, &ring, 0);
  if (uring_error == 0) io_uring_queue_exit(&ring);
}
#endif

int xfer_fio_uring_usable(char *why, size_t cap)
{
#ifdef XFER_WITH_URING
  if (!xfer_env_flag("XFER_FILE_URING")) {
    snprintf(why, cap, "XFER_FILE_URING=0");
    return 0;
  }
  pthread_once(&uring_once, uring_probe);
  if (uring_error < 0) {
    snprintf(why, cap, "io_uring_queue_init: %s", strerror(-uring_error));
    return 0;
  }
  return 1;
#else
  snprintf(why, cap, "this build has no liburing (liburing-dev was not found)");
  return 0;
#endif
}

xfer_code xfer_fio_queue_open(const xfer_fio *f, xfer_fio_engine engine, int slots, int threads,
                              int stall_ms, xfer_fio_queue **out, xfer_error *err)
{
  *out = NULL;
  xfer_fio_queue *q = calloc(1, sizeof *q);
  if (q) q->slots = calloc((size_t)slots, sizeof *q->slots);
  if (q) q->fifo = calloc((size_t)slots, sizeof *q->fifo);
  if (!q || !q->slots || !q->fifo) {
    if (q) free(q->slots), free(q->fifo);
    free(q);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_READ);
  }
  q->file = *f;
  /* its own descriptor: a request a stopped load or save left to land (a worker between its
  ** look at `dropped` and its syscall) never meets a number the caller closed and the process
  ** opened again for another file */
  q->file.fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
  if (q->file.fd < 0) {
    int e = errno;
    free(q->slots), free(q->fifo), free(q);
    return xfer_fio_error(err, XFER_E_ALLOC, XFER_OP_READ, e, f->path, -1, "dup: %s", strerror(e));
  }
  q->engine = engine;
  q->nslots = slots;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->work, NULL);
  pthread_cond_init(&q->finished, NULL);
  (void)stall_ms; /* only io_uring's requests have a stall guard */
  if (engine == XFER_FIO_URING) {
#ifdef XFER_WITH_URING
    q->stall_ms = stall_ms;
    /* watched (a deadline, a job that may be canceled): a request dropped stops within a step.
    ** Not otherwise: a cold O_DIRECT read keeps whole chunks in the device's queue. */
    q->stepped = xfer_watch_watched();
    /* one entry more than the slots: the stall guard's cancel always finds room */
    int e = io_uring_queue_init((unsigned)slots + 1, &q->ring, 0);
    if (e == 0) {
      *out = q;
      return XFER_E_OK;
    }
    xfer_fio_queue_close(q);
    return xfer_fio_error(err, XFER_E_UNAVAILABLE, XFER_OP_READ, -e, f->path, -1,
                          "io_uring_queue_init: %s", strerror(-e));
#else
    xfer_fio_queue_close(q);
    return xfer_fio_error(err, XFER_E_UNAVAILABLE, XFER_OP_READ, 0, f->path, -1,
                          "this build has no liburing");
#endif
  }
  q->workers = calloc((size_t)threads, sizeof *q->workers);
  if (!q->workers) {
    xfer_fio_queue_close(q);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_READ);
  }
  for (int i = 0; i < threads; i++) {
    int e = pthread_create(&q->workers[i], NULL, worker_main, q);
    if (e) {
      xfer_fio_queue_close(q);
      return xfer_fio_error(err, XFER_E_ALLOC, XFER_OP_READ, e, f->path, -1,
                            "pthread_create: %s", strerror(e));
    }
    q->nworkers++;
  }
  *out = q;
  return XFER_E_OK;
}

#ifdef XFER_WITH_URING
/* Queues what is left of the slot's transfer on the ring. */
static void uring_queue(xfer_fio_queue *q, int s)
{
  fio_slot *slot = &q->slots[s];
  struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
  /* never NULL: at most nslots requests are in flight on a ring of nslots entries */
  char *at = (char *)slot->buf + slot->done;
  size_t left = slot->len - slot->done;
  unsigned n = (unsigned)(q->stepped && left > STEP_BYTES ? STEP_BYTES : left);
  if (slot->write)
    io_uring_prep_write(sqe, q->file.fd, at, n, slot->offset + slot->done);
  else
    io_uring_prep_read(sqe, q->file.fd, at, n, slot->offset + slot->done);
  io_uring_sqe_set_data64(sqe, (uint64_t)s);
  q->inflight++;
}

/* Marks every running request failed: the ring broke (`result` its errno) or the guard gave
** a lost request up (`stalled`). */
static void uring_fail_running(xfer_fio_queue *q, int result, int stalled)
{
  for (int s = 0; s < q->nslots; s++)
    if (q->slots[s].state == SLOT_RUNNING) {
      q->slots[s].state = SLOT_DONE;
      q->slots[s].result = result;
      q->slots[s].stalled = stalled;
    }
  q->inflight = 0;
}

/* The cancel's tag: a slot number never reaches it, and liburing keeps UINT64_MAX for the
** timeouts it queues itself on kernels without IORING_FEAT_EXT_ARG. */
#define CANCEL_TAG (UINT64_MAX - 1)

/* The stall guard: no completion came in stall_ms, so everything in flight is cancelled. A
** request the kernel lost comes back as the cancel finding nothing (-ENOENT) and fails; one
** it can cancel comes back -ECANCELED; one already running in the kernel (-EALREADY) is
** waited for, as a blocking read would be, and cancelled again at the next stall. */
static void uring_cancel_all(xfer_fio_queue *q)
{
  if (q->cancelling) return;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
  if (!sqe) return; /* never: the ring has an entry more than the slots */
  io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(sqe, CANCEL_TAG);
  q->cancelling = 1;
}

/* The cancel's own completion: -ENOENT while requests are counted in flight means the kernel
** holds none of them, so their completions are lost and they fail. */
static void uring_cancel_done(xfer_fio_queue *q, int res)
{
  q->cancelling = 0;
  q->dropping = 0;
  if (res == -ENOENT && q->inflight > 0) uring_fail_running(q, ETIMEDOUT, 1);
}

/* Applies one completion to its slot: a short transfer is queued again for its rest. */
static void uring_complete(xfer_fio_queue *q, int s, int res)
{
  q->inflight--;
  fio_slot *slot = &q->slots[s];
  if (res == -ECANCELED) { /* the stall guard's cancel, or xfer_fio_drop's */
    slot->result = q->dropping ? ECANCELED : ETIMEDOUT;
    slot->stalled = !q->dropping;
    slot->state = SLOT_DONE;
    return;
  }
  if (res == -EINTR || res == -EAGAIN) {
    uring_queue(q, s);
    return;
  }
  if (res < 0) {
    slot->result = -res;
    slot->state = SLOT_DONE;
    return;
  }
  slot->done += (size_t)res;
  if (res > 0 && slot->done < slot->len && !q->dropped) {
    uring_queue(q, s);
    return;
  }
  if (res > 0 && slot->done < slot->len) { /* dropped between two steps */
    slot->result = ECANCELED;
    slot->state = SLOT_DONE;
    return;
  }
  slot->result = slot->done >= slot->need ? 0 : slot->write ? EIO : -1;
  slot->state = SLOT_DONE;
}

/* Submits what is queued and reaps one completion, waiting at most wait_us for it: 0 when none
** came in that time (whoever waits decides whether that is a stall), 1 otherwise. A slot counted
** running with nothing in flight fails at once: a wait on it would never end. */
static int uring_reap_within(xfer_fio_queue *q, long long wait_us)
{
  if (q->inflight <= 0) {
    uring_fail_running(q, EIO, 1);
    return 1;
  }
  struct io_uring_cqe *cqe = NULL;
  struct __kernel_timespec wait = { .tv_sec = wait_us / 1000000, .tv_nsec = (wait_us % 1000000) * 1000 };
  int e;
  do e = io_uring_submit_and_wait_timeout(&q->ring, &cqe, 1, &wait, NULL);
  while (e == -EINTR);
  if (e == -ETIME) return 0;
  if (e >= 0 && !cqe) return 1;
  if (e < 0) { /* the ring itself failed: every request in flight fails with it */
    uring_fail_running(q, -e, 0);
    return 1;
  }
  uint64_t tag = io_uring_cqe_get_data64(cqe);
  int res = cqe->res;
  io_uring_cqe_seen(&q->ring, cqe);
  if (tag == CANCEL_TAG)
    uring_cancel_done(q, res);
  else
    uring_complete(q, (int)tag, res);
  return 1;
}

/* One completion reaped, or the stall guard's cancel queued after stall_ms without one. */
static void uring_reap(xfer_fio_queue *q)
{
  if (!uring_reap_within(q, (long long)q->stall_ms * 1000)) uring_cancel_all(q);
}
#endif

void xfer_fio_drop(xfer_fio_queue *q)
{
  if (!q) return;
  __atomic_store_n(&q->dropped, 1, __ATOMIC_RELEASE);
#ifdef XFER_WITH_URING
  if (q->engine == XFER_FIO_URING) {
    if (q->inflight > 0 && !q->cancelling) {
      uring_cancel_all(q);
      q->dropping = 1;
      io_uring_submit(&q->ring);
    }
    return;
  }
#endif
  pthread_mutex_lock(&q->lock);
  for (; q->count > 0; q->count--) { /* not started: never will be */
    fio_slot *slot = &q->slots[q->fifo[q->head]];
    q->head = (q->head + 1) % q->nslots;
    slot->result = ECANCELED;
    slot->state = SLOT_DONE;
  }
  pthread_cond_broadcast(&q->finished);
  pthread_mutex_unlock(&q->lock);
}

void xfer_fio_submit(xfer_fio_queue *q, int slot_index, int write, void *buf, size_t len,
                     size_t need, uint64_t offset)
{
  fio_slot *slot = &q->slots[slot_index];
  *slot = (fio_slot){ .state = SLOT_QUEUED, .write = write, .buf = buf, .len = len,
                      .need = need, .offset = offset };
  if (write) corrupt_if_asked(&q->file, buf, need);
  int native;
  if (injected(&q->file, write ? XFER_OP_WRITE : XFER_OP_READ, &native)) {
    slot->state = SLOT_DONE;
    slot->result = native;
    slot->injected = 1;
    return;
  }
#ifdef XFER_WITH_URING
  if (q->engine == XFER_FIO_URING) {
    slot->state = SLOT_RUNNING;
    uring_queue(q, slot_index);
    io_uring_submit(&q->ring);
    return;
  }
#endif
  /* a fault "file:stall" (a rule, or torture's k-th wait under a deadline) stalls a worker's
  ** request: it ends once the move stopped (dropped the queue), a while after */
  slot->stall = injected(&q->file, XFER_OP_STALL, &native);
  pthread_mutex_lock(&q->lock);
  q->fifo[(q->head + q->count) % q->nslots] = slot_index;
  q->count++;
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->lock);
}

static int stall_ms_of(const xfer_fio_queue *q)
{
#ifdef XFER_WITH_URING
  return q->stall_ms;
#else
  (void)q;
  return 0;
#endif
}

/* The time `seconds` from now on the clock of the queue's conditions (CLOCK_REALTIME). */
static struct timespec condition_time_in(double seconds)
{
  struct timespec at;
  clock_gettime(CLOCK_REALTIME, &at);
  long long ns = at.tv_nsec + (long long)(seconds * 1e9);
  at.tv_sec += (time_t)(ns / 1000000000LL);
  at.tv_nsec = (long)(ns % 1000000000LL);
  return at;
}

/* How often a watched wait looks at its watch: a cancel is seen within this. */
#define WATCH_POLL_US 250

/* A slot's state as its caller sees it: a worker thread writes it under the queue's lock (io_uring's
** slots are the caller's alone). Read without the lock, ThreadSanitizer saw the race. */
static slot_state state_of(xfer_fio_queue *q, const fio_slot *slot)
{
  if (q->engine != XFER_FIO_THREADS) return slot->state;
  pthread_mutex_lock(&q->lock);
  slot_state state = slot->state;
  pthread_mutex_unlock(&q->lock);
  return state;
}

int xfer_fio_await(xfer_fio_queue *q, int slot_index)
{
  fio_slot *slot = &q->slots[slot_index];
  if (!xfer_watch_watched() || state_of(q, slot) == SLOT_FREE) return 1;
#ifdef XFER_WITH_URING
  if (q->engine == XFER_FIO_URING) {
    double quiet = xfer_now(); /* since the last completion: the stall guard's clock */
    while (slot->state != SLOT_DONE) {
      if (xfer_watch_ended()) return 0;
      if (uring_reap_within(q, WATCH_POLL_US)) {
        quiet = xfer_now();
      } else if ((xfer_now() - quiet) * 1e3 > q->stall_ms) {
        uring_cancel_all(q);
        quiet = xfer_now();
      }
    }
    return 1;
  }
#endif
  pthread_mutex_lock(&q->lock);
  while (slot->state != SLOT_DONE && !xfer_watch_ended()) {
    struct timespec until = condition_time_in(WATCH_POLL_US * 1e-6);
    pthread_cond_timedwait(&q->finished, &q->lock, &until);
  }
  int done = slot->state == SLOT_DONE;
  pthread_mutex_unlock(&q->lock);
  return done;
}

xfer_code xfer_fio_wait(xfer_fio_queue *q, int slot_index, xfer_error *err)
{
  fio_slot *slot = &q->slots[slot_index];
  if (state_of(q, slot) == SLOT_FREE) return XFER_E_OK;
#ifdef XFER_WITH_URING
  if (q->engine == XFER_FIO_URING)
    while (slot->state != SLOT_DONE) uring_reap(q);
#endif
  if (q->engine == XFER_FIO_THREADS) {
    pthread_mutex_lock(&q->lock);
    while (slot->state != SLOT_DONE) pthread_cond_wait(&q->finished, &q->lock);
    pthread_mutex_unlock(&q->lock);
  }
  slot->state = SLOT_FREE;
  if (!slot->result && !slot->write) corrupt_if_asked(&q->file, slot->buf, slot->need);
  if (!slot->result) return XFER_E_OK;
  if (slot->stalled)
    return xfer_fio_error(err, xfer_op_failure(slot->write ? XFER_OP_WRITE : XFER_OP_READ),
                          slot->write ? XFER_OP_WRITE : XFER_OP_READ, slot->result,
                          q->file.path, (long long)slot->offset,
                          "%s of %zu bytes at byte %llu: io_uring gave no completion in %d ms "
                          "(the request was cancelled or lost)", slot->write ? "write" : "read",
                          slot->len, (unsigned long long)slot->offset, stall_ms_of(q));
  if (slot->injected)
    return injected_error(&q->file, slot->write ? XFER_OP_WRITE : XFER_OP_READ, slot->result,
                          slot->len, (long long)slot->offset, err);
  return transfer_error(&q->file, slot->write, slot->result, slot->len, slot->done,
                        slot->offset, err);
}

int xfer_fio_settle(xfer_fio_queue *q, double seconds)
{
  if (!q) return 1;
  double until = xfer_now() + seconds;
#ifdef XFER_WITH_URING
  if (q->engine == XFER_FIO_URING) {
    for (double now = xfer_now(); q->inflight > 0; now = xfer_now()) {
      if (now >= until) return 0;
      uring_reap_within(q, (long long)((until - now) * 1e6) + 1);
    }
    return 1;
  }
#endif
  pthread_mutex_lock(&q->lock);
  int running = 1;
  while (running) {
    running = 0;
    for (int s = 0; s < q->nslots; s++) running |= q->slots[s].state == SLOT_QUEUED || q->slots[s].state == SLOT_RUNNING;
    double left = until - xfer_now();
    if (!running || left <= 0) break;
    struct timespec at = condition_time_in(left);
    pthread_cond_timedwait(&q->finished, &q->lock, &at);
  }
  pthread_mutex_unlock(&q->lock);
  return !running;
}

/* A queue handed to a helper thread, and what its requests read into or write from: let go
** once they have landed. */
typedef struct landing {
  xfer_fio_queue *q;
  xfer_ctx *ctx;       /* retained: the tensors' devices live until they go */
  xfer_tensor **held;  /* retained */
  size_t nheld;
} landing;

static void *land_then_let_go(void *arg)
{
  landing *l = arg;
  xfer_fio_queue_close(l->q);
  for (size_t i = 0; i < l->nheld; i++) {
    xfer_device *dev = xfer_tensor_device(l->held[i]);
    long long bytes = (long long)xfer_tensor_nbytes(l->held[i]);
    xfer_tensor_release(l->held[i]);
    if (dev) xfer_mem_landing(dev, -bytes); /* in use no more: no longer held either */
  }
  xfer_ctx_release(l->ctx);
  free(l->held);
  free(l);
  return NULL;
}

void xfer_fio_queue_close_holding(xfer_fio_queue *q, xfer_ctx *ctx, xfer_tensor *const *held, size_t n)
{
  landing *l = calloc(1, sizeof *l);
  if (l) l->held = calloc(n ? n : 1, sizeof *l->held);
  if (!l || !l->held) {
    if (l) free(l->held);
    free(l);
    xfer_fio_queue_close(q); /* waits here: the caller lets go */
    return;
  }
  l->q = q;
  l->ctx = xfer_ctx_retain(ctx);
  for (size_t i = 0; i < n; i++) {
    xfer_device *dev = held[i] ? xfer_tensor_device(held[i]) : NULL;
    if (!dev) continue; /* (a freed one holds no memory) */
    l->held[l->nheld++] = xfer_tensor_retain(held[i]);
    xfer_mem_landing(dev, (long long)xfer_tensor_nbytes(held[i])); /* held until let go */
  }
  if (xfer_run_detached(land_then_let_go, l)) land_then_let_go(l); /* no helper: the same here */
}

void xfer_fio_queue_close(xfer_fio_queue *q)
{
  if (!q) return;
#ifdef XFER_WITH_URING
  if (q->engine == XFER_FIO_URING && q->ring.ring_fd > 0) {
    while (q->inflight > 0) uring_reap(q);
    io_uring_queue_exit(&q->ring);
  }
#endif
  pthread_mutex_lock(&q->lock);
  q->stopping = 1;
  pthread_cond_broadcast(&q->work);
  pthread_mutex_unlock(&q->lock);
  for (int i = 0; i < q->nworkers; i++) pthread_join(q->workers[i], NULL);
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->work);
  pthread_cond_destroy(&q->finished);
  free(q->workers);
  free(q->fifo);
  free(q->slots);
  if (q->file.fd >= 0) close(q->file.fd);
  free(q);
}
