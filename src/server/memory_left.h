/*
** memory_left.h -- how much memory this process may still take before the kernel kills it:
** what the system has available (MemAvailable) or, inside a control group, what its limit
** leaves (cgroup v2 memory.max less memory.current), whichever is less. The server asks
** before it takes a client's allocation of memory the host backs: malloc and mmap succeed
** for more than there is, and the kernel's answer comes later, when the pages are touched,
** as the OOM killer (a 1.5 GiB ALLOC in a 1 GiB cgroup killed the server).
*/
#ifndef XFER_MEMORY_LEFT_H
#define XFER_MEMORY_LEFT_H

#include <stdint.h>

/* Bytes left; UINT64_MAX when neither the system nor a control group says. */
uint64_t xfer_memory_left(void);

#endif
