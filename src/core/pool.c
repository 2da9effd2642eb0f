/*
** pool.c -- the threads moves run on, made once and reused: asynchronous moves and batches
** (XFER_POOL_JOBS, at most JOBS_MAX threads; more jobs wait their turn in order) and a move's
** own helpers -- the staged pipeline's reader, a packer (XFER_POOL_HELPERS, as many as run at
** once: a helper's move waits for it, so it must never queue behind a job) and checksums of
** host memory (XFER_POOL_SUMS, half the CPUs: sums made beside a move leave the rest to it). A
** thread that
** finished its task waits for the next one instead of exiting: 50 asynchronous moves in a
** row made 57 threads, they take JOBS_MAX and a helper each now.
*/
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

/* Jobs running at once: enough to keep every device's queue fed (a job holds the locks of
** the devices it moves between; others take turns), not a thread per job started. */
#define JOBS_MAX 8

typedef struct pool {
  pthread_mutex_t lock;
  pthread_cond_t work;
  xfer_spawned *head, *tail;      /* tasks waiting for a thread */
  size_t queued, idle, threads;
  size_t max;                     /* 0: as many threads as tasks at once */
} pool;

/* Checksum threads at most, however many CPUs: 8 sum 100 GB/s and more. */
#define SUMS_MAX 8

static pool pools[3] = {
  {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, 0, JOBS_MAX},
  {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, 0, 0},
  {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, 0, 1}, /* set once: */
};

static pthread_once_t sums_sized = PTHREAD_ONCE_INIT;

static void size_sums(void)
{
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t half = cpus > 1 ? (size_t)cpus / 2 : 1;
  pools[2].max = half < SUMS_MAX ? half : SUMS_MAX;
}

size_t xfer_pool_sum_threads(void)
{
  pthread_once(&sums_sized, size_sums);
  return pools[2].max;
}

static void *worker(void *arg)
{
  pool *p = arg;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head) {
      p->idle++;
      pthread_cond_wait(&p->work, &p->lock);
      p->idle--;
    }
    xfer_spawned *task = p->head;
    p->head = task->next;
    if (!p->head) p->tail = NULL;
    p->queued--;
    pthread_mutex_unlock(&p->lock);
    task->fn(task->arg);
    if (task->owned) { /* nobody joins it: its own end (the task may have freed what it ran for) */
      free(task);
    } else { /* the joiner may free it as soon as it sees it done: nothing of it is read after */
      pthread_mutex_lock(&task->lock);
      task->done = 1;
      pthread_cond_broadcast(&task->cond);
      pthread_mutex_unlock(&task->lock);
    }
    pthread_mutex_lock(&p->lock);
  }
  return NULL;
}

static void task_init(xfer_spawned *task, void *(*fn)(void *), void *arg, int owned)
{
  task->owned = owned;
  task->fn = fn;
  task->arg = arg;
  task->done = 0;
  task->next = NULL;
  pthread_mutex_init(&task->lock, NULL);
  pthread_cond_init(&task->cond, NULL);
}

/* A thread more for the pool, its lock held: 0 or pthread_create's errno. */
static int thread_more(pool *p)
{
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&thread, &attr, worker, p);
  pthread_attr_destroy(&attr);
  if (!e) p->threads++;
  return e;
}

int xfer_spawn(xfer_pool_kind kind, void *(*fn)(void *), void *arg, xfer_spawned *task)
{
  pool *p = &pools[kind];
  if (kind == XFER_POOL_SUMS) xfer_pool_sum_threads();
  int owned = !task;
  if (owned && !(task = malloc(sizeof *task))) return ENOMEM;
  task_init(task, fn, arg, owned);
  pthread_mutex_lock(&p->lock);
  if (p->tail) p->tail->next = task;
  else p->head = task;
  p->tail = task;
  p->queued++;
  int e = 0;
  if (p->queued > p->idle && (!p->max || p->threads < p->max)) {
    e = thread_more(p);
    /* no new thread: the task waits for one of those there are, if any */
    if (e && p->threads) e = 0;
  }
  if (e) { /* no thread at all to run it: taken back */
    xfer_spawned **at = &p->head;
    while (*at != task) at = &(*at)->next;
    *at = task->next;
    p->tail = NULL;
    for (xfer_spawned *t = p->head; t; t = t->next) p->tail = t;
    p->queued--;
  } else {
    pthread_cond_signal(&p->work);
  }
  pthread_mutex_unlock(&p->lock);
  if (e) {
    pthread_cond_destroy(&task->cond);
    pthread_mutex_destroy(&task->lock);
    if (owned) free(task);
  }
  return e;
}

size_t xfer_spawn_all(xfer_pool_kind kind, void *(*fn)(void *), void *const *args, xfer_spawned *const *tasks,
                      size_t n)
{
  pool *p = &pools[kind];
  if (kind == XFER_POOL_SUMS) xfer_pool_sum_threads();
  if (!n) return 0;
  for (size_t k = 0; k < n; k++) task_init(tasks[k], fn, args[k], 0);
  for (size_t k = 0; k + 1 < n; k++) tasks[k]->next = tasks[k + 1];
  pthread_mutex_lock(&p->lock);
  xfer_spawned *before = p->tail; /* (the tasks go after it: taken back from there) */
  if (p->tail) p->tail->next = tasks[0];
  else p->head = tasks[0];
  p->tail = tasks[n - 1];
  p->queued += n;
  /* a thread for each task no idle thread takes, as n calls of xfer_spawn would make */
  for (size_t made = 0; made < n && p->queued > p->idle + made && (!p->max || p->threads < p->max); made++)
    if (thread_more(p)) break;
  size_t queued = p->threads ? n : 0;
  if (!queued) { /* no thread at all to run them: taken back */
    if (before) before->next = NULL;
    else p->head = NULL;
    p->tail = before;
    p->queued -= n;
  }
  pthread_mutex_unlock(&p->lock);
  if (queued == 1) {
    pthread_cond_signal(&p->work);
  } else if (queued) {
    pthread_cond_broadcast(&p->work);
  } else {
    for (size_t k = 0; k < n; k++) {
      pthread_cond_destroy(&tasks[k]->cond);
      pthread_mutex_destroy(&tasks[k]->lock);
    }
  }
  return queued;
}

int xfer_run_detached(void *(*fn)(void *), void *arg) { return xfer_spawn(XFER_POOL_HELPERS, fn, arg, NULL); }

void xfer_spawned_join(xfer_spawned *task)
{
  pthread_mutex_lock(&task->lock);
  while (!task->done) pthread_cond_wait(&task->cond, &task->lock);
  pthread_mutex_unlock(&task->lock);
  pthread_cond_destroy(&task->cond);
  pthread_mutex_destroy(&task->lock);
}
