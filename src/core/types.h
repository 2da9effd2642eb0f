/*
** types.h -- the core's structures and the backend table: what every layer shares, and no
** code. Layer 0 of docs/architecture.md: it includes nothing of the core but the public
** xfer.h, and every core header starts from it.
*/
#ifndef XFER_TYPES_H
#define XFER_TYPES_H

#include <pthread.h>
#include <stdarg.h>

#include "runtimes.h"
#include "xfer.h"

typedef struct xfer_runtime xfer_runtime;

/* -- Backend tables -------------------------------------------------------------- */

/* One backend per runtime, split by what it can do (as ggml-backend splits registry, device,
** buffer and stream): every backend has a runtime, memory and copies; sharing memory with
** other runtimes and moving other runtimes' memory as a transport are optional tables, NULL
** where the backend has none. A buffer is whatever the backend says it is (a pointer, a
** cl_mem, a struct of its own); the core only passes it back. Offsets and lengths are bytes.
** Optional members are NULL, and only src/core/backend_call.h reads a table. */
/* 2: peer and copy_imported take offsets; 3: shared memory, import op; 5: peer_joins;
** 6: device memory for a transport; 7: split into runtime/memory/copy/share/transport tables,
** one host copy with a direction (was read + write, and their _rows and _start twins), ops
** as xfer_op; 8: a runtime checks its own settings (runtime->check_config); 9: copy->many
** (a batch of copies in one submission); 11: a runtime gives its settings' defaults
** (runtime->config_defaults); 12: copy->many_again and many_forget (the same pieces again);
** 13: copy->crc32c (a device sums its own bytes); 14: copy->crc32c sums many ranges at once;
** 15: copy->idle (whether work that outlived a deadline is done); 16: copy->many_reaches (a
** batch over another GPU's memory); 17: copy->crc32c_begin and crc32c_end (a device's sums
** run beside the caller's next calls) */
#define XFER_BACKEND_VERSION 17

/* xfer_memory_kind and xfer_memory (a buffer as a transport uses it in place) are public:
** xfer.h. */
/* Queued moves a device can have in flight at once: the staged pipeline's reads take
** slots below half, its writes the upper half (one device may be both ends' runtime). */
#define XFER_QUEUE_SLOTS 32

/* The runtime: its driver and devices. */
typedef struct xfer_runtime_ops {
  /* Loads the driver and adds devices with xfer_runtime_add_device. A runtime that cannot
  ** work here returns XFER_E_UNAVAILABLE with the reason in err->message. */
  xfer_code (*open)(xfer_runtime *rt, xfer_error *err);
  void (*close)(xfer_runtime *rt); /* optional: releases devices and driver */
  /* optional: refuses settings of its own (xfer_config) out of range, before any is kept */
  xfer_code (*check_config)(const xfer_config *config, xfer_error *err);
  /* optional: the defaults of its own settings */
  void (*config_defaults)(xfer_config *config);
} xfer_runtime_ops;

/* A device's memory. */
typedef struct xfer_memory_ops {
  xfer_code (*alloc)(xfer_device *dev, size_t nbytes, void **buf, xfer_error *err);
  void (*free)(xfer_device *dev, void *buf, size_t nbytes); /* never fails */
  /* optional: the host address of a buffer the CPU can use in place, else NULL */
  void *(*host_address)(xfer_device *dev, void *buf);
  /* optional: the address a buffer handle stands for (host memory, a CUdeviceptr), for
  ** lending it through DLPack */
  void *(*native)(xfer_device *dev, void *buf);
  /* optional: the buffer handle the other ops take for memory the application owns (and,
  ** unwrap, its release: the memory itself stays the application's) */
  xfer_code (*wrap)(xfer_device *dev, const xfer_external *mem, void **buf, xfer_error *err);
  void (*unwrap)(xfer_device *dev, void *buf);
  /* optional: the host segment [base, base+size) goes back to the system; undo `pin`, what
  ** the device made for it and kept with it (xfer_host_pin_keep): a registration, a pin, an
  ** import. No move uses the segment. */
  void (*host_unpin)(xfer_device *dev, void *base, size_t size, void *pin);
  /* optional: free and total bytes as the driver reports them now */
  xfer_code (*info)(xfer_device *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                    xfer_error *err);
} xfer_memory_ops;

/* One copy of a batch (copy->many): `n` bytes between two ends, each a buffer of the device at
** a byte offset, or host memory (buf NULL) at `host`. A piece is never 0 bytes: the batch
** decides an element with nothing to move at prepare (batch.c: no group, no piece), and
** xfer_be_many refuses such a piece before a runtime sees it. */
typedef struct xfer_piece_end {
  void *buf;
  size_t offset;
  char *host;
} xfer_piece_end;
typedef struct xfer_piece {
  xfer_piece_end dst, src;
  size_t n;
} xfer_piece;

/* A range of a device's buffer to be summed (copy->crc32c). */
typedef struct xfer_sum_piece {
  void *buf;
  size_t offset, n;
} xfer_sum_piece;

/* A device's copies: between its buffers and host memory, within it, and to its runtime's
** other devices. `to_device`: host memory -> buffer, else buffer -> host memory. */
typedef struct xfer_copy_ops {
  xfer_code (*host)(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                    int to_device, xfer_error *err);
  /* optional, a view's rows: `rows` runs of `run` bytes, the first at `offset` and each
  ** `pitch` bytes after the one before, between the buffer and packed host memory in one
  ** driver call (pitch >= run, below 2^31). NULL: the core moves the covering span through
  ** the host, or run by run. */
  xfer_code (*host_rows)(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                         size_t rows, void *host, int to_device, xfer_error *err);
  /* optional, queued host copies (the staged pipeline): may return once the driver has the
  ** work (*queued = 1), leaving the host memory untouched until finish(slot) has returned.
  ** `slot` (0 to XFER_QUEUE_SLOTS-1) names the move for finish. A copy the backend cannot
  ** queue is done in full before start returns (*queued = 0). Every queued slot is finished,
  ** also after errors. (NULL: `host`, in full.) */
  xfer_code (*start)(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                     int to_device, int slot, int *queued, xfer_error *err);
  xfer_code (*finish)(xfer_device *dev, int slot, xfer_error *err);
  /* buffer -> buffer on one device */
  xfer_code (*within)(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                      size_t src_offset, size_t n, xfer_error *err);
  /* optional, a view's rows within the device: `rows` runs of `run` bytes from src (each
  ** src_pitch after the one before) to dst (each dst_pitch apart), done when it returns -- a
  ** view packed (dst_pitch = run) or scattered (src_pitch = run) without leaving it */
  xfer_code (*within_rows)(xfer_device *dev, void *dst, size_t dst_offset, size_t dst_pitch,
                           void *src, size_t src_offset, size_t src_pitch, size_t run,
                           size_t rows, xfer_error *err);
  /* optional, a batch: `n` copies, each between host memory and the device's buffers or
  ** within the device, submitted at once and done when it returns (no two destinations
  ** overlap). XFER_E_UNSUPPORTED without a word in err when these pieces are not for it
  ** (host memory it cannot reach in place): the core then makes them one by one. */
  xfer_code (*many)(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err);
  /* optional, the same pieces given again (a prepared batch's later runs), named by `keep`:
  ** nonzero, and never again for other pieces. The runtime may keep what it made of them (CUDA:
  ** the kernel's descriptor table, on the device) until many_forget(dev, keep), which may come
  ** from any thread at any time but during a run of those pieces. Otherwise as many. */
  xfer_code (*many_again)(xfer_device *dev, const xfer_piece *pieces, size_t n, uint64_t keep,
                          xfer_error *err);
  void (*many_forget)(xfer_device *dev, uint64_t keep);
  /* optional: asked without waiting, after a wait ended at a deadline (xfer_device_stalled):
  ** 1 once every copy and kernel submitted before some time is done -- that time, xfer_now()'s,
  ** in dev->idle_upto (a marker behind the queue: when it was placed; a query of the queue:
  ** when it was asked) -- else 0. NULL: always done. */
  int (*idle)(xfer_device *dev);
  /* optional: the CRC32C (as xfer_crc32c gives it, from 0) of each of `count` ranges into
  ** crc[], summed by the device itself (a batch's ranges in one submission where it can) and
  ** done when it returns. NULL, or XFER_E_UNSUPPORTED without a word: the core reads the bytes
  ** back and sums them on the host. */
  xfer_code (*crc32c)(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                      xfer_error *err);
  /* optional, the same in two halves, so that the device sums while the caller goes on (a
  ** move's source summed while it moves, a landed step while the next one moves): begin
  ** submits the sums of ranges whose bytes are final (*ticket names them for end) and returns;
  ** XFER_E_UNSUPPORTED without a word when it cannot now (the caller sums them otherwise); a
  ** begin that failed leaves nothing begun. Every begun ticket is ended once, given the same
  ** pieces: end waits for the sums (until the move's deadline, as every wait) and writes crc[]
  ** -- or, wanted 0, frees what it can without waiting (what a sum still running uses is kept
  ** until it is done). */
  xfer_code (*crc32c_begin)(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, int *ticket,
                            xfer_error *err);
  xfer_code (*crc32c_end)(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, int ticket,
                          uint32_t *crc, int wanted, xfer_error *err);
  /* optional: buffer on `src_dev` -> buffer on `dst_dev`, two devices of this runtime */
  xfer_code (*peer)(xfer_device *dst_dev, void *dst, size_t dst_offset, xfer_device *src_dev,
                    void *src, size_t src_offset, size_t n, xfer_error *err);
  /* optional: whether peer joins these two devices (NULL: any two of the runtime's; the
  ** remote runtime's devices are joined only on one server) */
  int (*peer_joins)(const xfer_device *src_dev, const xfer_device *dst_dev);
  /* optional: whether `many` on `dev` takes pieces that name `other`'s buffers -- another device
  ** of the runtime whose memory its copies reach in place (CUDA: a GPU with peer access on, its
  ** kernel reading and writing the other's memory over NVLink), so that a batch between two
  ** GPUs is one submission. NULL: never. */
  int (*many_reaches)(const xfer_device *dev, const xfer_device *other);
} xfer_copy_ops;

/* Optional: memory shared with the other runtimes of one GPU (interop), and device memory
** lent to a transport in place. Each member is optional. */
typedef struct xfer_share_ops {
  /* an opaque fd of the buffer's memory (the caller owns it) and the size of that memory */
  xfer_code (*export_fd)(xfer_device *dev, void *buf, int *fd, uint64_t *memory_size,
                         xfer_error *err);
  /* memory another runtime exported, as a buffer `nbytes` long that copy_imported takes (and,
  ** imported as a tensor's own memory, every other op); `handle` is what release_import
  ** needs. `op` names the call for faults and errors (import, or alloc when the import is a
  ** tensor's allocation). Owns `fd` only when it succeeds. */
  xfer_code (*import_fd)(xfer_device *dev, int fd, uint64_t memory_size, size_t nbytes,
                         xfer_op op, void **buf, void **handle, xfer_error *err);
  void (*release_import)(xfer_device *dev, void *buf, void *handle);
  /* n bytes between one of the device's buffers and an imported one (into_imported: buf ->
  ** imported, else imported -> buf), done when it returns */
  xfer_code (*copy_imported)(xfer_device *dev, void *buf, size_t offset, void *imported,
                             size_t imported_offset, size_t n, int into_imported,
                             xfer_error *err);
  /* memory the other runtimes of its GPU can import (an fd the caller owns, and the size of
  ** that memory), which this runtime's devices can copy to and from as their own and
  ** peer-copy across GPUs; freed with free_shared */
  xfer_code (*alloc_shared)(xfer_device *dev, size_t nbytes, void **buf, int *fd,
                            uint64_t *memory_size, xfer_error *err);
  void (*free_shared)(xfer_device *dev, void *buf, size_t nbytes);
  /* device memory a transport uses in place: the kind of memory the runtime's buffers are,
  ** and the address of buf+offset, the device's context made current on the calling thread
  ** (the transport's copies of it run there) */
  xfer_memory_kind memory_kind;
  xfer_code (*lend)(xfer_device *dev, void *buf, size_t offset, xfer_memory *out,
                    xfer_error *err);
} xfer_share_ops;

/* Optional: a runtime whose devices are another machine's, reached by a transport (the remote
** runtime over UCX). Its devices share no memory with this process. */
typedef struct xfer_transport_ops {
  /* optional, the direct path: whether the transport moves `other`'s device memory in place
  ** (other: a device of another runtime that lends memory; why not in `why`, when given),
  ** and the move: n bytes between buf+offset on dev and `mem` (into_buf: mem -> buf, else
  ** buf -> mem), done when it returns */
  int (*direct_joins)(const xfer_device *dev, const xfer_device *other, char *why, size_t cap);
  xfer_code (*direct)(xfer_device *dev, void *buf, size_t offset, const xfer_memory *mem,
                      size_t n, int into_buf, xfer_error *err);
} xfer_transport_ops;

typedef struct xfer_backend {
  int version;                         /* XFER_BACKEND_VERSION it was built against */
  const char *name;
  /* What the rest of xferlua knows of the runtime, so that nothing outside its folder names
  ** it: another name a device may be asked for by ("cpu" for the host; NULL: none), the
  ** memory a wrap of its device memory takes (xfer_tensor_wrap), and the DLPack device type
  ** of that memory (-1: none lent or taken through DLPack). */
  const char *alias;
  xfer_external_kind external_kind;
  int dlpack_device_type;
  const xfer_runtime_ops *runtime;
  const xfer_memory_ops *memory;
  const xfer_copy_ops *copy;
  const xfer_share_ops *share;         /* NULL: shares no memory with other runtimes */
  const xfer_transport_ops *transport; /* NULL: its devices are this machine's */
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
  /* A wait for its work ended at a move's deadline (the backend said so: xfer_device_stall):
  ** the work may still use any memory the moves gave it, so what is freed meanwhile it holds
  ** (quarantine, memory.c) until the backend says it is done (copy->idle) or it closes */
  int stalled;
  double stalled_at;            /* xfer_now() of the last wait that ended at a deadline */
  /* what copy->idle said when it said 1: every copy submitted before this xfer_now() time is
  ** done (its marker's placing; CUDA's query) -- what was freed before it may go back */
  double idle_upto;
  uint64_t stall_fault_epoch;   /* the fault rules' epoch + 1 when the stall fault last made it
                                ** stalled: not done while the rules stay so (0: none) */
  struct xfer_block **quarantine;
  double *quarantine_since;     /* xfer_now() of each one's hold */
  size_t nquarantine, quarantine_cap;
};

/* How many runtimes runtimes.h lists. */
enum {
#define XFER_RUNTIME_INDEX(name, missing) XFER_RUNTIME_##name,
  XFER_RUNTIME_LIST(XFER_RUNTIME_INDEX)
#undef XFER_RUNTIME_INDEX
  XFER_RUNTIMES
};
#define XFER_MAX_FAULTS 32

typedef struct xfer_fault_rule {
  xfer_fault fault;
  xfer_op op;                   /* fault.op as the backends ask for it */
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
  uint64_t fault_waits;         /* waits for a device's work since the last arming (atomic) */
  uint64_t stall_at;            /* that wait stalls (0: none) (atomic) */
  uint64_t cancel_armed;        /* the step torture cancels at (progress.c counts; ctx->lock) */
  xfer_fault failed;            /* what fail_at failed: runtime, op, nth = the call (ctx->lock) */
  uint64_t fault_epoch;         /* rules cleared or replaced so far (atomic; faults.h) */
  pthread_mutex_t lock;         /* faults, stats, busy tensors */
  pthread_cond_t idle;          /* a tensor stopped being busy, or a job ended */
  int jobs_running;             /* started moves whose threads have not ended (ctx->lock) */
  struct xfer_ledger_entry *ledger; /* per (from, to, path): moves, failures, costs (ledger.c;
                                ** ctx->lock) */
  size_t nledger, ledger_cap;
  uint64_t failing;             /* entries with failures or set aside (atomic: a move with none
                                ** to clear takes no lock) */
  uint64_t costed;              /* entries with measured figures (atomic, likewise) */
  uint64_t decisions;           /* set-aside paths passed over (atomic) */
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

/* -- Memory ------------------------------------------------------------------------ */

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
  int held;                     /* stalled devices whose work may still write it (quarantine:
                                ** freed, it goes back only when none holds it) */
  int free_asked;               /* ... freed meanwhile */
  struct xfer_block *prev, *next; /* neighbours in the segment */
} xfer_block;

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
  int lent;                     /* an owner's memory lent through DLPack, not given back yet:
                                ** free() is refused meanwhile, as for views (ctx->lock) */
  int wrapped;                  /* memory the application owns (xfer_tensor_wrap): no block */
  void (*release)(void *ud);    /* ... called once when the tensor lets go of it */
  void *release_ud;
  struct xfer_segment *external; /* wrapped host memory listed for pinning (pin = true) */
  int freed;
  int closed;                   /* its device was closed: its memory went with it */
  struct xfer_tensor *prev_on_dev, *next_on_dev; /* dev->tensors (ctx->lock) */
  int busy;                     /* moves using it now: free() waits for them (ctx->lock) */
  int not_valid;                /* how a move into it ended (XFER_E_TIMEOUT, XFER_E_CANCELED)
                                ** that may have left its bytes half written: reading it is
                                ** XFER_E_INVALID until it is written again; 0: valid */
};


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
static inline int xfer_is_host(const xfer_device *dev) { return dev == dev->ctx->devices[0]; }

#endif
