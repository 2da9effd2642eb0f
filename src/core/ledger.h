/*
** ledger.h -- what the planner knows of each (from, to, path) (ledger.c): how often and how
** fast it moved (xfer_stats), whether it failed and is set aside (xfer_health), and what it
** was measured to cost (xfer_costs). One table, one lock. Layer 4 of docs/architecture.md:
** it calls util.h and faults.h (whose epoch tells an injected failure that is over).
*/
#ifndef XFER_LEDGER_H
#define XFER_LEDGER_H

#include "faults.h"

/* One finished move on `path`, run by `runner`'s runtime where that is not the path's own (a
** batch group in one submission; NULL: the path's own): a success is counted (bytes, seconds,
** and traced when asked); a failure counts against (path, runner) for this pair (one that keeps
** failing, or fails for good, is set aside); a success clears that count. A failure of the
** host path's own copies is never counted: it is the last resort. */
void xfer_ledger_record(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                        xfer_path path, const xfer_device *runner, size_t bytes, double seconds,
                        xfer_code rc, const xfer_error *err);
/* Traced when asked (xfer.trace, XFER_TRACE=1): what a verified move's or batch group's check
** cost beside its copy -- `moved` seconds for the copy (with the sums made beside it), then
** `checked` seconds waiting for the ends' sums and comparing them (of which `devices` seconds
** for the devices' sums, `pool` for the host's sum pool), over `elements` ranges in `slices`
** submissions (1: at once). */
void xfer_ledger_trace_verify(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                              size_t bytes, size_t elements, size_t slices, double moved,
                              double checked, double devices, double pool);
/* Whether `path` run by `runner` (NULL: its own) is set aside for from -> to (and why, in
** `why`, when given). */
int xfer_ledger_set_aside(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                          xfer_path path, const xfer_device *runner, char *why, size_t cap);
/* The default choice passed over a path that was set aside. */
void xfer_ledger_note_decision(xfer_ctx *ctx);
/* The measured estimate of moving nbytes on `path` (0 when nothing is measured). */
int xfer_ledger_estimate(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                         xfer_path path, size_t nbytes, double *seconds);
/* `first`, or one of `others` whose estimate is clearly under first's (both measured). */
xfer_path xfer_ledger_choose(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                             size_t nbytes, xfer_path first, const xfer_path *others,
                             int nothers);
/* The plan cache file (XFER_PLAN_CACHE, else under the user's cache): 0 when there is none. */
int xfer_costs_file(char *out, size_t cap);
/* At close: everything the ledger holds. */
void xfer_ledger_fini(xfer_ctx *ctx);

/* The ledger's setting (setaside_after): its default and its range (open.c keeps it). */
void xfer_ledger_config_defaults(xfer_config *config);
xfer_code xfer_ledger_config_check(const xfer_config *config, xfer_error *err);

#endif
