/*
** file_jobs.c -- loads and saves as jobs (xfer_job_start_call): what each runs on its thread,
** and copies of what the caller gave, so that the caller's arrays, strings and open file are
** its own again once the start call returns. Cancel and deadlines are the jobs' (the load and
** the save stop between their requests: file_load.c, file_save.c).
*/
#include <stdlib.h>
#include <string.h>

#include "file_load.h"

/* -- Loads ---------------------------------------------------------------------------------- */

typedef struct load_job {
  xfer_file *file;              /* the job's own opening of the path */
  xfer_load_item *items;
  size_t n;
  xfer_file_opts opts;
  xfer_tensor **out;            /* the tensors, once loaded, until taken */
} load_job;

static xfer_code load_run(void *arg, xfer_error *err)
{
  load_job *j = arg;
  return xfer_file_load(j->file, j->items, j->n, &j->opts, j->out, err);
}

static void load_free(void *arg)
{
  load_job *j = arg;
  for (size_t i = 0; j->out && i < j->n; i++) xfer_tensor_release(j->out[i]);
  xfer_file_close(j->file);
  free(j->items);
  free(j->out);
  free(j);
}

xfer_code xfer_file_load_start(xfer_file *file, const xfer_load_item *items, size_t n,
                               const xfer_file_opts *opts, xfer_job **job, xfer_error *err)
{
  *job = NULL;
  xfer_ctx *ctx = xfer_file_context(file);
  load_job *j = calloc(1, sizeof *j);
  if (j) {
    j->n = n;
    j->items = malloc((n ? n : 1) * sizeof *j->items);
    j->out = calloc(n ? n : 1, sizeof *j->out);
  }
  if (!j || !j->items || !j->out) {
    if (j) load_free(j);
    return xfer_err_op(err, XFER_E_ALLOC, XFER_OP_READ, "out of host memory for a load's job");
  }
  if (n) memcpy(j->items, items, n * sizeof *items);
  if (opts) j->opts = *opts;
  xfer_code rc = xfer_file_open(ctx, xfer_file_path(file), &j->file, err);
  if (!rc && xfer_file_count(j->file) != xfer_file_count(file))
    rc = xfer_err_op(err, XFER_E_INVALID, XFER_OP_READ, "%s changed since it was opened (%zu tensors, "
                     "now %zu)", xfer_file_path(file), xfer_file_count(file), xfer_file_count(j->file));
  if (!rc) rc = xfer_job_start_call(ctx, load_run, j, load_free, j->opts.timeout, NULL, 0, job, err);
  if (rc) load_free(j);
  return rc;
}

xfer_tensor *xfer_file_load_take(xfer_job *job, size_t i)
{
  load_job *j = xfer_job_arg(job);
  xfer_tensor *unused = NULL;
  xfer_error ignored;
  if (!j || i >= j->n || !xfer_job_done(job) || xfer_job_wait(job, &unused, &ignored)) return NULL;
  xfer_tensor *t = j->out[i];
  j->out[i] = NULL;
  return t;
}

/* -- Saves ---------------------------------------------------------------------------------- */

typedef struct save_job {
  xfer_ctx *ctx;
  char *path, *format;
  char **names, **keys, **values;
  xfer_tensor **tensors;        /* (retained and busy by the job: xfer_job_start_call) */
  size_t n, nmeta;
  xfer_file_opts opts;
} save_job;

static xfer_code save_run(void *arg, xfer_error *err)
{
  save_job *j = arg;
  return xfer_file_save(j->ctx, j->path, j->format, (const char *const *)j->names, j->tensors, j->n,
                        (const char *const *)j->keys, (const char *const *)j->values, j->nmeta, &j->opts,
                        err);
}

static void strings_free(char **s, size_t n)
{
  for (size_t i = 0; s && i < n; i++) free(s[i]);
  free(s);
}

static void save_free(void *arg)
{
  save_job *j = arg;
  free(j->path);
  free(j->format);
  strings_free(j->names, j->n);
  strings_free(j->keys, j->nmeta);
  strings_free(j->values, j->nmeta);
  free(j->tensors);
  free(j);
}

/* n copies of the strings (NULL entries stay NULL); 0 when out of memory. */
static int strings_copy(char ***out, const char *const *s, size_t n)
{
  *out = calloc(n ? n : 1, sizeof **out);
  if (!*out) return 0;
  for (size_t i = 0; s && i < n; i++)
    if (s[i] && !((*out)[i] = strdup(s[i]))) return 0;
  return 1;
}

xfer_code xfer_file_save_start(xfer_ctx *ctx, const char *path, const char *format,
                               const char *const *names, xfer_tensor *const *tensors, size_t n,
                               const char *const *meta_keys, const char *const *meta_values,
                               size_t nmeta, const xfer_file_opts *opts, xfer_job **job,
                               xfer_error *err)
{
  *job = NULL;
  if (!path || !*path) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE, "no file name");
  for (size_t i = 0; i < n; i++) /* (the rest is checked by the save, on its thread) */
    if (!tensors || !tensors[i])
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE, "tensor %zu of the save is NULL", i + 1);
  save_job *j = calloc(1, sizeof *j);
  int copied = j != NULL;
  if (j) {
    j->ctx = ctx;
    j->n = n;
    j->nmeta = nmeta;
    j->path = strdup(path);
    j->format = format ? strdup(format) : NULL;
    j->tensors = calloc(n ? n : 1, sizeof *j->tensors);
    copied = j->path && (!format || j->format) && j->tensors && strings_copy(&j->names, names, n) &&
             strings_copy(&j->keys, meta_keys, nmeta) && strings_copy(&j->values, meta_values, nmeta);
  }
  if (!copied) {
    if (j) save_free(j);
    return xfer_err_op(err, XFER_E_ALLOC, XFER_OP_SAVE, "out of host memory for a save's job");
  }
  for (size_t i = 0; i < n; i++) j->tensors[i] = tensors[i];
  if (opts) j->opts = *opts;
  xfer_code rc = xfer_job_start_call(ctx, save_run, j, save_free, j->opts.timeout, j->tensors, n, job, err);
  if (rc) save_free(j);
  return rc;
}
