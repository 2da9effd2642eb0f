/*
** service.h -- what the core offers the layers above it (src/files, src/server) and every layer
** of its own, on xfer.h's types alone (no internal structure): error records (error.c),
** on/off switches from the environment and the clock (env.c), opening a driver library
** (driver_library.c), the arithmetic of layouts (layout.c), the deadline and cancel flag a
** thread's work runs under (progress.c), and asking the fault rules before a fallible call
** (faults.c). Layer 1 of docs/architecture.md.
*/
#ifndef XFER_SERVICE_H
#define XFER_SERVICE_H

#include "xfer.h"
#include "sentences.h"

/* -- error.c ---------------------------------------------------------------------- */

/* Copies text into dst of cap bytes, cut short to fit, always terminated. */
void xfer_copy_text(char *dst, size_t cap, const char *src);
/* dst = a then b, cut short to fit cap bytes. */
void xfer_err_join(char *dst, size_t cap, const char *a, const char *b);
/* The record of a failure the core (or a layer above it) meets itself: code, op and the
** sentence, one of sentences.h's in the core, with its arguments; clears the rest. Returns
** code. One of the two setters (xfer_err_native below is the other). */
xfer_code xfer_err_op(xfer_error *err, xfer_code code, xfer_op op, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* xfer_err_op with the code's own words from the error table as the sentence ("out of host
** memory" for XFER_E_ALLOC), where nothing more specific is known. */
static inline xfer_code xfer_err_code(xfer_error *err, xfer_code code, xfer_op op)
{
  return xfer_err_op(err, code, op, XFER_S_CAUSE, xfer_code_what(code));
}
/* Names, in a record already set, the API call that failed where it is none of the XFER_OPS
** (a name a caller gives: xfer_tensor_check's, a remote peer's): op_id is XFER_OP_OTHER
** unless the name is one of them. */
void xfer_err_call(xfer_error *err, const char *call);
/* A driver call failed: records its native code, name and text as the cause. */
xfer_code xfer_err_native(xfer_error *err, xfer_code code, xfer_op op, long long native,
                          const char *native_name, const char *native_text, int retryable,
                          int injected);
/* Puts a backend's cause into words naming both ends of the movement. */
void xfer_err_frame(xfer_error *err, const xfer_device *from, const xfer_device *to,
                    size_t nbytes);

/* -- env.c ---------------------------------------------------------------------------- */

/* An on/off switch from the environment (XFER_TRACE, XFER_CACHE, XFER_SHARED_MEMORY,
** XFER_VULKAN_NO_MAP, ...): its default when unset, else 1 for "1". */
int xfer_env_flag(const char *name);
/* Seconds on the monotonic clock. */
double xfer_now(void);

/* -- progress.c: the watch -------------------------------------------------------------- */

/* The deadline and cancel flag of the moves this thread runs (progress.c). */
typedef struct xfer_watch {
  double deadline_at, timeout;
  const int *canceled;
} xfer_watch;
/* Installs a deadline (`at`, xfer_now() seconds, from a timeout of `timeout` seconds; 0: none --
** an earlier one installed already holds) and a cancel flag (NULL: the one installed holds)
** until the returned watch is put back. */
xfer_watch xfer_watch_install(double at, double timeout, const int *canceled);
void xfer_watch_restore(xfer_watch before);
/* The deadline a move's options ask for (`asked` seconds: > 0 a timeout, < 0 none, 0 the
** context's `configured`), installed as above. */
xfer_watch xfer_watch_for(double asked, double configured);
/* XFER_E_INVALID for a timeout setting out of range (xfer_config_set). */
xfer_code xfer_watch_config_check(const xfer_config *c, xfer_error *err);
/* XFER_E_CANCELED (op cancel) once the flag is up, XFER_E_TIMEOUT (op deadline) past the
** deadline, saying how far the move got; XFER_E_OK otherwise (also what xfer_progress checks
** first). */
xfer_code xfer_watch_check(uint64_t done, uint64_t total, xfer_error *err);
/* Torture's steps (process-wide): every xfer_watch_check is one; the k-th from this call
** cancels (0: none), and xfer_watch_step_hit says whether it has. */
void xfer_watch_cancel_at(uint64_t k);
uint64_t xfer_watch_steps(void);
int xfer_watch_step_hit(void);
/* The watch this thread runs under: what a move's helper thread installs for itself (its
** waits end at the move's deadline, its steps stop when the move is canceled). */
xfer_watch xfer_watch_current(void);
/* The deadline installed (xfer_now() seconds), 0 for none: a backend's wait ends there. */
double xfer_watch_deadline(void);
/* Whether the move running on this thread was canceled (its job's flag is up): a backend's
** wait for an answer that may take long (a remote server's) tells the other side and ends. */
int xfer_watch_canceled(void);
/* Whether it is watched at all (a deadline, or a job's cancel flag), and whether that watch has
** ended (past the deadline, or canceled): what a wait looks at, counting no torture step. */
int xfer_watch_watched(void);
int xfer_watch_ended(void);

/* -- crc32c.c ------------------------------------------------------------------------------ */

/* The CRC32C of n bytes, continuing `crc` (0 to start): crc32c(crc32c(0, a), b) is the CRC
** of a then b. By the CPU's instruction where it has one (XFER_CRC_TABLES=1: tables always). */
uint32_t xfer_crc32c(uint32_t crc, const void *bytes, size_t n);
/* The byte table of CRC32C (reflected): what a device's kernel sums with. */
void xfer_crc32c_byte_table(uint32_t out[256]);
/* The CRC32C of a then b from the sums of each: crc_a = xfer_crc32c(0, a), crc_b =
** xfer_crc32c(0, b), len_b = b's bytes (how a device's sums of stretches are joined). */
uint32_t xfer_crc32c_join(uint32_t crc_a, uint32_t crc_b, size_t len_b);
/* x^(8n) modulo the polynomial, reflected: what a sum is multiplied by to be joined before n
** bytes (a device joining sums in parallel is given these for n = 2^j). */
uint32_t xfer_crc32c_shift(size_t n);
/* The CRC32C of n bytes from the sums of their `count` stretches of `stretch` bytes (the last
** the rest), each from 0: what a device summing stretches in parallel gives. */
uint32_t xfer_crc32c_of_stretches(const uint32_t *sums, size_t count, size_t stretch, size_t n);
/* out[k][b]: the register (b << 8k) after n zero bytes -- by linearity, any register's is the
** xor of its four bytes' (a device shifting sums by a fixed n looks them up). */
void xfer_crc32c_shift_table(size_t n, uint32_t out[4][256]);
/* The CRC32C of n bytes from their raw register: summed from 0 with no inversion before or
** after (a zero byte ahead of them changes nothing, so a device may pad them in front). Raw
** registers of stretches join as sums do (xfer_crc32c_of_stretches). */
uint32_t xfer_crc32c_from_raw(uint32_t raw, size_t n);
/* The CRC32C of n bytes from the raw registers of their pieces of `piece` bytes (the last the
** rest): what each device kernel gives (cuda_crc.c, opencl_crc.c, vulkan_crc.c). 0 for no bytes. */
uint32_t xfer_crc32c_of_raw_pieces(const uint32_t *raw, size_t piece, size_t n);
/* The device kernels' design (cuda_crc.c, opencl_crc.c, vulkan_crc.c): a block of 256 threads
** sums a piece of 256 stretches, right-aligned, and joins them by a tree of XFER_CRC_LEVELS
** levels of fixed shifts. A thread's stretch is 256 bytes (pieces of 64 KiB), or 64 or 16 for a
** call whose ranges all fit in pieces of 16 or 4 KiB: a batch of 16 KiB ranges in 64 KiB pieces
** left three threads of four idle. The table they read: the byte table, then for each stretch
** the shifts of each level j (by stretch * 2^j bytes, four tables of 256). */
#define XFER_CRC_LEVELS 8
#define XFER_CRC_STRETCHES 3
#define XFER_CRC_TABLE_WORDS ((size_t)256 + (size_t)XFER_CRC_STRETCHES * XFER_CRC_LEVELS * 1024)
void xfer_crc32c_kernel_table(uint32_t *out);
/* The stretch a kernel sums ranges of at most `largest` bytes by (its pieces: 256 stretches),
** and the word of the kernel table where that stretch's shifts begin. */
size_t xfer_crc32c_kernel_stretch(size_t largest, size_t *shifts_at);

/* -- pool.c: work off the caller's thread ---------------------------------------------------- */

/* Runs fn(arg) on a helper thread that nobody waits for (fn sees to arg): 0, or the errno of a
** thread that could not be made -- then nothing ran, and the caller does the work itself. */
int xfer_run_detached(void *(*fn)(void *), void *arg);

/* -- memory.c: memory a helper holds ------------------------------------------------------ */

/* `bytes` of a device's memory (negative: let go) that a helper thread holds for requests still
** landing in it or reading from it -- a stopped load's or save's (xfer_fio_queue_close_holding):
** counted in xfer.memory(dev).held, as a stalled device's is, until they have landed. */
void xfer_mem_landing(xfer_device *dev, long long bytes);

/* -- driver_library.c ----------------------------------------------------------------- */

/* dlopen()s `library`, or the one the environment variable `env` names; NULL with an
** unavailable error naming `what` ("the CUDA driver") otherwise. *path: the name used. */
void *xfer_driver_open(const char *env, const char *library, const char *what, const char **path,
                       xfer_error *err);

/* -- layout.c --------------------------------------------------------------------------- */

/* Packed (row-major) strides for a shape, and whether strides are packed. */
void xfer_packed_strides(const xfer_shape *shape, int64_t *strides);
int xfer_strides_packed(const xfer_shape *shape, const int64_t *strides);
/* The elements, from the first, that a layout reaches: [0, extent) (0 when it is empty). */
int64_t xfer_layout_extent(const xfer_shape *shape, const int64_t *strides);

/* -- faults.c: a fallible call asks first ----------------------------------------------------- */

/* Called by a backend's checked wrapper before each driver call: 1 means fail it, with
** *native the code the rule asks for (0: the backend's usual code for op). */
int xfer_fault_hit(xfer_ctx *ctx, const char *runtime, xfer_op op, long long *native);

#endif
