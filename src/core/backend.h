/*
** backend.h -- what a backend sees of the core: the structures and its table (types.h),
** error records and switches (util.h), fault rules (faults.h), device locks and lost
** errors (device.h), memory and pins (memory.h), and the device lists it adds to
** (runtime.h). Layer 6 of docs/architecture.md: backends call nothing above it.
*/
#ifndef XFER_BACKEND_H
#define XFER_BACKEND_H

#include "faults.h"
#include "runtime.h"

/* Every runtime's table (runtimes.h), weak: one whose folder this build left out (its
** headers were missing) has none, and its address is NULL -- the context lists it
** unavailable. */
#define XFER_RUNTIME_TABLE(name, missing) extern const xfer_backend xfer_backend_##name \
    __attribute__((weak));
XFER_RUNTIME_LIST(XFER_RUNTIME_TABLE)
#undef XFER_RUNTIME_TABLE

#endif
