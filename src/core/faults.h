/*
** faults.h -- fault injection (faults.c): the rules a backend's checked wrapper asks before
** each driver call. Layer 2 of docs/architecture.md: it calls only util.h.
*/
#ifndef XFER_FAULTS_H
#define XFER_FAULTS_H

#include "util.h"

/* Called by a backend's checked wrapper before each driver call: 1 means fail it, with
** *native the code the rule asks for (0: the backend's usual code for op). */
int xfer_fault_hit(xfer_ctx *ctx, const char *runtime, xfer_op op, long long *native);
/* Counts how often the rules were cleared or replaced (xfer_fault_clear, xfer_fault_fail_at):
** a failure an injected fault caused before the count moved is not the machine's (the ledger
** forgets it). */
uint64_t xfer_fault_epoch(const xfer_ctx *ctx);

#endif
