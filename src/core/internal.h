/*
** internal.h -- the core's own structures and the backend vtable.
** Backends include this; nothing outside src/ does.
*/
#ifndef XFER_INTERNAL_H
#define XFER_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>

#include "xfer.h"

typedef struct xfer_runtime xfer_runtime;

/* -- Backend vtable ------------------------------------------------------------ */

/* One table per runtime. A buffer is whatever the backend says it is (a pointer, a
** cl_mem, a struct of its own); the core only passes it back. Offsets and lengths are
** bytes. Optional members are NULL, and the core checks before calling. */
/* 2: peer and copy_imported take offsets (blocks of segments); 3: shared memory, import op;
** 5: peer_joins; 6: device memory for a transport (memory_kind, device_memory, direct) */
#define XFER_BACKEND_VERSION 6

/* What kind of memory a buffer is, as a transport that moves memory in place (UCX) tells
** them apart: host memory, or a CUDA device's. */
typedef enum { XFER_MEMORY_HOST = 0, XFER_MEMORY_CUDA } xfer_memory_kind;

/* A buffer's bytes as a transport uses them in place: where they start, and what they are. */
typedef struct xfer_memory {
  void *address;
  xfer_memory_kind kind;
} xfer_memory;
/* Queued moves a device can have in flight at once: the staged pipeline's reads take
** slots below half, its writes the upper half (one device may be both ends' runtime). */
#define XFER_QUEUE_SLOTS 32
typedef struct xfer_backend {
  int version;
  const char *name;
  /* Loads the driver and adds devices with xfer_runtime_add_device. A runtime that
  ** cannot work here returns XFER_E_UNAVAILABLE with the reason in err->message. */
  xfer_code (*open)(xfer_runtime *rt, xfer_error *err);
  void (*close)(xfer_runtime *rt);                         /* releases devices and driver */
  xfer_code (*alloc)(xfer_device *dev, size_t nbytes, void **buf, xfer_error *err);
  void (*free)(xfer_device *dev, void *buf, size_t nbytes);  /* never fails */
  /* host memory -> buffer */
  xfer_code (*write)(xfer_device *dev, void *buf, size_t offset, const void *src, size_t n,
                     xfer_error *err);
  /* buffer -> host memory */
  xfer_code (*read)(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                    xfer_error *err);
  /* optional, a view's rows: `rows` runs of `run` bytes, the first at `offset` and each
  ** `pitch` bytes after the one before, between the buffer and packed host memory in one
  ** driver call (pitch >= run, below 2^31). NULL: the core moves the covering span through
  ** the host, or run by run. */
  xfer_code (*read_rows)(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                         size_t rows, void *dst, xfer_error *err);
  xfer_code (*write_rows)(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                          size_t rows, const void *src, xfer_error *err);
  /* optional, a view's rows within the device: `rows` runs of `run` bytes from src (each
  ** src_pitch after the one before) to dst (each dst_pitch apart), done when it returns --
  ** a view packed (dst_pitch = run) or scattered (src_pitch = run) without leaving it */
  /* optional: the buffer handle the other ops take for memory the application owns (and,
  ** unwrap, its release: the memory itself stays the application's) */
  /* optional: the address a buffer handle stands for (host memory, a CUdeviceptr), for
  ** lending it through DLPack */
  void *(*native)(xfer_device *dev, void *buf);
  xfer_code (*wrap)(xfer_device *dev, const xfer_external *mem, void **buf, xfer_error *err);
  void (*unwrap)(xfer_device *dev, void *buf);
  xfer_code (*copy_rows)(xfer_device *dev, void *dst, size_t dst_offset, size_t dst_pitch,
                         void *src, size_t src_offset, size_t src_pitch, size_t run,
                         size_t rows, xfer_error *err);
  /* buffer -> buffer on one device */
  xfer_code (*copy)(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                    size_t src_offset, size_t n, xfer_error *err);
  /* optional: buffer on `src_dev` -> buffer on `dst_dev`, two devices of this runtime */
  xfer_code (*peer)(xfer_device *dst_dev, void *dst, size_t dst_offset, xfer_device *src_dev,
                    void *src, size_t src_offset, size_t n, xfer_error *err);
  /* optional: whether peer joins these two devices (NULL: any two of the runtime's; the
  ** remote runtime's devices are joined only on one server) */
  int (*peer_joins)(const xfer_device *src_dev, const xfer_device *dst_dev);
  /* optional, queued host moves (the staged pipeline): write/read that may return once
  ** the driver has the work (*queued = 1), leaving the host memory untouched until
  ** finish(slot) has returned. `slot` (0 to XFER_QUEUE_SLOTS-1) names the move for finish.
  ** A move the backend cannot queue is done in full before start returns (*queued = 0).
  ** Every queued slot is finished, also after errors. */
  xfer_code (*write_start)(xfer_device *dev, void *buf, size_t offset, const void *src, size_t n,
                           int slot, int *queued, xfer_error *err);
  xfer_code (*read_start)(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                          int slot, int *queued, xfer_error *err);
  xfer_code (*finish)(xfer_device *dev, int slot, xfer_error *err);
  /* optional, interop: an opaque fd of the buffer's memory (the caller owns it) and the
  ** size of that memory */
  xfer_code (*export_fd)(xfer_device *dev, void *buf, int *fd, uint64_t *memory_size,
                         xfer_error *err);
  /* optional, interop: memory another runtime exported, as a buffer `nbytes` long that
  ** copy_imported takes (and, imported as a tensor's own memory, every other op); `handle`
  ** is what release_import needs. `op` names the call for faults and errors ("import", or
  ** "alloc" when the import is a tensor's allocation). Owns `fd` only when it succeeds. */
  xfer_code (*import_fd)(xfer_device *dev, int fd, uint64_t memory_size, size_t nbytes,
                         const char *op, void **buf, void **handle, xfer_error *err);
  void (*release_import)(xfer_device *dev, void *buf, void *handle);
  /* optional, interop: copy n bytes between one of the device's buffers and an imported
  ** one (into_imported: buf -> imported, else imported -> buf), done when it returns */
  xfer_code (*copy_imported)(xfer_device *dev, void *buf, size_t offset, void *imported,
                             size_t imported_offset, size_t n, int into_imported,
                             xfer_error *err);
  /* optional: memory the other runtimes of its GPU can import (an fd the caller owns, and
  ** the size of that memory), which this runtime's devices can copy to and from as their
  ** own and peer-copy across GPUs; freed with free_shared */
  xfer_code (*alloc_shared)(xfer_device *dev, size_t nbytes, void **buf, int *fd,
                            uint64_t *memory_size, xfer_error *err);
  void (*free_shared)(xfer_device *dev, void *buf, size_t nbytes);
  /* optional: the host address of a buffer the CPU can use in place, else NULL */
  void *(*host_address)(xfer_device *dev, void *buf);
  /* optional: the host segment [base, base+size) goes back to the system; undo `pin`, what
  ** the device made for it and kept with it (xfer_host_pin_keep): a registration, a pin, an
  ** import. No move uses the segment. */
  void (*host_unpin)(xfer_device *dev, void *base, size_t size, void *pin);
  /* optional, device memory a transport uses in place: the kind of memory the runtime's
  ** buffers are (0, host: none to lend), and the address of buf+offset, the device's context
  ** made current on the calling thread (the transport's copies of it run there) */
  xfer_memory_kind memory_kind;
  xfer_code (*device_memory)(xfer_device *dev, void *buf, size_t offset, xfer_memory *out,
                             xfer_error *err);
  /* optional, the direct path: whether this runtime's transport moves `other`'s device memory
  ** in place (other: a device of another runtime whose backend lends memory of that kind;
  ** why not in `why`, when given), and the move: n bytes between buf+offset on dev and `mem` (into_buf: mem -> buf, else
  ** buf -> mem), done when it returns */
  int (*direct_joins)(const xfer_device *dev, const xfer_device *other, char *why, size_t cap);
  xfer_code (*direct)(xfer_device *dev, void *buf, size_t offset, const xfer_memory *mem,
                      size_t n, int into_buf, xfer_error *err);
  /* optional: free and total bytes as the driver reports them now */
  xfer_code (*memory)(xfer_device *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                      xfer_error *err);
} xfer_backend;

/* -- Core structures ---------------------------------------------------------- */

struct xfer_runtime {
  const xfer_backend *backend;  /* NULL for a runtime this build does not include */
  const char *name;
  xfer_ctx *ctx;
  int opened;                   /* open succeeded: close must run */
  int available;
  char reason[512];
  void *impl;                   /* the backend's own state */
  size_t first_device, ndevices;
  uint64_t objects;             /* driver objects held now (xfer_objects; atomic) */
};

struct xfer_device {
  xfer_ctx *ctx;
  xfer_runtime *rt;
  int refs;                     /* tensors on it and the application's handles (atomic): a
                                ** lost remote device with none gives its slot back */
  int index;                    /* within its runtime */
  char name[32];                /* "opencl:1" */
  char label[128];
  char platform[96];
  char vendor[64];
  char pci_bus_id[32];          /* "0000:19:00.0" where the runtime knows it */
  int cc_major, cc_minor;       /* CUDA compute capability */
  uint64_t total_memory;
  uint64_t max_alloc;           /* 0: no limit below total_memory */
  uint64_t max_import;          /* 0: none; else the largest buffer the driver is trusted to
                                ** import (NVIDIA's OpenCL crashes importing 512 MiB) */
  int unified, has_uuid, has_driver_uuid;
  int remote;                   /* another machine's (the remote runtime): shares nothing here */
  uint8_t uuid[16];
  uint8_t driver_uuid[16];      /* opaque-fd interop needs equal driver UUIDs too */
  void *impl;
  struct xfer_allocator *alloc; /* its caching allocator (memory.c) */
  int lost;                     /* set once the driver says the device is gone */
  xfer_code lost_code;          /* what a lost device's calls raise (0: device_lost; a remote
                                ** device's: peer_lost) */
  char lost_note[96];           /* why, after "device X was lost" ("" when the driver said) */
  int closed;                   /* dev:close(): its memory given back; xfer_device_find opens it */
  struct xfer_tensor *tensors;  /* its live tensors, for close (ctx->lock) */
  int can_export, can_import;   /* opaque-fd interop, as the backend found it at open */
  int can_share;                /* makes memory for others to import (alloc_shared) */
  uint64_t objects;             /* driver objects it holds now, its pins of host memory
                                ** included (xfer_objects; atomic) */
  /* The device of another runtime on this GPU whose shared memory this device's segments
  ** live in (an OpenCL device on NVIDIA's GPU: CUDA memory): moves between the two are
  ** one copy of the backing runtime's, and across GPUs one peer copy. NULL: its own. */
  struct xfer_device *backing;
  pthread_mutex_t lock;         /* one move at a time uses the driver state (recursive) */
};

#define XFER_RUNTIMES 5
#define XFER_MAX_FAULTS 32

typedef struct xfer_fault_rule {
  xfer_fault fault;
  int skip;                     /* matching calls still to let through */
  int left;                     /* matching calls still to fail */
} xfer_fault_rule;

struct xfer_ctx {
  int refs;
  xfer_runtime runtimes[XFER_RUNTIMES];
  size_t nruntimes;
  xfer_device **devices;
  size_t ndevices, cap;
  xfer_fault_rule faults[XFER_MAX_FAULTS];
  size_t nfaults;
  uint64_t fault_calls;         /* fallible driver calls since the last fail_at (atomic) */
  uint64_t fail_at;             /* that call fails (0: none) (atomic) */
  xfer_fault failed;            /* what fail_at failed: runtime, op, nth = the call (ctx->lock) */
  pthread_mutex_t lock;         /* faults, stats, busy tensors */
  pthread_cond_t idle;          /* a tensor stopped being busy, or a job ended */
  int jobs_running;             /* started moves whose threads have not ended (ctx->lock) */
  xfer_stat *stats;
  size_t nstats, stats_cap;
  struct xfer_health_entry *health; /* what the planner remembers (health.c; ctx->lock) */
  size_t nhealth, health_cap;
  uint64_t health_decisions;    /* set-aside paths passed over (atomic) */
  struct xfer_cost_entry *costs; /* measured figures per pair and path (costs.c; ctx->lock) */
  size_t ncosts, costs_cap;     /* ncosts: atomic, read without the lock */
  int trace;
  xfer_config config;
  /* The host application's reclaimer (the Lua binding's full GC): run when a driver
  ** refuses memory, so that tensors nobody references give their blocks back. */
  void (*reclaim)(void *arg);
  void *reclaim_arg;
  uint64_t gc_debt;             /* tensor bytes allocated since the last collection (atomic) */
  uint64_t gc_baseline;         /* tensor bytes live after the last collection (atomic) */
  uint64_t tensor_bytes;        /* tensor bytes live now (atomic) */
};

/* A host segment: runtimes may register or import it in place, and keep what they made
** with it (xfer_host_pin_keep) until it goes back to the system. */
typedef struct xfer_host_span {
  char *base;
  size_t size;
} xfer_host_span;

/* A segment's memory as another runtime imported it. */
#define XFER_MAX_IMPORTS 4
/* What a device made for a host segment (xfer_backend.host_unpin undoes it), or what another
** owner made (a UCX context's registration: `undo` undoes it, with the owner as `key`). */
#define XFER_MAX_PINS 16
typedef void (*xfer_pin_undo)(void *key, void *base, size_t size, void *pin);
typedef struct xfer_pin {
  void *key;                    /* the device, or the owner */
  void *pin;
  xfer_pin_undo undo;           /* an owner's: how it is undone (NULL: the device's host_unpin) */
} xfer_pin;
typedef struct xfer_import {
  xfer_device *dev;             /* the importing device */
  void *buf, *handle;
} xfer_import;

/* -- Memory (memory.c) ------------------------------------------------------------ */

/* A segment is one driver allocation; blocks are carved from it. What the memory has cost
** stays with the segment for as long as the driver's allocation lives: its imports into
** other runtimes, and (host segments) what runtimes made to use it in place: CUDA's
** registration, NVIDIA OpenCL's pin, Vulkan's host import. */
typedef struct xfer_segment {
  xfer_device *dev;
  void *buf;                    /* the backend's buffer */
  size_t size;
  int small;                    /* of the small pool */
  void *handle;                 /* a backed segment: its import's handle, and ... */
  void *backing_buf;            /* ... the memory as its backing device sees it */
  xfer_import imports[XFER_MAX_IMPORTS];
  int nimports;
  xfer_pin pins[XFER_MAX_PINS]; /* host segments */
  int npins;
  struct xfer_block *first;     /* its blocks, in address order */
  struct xfer_segment *prev, *next; /* the device's segments */
} xfer_segment;

typedef struct xfer_block {
  xfer_segment *seg;
  void *buf;                    /* seg->buf: what backends are given, with `offset` */
  size_t offset, size;          /* in the segment; size is rounded */
  size_t requested;             /* what the caller asked for (0 while free) */
  int allocated;
  struct xfer_block *prev, *next; /* neighbours in the segment */
} xfer_block;

/* A block of at least nbytes (NULL for 0 bytes): from the device's cache, or from the
** driver (emptying the cache, running the reclaimer and retrying once when it refuses). */
xfer_code xfer_mem_alloc(xfer_device *dev, size_t nbytes, xfer_block **out, xfer_error *err);
/* Back to the cache (or to the driver, when caching is off or over the limit). */
void xfer_mem_free(xfer_block *b);
/* host: blocks are whole pages, so any host block can be pinned or imported in place */
xfer_code xfer_mem_device_init(xfer_device *dev, int host);
void xfer_mem_device_fini(xfer_device *dev);
/* A segment's imports, under its allocator's lock: `importer`'s view of it or NULL (*room:
** whether another import would fit), and one more kept (0 when there was no room). */
void *xfer_mem_import_find(xfer_segment *seg, const xfer_device *importer, int *room);
int xfer_mem_import_keep(xfer_segment *seg, xfer_device *importer, void *buf, void *handle);
/* Undoes what `dev` made for host segments, and its imports of other devices' segments (a
** closing device). */
void xfer_mem_host_unpin_device(xfer_ctx *ctx, xfer_device *dev);
void xfer_mem_drop_imports_by(xfer_ctx *ctx, xfer_device *dev);
/* After the runtimes open: which devices keep their memory in another runtime's. */
void xfer_mem_link_backing(xfer_ctx *ctx);
/* At close, before the runtimes: every cached segment back to its driver. */
void xfer_mem_release_all(xfer_ctx *ctx);
/* Reads XFER_CACHE; the defaults. */
void xfer_mem_config_init(xfer_ctx *ctx);
/* Tensor bytes made and dropped, for the GC pressure count. */
void xfer_mem_tensor_made(xfer_ctx *ctx, size_t nbytes);
void xfer_mem_tensor_dropped(xfer_ctx *ctx, size_t nbytes);

struct xfer_tensor {
  int refs;
  xfer_device *dev;
  xfer_dtype dtype;
  xfer_shape shape;
  size_t numel, nbytes;
  xfer_block *block;            /* NULL for 0 bytes, and for views (their base holds it) */
  void *buf;                    /* block->buf, and element [0,...,0] is at byte `offset` */
  size_t offset;
  int64_t strides[XFER_MAX_DIMS]; /* in elements; packed (row-major) for what alloc makes */
  int contiguous;               /* strides packed: its elements are nbytes from `offset` */
  size_t first;                 /* the view's offset in elements within its base's memory */
  struct xfer_tensor *base;     /* a view's tensor that owns the memory (a reference); NULL
                                ** for an owner */
  int views;                    /* an owner's live views: free() is refused while any
                                ** (ctx->lock) */
  int wrapped;                  /* memory the application owns (xfer_tensor_wrap): no block */
  void (*release)(void *ud);    /* ... called once when the tensor lets go of it */
  void *release_ud;
  struct xfer_segment *external; /* wrapped host memory listed for pinning (pin = true) */
  int freed;
  int closed;                   /* its device was closed: its memory went with it */
  struct xfer_tensor *prev_on_dev, *next_on_dev; /* dev->tensors (ctx->lock) */
  int busy;                     /* moves using it now: free() waits for them (ctx->lock) */
};

/* -- Helpers shared by the core and the backends -------------------------------- */

/* The device memory at byte `offset` of a contiguous tensor, for a transport to move in place
** (the remote runtime's server): its address and kind, the device's context current on this
** thread; XFER_E_UNSUPPORTED for host memory and runtimes that lend none. */
xfer_code xfer_tensor_device_memory(xfer_tensor *t, size_t offset, xfer_memory *out,
                                   xfer_error *err);

/* Backends count the driver objects a tensor, a segment or a pin holds, on the device that made
** them and its runtime (buffers, memory,
** imports, registrations) -- not those a device makes once and keeps (queues, pools, events,
** fences) -- so that a test can see every one given back. */
static inline void xfer_objects(xfer_device *dev, int delta)
{
  __atomic_add_fetch(&dev->objects, (uint64_t)(int64_t)delta, __ATOMIC_RELAXED);
  __atomic_add_fetch(&dev->rt->objects, (uint64_t)(int64_t)delta, __ATOMIC_RELAXED);
}

/* The host device: the host runtime opens first, with its one device. */
static inline xfer_device *xfer_host_of(const xfer_ctx *ctx) { return ctx->devices[0]; }

/* env_guard.c: a copy of the environment, and putting it back (a driver's open edits it) */
char **xfer_env_snapshot(void);
void xfer_env_restore(char **snapshot);
void xfer_env_free(char **snapshot);
static inline int xfer_is_host(const xfer_device *dev) { return dev == dev->ctx->devices[0]; }

/* An on/off switch from the environment (XFER_TRACE, XFER_CACHE, XFER_SHARED_MEMORY,
** XFER_VULKAN_NO_MAP): its default when unset, else 1 for "1" (xfer_ctx_open refuses other
** values). */
int xfer_env_flag(const char *name);

/* Copies text into dst of cap bytes, cut short to fit, always terminated. */
void xfer_copy_text(char *dst, size_t cap, const char *src);

/* Sets code, op and a formatted message; clears the rest. Returns code. */
xfer_code xfer_err_set(xfer_error *err, xfer_code code, const char *op, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* A driver call failed: records its native code, name and text as the cause. */
xfer_code xfer_err_native(xfer_error *err, xfer_code code, const char *op, long long native,
                          const char *native_name, const char *native_text, int retryable,
                          int injected);
/* Puts a backend's cause into words naming both ends of the movement. */
void xfer_err_frame(xfer_error *err, const xfer_device *from, const xfer_device *to,
                    size_t nbytes);

/* Called by a backend's checked wrapper before each driver call: 1 means fail it, with
** *native the code the rule asks for (0: the backend's usual code for op). */
int xfer_fault_hit(xfer_ctx *ctx, const char *runtime, const char *op, long long *native);

xfer_device *xfer_runtime_add_device(xfer_runtime *rt, xfer_error *err);
/* A new device in place `slot` of the context's list, whose device the runtime retired (it
** keeps that one until it closes: a reader may still hold it). */
xfer_device *xfer_runtime_replace_device(xfer_runtime *rt, size_t slot, xfer_error *err);
void xfer_device_destroy(xfer_device *dev);
void xfer_device_lock(xfer_device *dev);
void xfer_device_unlock(xfer_device *dev);
void xfer_device_lock_pair(xfer_device *a, xfer_device *b);
void xfer_device_unlock_pair(xfer_device *a, xfer_device *b);
/* What a move holds: the devices at both ends (and those an interop move may use besides:
** the exporter two importers meet in, or the CUDA devices standing for the ends of a peer copy across
** two GPUs), locked in one global order, and both tensors marked busy. */
typedef struct xfer_hold {
  xfer_device *devs[4];
  int ndevs;
  xfer_tensor *tensors[2];
} xfer_hold;
void xfer_hold_take(xfer_hold *h, xfer_tensor *src, xfer_device *dst_dev, xfer_tensor *dst);
void xfer_hold_drop(xfer_hold *h);

/* A new tensor whose allocation failure names `from` (NULL: a fresh tensor). */
/* transfer.c: the progress of the move running on this thread (its caller's callback):
** 0 to go on, else the move stops with XFER_E_INVALID (op "progress") in err */
xfer_code xfer_progress(uint64_t done, uint64_t total, xfer_error *err);

/* health.c: failures per pair and path; whether one is set aside (and why, in `why`) */
typedef struct xfer_health_entry xfer_health_entry;
void xfer_health_record(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                        xfer_path path, xfer_code rc, const xfer_error *err);
int xfer_health_set_aside(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                          xfer_path path, char *why, size_t cap);
void xfer_health_note_decision(xfer_ctx *ctx);
void xfer_health_forget_injected(xfer_ctx *ctx);
/* costs.c: the measured figures; the default choice among the paths that apply */
typedef struct xfer_cost_entry xfer_cost_entry;
int xfer_cost_estimate(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                       xfer_path path, size_t nbytes, double *seconds);
/* `first`, or one of `others` whose estimate is under 0.9 of first's (both measured) */
xfer_path xfer_cost_choose(xfer_ctx *ctx, const xfer_device *from, const xfer_device *to,
                           size_t nbytes, xfer_path first, const xfer_path *others, int nothers);
int xfer_costs_file(char *out, size_t cap);
void xfer_costs_fini(xfer_ctx *ctx);
void xfer_health_fini(xfer_ctx *ctx);

/* memory.c: wrapped host memory the runtimes may pin (pin = true), and letting go of it */
xfer_segment *xfer_mem_host_external(xfer_ctx *ctx, void *base, size_t size);
void xfer_mem_host_external_drop(xfer_ctx *ctx, xfer_segment *seg);

/* wrap.c: what a wrapped tensor's free does, once: the backend's handle, the owner's release */
void xfer_wrap_release(xfer_tensor *t, void *buf);

/* view.c: packed (row-major) strides for a shape, whether strides are packed, and a view's
** elements packed into host memory or scattered from it (device locked, tensor checked). */
void xfer_packed_strides(const xfer_shape *shape, int64_t *strides);
int xfer_strides_packed(const xfer_shape *shape, const int64_t *strides);
/* The elements, from the first, that a layout reaches: [0, extent) (0 when it is empty). */
int64_t xfer_layout_extent(const xfer_shape *shape, const int64_t *strides);
xfer_code xfer_view_move(xfer_tensor *t, char *packed, int to_packed, xfer_error *err);
/* Whether a view can be packed or scattered on its own device (copy_rows, a layout of rows),
** and doing it between the view and `packed`, a contiguous tensor on the same device
** (device locked, both checked). */
int xfer_view_on_device(const xfer_tensor *t);
xfer_code xfer_view_device_move(xfer_tensor *t, xfer_tensor *packed, int to_packed,
                                xfer_error *err);
/* A new tensor of its device: the context retained, listed for closing (tensor.c). */
void xfer_tensor_adopt(xfer_tensor *t);
xfer_code xfer_tensor_alloc(xfer_device *dev, xfer_dtype dtype, const xfer_shape *shape,
                            const xfer_device *from, xfer_tensor **out, xfer_error *err);


/* dlopen()s `library`, or the one the environment variable `env` names; NULL with an
** unavailable error naming `what` ("the CUDA driver") otherwise. *path: the name used. */
void *xfer_driver_open(const char *env, const char *library, const char *what, const char **path,
                       xfer_error *err);

/* memory.c: host segments, the one registry of host memory runtimes may use in place. */
/* 1 and the span of the host segment holding [ptr, ptr+n), else 0 (memory xferlua does not
** own, which a runtime must not keep hold of). */
int xfer_host_span_of(xfer_ctx *ctx, const void *ptr, size_t n, xfer_host_span *out);
/* What `key` (a device, or an owner) made for the host segment at `base` and kept with it,
** or NULL. */
void *xfer_host_pin(xfer_ctx *ctx, const char *base, const void *key);
/* Keeps `pin` with the segment at `base` until it goes back to the system (then dev's
** host_unpin undoes it). 0 when the segment is gone, holds one of dev's already, or has no
** room: the caller undoes its own. */
int xfer_host_pin_keep(xfer_ctx *ctx, const char *base, xfer_device *dev, void *pin);
/* The same for an owner that is no device: `undo(owner, base, size, pin)` undoes the pin when
** the segment goes back to the system or xfer_host_unpin_owner(ctx, owner) is called; it runs
** under the host allocator's lock (it must not call back into the allocator). */
int xfer_host_pin_keep_owned(xfer_ctx *ctx, const char *base, void *owner, void *pin,
                             xfer_pin_undo undo);
/* Every pin `owner` kept is undone (the owner is closing). */
void xfer_host_unpin_owner(xfer_ctx *ctx, void *owner);

/* stats.c: records one move (and traces it when asked). */
void xfer_stats_record(xfer_ctx *ctx, xfer_path path, const xfer_device *from,
                       const xfer_device *to, size_t bytes, double seconds);
void xfer_stats_clear(xfer_ctx *ctx);
/* A lost device's error, for op: its code and "device X was lost[: why]". */
xfer_code xfer_device_lost_error(const xfer_device *dev, const char *op, xfer_error *err);
double xfer_now(void);

/* transfer.c: adds a step to a plan's description. */
void xfer_plan_step(xfer_plan *plan, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* interop.c: the interop path. */
void xfer_interop_describe(const xfer_tensor *src, const xfer_device *dst, xfer_plan *plan);
int xfer_interop_applies(const xfer_device *src, const xfer_device *dst);
/* 0 when a move of nbytes between src and dst would import a buffer larger than a device
** there imports (max_import): interop does not apply to it, the next path does. */
int xfer_interop_fits(const xfer_device *src, const xfer_device *dst, size_t nbytes);
/* The devices besides both ends that an interop move src -> dst uses (the
** exporter, or the peer runtime's devices standing for the ends): how many, into out. */
int xfer_interop_helpers(const xfer_device *src, const xfer_device *dst, xfer_device *out[2]);
xfer_code xfer_interop_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err);
void xfer_imports_release(xfer_import *imports, int *nimports);

/* staged.c: the staged path, its chunks from the host pool. */
xfer_code xfer_staged_run(xfer_tensor *src, xfer_tensor *dst, xfer_error *err);
/* The chunks a staged move of n bytes takes: how many (at most the depth), and *chunk their
** size (at most the setting, no more than the move needs). */
int xfer_staged_chunks(const xfer_ctx *ctx, size_t n, size_t *chunk);

/* Page-aligned host memory; large blocks come populated (no page-fault storm). */
void *xfer_host_pages_alloc(size_t nbytes);
void xfer_host_pages_free(void *p, size_t nbytes);

extern const xfer_backend xfer_backend_host;
#ifdef XFER_WITH_OPENCL
extern const xfer_backend xfer_backend_remote;
extern const xfer_backend xfer_backend_opencl;
#endif
#ifdef XFER_WITH_VULKAN
extern const xfer_backend xfer_backend_vulkan;
#endif
#ifdef XFER_WITH_CUDA
extern const xfer_backend xfer_backend_cuda;
#endif

#endif
