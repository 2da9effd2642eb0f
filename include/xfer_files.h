/*
** xfer_files.h -- files as endpoints: safetensors, NumPy's .npy and .npz read into tensors on
** any device and written from them. Built on xfer.h's API alone (src/files/, a layer above
** the core): a program that moves tensors without files needs only xfer.h.
*/
#ifndef XFER_FILES_H
#define XFER_FILES_H

#include "xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* -- Files as endpoints ----------------------------------------------------------- */

/* A tensor file opened for reading: safetensors, NumPy's .npy or .npz (stored or deflated
** members), known by its first bytes. Opening reads and checks the header only (dtypes
** known, shapes matching their bytes, every tensor inside the file, none overlapping):
** XFER_E_INVALID (or XFER_E_UNSUPPORTED for a dtype or feature xferlua has not) naming the
** file, the tensor and the byte (err->file, err->tensor, err->offset). */
typedef struct xfer_file xfer_file;

typedef struct xfer_file_info {
  const char *name;       /* the tensor's name ("" for an .npy file's one array); the file's */
  xfer_dtype dtype;
  xfer_shape shape;
  uint64_t offset;        /* the first element's byte in the file */
  uint64_t nbytes;        /* the elements' bytes */
  int deflated;           /* an .npz member stored compressed */
  int fortran;            /* an .npy array in column-major order (loaded as row-major) */
} xfer_file_info;

xfer_code xfer_file_open(xfer_ctx *ctx, const char *path, xfer_file **out, xfer_error *err);
void xfer_file_close(xfer_file *file);
/* "safetensors", "npy" or "npz" */
const char *xfer_file_format(const xfer_file *file);
const char *xfer_file_path(const xfer_file *file);
uint64_t xfer_file_size(const xfer_file *file);
size_t xfer_file_count(const xfer_file *file);
/* Entry i (from 0) in the file's order; XFER_E_INVALID past the end. */
xfer_code xfer_file_entry(const xfer_file *file, size_t i, xfer_file_info *out, xfer_error *err);
/* The entry named `name`, or -1. */
long xfer_file_find(const xfer_file *file, const char *name);
/* safetensors' "__metadata__": key/value pair i, or 0 past the end. */
size_t xfer_file_metadata_count(const xfer_file *file);
int xfer_file_metadata(const xfer_file *file, size_t i, const char **key, const char **value);

/* Whether a file is read and written around the page cache (O_DIRECT), and by what. */
typedef enum {
  XFER_FILE_DIRECT_OFF = -1,  /* through the page cache */
  XFER_FILE_DIRECT_CHOOSE = 0,
  XFER_FILE_DIRECT_ON = 1     /* O_DIRECT (falls back, saying so, where refused) */
} xfer_file_direct;
typedef enum {
  XFER_FILE_ENGINE_CHOOSE = 0,
  XFER_FILE_ENGINE_URING = 1, /* io_uring */
  XFER_FILE_ENGINE_THREADS = 2
} xfer_file_engine;

/* How a file is read or written: each setting 0 lets the planner choose. */
typedef struct xfer_file_opts {
  int direct;             /* an xfer_file_direct */
  int engine;             /* an xfer_file_engine */
  size_t chunk;           /* bytes a request (a multiple of 4096), 0: 16 MiB */
  int depth;              /* requests in flight, 0: chosen (2..64) */
  int sync;               /* saves: 0 fdatasync before the rename (the default), -1 not */
  /* called with the bytes done and the total after each chunk; non-zero aborts (as moves) */
  int (*progress)(void *ud, uint64_t done, uint64_t total);
  void *progress_ud;
  /* loads: 1: each tensor's bytes as they landed checked against the CRC32C the file records
  ** for it ("crc32c.NAME" in a safetensors __metadata__, as xfer_file_save writes for every
  ** tensor): XFER_E_CORRUPT naming the tensor where they differ, XFER_E_UNSUPPORTED where
  ** the file records none for a tensor loaded;
  ** saves: 1: each tensor's bytes checked from where they lie to the file -- its device's
  ** CRC32C against the sum of what was written, and the file read back before it is put in
  ** place: XFER_E_CORRUPT naming the tensor where they differ, and no file is left */
  int verify;
  /* seconds: past this deadline the load or save ends XFER_E_TIMEOUT (op deadline) between its
  ** requests, its device pieces' waits at the deadline -- nothing half-loaded stays, a save
  ** leaves no file; 0: xfer_config's timeout; < 0: none */
  double timeout;
} xfer_file_opts;

#define XFER_FILE_STEPS 8

/* What the planner chose and why (xfer_file_plan, and each load's/save's). */
typedef struct xfer_file_route {
  int direct;             /* 1: O_DIRECT reads/writes through aligned chunks */
  int engine;             /* XFER_FILE_ENGINE_URING or _THREADS */
  size_t chunk;
  int depth, threads;
  double cached;          /* the share of the file's pages in the page cache (0..1) */
  char reason[512];
  /* loads onto CUDA devices: whether GPUDirect Storage (cuFile) reads into them, and why not
  ** ("" for loads that have no CUDA target) */
  int gds;
  char gds_reason[320];
  /* the steps, in words (f:plan, xfer.file_route): the reads, then where the bytes go -- for
  ** each device, how a chunk's pieces reach it; after a load, as its batch ran them */
  int nsteps;
  char steps[XFER_FILE_STEPS][256];
  int writing;            /* a save's route */
} xfer_file_route;

/* One tensor to load: entry `entry` onto `dev`, converted to `dtype` when convert is 1. With
** `sliced` 1, only elements [begin, end) of dimension `dim` (a part of a tensor split across
** devices: one item a part, each read out of the file's chunks onto its own device; the
** target's shape is the entry's with that dimension end - begin). Zeroed: the whole entry. */
typedef struct xfer_load_item {
  size_t entry;
  xfer_device *dev;
  int convert;
  xfer_dtype dtype;
  int sliced, dim;
  int64_t begin, end;
} xfer_load_item;

/* Part `part` (from 0) of `parts` of a dimension of `n` elements, as numpy.array_split and
** torch.tensor_split cut it: the first n % parts parts one element longer. */
void xfer_split_part(int64_t n, int parts, int part, int64_t *begin, int64_t *end);

/* Loads the items at once: every target allocated first, then the file read in large
** requests (several in flight) into host chunks that are scattered to the devices as one
** batch each, reading the next chunks while one is scattered. out[i] gets a new tensor for
** item i. On failure nothing stays allocated and err names the file, the tensor, the byte. */
xfer_code xfer_file_load(xfer_file *file, const xfer_load_item *items, size_t n,
                         const xfer_file_opts *opts, xfer_tensor **out, xfer_error *err);
/* The route a load of these items would take (nothing read). */
xfer_code xfer_file_plan(xfer_file *file, const xfer_load_item *items, size_t n,
                         const xfer_file_opts *opts, xfer_file_route *out, xfer_error *err);
/* The route of the last load or save on this thread (its reason said what ran). */
const xfer_file_route *xfer_file_last_route(void);

/* Saves tensors to `path` in `format` ("safetensors", "npy": one tensor, "npz"; NULL: by
** the path's extension, safetensors otherwise). Views are saved as their elements, in
** row-major order. Written to a temporary file beside it, synced, then renamed over `path`:
** a failed save leaves `path` as it was and no temporary behind. */
xfer_code xfer_file_save(xfer_ctx *ctx, const char *path, const char *format,
                         const char *const *names, xfer_tensor *const *tensors, size_t n,
                         const char *const *meta_keys, const char *const *meta_values,
                         size_t nmeta, const xfer_file_opts *opts, xfer_error *err);

/* A load on a thread of the job pool (as xfer_transfer_start's moves): returns at once. The
** job reads its own opening of the file's path (closing `file` meanwhile is harmless) with
** copies of the items and options; xfer_job_wait gives its code, then each
** xfer_file_load_take(job, i) its tensor. xfer_job_cancel returns once nothing more is
** written: the load stops between requests (its device pieces' copies in flight waited for),
** ends XFER_E_CANCELED and keeps nothing. opts->timeout counts from this call. */
xfer_code xfer_file_load_start(xfer_file *file, const xfer_load_item *items, size_t n,
                               const xfer_file_opts *opts, xfer_job **job, xfer_error *err);
/* Item i's tensor of a load job that ended XFER_E_OK (a new reference, taken once: NULL
** after, or before the job ended well). */
xfer_tensor *xfer_file_load_take(xfer_job *job, size_t i);
/* A save on a thread of the job pool: the arguments are copied, the tensors busy (freeing one
** waits for the save) until the job ends. A canceled or failed save leaves no file. */
xfer_code xfer_file_save_start(xfer_ctx *ctx, const char *path, const char *format,
                               const char *const *names, xfer_tensor *const *tensors, size_t n,
                               const char *const *meta_keys, const char *const *meta_values,
                               size_t nmeta, const xfer_file_opts *opts, xfer_job **job,
                               xfer_error *err);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
