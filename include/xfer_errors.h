/*
** xferlua error codes: one table, expanded wherever a code, its Lua name or
** its default wording is needed, so the three can never disagree.
*/
#ifndef XFER_ERRORS_H
#define XFER_ERRORS_H

/* XFER_ERRDEF(NAME, lua_name, what) -- `what` completes "the operation failed: ..." */
#define XFER_ERRORS(XFER_ERRDEF)                                              \
  XFER_ERRDEF(OK, "ok", "no error")                                           \
  XFER_ERRDEF(READ, "read", "reading a tensor off its device failed")        \
  XFER_ERRDEF(WRITE, "write", "writing a tensor to its device failed")       \
  XFER_ERRDEF(ALLOC, "alloc", "allocating device memory failed")             \
  XFER_ERRDEF(FREED, "freed", "attempt to use a freed tensor")               \
  XFER_ERRDEF(CLOSED, "closed", "attempt to use a closed device")            \
  XFER_ERRDEF(INVALID, "invalid", "invalid argument")                        \
  XFER_ERRDEF(UNSUPPORTED, "unsupported", "operation not supported")         \
  XFER_ERRDEF(UNAVAILABLE, "unavailable", "runtime or device unavailable")   \
  XFER_ERRDEF(DEVICE_LOST, "device_lost", "the device was lost")            \
  XFER_ERRDEF(IN_USE, "in_use", "the tensor's memory is in use by its views")            \
  XFER_ERRDEF(PEER_LOST, "peer_lost", "the remote peer was lost")                       \
  XFER_ERRDEF(TIMEOUT, "timeout", "the remote operation passed its deadline")            \
  XFER_ERRDEF(UNREACHABLE, "unreachable", "the remote peer could not be reached")       \
  XFER_ERRDEF(UNAUTHORIZED, "unauthorized", "the remote peer refused the token")        \
  XFER_ERRDEF(VERSION_MISMATCH, "version_mismatch", "the remote peer speaks another protocol version")

#endif
