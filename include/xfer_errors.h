/*
** xferlua error codes: one table, expanded wherever a code, its Lua name or
** its default wording is needed, so the three can never disagree.
*/
#ifndef XFER_ERRORS_H
#define XFER_ERRORS_H

/* XFER_ERRDEF(NAME, lua_name, what) -- `what` is the kind of failure in words, and the cause
** the core writes when nothing more specific is known (a driver's failure carries the driver's
** own words instead): a failed host allocation says "out of host memory", a freed tensor
** "attempt to use a freed tensor". xfer_code_what() returns it; a Lua error has it as e.what. */
#define XFER_ERRORS(XFER_ERRDEF)                                              \
  XFER_ERRDEF(OK, "ok", "no error")                                           \
  XFER_ERRDEF(READ, "read", "reading a tensor off its device failed")        \
  XFER_ERRDEF(WRITE, "write", "writing a tensor to its device failed")       \
  XFER_ERRDEF(ALLOC, "alloc", "out of host memory")             \
  XFER_ERRDEF(FREED, "freed", "attempt to use a freed tensor")               \
  XFER_ERRDEF(CLOSED, "closed", "attempt to use a closed device")            \
  XFER_ERRDEF(INVALID, "invalid", "invalid argument")                        \
  XFER_ERRDEF(UNSUPPORTED, "unsupported", "operation not supported")         \
  XFER_ERRDEF(UNAVAILABLE, "unavailable", "runtime or device unavailable")   \
  XFER_ERRDEF(DEVICE_LOST, "device_lost", "the device was lost")            \
  XFER_ERRDEF(IN_USE, "in_use", "the tensor's memory is in use by its views")            \
  XFER_ERRDEF(PEER_LOST, "peer_lost", "the remote peer was lost")                       \
  XFER_ERRDEF(TIMEOUT, "timeout", "the operation passed its deadline")                    \
  XFER_ERRDEF(UNREACHABLE, "unreachable", "the remote peer could not be reached")       \
  XFER_ERRDEF(UNAUTHORIZED, "unauthorized", "the remote peer refused the token")        \
  XFER_ERRDEF(VERSION_MISMATCH, "version_mismatch", "the remote peer speaks another protocol version") \
  XFER_ERRDEF(CORRUPT, "corrupt", "the bytes that arrived are not the bytes sent")        \
  XFER_ERRDEF(CANCELED, "canceled", "the operation was canceled")                        \
  XFER_ERRDEF(STALE, "stale", "a remote buffer's handle names memory freed since")

/* XFER_OPDEF(NAME, name, failure) -- the operations the core and the backends tell apart:
** a driver call's phase (what fault rules target and backends fail in) and the steps of a
** move. `failure` is what a driver call failing in that op means, the one mapping every
** backend uses: an allocation failed, a read off the device failed, or the target could not
** be written (write, copy, peer, import, ...: the move's bytes did not arrive). Then the API
** calls that errors name (no driver call fails in them: their failure is INVALID). Errors of
** API calls outside this list (a Lua function's name) carry XFER_OP_OTHER and the name. */
#define XFER_OPS(XFER_OPDEF)                                                  \
  XFER_OPDEF(OPEN, "open", UNAVAILABLE)                                       \
  XFER_OPDEF(ALLOC, "alloc", ALLOC)                                           \
  XFER_OPDEF(FREE, "free", WRITE)                                             \
  XFER_OPDEF(READ, "read", READ)                                              \
  XFER_OPDEF(WRITE, "write", WRITE)                                           \
  XFER_OPDEF(COPY, "copy", WRITE)                                             \
  XFER_OPDEF(PEER, "peer", WRITE)                                             \
  XFER_OPDEF(IMPORT, "import", WRITE)                                         \
  XFER_OPDEF(EXPORT, "export", WRITE)                                         \
  XFER_OPDEF(MAP, "map", WRITE)                                               \
  XFER_OPDEF(REGISTER, "register", WRITE)                                     \
  XFER_OPDEF(MEMORY, "memory", WRITE)                                         \
  XFER_OPDEF(SYNC, "sync", WRITE)                                             \
  XFER_OPDEF(SEND, "send", WRITE)                                             \
  XFER_OPDEF(RECV, "recv", READ)                                              \
  XFER_OPDEF(CONNECT, "connect", UNAVAILABLE)                                 \
  XFER_OPDEF(LISTEN, "listen", UNAVAILABLE)                                   \
  XFER_OPDEF(DIRECT, "direct", WRITE)                                         \
  XFER_OPDEF(PLAN, "plan", UNSUPPORTED)                                       \
  XFER_OPDEF(PROGRESS, "progress", INVALID)                                   \
  XFER_OPDEF(CONVERT, "convert", INVALID)                                     \
  XFER_OPDEF(VERIFY, "verify", READ)                                          \
  XFER_OPDEF(CORRUPT, "corrupt", CORRUPT)                                     \
  XFER_OPDEF(STALL, "stall", TIMEOUT)                                         \
  XFER_OPDEF(DEADLINE, "deadline", TIMEOUT)                                   \
  XFER_OPDEF(CANCEL, "cancel", CANCELED)                                      \
  /* the API calls the core and the layers above it name in their errors */    \
  XFER_OPDEF(BATCH, "batch", INVALID)                                         \
  XFER_OPDEF(CLOSE, "close", INVALID)                                         \
  XFER_OPDEF(CONFIG, "config", INVALID)                                       \
  XFER_OPDEF(DEVICE, "device", INVALID)                                       \
  XFER_OPDEF(DLPACK, "dlpack", INVALID)                                       \
  XFER_OPDEF(ENTRY, "entry", INVALID)                                         \
  XFER_OPDEF(EQUALS, "equals", INVALID)                                       \
  XFER_OPDEF(GET, "get", INVALID)                                             \
  XFER_OPDEF(HOLD, "hold", INVALID)                                           \
  XFER_OPDEF(INJECT, "inject", INVALID)                                       \
  XFER_OPDEF(LOAD_COSTS, "load_costs", INVALID)                               \
  XFER_OPDEF(RUNTIME, "runtime", INVALID)                                     \
  XFER_OPDEF(RUN_ASYNC, "run_async", INVALID)                                 \
  XFER_OPDEF(SAVE, "save", INVALID)                                           \
  XFER_OPDEF(SAVE_COSTS, "save_costs", INVALID)                               \
  XFER_OPDEF(SET, "set", INVALID)                                             \
  XFER_OPDEF(SET_COST, "set_cost", INVALID)                                   \
  XFER_OPDEF(TENSOR, "tensor", INVALID)                                       \
  XFER_OPDEF(TO_ASYNC, "to_async", INVALID)                                   \
  XFER_OPDEF(VIEW, "view", INVALID)                                           \
  XFER_OPDEF(WRAP, "wrap", INVALID)

#endif
