/*
** jobs.c -- asynchronous transfers: each runs xfer_transfer_to on a thread of the job pool
** (pool.c: a few threads made once; more jobs wait their turn, in order). Device locks
** (xfer_hold) let moves on different devices run at once and make moves that share a device
** take turns.
*/
#include <stdlib.h>
#include <string.h>

#include "batch.h"

struct xfer_job {
  pthread_mutex_t lock;         /* done, and its waiters */
  pthread_cond_t ended;
  xfer_ctx *ctx;                /* the thread's reference: it counts itself out at its end */
  xfer_tensor *src;
  xfer_device *dst;
  xfer_batch *batch;            /* a batch's run instead of a move (no src, no result) */
  xfer_transfer_opts opts;
  xfer_tensor *result;
  xfer_code rc;
  xfer_error err;
  int done;                     /* set (atomically, under lock) when the move has finished */
  int refs;                     /* the caller's and the thread's (atomic) */
  uint64_t bytes_done, bytes_total; /* progress (atomic) */
  int (*user_progress)(void *ud, uint64_t done, uint64_t total); /* the caller's, if any */
  void *user_ud;
  int canceled;                 /* xfer_job_cancel: the move stops at its next step (atomic) */
  double deadline_at;           /* from the start call's timeout (xfer_now() seconds), 0: none */
  double timeout;
  /* a job of the caller's own (xfer_job_start_call) instead of a move */
  xfer_code (*call)(void *arg, xfer_error *err);
  void *arg;
  void (*release)(void *arg);
  int arg_holders;              /* the run's and the caller's hold of arg (atomic): the last to let go releases it */
  xfer_tensor **uses;           /* busy (and retained) while it runs */
  size_t nuses;
};

/* The job's own progress callback: counts for xfer_job_progress, then the caller's. */
static int job_progress(void *ud, uint64_t done, uint64_t total)
{
  xfer_job *job = ud;
  __atomic_store_n(&job->bytes_total, total, __ATOMIC_RELAXED);
  __atomic_store_n(&job->bytes_done, done, __ATOMIC_RELEASE);
  return job->user_progress ? job->user_progress(job->user_ud, done, total) : 0;
}

void xfer_job_progress(xfer_job *job, uint64_t *done, uint64_t *total)
{
  *done = __atomic_load_n(&job->bytes_done, __ATOMIC_ACQUIRE);
  *total = __atomic_load_n(&job->bytes_total, __ATOMIC_RELAXED);
}

static void job_destroy(xfer_job *job)
{
  for (size_t i = 0; i < job->nuses; i++) xfer_tensor_release(job->uses[i]);
  free(job->uses);
  xfer_tensor_release(job->result);
  xfer_tensor_release(job->src);
  xfer_batch_release(job->batch);
  pthread_cond_destroy(&job->ended);
  pthread_mutex_destroy(&job->lock);
  free(job);
}

static xfer_job *job_new(void)
{
  xfer_job *job = calloc(1, sizeof *job);
  if (!job) return NULL;
  pthread_mutex_init(&job->lock, NULL);
  pthread_cond_init(&job->ended, NULL);
  job->refs = 2; /* the caller's and the pool thread's */
  job->arg_holders = 2;
  return job;
}

/* One of the two holds of a job's arg let go (the run's as it ends, the caller's as it lets go of
** the job): the last one releases it -- at once, not when the job's memory goes, which the pool's
** thread may free a moment after a caller that waited has let go (a caller's arg came back late). */
static void arg_let_go(xfer_job *job)
{
  if (__atomic_sub_fetch(&job->arg_holders, 1, __ATOMIC_ACQ_REL) == 0 && job->release) {
    job->release(job->arg);
    job->release = NULL;
  }
}

static void job_unref(xfer_job *job)
{
  if (__atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) == 0) job_destroy(job);
}

/* The source is busy from the start call until the move has ended, so freeing it waits
** for the move even when the thread has not taken its hold yet. */
static void mark_busy(xfer_tensor *t, int by) { xfer_tensors_busy(&t, 1, by); }

static void jobs_running(xfer_ctx *ctx, int by)
{
  if (!ctx) return;
  pthread_mutex_lock(&ctx->lock);
  ctx->jobs_running += by;
  if (by < 0) pthread_cond_broadcast(&ctx->idle);
  pthread_mutex_unlock(&ctx->lock);
}

/* What the run holds besides its result goes before the job reads as done: a caller that
** waited and let go finds the memory back at once (the thread's own reference to the job,
** dropped after, once held the source -- and a result no one else held -- until this thread
** got there: the memory came back "one job late"). */
static void *run_job(void *arg)
{
  xfer_job *job = arg;
  xfer_ctx *ctx = job->ctx;
  /* a job waiting its turn counts its deadline from the start call, and may be canceled
  ** before it starts: then it ends at its first step */
  xfer_watch outer = xfer_watch_install(job->deadline_at, job->timeout, &job->canceled);
  if (job->call) {
    job->rc = job->call(job->arg, &job->err);
    xfer_tensors_busy(job->uses, job->nuses, -1);
    for (size_t i = 0; i < job->nuses; i++) xfer_tensor_release(job->uses[i]);
    job->nuses = 0;
  } else if (job->batch) {
    job->rc = xfer_batch_run_claimed(job->batch, &job->err); /* claimed by xfer_batch_start */
    xfer_batch_release(job->batch);
    job->batch = NULL;
  } else {
    job->rc = xfer_transfer_to(job->src, job->dst, &job->opts, &job->result, &job->err);
    mark_busy(job->src, -1);
    xfer_tensor_release(job->src);
    job->src = NULL;
  }
  xfer_watch_restore(outer);
  arg_let_go(job); /* (before it reads as done: see above) */
  pthread_mutex_lock(&job->lock);
  __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&job->ended);
  pthread_mutex_unlock(&job->lock);
  job_unref(job); /* the last one out (this thread, for a detached job) frees it */
  jobs_running(ctx, -1); /* after: a detached job's result is given back by now */
  if (ctx) xfer_ctx_release(ctx);
  return NULL;
}

void xfer_synchronize(xfer_ctx *ctx)
{
  pthread_mutex_lock(&ctx->lock);
  while (ctx->jobs_running > 0) pthread_cond_wait(&ctx->idle, &ctx->lock);
  pthread_mutex_unlock(&ctx->lock);
}

xfer_code xfer_transfer_start(xfer_tensor *src, xfer_device *dst_dev,
                              const xfer_transfer_opts *opts, xfer_job **out, xfer_error *err)
{
  *out = NULL;
  xfer_code rc = xfer_tensor_usable(src, XFER_OP_TO_ASYNC, err);
  if (rc) return rc;
  xfer_job *job = job_new();
  if (!job) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_TO_ASYNC);
  job->src = xfer_tensor_retain(src);
  job->dst = dst_dev;
  job->ctx = xfer_ctx_retain(src->dev->ctx);
  if (opts) job->opts = *opts;
  job->user_progress = job->opts.progress;
  job->user_ud = job->opts.progress_ud;
  job->opts.progress = job_progress;
  job->opts.progress_ud = job;
  job->bytes_total = src->nbytes;
  double configured;
  __atomic_load(&src->dev->ctx->config.timeout, &configured, __ATOMIC_RELAXED);
  job->timeout = job->opts.timeout ? job->opts.timeout : configured;
  job->deadline_at = job->timeout > 0 ? xfer_now() + job->timeout : 0;
  mark_busy(src, 1);
  jobs_running(job->ctx, 1);
  if (xfer_spawn(XFER_POOL_JOBS, run_job, job, NULL)) {
    mark_busy(src, -1);
    jobs_running(job->ctx, -1);
    xfer_ctx_release(job->ctx);
    job_destroy(job);
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_TO_ASYNC, XFER_S_THREAD_NOT_STARTED);
  }
  *out = job;
  return XFER_E_OK;
}

xfer_code xfer_batch_start(xfer_batch *batch, xfer_job **out, xfer_error *err)
{
  *out = NULL;
  xfer_code rc = xfer_batch_claim(batch, err);
  if (rc) return rc;
  xfer_job *job = job_new();
  if (!job) {
    xfer_batch_unclaim(batch);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_RUN_ASYNC);
  }
  job->batch = xfer_batch_retain(batch);
  job->ctx = xfer_batch_ctx(batch); /* NULL for an empty batch: no context to count it in */
  if (job->ctx) xfer_ctx_retain(job->ctx);
  job->bytes_total = xfer_batch_bytes(batch);
  double asked = xfer_batch_timeout(batch), configured = 0;
  if (job->ctx) __atomic_load(&job->ctx->config.timeout, &configured, __ATOMIC_RELAXED);
  job->timeout = asked ? asked : configured;
  job->deadline_at = job->timeout > 0 ? xfer_now() + job->timeout : 0;
  jobs_running(job->ctx, 1);
  if (xfer_spawn(XFER_POOL_JOBS, run_job, job, NULL)) {
    jobs_running(job->ctx, -1);
    if (job->ctx) xfer_ctx_release(job->ctx);
    xfer_batch_unclaim(batch);
    job_destroy(job);
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_RUN_ASYNC, XFER_S_THREAD_NOT_STARTED);
  }
  *out = job;
  return XFER_E_OK;
}

xfer_code xfer_job_start_call(xfer_ctx *ctx, xfer_code (*fn)(void *arg, xfer_error *err), void *arg,
                              void (*release)(void *arg), double timeout, xfer_tensor *const *tensors,
                              size_t ntensors, xfer_job **out, xfer_error *err)
{
  *out = NULL;
  xfer_job *job = job_new();
  xfer_tensor **uses = ntensors ? calloc(ntensors, sizeof *uses) : NULL;
  if (!job || (ntensors && !uses)) {
    free(job);
    free(uses);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_RUN_ASYNC);
  }
  job->call = fn;
  job->arg = arg;
  job->ctx = xfer_ctx_retain(ctx);
  for (size_t i = 0; i < ntensors; i++) uses[job->nuses++] = xfer_tensor_retain(tensors[i]);
  job->uses = uses;
  double configured;
  __atomic_load(&ctx->config.timeout, &configured, __ATOMIC_RELAXED);
  job->timeout = timeout ? timeout : configured;
  job->deadline_at = job->timeout > 0 ? xfer_now() + job->timeout : 0;
  xfer_tensors_busy(job->uses, job->nuses, 1);
  jobs_running(ctx, 1);
  if (xfer_spawn(XFER_POOL_JOBS, run_job, job, NULL)) {
    xfer_tensors_busy(job->uses, job->nuses, -1);
    jobs_running(ctx, -1);
    xfer_ctx_release(ctx);
    job_destroy(job); /* (not given release: the caller keeps arg on failure) */
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_RUN_ASYNC, XFER_S_THREAD_NOT_STARTED);
  }
  job->release = release; /* (read by job_destroy only once both have let go) */
  *out = job;
  return XFER_E_OK;
}

void *xfer_job_arg(xfer_job *job) { return job ? job->arg : NULL; }

int xfer_job_done(xfer_job *job) { return __atomic_load_n(&job->done, __ATOMIC_ACQUIRE); }

/* Waits for the move to end (its thread goes on to other jobs). */
static void join(xfer_job *job)
{
  pthread_mutex_lock(&job->lock);
  while (!__atomic_load_n(&job->done, __ATOMIC_ACQUIRE)) pthread_cond_wait(&job->ended, &job->lock);
  pthread_mutex_unlock(&job->lock);
}

xfer_code xfer_job_wait(xfer_job *job, xfer_tensor **out, xfer_error *err)
{
  *out = NULL;
  join(job);
  if (job->rc) {
    if (err) *err = job->err;
    return job->rc;
  }
  *out = job->result ? xfer_tensor_retain(job->result) : NULL; /* a batch makes none */
  return XFER_E_OK;
}

/* The caller lets go: a finished job's result goes now, not when its thread drops the job
** (the thread touches no result once the job reads as done). */
static void caller_done(xfer_job *job)
{
  xfer_tensor *result = NULL;
  pthread_mutex_lock(&job->lock);
  if (__atomic_load_n(&job->done, __ATOMIC_ACQUIRE)) {
    result = job->result;
    job->result = NULL;
  }
  pthread_mutex_unlock(&job->lock);
  xfer_tensor_release(result);
  arg_let_go(job);
  job_unref(job);
}

xfer_code xfer_job_cancel(xfer_job *job)
{
  if (!job) return XFER_E_OK;
  __atomic_store_n(&job->canceled, 1, __ATOMIC_RELEASE);
  join(job); /* nothing more writes into its targets once its thread is through */
  return XFER_E_OK;
}

void xfer_job_release(xfer_job *job)
{
  if (!job) return;
  join(job);
  caller_done(job);
}

void xfer_job_detach(xfer_job *job)
{
  if (!job) return;
  caller_done(job); /* running still: the pool's thread lets go of it and its result at its end */
}
