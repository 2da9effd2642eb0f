/*
** util.h -- what every layer may call: error records (error.c), the environment's switches
** and a copy of it (env_guard.c), the clock, opening a driver library (driver_library.c),
** the arithmetic of layouts (layout.c) and the running move's progress (progress.c).
** Layer 1 of docs/architecture.md: these files call nothing of the core above them.
*/
#ifndef XFER_UTIL_H
#define XFER_UTIL_H

#include "types.h"

/* -- error.c ---------------------------------------------------------------------- */

/* Copies text into dst of cap bytes, cut short to fit, always terminated. */
void xfer_copy_text(char *dst, size_t cap, const char *src);
/* dst = a then b, cut short to fit cap bytes. */
void xfer_err_join(char *dst, size_t cap, const char *a, const char *b);
/* Sets code, op and a formatted message; clears the rest. Returns code. */
xfer_code xfer_err_set(xfer_error *err, xfer_code code, const char *op, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* The same for one of the XFER_OPS (a driver call's phase, a step of a move). */
xfer_code xfer_err_op(xfer_error *err, xfer_code code, xfer_op op, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* The code's own words from the error table as the cause ("out of host memory" for
** XFER_E_ALLOC): for failures the core meets itself, where no driver has more to say. The
** second form names an API call instead of one of the XFER_OPS. */
xfer_code xfer_err_code(xfer_error *err, xfer_code code, xfer_op op);
xfer_code xfer_err_code_in(xfer_error *err, xfer_code code, const char *call);
/* A driver call failed: records its native code, name and text as the cause. */
xfer_code xfer_err_native(xfer_error *err, xfer_code code, xfer_op op, long long native,
                          const char *native_name, const char *native_text, int retryable,
                          int injected);
/* Puts a backend's cause into words naming both ends of the movement. */
void xfer_err_frame(xfer_error *err, const xfer_device *from, const xfer_device *to,
                    size_t nbytes);

/* -- env_guard.c -------------------------------------------------------------------- */

/* A copy of the environment, and putting it back (a driver's open edits it). */
char **xfer_env_snapshot(void);
void xfer_env_restore(char **snapshot);
void xfer_env_free(char **snapshot);
/* An on/off switch from the environment (XFER_TRACE, XFER_CACHE, XFER_SHARED_MEMORY,
** XFER_VULKAN_NO_MAP, ...): its default when unset, else 1 for "1". */
int xfer_env_flag(const char *name);
/* XFER_INVALID when a switch is set to anything but 0 or 1, saying which. */
xfer_code xfer_env_flags_check(xfer_error *err);
/* Seconds on the monotonic clock. */
double xfer_now(void);

/* -- driver_library.c ----------------------------------------------------------------- */

/* dlopen()s `library`, or the one the environment variable `env` names; NULL with an
** unavailable error naming `what` ("the CUDA driver") otherwise. *path: the name used. */
void *xfer_driver_open(const char *env, const char *library, const char *what, const char **path,
                       xfer_error *err);

/* -- layout.c --------------------------------------------------------------------------- */

/* Packed (row-major) strides for a shape, and whether strides are packed. */
void xfer_packed_strides(const xfer_shape *shape, int64_t *strides);
int xfer_strides_packed(const xfer_shape *shape, const int64_t *strides);
/* The elements, from the first, that a layout reaches: [0, extent) (0 when it is empty). */
int64_t xfer_layout_extent(const xfer_shape *shape, const int64_t *strides);

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
  XFER_POOL_HELPERS   /* a move's own helper (a pipeline's reader): never waits for a thread */
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

/* Whether the move running on this thread has a progress callback (its paths then go in
** steps, telling each). */
int xfer_progress_wanted(void);
void xfer_progress_restore(const xfer_transfer_opts *before);

#endif
