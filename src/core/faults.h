/*
** faults.h -- fault injection (faults.c): the rules' epoch (xfer_fault_hit, which a backend's
** checked wrapper asks before each driver call, is in service.h). Layer 2 of docs/architecture.md: it calls only util.h.
*/
#ifndef XFER_FAULTS_H
#define XFER_FAULTS_H

#include "util.h"

/* Counts how often the rules were cleared or replaced (xfer_fault_clear, xfer_fault_fail_at):
** a failure an injected fault caused before the count moved is not the machine's (the ledger
** forgets it). */
uint64_t xfer_fault_epoch(const xfer_ctx *ctx);

#endif
