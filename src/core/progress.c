/*
** progress.c -- the watch over the move running on this thread: its progress callback, its
** deadline and its cancel flag. The outermost move's, when a move runs others (a packed
** view's, a conversion's), so that the paths far below the move (the staged pipeline's chunks,
** a batch's groups, a file's reads) report to the caller who asked. Every point a move tells
** its progress is also where it stops: canceled, or past its deadline. A watched move goes in
** steps (xfer_progress_wanted), so that it stops within a step of being asked to; the backends'
** waits end at the deadline (xfer_wait_until).
*/
#include <sched.h>
#include <time.h>

#include "util.h"

static _Thread_local const xfer_transfer_opts *progress_of;
static _Thread_local double deadline_at;      /* xfer_now() seconds; 0: none */
static _Thread_local double deadline_given;   /* ... and the timeout it came from */
static _Thread_local const int *canceled_by;  /* nonzero there: stop */

static uint64_t steps_seen, cancel_at; /* torture's (atomic) */
static int step_hit;

void xfer_watch_cancel_at(uint64_t k)
{
  __atomic_store_n(&cancel_at, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&steps_seen, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&step_hit, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&cancel_at, k, __ATOMIC_RELEASE);
}

uint64_t xfer_watch_steps(void) { return __atomic_load_n(&steps_seen, __ATOMIC_ACQUIRE); }
int xfer_watch_step_hit(void) { return __atomic_load_n(&step_hit, __ATOMIC_ACQUIRE); }

xfer_code xfer_watch_check(uint64_t done, uint64_t total, xfer_error *err)
{
  uint64_t step = __atomic_add_fetch(&steps_seen, 1, __ATOMIC_ACQ_REL);
  int torture_cancel = step == __atomic_load_n(&cancel_at, __ATOMIC_ACQUIRE);
  if (torture_cancel) __atomic_store_n(&step_hit, 1, __ATOMIC_RELEASE);
  if (torture_cancel || (canceled_by && __atomic_load_n(canceled_by, __ATOMIC_ACQUIRE)))
    return xfer_err_op(err, XFER_E_CANCELED, XFER_OP_CANCEL, XFER_S_CANCELED, (unsigned long long)done,
                       (unsigned long long)total);
  if (deadline_at && xfer_now() > deadline_at)
    return xfer_err_op(err, XFER_E_TIMEOUT, XFER_OP_DEADLINE, XFER_S_DEADLINE_PASSED, deadline_given,
                       (unsigned long long)done, (unsigned long long)total);
  return XFER_E_OK;
}

xfer_code xfer_progress(uint64_t done, uint64_t total, xfer_error *err)
{
  xfer_code rc = xfer_watch_check(done, total, err);
  if (rc) return rc;
  const xfer_transfer_opts *o = progress_of;
  if (!o || !o->progress || !o->progress(o->progress_ud, done, total)) return XFER_E_OK;
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_PROGRESS, XFER_S_PROGRESS_STOPPED,
                     (unsigned long long)done, (unsigned long long)total);
}

/* Installs opts' callback for the moves this thread runs until the returned one is put back. */
const xfer_transfer_opts *xfer_progress_install(const xfer_transfer_opts *opts)
{
  const xfer_transfer_opts *before = progress_of;
  if (opts && opts->progress) progress_of = opts;
  return before;
}

void xfer_progress_restore(const xfer_transfer_opts *before) { progress_of = before; }

int xfer_progress_wanted(void)
{
  return (progress_of && progress_of->progress) || deadline_at || canceled_by;
}

xfer_watch xfer_watch_install(double at, double timeout, const int *canceled)
{
  xfer_watch before = {deadline_at, deadline_given, canceled_by};
  if (at > 0 && (!deadline_at || at < deadline_at)) { /* the earlier deadline holds */
    deadline_at = at;
    deadline_given = timeout;
  }
  if (canceled) canceled_by = canceled;
  return before;
}

void xfer_watch_restore(xfer_watch before)
{
  deadline_at = before.deadline_at;
  deadline_given = before.timeout;
  canceled_by = before.canceled;
}

double xfer_watch_deadline(void) { return deadline_at; }

int xfer_watch_canceled(void) { return canceled_by && __atomic_load_n(canceled_by, __ATOMIC_ACQUIRE); }

int xfer_watch_watched(void) { return deadline_at > 0 || canceled_by; }

int xfer_watch_ended(void) { return (deadline_at > 0 && xfer_now() > deadline_at) || xfer_watch_canceled(); }

xfer_watch xfer_watch_current(void) { return (xfer_watch){deadline_at, deadline_given, canceled_by}; }

xfer_code xfer_watch_config_check(const xfer_config *c, xfer_error *err)
{
  if (c->timeout == 0 || (c->timeout >= 0.001 && c->timeout <= 86400)) return XFER_E_OK;
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG, XFER_S_TIMEOUT_RANGE, "timeout", c->timeout);
}

xfer_watch xfer_watch_for(double asked, double configured)
{
  double t = asked ? asked : configured;
  return xfer_watch_install(t > 0 ? xfer_now() + t : 0, t, NULL);
}

/* Polls ready(arg) until it says so (1), or the deadline passes (0): at once and yielding for
** the first 100 us (a copy engine's chunk), then sleeping 20 us between looks (a stalled device
** costs the CPU little, and the deadline is missed by a sleep at most). A stall (the fault)
** never sees it ready. */
int xfer_wait_until(int (*ready)(void *), void *arg, int stalled)
{
  double start = xfer_now();
  for (;;) {
    if (!stalled && ready(arg)) return 1;
    double now = xfer_now();
    if (deadline_at && now > deadline_at) return 0;
    if (now - start < 100e-6) {
      sched_yield();
    } else {
      struct timespec nap = {0, 20000};
      nanosleep(&nap, NULL);
    }
  }
}
