/*
** util.h -- what every layer of the core may call: service.h's (error records, switches, the
** clock, driver libraries, layouts, fault rules), a copy of the environment (env_guard.c), the
** running move's progress (progress.c) and the threads moves run on (pool.c).
** Layer 1 of docs/architecture.md: these files call nothing of the core above them.
*/
#ifndef XFER_UTIL_H
#define XFER_UTIL_H

#include "service.h"
#include "types.h"

/* -- env_guard.c -------------------------------------------------------------------- */

/* A copy of the environment, and putting it back (a driver's open edits it). */
char **xfer_env_snapshot(void);
void xfer_env_restore(char **snapshot);
void xfer_env_free(char **snapshot);
/* XFER_INVALID when a switch is set to anything but 0 or 1, saying which. */
xfer_code xfer_env_flags_check(xfer_error *err);

/* -- progress.c ------------------------------------------------------------------------- */

/* The progress of the move running on this thread (its caller's callback): 0 to go on, else
** the move stops with XFER_E_INVALID (op "progress") in err. */
xfer_code xfer_progress(uint64_t done, uint64_t total, xfer_error *err);
/* Installs opts' callback for the moves this thread runs until the returned one is put back
** (xfer_progress_restore): a move that runs others keeps the outermost callback. */
const xfer_transfer_opts *xfer_progress_install(const xfer_transfer_opts *opts);
/* -- pool.c: threads made once and reused ---------------------------------------------- */

typedef enum {
  XFER_POOL_JOBS,     /* asynchronous moves and batches: a few threads, the rest wait in order */
  XFER_POOL_HELPERS,  /* a move's own helper (a pipeline's reader): never waits for a thread */
  XFER_POOL_SUMS      /* checksums of host memory: half the CPUs (at most 8), the rest wait */
} xfer_pool_kind;

/* A task given to a pool: filled by xfer_spawn, waited for by xfer_spawned_join. */
typedef struct xfer_spawned {
  void *(*fn)(void *);
  void *arg;
  int done, owned;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct xfer_spawned *next;
} xfer_spawned;

/* Runs fn(arg) on a thread of the pool: 0, or the errno of a thread that could not be made
** when the pool has none. `task` NULL: nobody waits for it (fn sees to its own end);
** otherwise xfer_spawned_join(task) must be called once, and waits for fn to return. */
int xfer_spawn(xfer_pool_kind kind, void *(*fn)(void *), void *arg, xfer_spawned *task);
void xfer_spawned_join(xfer_spawned *task);
/* n tasks at once, as n calls of xfer_spawn with a task each (tasks[k] runs fn(args[k])): queued
** in one hold of the pool's lock and its idle threads woken by one broadcast -- a call a task
** woke a thread each time, which then waited for the lock the caller held (the sums of a
** landed slice are 8 tasks on the caller's way to the next slice). Returns n, or 0 when the
** pool has no thread and none could be made (nothing queued: the caller runs them). */
size_t xfer_spawn_all(xfer_pool_kind kind, void *(*fn)(void *), void *const *args, xfer_spawned *const *tasks,
                      size_t n);
/* How many threads XFER_POOL_SUMS runs at once. */
size_t xfer_pool_sum_threads(void);

/* Whether the move running on this thread is watched -- a progress callback, a deadline or a
** cancel flag: its paths then go in steps, telling each (and stopping at one). */
int xfer_progress_wanted(void);
void xfer_progress_restore(const xfer_transfer_opts *before);

/* Polls ready(arg) until it is (1) or the deadline passes (0); `stalled` (a fault): never
** ready -- with no deadline, a wait that never ends, as a stalled device's. */
int xfer_wait_until(int (*ready)(void *), void *arg, int stalled);

#endif
