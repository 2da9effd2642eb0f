/*
** progress.c -- the progress callback of the move running on this thread: the outermost
** move's, when a move runs others (a packed view's, a conversion's), so that the paths far
** below the move (the staged pipeline's chunks) report to the caller who asked.
*/
#include "util.h"

static _Thread_local const xfer_transfer_opts *progress_of;

xfer_code xfer_progress(uint64_t done, uint64_t total, xfer_error *err)
{
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

int xfer_progress_wanted(void) { return progress_of && progress_of->progress; }
