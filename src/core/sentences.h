/*
** sentences.h -- every sentence the core writes into an error, in one place (as LuaJIT's
** lj_errmsg.h): a call site passes a code, an op (xfer_op) and one of these with its
** arguments, xfer_err_op(err, XFER_E_INVALID, XFER_OP_BATCH, XFER_S_BATCH_EMPTY). Each is a
** printf format, so the compiler checks the arguments where it is used. A driver's own words
** are the driver's (xfer_err_native), and a runtime's sentences live in its folder.
** scripts/layers checks that no core file writes a sentence of its own, that each here is
** used, and that no two are the same.
*/
#ifndef XFER_SENTENCES_H
#define XFER_SENTENCES_H

/* a cause said already: the code's own words from the error table (service.h:
** xfer_err_code), a driver's words kept from an earlier failure */
#define XFER_S_CAUSE "%s"

/* a driver's failure, in its own words (error.c: xfer_err_native) */
#define XFER_S_NATIVE "%s (%lld): %s%s"
#define XFER_S_INJECTED " [injected fault]"

/* a tensor's sums asked stretch by stretch (tensor.c: xfer_tensor_crc32c_each) */
#define XFER_S_SUM_STRETCHES \
  "%zu sums asked of %zu bytes in stretches of %zu bytes (a tensor that is not a view): %zu there"

/* a move's bytes checked once they arrived (transfer.c: verify) */
#define XFER_S_CORRUPT \
  "%zu bytes arrived changed: CRC32C %08x sent from %s, %08x arrived on %s"

/* both ends of a failed move, around its cause (error.c: xfer_err_frame) */
#define XFER_S_FRAME_ALLOC_ELSEWHERE "Failed to allocate %zu bytes on %s (memory of %s): %s"
#define XFER_S_FRAME_ALLOC_ON_THE_WAY \
  "Failed to allocate memory on %s for a move of %zu bytes from %s to %s: %s"
#define XFER_S_FRAME_ALLOC "Failed to allocate %zu bytes on %s: %s"
#define XFER_S_FRAME_ALLOC_FOR_MOVE "Failed to allocate %zu bytes on %s for a tensor from %s: %s"
#define XFER_S_FRAME_STOPPED "Stopped a move of %zu bytes from %s to %s: %s"
#define XFER_S_FRAME_ON_THE_WAY "Failed to %s a tensor from %s to %s (on %s): %s"
#define XFER_S_FRAME_READ "Failed to read a tensor off %s on the way to %s: %s"
#define XFER_S_FRAME_WRITE "Failed to write a tensor to %s on the way from %s: %s"
#define XFER_S_FRAME_MOVE "Failed to %s a tensor from %s to %s: %s"

/* what the core finds before it calls a runtime (backend_call.h) */
#define XFER_S_NO_FREE_MEMORY_TOLD "%s cannot tell its free memory"
#define XFER_S_BATCH_PIECE_EMPTY \
  "batch piece %zu of %zu is 0 bytes: nothing to move reaches a runtime"
#define XFER_S_EXPORTS_NO_MEMORY "%s exports no memory"
#define XFER_S_IMPORTS_NO_MEMORY "%s imports no memory"

/* batches (xfer_batch_*): what the elements and parts may be (batch.c) */
#define XFER_S_BATCH_OFFSETS_NEED_BYTES \
  "batch: element %zu of %zu: offsets need a byte count (nbytes 0 is the whole tensors)"
#define XFER_S_BATCH_SHAPES_DIFFER \
  "batch: element %zu of %zu: one shape is needed at both ends: target %s, source %s"
#define XFER_S_BATCH_RANGE_OF_VIEW \
  "batch: element %zu of %zu: byte ranges need contiguous tensors (a view is copied whole: " \
  "nbytes 0)"
#define XFER_S_BATCH_RANGE_OUTSIDE \
  "batch: element %zu of %zu: bytes %zu to %zu are outside the %s (%zu bytes)"
#define XFER_S_BATCH_WRITES_OVERLAP \
  "batch: elements %zu and %zu of %zu write the same bytes of a tensor on %s"
#define XFER_S_BATCH_READS_OWN_WRITES \
  "batch: element %zu of %zu reads bytes it also writes (a shifted copy within one tensor)"
#define XFER_S_BATCH_READS_OTHERS_WRITES \
  "batch: elements %zu and %zu of %zu: one reads bytes the other writes (their order in a " \
  "batch is not kept)"
#define XFER_S_BATCH_NO_PART_ENDS "batch: parts need at least one end"
#define XFER_S_BATCH_PART_ENDS_ORDER \
  "batch: part %zu ends at element %zu: ends ascend, up to the batch's %zu elements"
#define XFER_S_BATCH_PARTS_SHORT \
  "batch: the last part ends at element %zu, not at the batch's last (%zu)"
#define XFER_S_BATCH_EMPTY "batch: no elements given"
#define XFER_S_BATCH_CONVERT_OPTION \
  "batch: a dtype change is made by the targets' dtypes, not opts.convert"
#define XFER_S_BATCH_NULL "batch: NULL batch"
#define XFER_S_BATCH_RUNNING "batch: it is running already (a job runs it: wait for the job first)"
#define XFER_S_BATCH_NO_PART "batch: no part %zu (it has %zu)"
#define XFER_S_BATCH_NO_GROUP "batch: no group %zu (it has %zu)"

/* devices and the context (context.c) */
#define XFER_S_DEVICE_RUNTIME_UNAVAILABLE "no device '%s': %s is unavailable here: %s"
#define XFER_S_DEVICE_NONE_OF_RUNTIME "no %s device: %s"
#define XFER_S_DEVICE_UNKNOWN "unknown device '%s' (devices here: %s)"
#define XFER_S_HOST_NOT_CLOSED "host memory cannot be closed"
#define XFER_S_CLOSED_TENSORS_KEEP_MEMORY \
  "%s is closed, but out of host memory its tensors keep theirs until freed"

/* a device lost (device.c) */
#define XFER_S_DEVICE_LOST "device %s was lost%s%s"

/* DLPack, both ways (dlpack.c) */
#define XFER_S_DLPACK_NOT_LENT \
  "dlpack: %s tensors are not lent through DLPack (host and CUDA are; move it there first)"
#define XFER_S_DLPACK_DEVICE_TYPE \
  "from_dlpack: device type %d (CPU, CUDA and CUDA host memory are read)"
#define XFER_S_DLPACK_DTYPE "from_dlpack: dtype code %d, %d bits, %d lanes has no xferlua dtype"
#define XFER_S_DLPACK_TOO_MANY_DIMENSIONS "from_dlpack: %d dimensions (at most %d)"
#define XFER_S_DLPACK_NEGATIVE_STRIDE "from_dlpack: a negative stride (dimension %d)"
#define XFER_S_DLPACK_NULL_TENSOR "from_dlpack: a NULL tensor"
#define XFER_S_DLPACK_VERSION "from_dlpack: DLPack %u.%u (1.x is read)"
#define XFER_S_DLPACK_READ_ONLY \
  "from_dlpack: a read-only tensor (xferlua tensors are writable: copy it first)"
#define XFER_S_DLPACK_NO_DEVICE "from_dlpack: no such device"
#define XFER_S_DLPACK_NO_DATA "from_dlpack: no data"

/* driver libraries (driver_library.c) */
#define XFER_S_LIBRARY_NOT_LOADED "cannot load %s %s: %s"

/* dtypes and their conversions (dtype.c) */
#define XFER_S_CONVERT_OUT_OF_RANGE "value %.17g is out of range for %s (%s)"
#define XFER_S_CONVERT_NOT_WHOLE "value %.17g is not a whole number, which %s needs"
#define XFER_S_DTYPE_UNKNOWN "unknown dtype %d"
#define XFER_S_CONVERT_INT_OUT_OF_RANGE "value %lld is out of range for %s (%s)"
#define XFER_S_CONVERT_UINT_OUT_OF_RANGE "value %llu is out of range for %s (%s)"
#define XFER_S_CONVERT_ELEMENT "%s to %s: element %zu: %s"

/* switches from the environment (env.c) */
#define XFER_S_SWITCH_NOT_BOOLEAN "%s must be 0 or 1, not '%.40s'"

/* fault rules (xfer_fault_inject, XFER_FAULTS) (faults.c) */
#define XFER_S_FAULT_RUNTIME_UNKNOWN \
  "unknown runtime '%s' (expected host, cuda, vulkan, opencl, remote or file)"
#define XFER_S_FAULT_OP_UNKNOWN \
  "unknown op '%s' (expected alloc, read, write, copy, peer, import, export, register, map, " \
  "sync, send, recv, verify, stall or corrupt)"
#define XFER_S_FAULT_NTH_COUNT "nth and count must be at least 1 (got nth=%d, count=%d)"
#define XFER_S_FAULT_TOO_MANY_RULES "too many fault rules (at most %d)"
#define XFER_S_FAULT_RULE_TOO_LONG "fault rule too long: '%.*s'"
#define XFER_S_FAULT_RULE_BAD \
  "bad fault rule '%.*s' (expected runtime:op[:nth[:count[:native]]], nth and count from 1 to " \
  "%d, native from %d to %d, such as host:read:1)"

/* holding devices for a move (hold.c) */
#define XFER_S_HOLD_TOO_MANY_DEVICES "a move on more than %d devices at once"

/* memory shared between runtimes (interop.c) */
#define XFER_S_IMPORTED_TOO_OFTEN "a buffer is imported at most %d times"
#define XFER_S_SHARE_FOREIGN_MEMORY "a tensor without memory of xferlua's own is not shared"
#define XFER_S_INTEROP_WHOLE_ONLY "interop between %s and %s moves whole"
#define XFER_S_INTEROP_NO_SHARE "interop between %s and %s has no way to share memory"

/* asynchronous jobs (jobs.c) */
#define XFER_S_THREAD_NOT_STARTED "cannot start a transfer thread"

/* the ledger: costs, their cache, setting a path aside (ledger.c) */
#define XFER_S_COST_TWO_DEVICES "set_cost: two devices of this context are needed"
#define XFER_S_COST_PATH_AUTO "set_cost: a path other than auto is needed"
#define XFER_S_COST_POINTS \
  "set_cost: points are 2 to %d {bytes, seconds} pairs, bytes increasing, both > 0 and finite"
#define XFER_S_COST_LINEAR \
  "set_cost: latency must be >= 0 seconds and bandwidth > 0 bytes per second, both finite (not " \
  "%s and %s)"
#define XFER_S_COSTS_NOT_READ "load_costs: cannot read %s: %s"
#define XFER_S_COSTS_NOT_A_CACHE \
  "load_costs: %s is no xferlua plan cache (its first line is not the header this version " \
  "writes): delete it"
#define XFER_S_COSTS_CACHE_OFF "save_costs: no plan cache to write: XFER_PLAN_CACHE is off"
#define XFER_S_COSTS_NO_CACHE_FILE \
  "save_costs: no plan cache to write: neither XFER_PLAN_CACHE nor HOME is set"
#define XFER_S_COSTS_NOT_WRITTEN_WHY "save_costs: cannot write %s: %s"
#define XFER_S_COSTS_NOT_WRITTEN "save_costs: cannot write %s"
#define XFER_S_CONFIG_SETASIDE_AFTER "setaside_after must be 0 (never) to 1000000, not %d"

/* memory and its cache (memory.c) */
#define XFER_S_ALLOC_TOO_LARGE "%zu bytes is more than any device holds"
#define XFER_S_DEVICE_CLOSED_REOPEN "device %s is closed (xfer.device(\"%s\") opens it again)"
#define XFER_S_CONFIG_CACHE "cache must be 0 or 1, not %d"

/* opening a context (open.c) */
#define XFER_S_FAIL_AT_NOT_NUMBER "XFER_FAIL_AT must be a call number >= 0, not '%.40s'"
#define XFER_S_FAULTS_ENV "XFER_FAULTS: %s"

/* plans (plan.c) */
#define XFER_S_CONVERT_VIA_HOST_FORBIDDEN \
  "a dtype change is made on the host: the move passes the host, which via = \"%s\" forbids " \
  "(via = \"host\", or none)"
#define XFER_S_COPY_SHAPES_DIFFER "copy_from needs one shape at both ends: target %s, source %s"

/* progress callbacks (progress.c) */
#define XFER_S_CANCELED "canceled after %llu of %llu bytes"
#define XFER_S_WAIT_DEADLINE \
  "%s had not done its work by the move's deadline (%s waited %.3f s); its memory that the " \
  "work may still write is held until the device says it is done"
#define XFER_S_NOT_VALID \
  "the tensor holds no valid bytes: a move into it ended %s; write it before reading it"
#define XFER_S_TIMEOUT_RANGE "%s must be 0 (none) or 0.001 to 86400 seconds, not %g"
#define XFER_S_DEADLINE_PASSED "passed its deadline (%g s) after %llu of %llu bytes"
#define XFER_S_PROGRESS_STOPPED \
  "the move was stopped by its progress callback at %llu of %llu bytes"

/* routes and the staging policy (route.c) */
#define XFER_S_CONFIG_STAGING_CHUNK "staging_chunk must be 4096 to 1073741824 bytes, not %zu"
#define XFER_S_CONFIG_STAGING_DEPTH "staging_depth must be 2 to 16, not %d"
#define XFER_S_PATH_UNKNOWN "unknown path %d"

/* runtimes (runtime.c) */
#define XFER_S_RUNTIME_LISTING "%s listing devices"
#define XFER_S_RUNTIME_NO_INDEX "no runtime #%zu (there are %zu)"

/* staging through the host (staged.c) */
#define XFER_S_STAGED_NO_CHUNKS \
  "a staged route of %zu bytes has no chunks to move %zu bytes through"
#define XFER_S_STAGING_READER_NOT_STARTED "cannot start the staging reader thread"

/* tensors (tensor.c) */
#define XFER_S_VIEW_OF_FREED "attempt to use a view of a freed tensor"
#define XFER_S_TENSOR_OF_CLOSED_DEVICE \
  "attempt to use a tensor of a closed device (%s closed since it was made)"
#define XFER_S_TENSOR_RANK "a tensor has 0 to %d dimensions, not %d"
#define XFER_S_TENSOR_NEGATIVE_DIMENSION "dimension %d is negative (%lld)"
#define XFER_S_TENSOR_TOO_LARGE "shape too large for memory"
#define XFER_S_FREE_LENT_BY_DLPACK \
  "free: this tensor's memory is lent through DLPack (%d time%s) to another framework, which " \
  "reads it still: it can be freed once that lets go (the array or tensor made from it " \
  "collected)"
#define XFER_S_FREE_VIEWS_USE_MEMORY \
  "free: %d view%s of this tensor use%s its memory: free %s first (or let %s be collected; the " \
  "memory goes back with the last)"
#define XFER_S_DIRECT_NOT_LENT "%s lends no device memory here"
#define XFER_S_SIZE_MISMATCH "%zu bytes given for a %s tensor of %zu bytes"

/* views (view.c) */
#define XFER_S_VIEW_NEGATIVE "dimension %d: size %lld, stride %lld: neither may be negative"
#define XFER_S_VIEW_DIMENSION_TOO_LARGE "dimension %d: %lld elements in a tensor of %zu"
#define XFER_S_VIEW_PAST_END "the view reaches element %lld of a tensor of %zu elements"
#define XFER_S_INDEX_COUNT "%d indices for a tensor of %d dimensions"
#define XFER_S_INDEX_OUT_OF_RANGE "index %lld is out of range for dimension %d (size %lld)"

/* moving views (view_io.c) */
#define XFER_S_VIEW_NOT_ROWS "the view is no layout of rows"

/* wrapping memory made elsewhere (wrap.c) */
#define XFER_S_WRAP_NOTHING "wrap: %s cannot be a tensor of %s (its runtime wraps nothing)"
#define XFER_S_WRAP_WRONG_RUNTIME "wrap: %s cannot be a tensor of %s (it takes %s)"
#define XFER_S_WRAP_NEEDS "wrap: a device, the memory and a shape are needed"
#define XFER_S_WRAP_DEVICE_CLOSED "device %s is closed"
#define XFER_S_WRAP_PIN_HOST_ONLY \
  "wrap: pin is for host memory (it lets the drivers register or import it)"
#define XFER_S_WRAP_BAD_SHAPE "wrap: unknown dtype or bad dimensions"
#define XFER_S_WRAP_NEGATIVE "wrap: dimension %d: size %lld, stride %lld: neither may be negative"
#define XFER_S_WRAP_PAST_END "wrap: the tensor reaches %.0f bytes into memory of %zu"
#define XFER_S_WRAP_REFUSED "wrap: %s cannot wrap memory"

#endif
