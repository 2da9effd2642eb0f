/*
** hostmem.c -- page-aligned host memory. Drivers can register or import page-aligned
** memory in place; large blocks are mapped populated so the first copy into them does
** not pay one page fault per 4 KiB (measured at 13 us a page in the CI VMs).
*/
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* Below this, a page-aligned heap block is cheaper than a mapping of its own. */
#define MAP_THRESHOLD ((size_t)256 * 1024)

static size_t page_size(void)
{
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

void *xfer_host_pages_alloc(size_t nbytes)
{
  if (nbytes < MAP_THRESHOLD) {
    void *p = NULL;
    return posix_memalign(&p, page_size(), nbytes ? nbytes : 1) ? NULL : p;
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
