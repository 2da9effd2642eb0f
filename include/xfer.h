/*
** xfer.h -- the C API of xferlua's core: runtimes, devices, tensors, transfers,
** errors and fault injection. It uses no Lua; the Lua binding is built on it, and a
** host application can embed the same calls (see xfer_lua.h for the Lua side).
*/
#ifndef XFER_H
#define XFER_H

#include <stddef.h>
#include <stdint.h>

#include "xfer_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is its API, the
** only symbols it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define XFER_VERSION "0.1.0"
#define XFER_MAX_DIMS 8

/* -- Errors ------------------------------------------------------------------ */

/* Every call that can fail returns an xfer_code (XFER_OK on success) and, when
** `err` is not NULL, fills it. Nothing else is ever reported: no aborts, no prints. */
typedef enum {
#define XFER_ERRENUM(name, lua_name, what) XFER_E_##name,
  XFER_ERRORS(XFER_ERRENUM)
#undef XFER_ERRENUM
  XFER_E__COUNT
} xfer_code;

/* The operations of the XFER_OPS table (xfer_errors.h). */
typedef enum {
  XFER_OP_OTHER = -1,    /* an API call's own name */
#define XFER_OPENUM(name, text, failure) XFER_OP_##name,
  XFER_OPS(XFER_OPENUM)
#undef XFER_OPENUM
  XFER_OP__COUNT
} xfer_op;

/* The op's name ("read"), and what a driver call failing in it means (XFER_E_READ). */
const char *xfer_op_name(xfer_op op);
xfer_code xfer_op_failure(xfer_op op);
/* The op of that name, or XFER_OP_OTHER. */
xfer_op xfer_op_of(const char *name);

typedef struct xfer_error {
  xfer_code code;
  char op[16];           /* phase that failed: alloc read write copy ... or the API call */
  xfer_op op_id;         /* the same as an xfer_op (XFER_OP_OTHER for an API call's name) */
  char from[32];         /* device the data came from ("" when none) */
  char to[32];           /* device the data was going to ("" when none) */
  char device[32];       /* the device whose call failed: an end, or one a move used on its
                         ** way (host staging, the GPU that shares its memory) ("" when none) */
  long long native;      /* the driver's own code (errno for host, CUresult, VkResult...) */
  char native_name[48];  /* its symbolic name: "ENOMEM", "CUDA_ERROR_ILLEGAL_ADDRESS" */
  int retryable;         /* 1 when trying again may succeed */
  int injected;          /* 1 when fault injection caused it */
  long long element;     /* a batch's element that failed, counted from 1; 0: not a batch's */
  /* a file endpoint's failure (xfer_file_*): the file, the tensor of it and the byte of the
  ** file where it failed; file "" for every other error, offset -1 when no byte is at fault */
  char file[256];
  char tensor[128];
  long long offset;
  char message[512];     /* the whole story, for people */
} xfer_error;

/* "read", "alloc", ... for a code; NULL when out of range. */
const char *xfer_code_name(xfer_code code);
/* The kind of failure in words ("out of host memory" for XFER_E_ALLOC: the cause the core gives
** when no driver says more); NULL when out of range. */
const char *xfer_code_what(xfer_code code);

/* -- Element types ------------------------------------------------------------ */

typedef enum {
  XFER_F16, XFER_BF16, XFER_F32, XFER_F64,
  XFER_I8, XFER_I16, XFER_I32, XFER_I64,
  XFER_U8, XFER_U16, XFER_U32, XFER_U64,
  XFER_BOOL,
  XFER_DTYPE__COUNT
} xfer_dtype;

const char *xfer_dtype_name(xfer_dtype dtype);
/* Returns 0 and sets *out when `name` is a dtype name ("f32") or a name users type from
** NumPy and PyTorch ("float32", "int64", "bfloat16", "half", "uint8", ...), else -1. */
int xfer_dtype_parse(const char *name, xfer_dtype *out);
size_t xfer_dtype_size(xfer_dtype dtype);
int xfer_dtype_is_float(xfer_dtype dtype);

/* Stores `value` as one element of `dtype` at `dst`. Floats round to nearest even;
** integers must be whole and in range; bool takes 0 or 1. XFER_E_INVALID otherwise. */
xfer_code xfer_value_store(xfer_dtype dtype, double value, void *dst, xfer_error *err);
/* The element at `src` as a double (exact except i64/u64 beyond 2^53). */
double xfer_value_load(xfer_dtype dtype, const void *src);
/* n elements of `from` at src stored as `to` at dst, each as xfer_value_store stores a
** value (integers to integers exactly). XFER_E_INVALID naming the first element (1-based)
** that does not fit. */
xfer_code xfer_convert(xfer_dtype to, void *dst, xfer_dtype from, const void *src, size_t n,
                       xfer_error *err);

/* -- Context, runtimes, devices ---------------------------------------------- */

typedef struct xfer_ctx xfer_ctx;
typedef struct xfer_device xfer_device;
typedef struct xfer_tensor xfer_tensor;

/* Opens every runtime (a missing one is recorded as unavailable, never an error) and
** reads XFER_FAULTS from the environment. The context is reference counted: tensors
** hold a reference, so it lives until the last of them is released. */
xfer_code xfer_ctx_open(xfer_ctx **out, xfer_error *err);
xfer_ctx *xfer_ctx_retain(xfer_ctx *ctx);
void xfer_ctx_release(xfer_ctx *ctx);
/* A handle an application keeps on a device (the Lua binding's, one per xfer.Device object):
** a lost remote device that neither a handle nor a tensor refers to gives its place in the
** context to the devices of a later connection. The device lives as long as its context. */
void xfer_device_retain(xfer_device *dev);
void xfer_device_release(xfer_device *dev);

typedef struct xfer_runtime_info {
  const char *name;      /* "host", "cuda", "vulkan", "opencl" */
  int available;
  const char *reason;    /* why not available ("" when available) */
  size_t device_count;
  uint64_t objects;      /* driver objects it holds now for tensors, segments and pins */
  const char *alias;     /* another name its devices are found by ("cpu" for "host"), or "" */
} xfer_runtime_info;

size_t xfer_runtime_count(const xfer_ctx *ctx);
xfer_code xfer_runtime_get(const xfer_ctx *ctx, size_t index, xfer_runtime_info *out,
                           xfer_error *err);

size_t xfer_device_count(const xfer_ctx *ctx);
xfer_device *xfer_device_at(xfer_ctx *ctx, size_t index);
/* "host" (or "cpu"), "cuda:0", "cuda" (its first device), ... An unknown name is
** XFER_E_INVALID naming the devices there are. */
xfer_code xfer_device_find(xfer_ctx *ctx, const char *name, xfer_device **out,
                           xfer_error *err);

typedef struct xfer_device_info {
  const char *name;      /* "host", "opencl:1" */
  const char *runtime;   /* "host", "opencl" */
  int index;             /* index within its runtime */
  const char *label;     /* what the driver calls it */
  const char *platform;  /* the driver's platform or driver name ("" when none) */
  const char *vendor;    /* ("" when unknown) */
  uint64_t total_memory; /* bytes */
  uint64_t max_alloc;    /* the largest single buffer the driver allows, bytes */
  int unified;           /* shares memory with the host */
  int has_uuid;
  uint8_t uuid[16];      /* physical device UUID: equal UUIDs are the same GPU */
  const char *pci_bus_id; /* "0000:19:00.0" ("" where the runtime does not say) */
  int cc_major, cc_minor; /* CUDA compute capability (0 elsewhere) */
  int has_driver_uuid;
  uint8_t driver_uuid[16]; /* the driver's UUID (Vulkan): opaque fds pass only between equals */
  int closed;            /* xfer_device_close'd, not opened again yet */
  const char *backing;   /* the device of another runtime whose memory this one's tensors
                         ** live in ("cuda:0" for an OpenCL device on NVIDIA's GPU), or "" */
  uint64_t max_import;   /* the largest buffer shared with another runtime by import, bytes
                         ** (0: no limit): larger tensors are the driver's own, and move
                         ** between runtimes by staging (NVIDIA's OpenCL: 256 MiB) */
  int external_kind;     /* the xfer_external_kind a wrap of its memory takes (XFER_EXTERNAL_NONE:
                         ** its runtime wraps nothing) */
  int dlpack_device_type; /* DLPack's device type of its memory (1 kDLCPU, 2 kDLCUDA), -1: none */
  int remote;            /* another machine's device (the remote runtime's) */
} xfer_device_info;

/* "host", "cuda:0", "nodeB/cuda:0": the name it is found by. */
const char *xfer_device_name(const xfer_device *dev);
/* 1 for the context's host device (host memory). */
int xfer_device_is_host(const xfer_device *dev);
/* What the device is, as found when it opened: no driver call (it does not fail). */
xfer_code xfer_device_get_info(xfer_device *dev, xfer_device_info *out, xfer_error *err);
/* The device's free memory in bytes, asked of the driver now: XFER_E_UNSUPPORTED where the
** driver cannot tell (OpenCL), or the driver's error. */
xfer_code xfer_device_free_memory(xfer_device *dev, uint64_t *free_bytes, xfer_error *err);
/* Gives back everything the device holds -- its tensors' memory (they raise XFER_E_CLOSED
** from then on; releasing them stays harmless), its cache, the driver objects they held --
** once the moves using it have ended. xfer_device_find opens it again. Not the host. */
xfer_code xfer_device_close(xfer_device *dev, xfer_error *err);
int xfer_device_is_closed(const xfer_device *dev);
/* 1 once the driver said the device is gone (for the life of the process). */
int xfer_device_is_lost(const xfer_device *dev);
/* A UUID as text, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (out: at least 37 bytes). */
void xfer_uuid_text(const uint8_t uuid[16], char *out, size_t cap);
/* 0 for a device that is gone for good -- a remote one whose peer was lost or closed: it
** stays (its tensors still name it, raising peer_lost) but xfer.devices() lists it no more */
int xfer_device_listed(const xfer_device *dev);
xfer_ctx *xfer_device_ctx(const xfer_device *dev);

/* A device's caching allocator, as torch.cuda.memory_stats counts it. Tensors hold blocks
** of segments (driver allocations); a freed block goes back to the cache. */
typedef struct xfer_memory_info {
  uint64_t in_use;         /* bytes live tensors and moves asked for */
  uint64_t peak;           /* most in_use has been since the context opened */
  uint64_t allocated;      /* bytes of blocks held (sizes rounded up to their class) */
  uint64_t peak_allocated;
  uint64_t reserved;       /* bytes held from the driver: allocated + cached */
  uint64_t peak_reserved;
  uint64_t cached;         /* held from the driver for reuse, in no block in use */
  uint64_t buffers;        /* blocks held */
  uint64_t segments;       /* driver allocations held */
  uint64_t driver_allocs;  /* allocations the driver made (or refused) so far */
  uint64_t driver_frees;   /* allocations given back to the driver so far */
  uint64_t cache_hits;     /* blocks served from the cache, no driver call */
  uint64_t oom_retries;    /* allocations retried after the driver refused one */
  uint64_t objects;        /* driver objects the device holds: buffers, memory, imports, its
                           ** registrations of host memory (not queues, pools, events) */
  uint64_t held;           /* bytes freed (still in in_use) while a device was stalled -- a wait
                           ** for its work ended at a deadline -- held until that work is done;
                           ** and bytes a stopped load's or save's request still lands in */
} xfer_memory_info;

void xfer_device_memory(const xfer_device *dev, xfer_memory_info *out);

/* What kind of memory a device's tensors are, as a transport that moves memory in place (UCX)
** tells them apart: host memory, or a CUDA device's. A capability of the runtime that lends
** it, named by the kind of memory, not by the runtime (a Vulkan or OpenCL device lends none:
** XFER_MEMORY_HOST, moved through the host). */
typedef enum { XFER_MEMORY_HOST = 0, XFER_MEMORY_CUDA } xfer_memory_kind;
/* A tensor's bytes as a transport uses them in place: where they start, and what they are. */
typedef struct xfer_memory {
  void *address;
  xfer_memory_kind kind;
} xfer_memory;
xfer_memory_kind xfer_device_memory_kind(const xfer_device *dev);

/* -- Tensors ------------------------------------------------------------------ */

typedef struct xfer_shape {
  int ndim;                       /* 0 (a scalar) .. XFER_MAX_DIMS */
  int64_t dims[XFER_MAX_DIMS];
} xfer_shape;

/* Allocates an uninitialised tensor. A new tensor holds one reference. */
xfer_code xfer_tensor_empty(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                            xfer_tensor **out, xfer_error *err);
/* Allocates a tensor and fills it from `nbytes` host bytes (must equal its size). */
xfer_code xfer_tensor_from_bytes(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                                 const void *bytes, size_t nbytes, xfer_tensor **out,
                                 xfer_error *err);

xfer_tensor *xfer_tensor_retain(xfer_tensor *t);
/* Drops a reference; the last one frees the buffer and the tensor. Never fails. */
void xfer_tensor_release(xfer_tensor *t);
/* Frees the device buffer now; idempotent. Every later use returns XFER_E_FREED. A tensor
** whose memory views still use is not freed: XFER_E_IN_USE (free the views first, or let
** them go: the memory goes back with the last of them). A view's free drops the view. */
xfer_code xfer_tensor_free(xfer_tensor *t, xfer_error *err);
int xfer_tensor_is_freed(const xfer_tensor *t);
/* XFER_E_OK for a usable tensor; XFER_E_FREED ("attempt to use a freed tensor") or
** XFER_E_DEVICE_LOST otherwise, with `op` naming what was attempted. */
xfer_code xfer_tensor_check(const xfer_tensor *t, const char *op, xfer_error *err);
/* xfer_tensor_check, and XFER_E_INVALID for a tensor that holds no valid bytes (a move into it
** timed out or was canceled, and nothing wrote it since): what reading it needs. */
xfer_code xfer_tensor_readable(const xfer_tensor *t, const char *op, xfer_error *err);

xfer_dtype xfer_tensor_dtype(const xfer_tensor *t);
const xfer_shape *xfer_tensor_shape(const xfer_tensor *t);
size_t xfer_tensor_numel(const xfer_tensor *t);
size_t xfer_tensor_nbytes(const xfer_tensor *t);
xfer_device *xfer_tensor_device(const xfer_tensor *t);

/* Writes "f32[2,3]" ("f32[]" for a scalar) into buf; returns the length it needed. */
size_t xfer_shape_format(xfer_dtype dtype, const xfer_shape *shape, char *buf, size_t cap);

/* Memory the application owns, wrapped as a tensor without a copy. xferlua never frees it:
** it calls `release(release_ud)` once, when the tensor is freed or its last reference goes. */
typedef enum {
  XFER_EXTERNAL_NONE = -1, /* (a device info's external_kind: its runtime wraps nothing) */
  XFER_EXTERNAL_HOST,     /* ptr: host memory */
  XFER_EXTERNAL_CUDA,     /* ptr: a CUdeviceptr, as (void *)(uintptr_t) */
  XFER_EXTERNAL_VULKAN,   /* vk_buffer, vk_memory: a VkBuffer and the VkDeviceMemory bound to it */
  XFER_EXTERNAL_OPENCL    /* ptr: a cl_mem */
} xfer_external_kind;

typedef struct xfer_external {
  xfer_external_kind kind;  /* must be the device's runtime */
  void *ptr;
  uint64_t vk_buffer, vk_memory;
  size_t offset;            /* bytes from the start of the memory to the tensor's first element */
  size_t size;              /* bytes the memory holds from `offset` on: the elements must fit */
  int pin;                  /* host memory the drivers may register or import in place for
                            ** faster moves (let go of when the tensor is); 0: it moves as
                            ** pageable memory */
} xfer_external;

/* strides NULL: packed row-major. The tensor moves, views and converts like any other. */
xfer_code xfer_tensor_wrap(xfer_device *dev, const xfer_external *mem, xfer_dtype dtype,
                           const xfer_shape *shape, const int64_t *strides,
                           void (*release)(void *ud), void *release_ud, xfer_tensor **out,
                           xfer_error *err);
/* 1 for a tensor made by xfer_tensor_wrap (and views of one). */
int xfer_tensor_is_wrapped(const xfer_tensor *t);

/* DLPack 1.x, both ways, no copy. to_dlpack lends a host or CUDA tensor as a
** DLManagedTensorVersioned* (versioned = 1) or DLManagedTensor* (0) in *out; the consumer
** calls its deleter once (xferlua keeps the tensor alive until then). from_dlpack takes a
** producer's CPU, CUDA-host or CUDA tensor as a wrapped tensor and calls its deleter once when
** it lets go; on failure the caller still owns it. A read-only one is XFER_E_UNSUPPORTED.
** A CUDA tensor's memory must be ready when it is given: xferlua's moves run on streams of
** their own (non-blocking), which no producer's stream orders -- wait for the work the
** producer queued for it first (the xferlua package waits for the framework's current stream). */
/* The device memory at byte `offset` of a contiguous tensor, for a transport to move in place:
** its address and kind, the device's context current on this thread; XFER_E_UNSUPPORTED for
** host memory and runtimes that lend none. */
xfer_code xfer_tensor_device_memory(xfer_tensor *t, size_t offset, xfer_memory *out,
                                   xfer_error *err);
xfer_code xfer_tensor_to_dlpack(xfer_tensor *t, int versioned, void **out, xfer_error *err);
/* The DLPack device (__dlpack_device__) to_dlpack would lend `t` as: type 1 kDLCPU or 2 kDLCUDA
** and its ordinal; type -1 for a tensor it does not lend (freed, or of another runtime). */
void xfer_tensor_dlpack_device(const xfer_tensor *t, int *type, int *id);
xfer_code xfer_tensor_from_dlpack(xfer_ctx *ctx, void *managed, int versioned, xfer_tensor **out,
                                  xfer_error *err);

/* Views share a tensor's memory (no copy): `shape`, `strides` (in elements, >= 0) and the
** `first` element, counted in the memory of the tensor that owns it (t's own base when t is
** a view). Every element must lie inside that memory. The view holds a reference to it. */
xfer_code xfer_tensor_view(xfer_tensor *t, const xfer_shape *shape, const int64_t *strides,
                           int64_t first, xfer_tensor **out, xfer_error *err);
const int64_t *xfer_tensor_strides(const xfer_tensor *t);
/* 1 when its elements lie packed in row-major order (what moves need without packing). */
int xfer_tensor_is_contiguous(const xfer_tensor *t);
/* The first element's index in the owner's memory (0 for what alloc makes). */
size_t xfer_tensor_first(const xfer_tensor *t);
/* One element (xfer_dtype_size bytes), at 0-based `index` (n = its dimensions): one small
** read or write of the device, never a whole copy. */
xfer_code xfer_tensor_get(xfer_tensor *t, const int64_t *index, int n, void *elem,
                          xfer_error *err);
xfer_code xfer_tensor_set(xfer_tensor *t, const int64_t *index, int n, const void *elem,
                          xfer_error *err);

/* The tensor's first element where the CPU can use it in place (host tensors), else NULL;
** a non-contiguous view's elements lie where its strides say. */
void *xfer_tensor_host_data(xfer_tensor *t);

/* Copies the tensor's bytes out to host memory `dst` (nbytes must equal its size), packed
** in row-major order (a view's elements gathered by its strides). */
xfer_code xfer_tensor_read(xfer_tensor *t, void *dst, size_t nbytes, xfer_error *err);
/* Overwrites the tensor's bytes from host memory `src` (nbytes must equal its size; a view's
** elements scattered by its strides). */
xfer_code xfer_tensor_write(xfer_tensor *t, const void *src, size_t nbytes, xfer_error *err);
/* Sets every element to the element at `elem` (xfer_dtype_size bytes). */
xfer_code xfer_tensor_fill(xfer_tensor *t, const void *elem, xfer_error *err);
/* The CRC32C (Castagnoli) of the tensor's bytes, its elements in order (a view's as packed):
** what `verify` compares, and what anyone can compute of the same bytes elsewhere. Device
** memory is read to the host in chunks for it. */
xfer_code xfer_tensor_crc32c(xfer_tensor *t, uint32_t *crc, xfer_error *err);
/* The CRC32C of each `stretch` bytes of a tensor that is not a view, in order, into crc[count]
** (count: the stretches its bytes make, the last one shorter where they do not divide): summed
** where they lie, a device's all in one call of its own. What a file load's verify joins, for
** a tensor split across devices along a later dimension, into the sum of the whole. */
xfer_code xfer_tensor_crc32c_each(xfer_tensor *t, size_t stretch, uint32_t *crc, size_t count,
                                  xfer_error *err);
/* *equal = 1 when a and b have one dtype, one shape and the same bytes. */
xfer_code xfer_tensor_equal(xfer_tensor *a, xfer_tensor *b, int *equal, xfer_error *err);

/* -- Transfers ---------------------------------------------------------------- */

typedef enum {
  XFER_PATH_AUTO = 0,     /* let the planner choose */
  XFER_PATH_SAME_DEVICE,  /* device-local copy */
  XFER_PATH_SAME_RUNTIME, /* the runtime's own copy between two of its devices */
  XFER_PATH_INTEROP,      /* one physical GPU shared between runtimes */
  XFER_PATH_DIRECT,       /* a transport (UCX) moves device memory in place: a remote end */
  XFER_PATH_STAGED,       /* pipelined through staging chunks */
  XFER_PATH_HOST,         /* explicit host round-trip */
  XFER_PATH__COUNT
} xfer_path;

const char *xfer_path_name(xfer_path path);
/* Returns 0 and sets *out for "same_device", "host", ... (not "auto"), else -1. */
int xfer_path_parse(const char *name, xfer_path *out);

typedef struct xfer_transfer_opts {
  xfer_path via;          /* XFER_PATH_AUTO, or a path to force */
  int convert;            /* 1: the new tensor is of `dtype` (xfer_transfer_to) */
  xfer_dtype dtype;       /* converted on the host: the move passes the host (via AUTO or
                          ** HOST; any other path is XFER_E_UNSUPPORTED) */
  /* called on the moving thread with the bytes done and the total: at the start, after each
  ** staged chunk, and at the end; returning non-zero aborts the move (XFER_E_INVALID, op
  ** "progress"; nothing stays allocated). NULL: none. */
  int (*progress)(void *ud, uint64_t done, uint64_t total);
  void *progress_ud;
  /* 1: each contiguous move's bytes checked once they have arrived -- the CRC32C of the
  ** source range and of the target range compared (a batch: each element's); a difference is
  ** XFER_E_CORRUPT (op "verify"), naming both ends and both sums. A device sums its own memory
  ** where its runtime can (copy->crc32c: OpenCL, a remote device's server), else it is read
  ** back to the host for its sum. -1: not checked; 0: as xfer_config's verify. */
  int verify;
  /* seconds the move (a batch's run, an asynchronous move from its start call) may take: past
  ** them it ends XFER_E_TIMEOUT at the next step it takes or wait it makes -- a device's wait
  ** ends at the deadline, never blocking beyond it -- and its target is not valid (reading it
  ** is XFER_E_INVALID until it is written again). 0: as xfer_config's timeout; < 0: none. */
  double timeout;
} xfer_transfer_opts;

#define XFER_PLAN_MAX_STEPS 6
typedef struct xfer_plan {
  xfer_path path;
  char reason[512];
  int nsteps;
  char steps[XFER_PLAN_MAX_STEPS][96];
  /* each path the planner considered (those that apply, set aside or not), in its order, with
  ** its estimate for this move where it has a measured figure (xfer_cost_set) */
  int nestimates;
  struct {
    xfer_path path;
    int measured;        /* 0: no figure yet (seconds is 0) */
    double seconds;
  } estimates[XFER_PATH__COUNT];
  /* the moves it will make, in order, as the ledger (xfer_stats) will record them: a view's
  ** pack on its device or a conversion on the host records none; then, marked `fallback`,
  ** those made instead when the driver refuses a view's runs at once */
  int nmoves;
  struct {
    char from[32], to[32];
    xfer_path path;
    char runner[32];     /* the runtime that runs it where not the path's own (xfer_stat) */
    int fallback;
  } moves[6];
} xfer_plan;

/* What moving `src` to `dst_dev` will do, and why: every step (a view packed or its runs
** moved at once, a dtype converted, the contiguous move's path). A forced path that does not
** apply is XFER_E_UNSUPPORTED saying why. */
xfer_code xfer_transfer_plan(xfer_tensor *src, xfer_device *dst_dev,
                             const xfer_transfer_opts *opts, xfer_plan *out, xfer_error *err);
/* A new tensor on `dst_dev` holding src's bytes. On failure nothing stays allocated
** and `src` is untouched. */
xfer_code xfer_transfer_to(xfer_tensor *src, xfer_device *dst_dev,
                           const xfer_transfer_opts *opts, xfer_tensor **out, xfer_error *err);
/* Fills `dst` from `src` (same shape, any devices). Between dtypes, converted on the host as
** xfer_convert does (the move passes the host). On failure `src` is untouched; `dst` may
** hold part of the data. */
xfer_code xfer_transfer_copy(xfer_tensor *dst, xfer_tensor *src,
                             const xfer_transfer_opts *opts, xfer_error *err);

/* -- Batches ------------------------------------------------------------------- */

/* Many copies as one: grouped by (from, to), each group planned once, submitted at once where
** the runtime takes a batch (CUDA: one kernel over pinned host memory or the device's own)
** and synchronised once; elsewhere the group's copies run one by one on the group's route. */
typedef struct xfer_batch_item {
  xfer_tensor *dst, *src;
  /* bytes `nbytes` from byte `src_offset` of src to byte `dst_offset` of dst (both tensors
  ** contiguous); nbytes 0: the whole tensors, as xfer_transfer_copy (same shape; views and
  ** dtype changes allowed, moved one by one) */
  size_t dst_offset, src_offset, nbytes;
} xfer_batch_item;

typedef struct xfer_batch xfer_batch;

/* Checks and plans a batch once: every element's tensors alive, ranges inside them, no two
** destinations overlapping; the batch holds a reference to every tensor. An empty batch is
** allowed (its run does nothing). XFER_E_INVALID names the element (err->element). */
xfer_code xfer_batch_prepare(const xfer_batch_item *items, size_t n,
                             const xfer_transfer_opts *opts, xfer_batch **out, xfer_error *err);
/* Runs it (again). On failure err names the element (err->element, from 1) and its ends;
** xfer_batch_done says which elements completed; sources are untouched. */
xfer_code xfer_batch_run(xfer_batch *batch, xfer_error *err);
/* A batch in parts, each run alone: part k is elements [part_end[k-1], part_end[k]) (part_end
** ascending, the last = n); no group crosses a part, so running part k submits its groups
** only -- one batch prepared for a stream of steps (a file load's chunks, a KV cache's layers)
** instead of one prepared per step. Overlaps are checked across the whole batch. */
xfer_code xfer_batch_prepare_parts(const xfer_batch_item *items, size_t n, const size_t *part_end,
                                   size_t nparts, const xfer_transfer_opts *opts,
                                   xfer_batch **out, xfer_error *err);
/* Runs part `part` (from 0) alone; xfer_batch_done then says which of its elements completed
** (the others' flags are the last run's). */
xfer_code xfer_batch_run_part(xfer_batch *batch, size_t part, xfer_error *err);
size_t xfer_batch_count(const xfer_batch *batch);
size_t xfer_batch_bytes(const xfer_batch *batch);
/* 1 when element i (from 0) completed in the last run. */
int xfer_batch_done(const xfer_batch *batch, size_t i);
/* How many groups the batch has, and how many of them a runtime takes at once. */
void xfer_batch_groups(const xfer_batch *batch, size_t *groups, size_t *submitted_at_once);
/* Group `index` (from 0) of a prepared batch in words (b:plan()): how its elements move -- in
** one submission (by which device, importing what), through host chunks (packed by, scattered
** by), one at a time on its route, or, for a view or dtype element, its whole plan as
** xfer_transfer_plan says it; `moves` as the ledger records them. A group whose route could
** not be made: its error. */
xfer_code xfer_batch_plan(const xfer_batch *batch, size_t index, xfer_plan *out, xfer_error *err);
void xfer_batch_release(xfer_batch *batch);
/* prepare, run, release */
xfer_code xfer_transfer_batch(const xfer_batch_item *items, size_t n,
                              const xfer_transfer_opts *opts, xfer_error *err);

/* -- Asynchronous transfers ---------------------------------------------------- */

/* A move running on its own thread. Moves on different devices run at once; moves that
** share a device take turns. The job holds a reference to the source; do not change the
** source while the job runs (freeing it waits for the job). */
typedef struct xfer_job xfer_job;

xfer_code xfer_transfer_start(xfer_tensor *src, xfer_device *dst_dev,
                              const xfer_transfer_opts *opts, xfer_job **out, xfer_error *err);
/* 1 once the move has finished, failed or not. */
int xfer_job_done(xfer_job *job);
/* How far the move is: bytes done and the total (0 and 0 before it starts). */
void xfer_job_progress(xfer_job *job, uint64_t *done, uint64_t *total);
/* A batch run on a thread of its own (the job holds a reference to the batch; running it again
** meanwhile is refused): xfer_job_wait gives its error, or XFER_E_OK and *out NULL. */
xfer_code xfer_batch_start(xfer_batch *batch, xfer_job **out, xfer_error *err);
/* A job of the caller's own: fn(arg, err) on a thread of the same pool, under a deadline
** (`timeout` seconds from now; 0: xfer_config's; < 0: none) and the job's cancel flag, which
** the moves, batch runs, loads and saves fn makes honour; fn's code and error are the job's
** (xfer_job_wait: *out NULL). The `ntensors` tensors fn uses are busy meanwhile (freeing one
** waits for fn). release(arg), if given, runs once the caller and the thread have both let
** go of the job, on the thread of the last: a caller that waited for the job has it run by
** the time xfer_job_release returns. (The file layer's loads and saves run so: xfer_files.h.) */
xfer_code xfer_job_start_call(xfer_ctx *ctx, xfer_code (*fn)(void *arg, xfer_error *err), void *arg,
                              void (*release)(void *arg), double timeout, xfer_tensor *const *tensors,
                              size_t ntensors, xfer_job **out, xfer_error *err);
/* The `arg` a job of the caller's own was started with (NULL for a move or a batch run). */
void *xfer_job_arg(xfer_job *job);
/* Waits for the move: XFER_E_OK and *out (a new reference), or its error. May be called
** again: the same tensor or error comes back. */
xfer_code xfer_job_wait(xfer_job *job, xfer_tensor **out, xfer_error *err);
/* Cancels the job and waits for it: returns only once nothing more will be written into its
** targets -- a move not started never starts, a running one stops at its next step (a staged
** chunk, a batch's group), its copies in flight waited for. The job then ends XFER_E_CANCELED
** (op "cancel"; xfer_job_wait says it) unless it had ended already (a no-op then), and its
** targets not written are not valid (xfer_transfer_opts.timeout says what that means). */
xfer_code xfer_job_cancel(xfer_job *job);
/* Waits, then drops the job (and its result, unless taken with xfer_job_wait). */
void xfer_job_release(xfer_job *job);
/* Drops the job without waiting: a move still running finishes on its thread, which then
** drops the result (for collectors, which must not wait on a move that may wait on them). */
void xfer_job_detach(xfer_job *job);
/* Waits until no move started with xfer_transfer_start is running, detached ones included
** (they give their memory back when they end): then every byte a finished move held is
** accounted for. */
void xfer_synchronize(xfer_ctx *ctx);

/* -- Observability and settings ------------------------------------------------ */

/* Moves so far, one entry per path and pair of devices. */
typedef struct xfer_stat {
  xfer_path path;
  char from[32], to[32];
  char runner[32];       /* the device whose runtime ran these moves where not the path's own
                         ** (a batch group in one submission: "cuda:0" over vulkan:0's memory);
                         ** "" for the path's own */
  uint64_t count, bytes;
  double seconds;
} xfer_stat;

/* Copies at most `max` entries into `out`; returns how many there are. */
size_t xfer_stats(xfer_ctx *ctx, xfer_stat *out, size_t max);
void xfer_stats_reset(xfer_ctx *ctx);
/* 1: one line per move on stderr (path, bytes, time, GB/s); also XFER_TRACE=1. */
void xfer_trace(xfer_ctx *ctx, int on);

typedef struct xfer_config {
  size_t staging_chunk;  /* bytes per staging chunk of the staged path (default 4 MiB) */
  int staging_depth;     /* chunks in flight, at least 2 (default 3) */
  int cache;             /* 1: freed blocks are kept for reuse (default; XFER_CACHE=0 turns
                         ** it off: every allocation and free reaches the driver) */
  uint64_t cache_limit;  /* bytes each device may keep cached; beyond, freed blocks go
                         ** back to the driver (0: no limit, the default) */
  int setaside_after;    /* failures in a row that set a path aside for a pair of devices
                         ** (default 3; a non-retryable failure sets it aside at once; 0: never) */
  double remote_timeout; /* seconds a request to a remote peer may take before the peer is
                         ** given up as lost (default 10; xfer_connect's timeout overrides) */
  size_t remote_chunk;   /* bytes per request of a move to or from a remote device, 4 KiB to
                         ** 64 MiB (the most a server takes at once; default 4 MiB, the
                         ** fastest measured with remote_depth 4) */
  int remote_depth;      /* requests of a move in flight per peer, 1 to 4 (default 4; a server
                         ** queues at most 256 MiB of one client's) */
  int verify;            /* 1: every move and batch checks its bytes once they arrived (as
                         ** xfer_transfer_opts.verify = 1) unless its options say -1 (default 0) */
  size_t remote_device_chunk; /* bytes per request of a direct move (CUDA memory to UCX in
                         ** place), 4 KiB to 64 MiB (default 64 MiB: over cuda_ipc a request's
                         ** round trip outweighs its copy -- 4 MiB ran at 0.38-0.48 TB/s, 64 MiB
                         ** at 1.7) */
  double timeout;        /* seconds every move may take unless its options say (as
                         ** xfer_transfer_opts.timeout; 0: none, the default; 0.001 to 86400) */
} xfer_config;

/* -- What the planner remembers ---------------------------------------------------------- */

/* A path set aside for a pair: the default choice skips it (a forced via still tries it). */
typedef struct xfer_health_info {
  char from[32], to[32];
  xfer_path path;
  char runner[32];       /* as in xfer_stat: "" for the path's own */
  int failures;          /* in a row */
  int injected;          /* the last failure was an injected fault */
  int64_t when;          /* time() of setting aside */
  char reason[200];      /* the error message that set it aside */
} xfer_health_info;

/* Copies at most `max` set-aside paths into `out`; returns how many there are, and in
** *decisions how often the planner passed one over (NULL: not wanted). */
size_t xfer_health(xfer_ctx *ctx, xfer_health_info *out, size_t max, uint64_t *decisions);
/* Forgets failures and set-aside paths between from and to (NULL: any device). */
void xfer_forget_failures(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to);

/* -- What paths cost (the planner that knows sizes) ------------------------------------- */

/* A measured figure: moving n bytes from `from` to `to` by `path` takes about
** latency + n / bandwidth seconds. The default choice is the first path that applies; another
** one is taken for a move when both have figures and the other's estimate is under 0.95 of
** it. Figures come from calibration (xfer.calibrate in Lua) or the self-test, and live in a
** cache file: XFER_PLAN_CACHE ("off": none), else $XDG_CACHE_HOME/xferlua/plan-cache.tsv or
** ~/.cache/xferlua/plan-cache.tsv, read when the context opens. */
#define XFER_COST_POINTS 8
typedef struct xfer_cost {
  const char *from, *to; /* device names */
  xfer_path path;
  double latency;        /* seconds */
  double bandwidth;      /* bytes per second */
  int64_t when;          /* time() of the measurement */
  int npoints;           /* times measured at sizes (xfer_cost_set_points), 0 when none */
  double bytes[XFER_COST_POINTS], seconds[XFER_COST_POINTS];
} xfer_cost;

/* XFER_E_INVALID for devices of another context, path auto, a negative or non-finite
** latency, a bandwidth that is not > 0 and finite. */
xfer_code xfer_cost_set(xfer_ctx *ctx, xfer_device *from, xfer_device *to, xfer_path path,
                        double latency, double bandwidth, xfer_error *err);
/* Measured times at 2..XFER_COST_POINTS sizes (bytes increasing, both > 0 and finite): an
** estimate is then read off the line between the two sizes around it (beyond the largest,
** at the rate between the two largest), latency and bandwidth being that line's ends. */
xfer_code xfer_cost_set_points(xfer_ctx *ctx, xfer_device *from, xfer_device *to, xfer_path path,
                               const double *bytes, const double *seconds, int n, xfer_error *err);
/* Copies at most `cap` figures into `out`; returns how many there are. */
size_t xfer_costs_list(xfer_ctx *ctx, xfer_cost *out, size_t cap);
/* Forgets every figure (the cache file stays: xfer_costs_save or delete it). */
void xfer_costs_forget(xfer_ctx *ctx);
/* Reads figures from `file` (NULL: the cache file), keeping those of devices here (name,
** label and UUID equal); a missing file is no error, one of another format is
** XFER_E_INVALID. *loaded (may be NULL): how many were kept. */
xfer_code xfer_costs_load(xfer_ctx *ctx, const char *file, size_t *loaded, xfer_error *err);
/* Writes every figure to `file` (NULL: the cache file), whole or not at all. */
xfer_code xfer_costs_save(xfer_ctx *ctx, const char *file, xfer_error *err);


/* Gives what `dev` keeps cached back to its driver (every device's when dev is NULL). */
void xfer_empty_cache(xfer_ctx *ctx, xfer_device *dev);

void xfer_config_get(const xfer_ctx *ctx, xfer_config *out);
/* XFER_E_INVALID for a chunk under 4 KiB or over 1 GiB, or a depth outside 2..16. Turning
** the cache off, or lowering its limit, gives back what is over it at once. */
xfer_code xfer_config_set(xfer_ctx *ctx, const xfer_config *config, xfer_error *err);

/* -- Help for a garbage collector ----------------------------------------------------- */

/* A collector of the host application (the Lua binding's) cannot see device memory. When
** a driver refuses an allocation, the core empties that device's cache, calls `reclaim`
** (on the thread that allocates; it must not call into xferlua except to free tensors),
** empties the cache again, and retries once when memory came back. NULL removes it. */
void xfer_set_reclaim(xfer_ctx *ctx, void (*reclaim)(void *arg), void *arg);
/* 1 when tensor bytes allocated since the last collection have passed a threshold that
** grows with what was live after it: the application should collect now, then call
** xfer_gc_done. */
int xfer_gc_due(xfer_ctx *ctx);
void xfer_gc_done(xfer_ctx *ctx);

/* -- Fault injection ---------------------------------------------------------- */

/* The `nth` matching driver call from now on fails, and so do the `count - 1`
** matching calls after it, through the same path a real failure takes. */
typedef struct xfer_fault {
  char runtime[16];      /* "host", "cuda", ... */
  char op[16];           /* "alloc", "read", "write", "copy", ... */
  int nth;               /* >= 1 */
  int count;             /* >= 1 */
  long long native;      /* the driver code to fail with; 0: the backend's usual one for op */
} xfer_fault;

xfer_code xfer_fault_inject(xfer_ctx *ctx, const xfer_fault *fault, xfer_error *err);
/* Adds the rules of a spec such as "host:read:1,vulkan:copy:1:1:-4"
** (runtime:op[:nth[:count[:native]]]). */
xfer_code xfer_fault_parse(xfer_ctx *ctx, const char *spec, xfer_error *err);
void xfer_fault_clear(xfer_ctx *ctx);
/* Rules not yet used up; copies at most `max` into `out` and returns how many there are. */
size_t xfer_fault_list(xfer_ctx *ctx, xfer_fault *out, size_t max);
/* Torture, curl-style: every fallible driver call is counted; the k-th from now fails (0:
** none), as an injected fault of its runtime and op. Also XFER_FAIL_AT=k at open. */
void xfer_fault_fail_at(xfer_ctx *ctx, uint64_t k);
/* Fallible driver calls since the last xfer_fault_fail_at (or since the context opened). */
uint64_t xfer_fault_calls(xfer_ctx *ctx);
/* 1, with the runtime and op of the call and nth = its number, once fail_at has failed one. */
int xfer_fault_failed(xfer_ctx *ctx, xfer_fault *out);
/* The points torture counts, and what the k-th of a kind does when armed: a fallible driver
** call fails (xfer_fault_fail_at); a wait for a device's work under a deadline stalls -- it
** never sees the work done and ends at the deadline, as the "stall" fault (op "stall"); a step, a point
** where a move tells its progress, cancels the move there, as job:cancel() would (op
** "cancel", no runtime). Arming one kind disarms the others and counts every kind from 0. */
typedef enum { XFER_POINT_CALL, XFER_POINT_WAIT, XFER_POINT_STEP } xfer_point;
void xfer_fault_fail_at_point(xfer_ctx *ctx, xfer_point kind, uint64_t k);
/* Points of the kind seen since the last arming (or since the context opened). */
uint64_t xfer_fault_points(xfer_ctx *ctx, xfer_point kind);

/* The ops a fault may name, NULL-terminated. */
const char *const *xfer_fault_ops(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
