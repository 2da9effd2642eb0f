/*
** file_route.h -- THE decision of how a file is read or written (file_route.c): O_DIRECT or
** the page cache, io_uring or threads, chunk, depth, and the words that say why.
** Layer 2 of docs/architecture.md, beside file_io.c: it asks the kernel, never a device.
*/
#ifndef XFER_FILE_ROUTE_H
#define XFER_FILE_ROUTE_H

#include "file_io.h"

#define XFER_FILE_CHUNK_DEFAULT (16u << 20)

/* For a read of `bytes` of the open file `fd` (`size` bytes, at `path`), or a write of `bytes`
** (writing = 1, fd the new file), to or from devices other than the host (devices = 1), with the caller's opts (NULL: all chosen): the route in
** *out. Checks opts: XFER_E_INVALID for a chunk that is not a multiple of 4096 in
** [4 KiB, 1 GiB], or a depth outside 2..64. */
xfer_code xfer_file_route_make(const char *path, int fd, uint64_t size, uint64_t bytes,
                               int writing, int devices, const xfer_file_opts *opts,
                               xfer_file_route *out, xfer_error *err);
/* What a route's way gives way to when it is refused at setup: the route's only other choices,
** made here so that a load or a save never decides them itself. */
typedef enum xfer_file_refusal {
  XFER_FILE_REFUSED_DIRECT,     /* O_DIRECT (the file system, or a format): the page cache */
  XFER_FILE_REFUSED_URING,      /* io_uring at setup: a pool of threads */
} xfer_file_refusal;
/* The route's next way after `what` was refused, `why` added to its reason. */
void xfer_file_route_next(xfer_file_route *route, xfer_file_refusal what, const char *why);

/* A step of the route in words (up to XFER_FILE_STEPS; the first is the route's own). */
void xfer_file_route_say(xfer_file_route *route, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Opens `path` again with O_DIRECT (for reads: O_RDONLY, writes: O_WRONLY): the fd, or -1 with
** errno's words in why. */
int xfer_file_open_direct(const char *path, int writing, char *why, size_t cap);
/* GPUDirect Storage for loads onto CUDA devices: 1 when cuFile would read into them, else 0
** with why in `why` (checked once: the library, then the nvidia-fs kernel module). */
int xfer_file_gds(char *why, size_t cap);
/* The route last taken on this thread (xfer_file_last_route). */
void xfer_file_route_taken(const xfer_file_route *route);

#endif
