/*
** hostmem.c -- page-aligned host memory. Drivers can register or import page-aligned
** memory in place; large blocks are mapped populated so the first copy into them does
** not pay one page fault per 4 KiB (measured at 13 us a page in the CI VMs).
**
** A block of 2 MiB or more is also aligned to 2 MiB and asked for transparent huge pages
** (where the kernel gives them only on request, as Debian's does): a kernel that copies into
** or out of it -- a socket's receive, a cross-process read (CMA), a driver pinning it -- walks
** one page table entry per 2 MiB instead of 512. ucx_perftest's buffers are huge pages too
** (UCX's allocator asks for them), so without this the remote bench compared 4 KiB pages to
** its 2 MiB ones. XFER_HUGE_PAGES=0 turns it off.
*/
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memory.h"

/* Below this, a page-aligned heap block is cheaper than a mapping of its own. */
#define MAP_THRESHOLD ((size_t)256 * 1024)
#define HUGE_PAGE ((size_t)2 << 20)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static size_t page_size(void)
{
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

/* What is populated at a time: a move with a deadline (a load's targets, made under it) stops
** populating once the deadline passed or it was canceled -- 1 GiB took 1.6 s to populate on
** the CPU machine's first use of that memory, a load's deadline of 0.26 s missed by as much. */
#define POPULATE_STEP ((size_t)8 << 20)

/* nbytes at a 2 MiB boundary, huge pages asked for, then populated (in steps, until the
** thread's move is past its deadline or canceled); NULL when the kernel has not the room (the
** caller maps it the plain way). */
static void *huge_pages_alloc(size_t nbytes)
{
  size_t span = nbytes + HUGE_PAGE;
  char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  size_t page = page_size();
  size_t length = (nbytes + page - 1) & ~(page - 1);
  /* the unaligned head and the tail past the block go back at once */
  if (start > raw) munmap(raw, (size_t)(start - raw));
  if (raw + span > start + length) munmap(start + length, (size_t)(raw + span - (start + length)));
  (void)madvise(start, length, MADV_HUGEPAGE); /* a request: a kernel without THP says no */
  for (size_t at = 0; at < length; at += POPULATE_STEP) {
    if (xfer_watch_ended()) return start; /* the rest faults in where it is first written */
    size_t n = length - at < POPULATE_STEP ? length - at : POPULATE_STEP;
    if (madvise(start + at, n, MADV_POPULATE_WRITE) == 0) continue;
    if (errno == EINVAL) { /* a kernel before 5.14: one write a page populates it all the same */
      for (size_t b = at; b < length; b += page) ((volatile char *)start)[b] = 0;
      return start;
    }
    munmap(start, length); /* no memory to populate it with: the plain way, as before */
    return NULL;
  }
  return start;
}

void *xfer_host_pages_alloc(size_t nbytes)
{
  if (nbytes < MAP_THRESHOLD) {
    void *p = NULL;
    return posix_memalign(&p, page_size(), nbytes ? nbytes : 1) ? NULL : p;
  }
  if (nbytes >= HUGE_PAGE && xfer_env_flag("XFER_HUGE_PAGES")) {
    void *p = huge_pages_alloc(nbytes);
    if (p) return p;
  }
  void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void xfer_host_pages_free(void *p, size_t nbytes)
{
  if (!p) return;
  if (nbytes < MAP_THRESHOLD)
    free(p);
  else
    munmap(p, nbytes);
}
