/*
** file_route.c -- how a file is read or written (file_route.h), decided once per load or save.
**
** The page cache first: a file that is mostly in memory is read with plain preads on several
** threads (each a memory copy), since O_DIRECT would go back to the disk for what memory
** already holds. A file that is not, and large enough, is read with O_DIRECT through aligned
** chunks: no copy into the page cache, requests the kernel hands to the device as DMA, kept
** deep by io_uring (threads where io_uring cannot be set up). Small reads take the page
** cache: aligning them costs more than the copy.
*/
#include <dlfcn.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "file_route.h"

/* the most bytes of requests in flight of a watched read or write (xfer_file_route_make) */
#define WATCHED_BYTES ((size_t)8 << 20)

/* below this, a read or write is one syscall's worth: O_DIRECT gains nothing */
#define SMALL_BYTES (64u << 20)

static _Thread_local xfer_file_route last_route;

void xfer_file_route_say(xfer_file_route *route, const char *fmt, ...)
{
  if (route->nsteps == XFER_FILE_STEPS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(route->steps[route->nsteps++], sizeof route->steps[0], fmt, ap);
  va_end(ap);
}

/* The first step: how the bytes cross between the file and host memory (made again when a way
** gives way to the next). */
static void say_io(xfer_file_route *r, int writing)
{
  char engine[48];
  if (r->engine == XFER_FILE_ENGINE_URING) snprintf(engine, sizeof engine, "io_uring");
  else snprintf(engine, sizeof engine, "%d threads", r->threads);
  snprintf(r->steps[0], sizeof r->steps[0], "%s %s in requests of %zu KiB, %d in flight, by %s",
           writing ? "write" : "read", r->direct ? "with O_DIRECT (pinned host chunks, no page "
           "cache)" : "through the page cache", r->chunk >> 10, r->depth, engine);
  if (!r->nsteps) r->nsteps = 1;
}

void xfer_file_route_taken(const xfer_file_route *route) { last_route = *route; }
const xfer_file_route *xfer_file_last_route(void) { return &last_route; }

int xfer_file_open_direct(const char *path, int writing, char *why, size_t cap)
{
  int fd = open(path, (writing ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
  if (fd < 0) snprintf(why, cap, "the file system refuses O_DIRECT (%s)", strerror(errno));
  return fd;
}

static pthread_once_t gds_once = PTHREAD_ONCE_INIT;
static char gds_why[320];

/* cuFile (libcufile, the CUDA Toolkit's) reads straight into GPU memory only with NVIDIA's
** nvidia-fs kernel module; without it cuFile runs in its compatibility mode -- POSIX reads
** through bounce buffers of its own, what xferlua's O_DIRECT path through pinned chunks does
** already. So where nvidia-fs is absent, GDS is unavailable with that reason. Where it is
** present xferlua does not use it yet: no machine here has it to test a read path against. */
static void gds_probe(void)
{
  xfer_error err;
  const char *path = NULL;
  void *lib = xfer_driver_open("XFER_CUFILE_LIBRARY", "libcufile.so.0", "cuFile", &path, &err);
  if (!lib && !getenv("XFER_CUFILE_LIBRARY")) /* the Toolkit's place, off the loader's path */
    lib = xfer_driver_open("XFER_CUFILE_LIBRARY", "/usr/local/cuda/lib64/libcufile.so.0", "cuFile",
                           &path, &err);
  if (!lib) {
    snprintf(gds_why, sizeof gds_why, "GPUDirect Storage unavailable: no libcufile.so.0 (%.200s)",
             err.message);
    return;
  }
  int has_fn = dlsym(lib, "cuFileDriverOpen") != NULL;
  dlclose(lib);
  if (!has_fn)
    snprintf(gds_why, sizeof gds_why, "GPUDirect Storage unavailable: %.120s has no cuFileDriverOpen", path);
  else if (access("/proc/driver/nvidia-fs", F_OK) != 0)
    snprintf(gds_why, sizeof gds_why, "GPUDirect Storage unavailable: %.100s is there but the "
             "nvidia-fs kernel module is not loaded (no /proc/driver/nvidia-fs), so cuFile would "
             "only read through bounce buffers, as the pinned chunks do", path);
  else
    snprintf(gds_why, sizeof gds_why, "GPUDirect Storage present (%.100s, nvidia-fs loaded) but "
             "not used: xferlua reads through pinned chunks", path);
}

int xfer_file_gds(char *why, size_t cap)
{
  pthread_once(&gds_once, gds_probe);
  snprintf(why, cap, "%s", gds_why);
  return 0;
}

/* The share of the file's pages the page cache holds (mincore over a mapping that reads
** nothing), or -1 where it cannot tell. */
static double cached_share(int fd, uint64_t size)
{
  if (size == 0) return 1;
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  long page = sysconf(_SC_PAGESIZE);
  size_t pages = (size_t)((size + (uint64_t)page - 1) / (uint64_t)page);
  unsigned char *vec = malloc(pages);
  double share = -1;
  if (vec && mincore(map, (size_t)size, vec) == 0) {
    size_t in = 0;
    for (size_t i = 0; i < pages; i++) in += vec[i] & 1;
    share = (double)in / (double)pages;
  }
  free(vec);
  munmap(map, (size_t)size);
  return share;
}

static int env_size(const char *name, size_t *out)
{
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (*end == 'k' || *end == 'K') n <<= 10, end++;
  else if (*end == 'm' || *end == 'M') n <<= 20, end++;
  if (*end) return 0;
  *out = (size_t)n;
  return 1;
}

/* O_DIRECT or the page cache, and why in `why`: as asked; a read of a file mostly cached
** already, or a small one, through the page cache; else O_DIRECT. */
static int choose_direct(const xfer_file_opts *opts, int writing, uint64_t bytes, double cached,
                         char *why, size_t cap)
{
  if (opts->direct) {
    int direct = opts->direct == XFER_FILE_DIRECT_ON;
    snprintf(why, cap, "%s as asked", direct ? "O_DIRECT" : "the page cache");
    return direct;
  }
  if (!writing && cached >= 0.5) {
    snprintf(why, cap, "the page cache: %.0f%% of the file is there already", cached * 100);
    return 0;
  }
  if (bytes < SMALL_BYTES) {
    snprintf(why, cap, "the page cache: %llu bytes are too few for O_DIRECT to pay",
             (unsigned long long)bytes);
    return 0;
  }
  if (writing) snprintf(why, cap, "O_DIRECT: a large write, past the page cache");
  else snprintf(why, cap, "O_DIRECT: %.0f%% of the file is in the page cache",
                cached < 0 ? 0 : cached * 100);
  return 1;
}

/* io_uring or threads, and why in `why`: as asked; threads for page-cache reads (copies the
** reading thread makes); io_uring for O_DIRECT where it can be set up. */
static int choose_engine(const xfer_file_opts *opts, int direct, int threads, char *why, size_t cap)
{
  char uwhy[160];
  if (opts->engine) {
    snprintf(why, cap, "%s as asked", opts->engine == XFER_FILE_ENGINE_URING ? "io_uring" : "threads");
    return opts->engine;
  }
  if (!direct) {
    snprintf(why, cap, "%d threads (page-cache reads are copies the reading thread makes)", threads);
    return XFER_FILE_ENGINE_THREADS;
  }
  if (xfer_fio_uring_usable(uwhy, sizeof uwhy)) {
    snprintf(why, cap, "io_uring");
    return XFER_FILE_ENGINE_URING;
  }
  snprintf(why, cap, "%d threads (io_uring: %s)", threads, uwhy);
  return XFER_FILE_ENGINE_THREADS;
}

xfer_code xfer_file_route_make(const char *path, int fd, uint64_t size, uint64_t bytes,
                               int writing, int devices, const xfer_file_opts *opts,
                               xfer_file_route *out, xfer_error *err)
{
  static const xfer_file_opts none;
  if (!opts) opts = &none;
  memset(out, 0, sizeof *out);
  size_t chunk = opts->chunk;
  int chunk_chosen = !chunk && !env_size("XFER_FILE_CHUNK", &chunk);
  if (chunk_chosen) chunk = XFER_FILE_CHUNK_DEFAULT;
  if (chunk < XFER_FIO_ALIGN || chunk > (1u << 30) || chunk % XFER_FIO_ALIGN)
    return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_PLAN, 0, path, -1,
                          "chunk of %zu bytes: a multiple of 4096 from 4 KiB to 1 GiB", chunk);
  if (opts->depth && (opts->depth < 2 || opts->depth > 64))
    return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_PLAN, 0, path, -1,
                          "depth %d: 2 to 64 requests in flight", opts->depth);
  if (opts->direct < XFER_FILE_DIRECT_OFF || opts->direct > XFER_FILE_DIRECT_ON ||
      opts->engine < XFER_FILE_ENGINE_CHOOSE || opts->engine > XFER_FILE_ENGINE_THREADS)
    return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_PLAN, 0, path, -1,
                          "direct is -1, 0 or 1 and engine 0, 1 (io_uring) or 2 (threads)");
  out->chunk = chunk;
  out->cached = writing ? 0 : cached_share(fd, size);
  char why[200];
  int direct = choose_direct(opts, writing, bytes, out->cached, why, sizeof why);
  out->direct = direct;
  /* Page-cache reads are copies: a thread a core (up to 16) into host tensors, half the cores
  ** (up to 8) where chunks go on to devices (the scattering thread and the driver's want the
  ** rest), in 4 MiB requests; XFER_FILE_THREADS says otherwise. Measured on the H200 (docs/
  ** performance.md "Files"): 8 threads of 4 MiB 30 GB/s into cuda:0, 16 of 16 MiB 23. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (devices) cpus /= 2;
  size_t asked = 0;
  if (env_size("XFER_FILE_THREADS", &asked) && asked >= 1 && asked <= 64) cpus = (long)asked;
  int threads = cpus < 2 ? 2 : cpus > (devices ? 8 : 16) ? (devices ? 8 : 16) : (int)cpus;
  if (!direct && chunk_chosen) out->chunk = chunk = 4u << 20;
  char ewhy[200] = "";
  int engine = choose_engine(opts, direct, threads, ewhy, sizeof ewhy);
  out->engine = engine;
  out->threads = engine == XFER_FILE_ENGINE_THREADS ? threads : 0;
  int depth = opts->depth ? opts->depth : engine == XFER_FILE_ENGINE_THREADS ? 2 * threads : 8;
  /* A watched read or write (a job, which may be canceled, or one with a deadline) stops
  ** between its requests but waits for those in flight (they land in its memory): at most
  ** WATCHED_BYTES of them, so that it stops within a few requests' time. A 256 MiB load's
  ** cancel on the 2-core VM: p50 18 ms with 8 requests of 4 MiB in flight (page cache) */
  xfer_watch watch = xfer_watch_current();
  int watched = !opts->depth && (watch.deadline_at > 0 || watch.canceled) && depth > 2 &&
                (size_t)depth * chunk > WATCHED_BYTES;
  if (watched) depth = WATCHED_BYTES / chunk < 2 ? 2 : (int)(WATCHED_BYTES / chunk);
  if (depth < 2) depth = 2;
  if (depth > 64) depth = 64;
  out->depth = depth;
  snprintf(out->reason, sizeof out->reason, "%s; %s; %d requests of %zu KiB in flight%s", why,
           ewhy, depth, chunk >> 10, watched ? " (watched: canceled or timed, it stops within them)" : "");
  out->writing = writing;
  say_io(out, writing);
  return XFER_E_OK;
}

void xfer_file_route_next(xfer_file_route *route, xfer_file_refusal what, const char *why)
{
  size_t at = strlen(route->reason);
  if (what == XFER_FILE_REFUSED_DIRECT) {
    route->direct = 0;
    snprintf(route->reason + at, sizeof route->reason - at, "; then the page cache: %s", why);
    say_io(route, route->writing);
    return;
  }
  route->engine = XFER_FILE_ENGINE_THREADS;
  route->threads = 2; /* the requests in flight stay as many: two threads keep them going */
  snprintf(route->reason + at, sizeof route->reason - at, "; then 2 threads: io_uring refused "
           "at setup (%s)", why);
  say_io(route, route->writing);
}
