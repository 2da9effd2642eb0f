/*
** error.c -- error records: codes, their names, and the sentences that name both
** ends of a failed movement ("Failed to read a tensor off X on the way to Y: ...").
*/
#include <stdio.h>
#include <string.h>

#include "util.h"

static const struct {
  const char *name, *what;
} codes[] = {
#define XFER_ERRROW(name, lua_name, what) {lua_name, what},
  XFER_ERRORS(XFER_ERRROW)
#undef XFER_ERRROW
};

static const struct {
  const char *name;
  xfer_code failure;
} ops[XFER_OP__COUNT] = {
#define XFER_OPROW(name, text, failure) {text, XFER_E_##failure},
  XFER_OPS(XFER_OPROW)
#undef XFER_OPROW
};

const char *xfer_op_name(xfer_op op)
{
  return (unsigned)op < XFER_OP__COUNT ? ops[op].name : "?";
}

xfer_code xfer_op_failure(xfer_op op)
{
  return (unsigned)op < XFER_OP__COUNT ? ops[op].failure : XFER_E_WRITE;
}

/* The one place an op's name is looked up: errors record their op as text (the public field,
** which may be an API call's name) and as this number, which the core compares. */
xfer_op xfer_op_of(const char *name)
{
  for (int i = 0; name && i < XFER_OP__COUNT; i++)
    if (!strcmp(ops[i].name, name)) return (xfer_op)i;
  return XFER_OP_OTHER;
}

const char *xfer_code_name(xfer_code code)
{
  if ((int)code < 0 || code >= XFER_E__COUNT) return NULL;
  return codes[code].name;
}

const char *xfer_code_what(xfer_code code)
{
  if ((int)code < 0 || code >= XFER_E__COUNT) return NULL;
  return codes[code].what;
}

void xfer_copy_text(char *dst, size_t cap, const char *src)
{
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

void xfer_err_join(char *dst, size_t cap, const char *a, const char *b)
{
  xfer_copy_text(dst, cap, a);
  size_t n = strlen(dst);
  if (n + 1 < cap) xfer_copy_text(dst + n, cap - n, b);
}

/* (err not NULL) The record's code, op and message. */
static void record(xfer_error *err, xfer_code code, xfer_op op, const char *fmt, va_list ap)
{
  memset(err, 0, sizeof *err);
  err->code = code;
  xfer_copy_text(err->op, sizeof err->op, xfer_op_name(op));
  err->op_id = op;
  vsnprintf(err->message, sizeof err->message, fmt, ap);
}

xfer_code xfer_err_op(xfer_error *err, xfer_code code, xfer_op op, const char *fmt, ...)
{
  if (!err) return code;
  va_list ap;
  va_start(ap, fmt);
  record(err, code, op, fmt, ap);
  va_end(ap);
  return code;
}

void xfer_err_call(xfer_error *err, const char *call)
{
  if (!err || !call) return;
  xfer_copy_text(err->op, sizeof err->op, call);
  err->op_id = xfer_op_of(call);
}

xfer_code xfer_err_native(xfer_error *err, xfer_code code, xfer_op op, long long native,
                          const char *native_name, const char *native_text, int retryable,
                          int injected)
{
  if (!err) return code;
  xfer_err_op(err, code, op, XFER_S_NATIVE, native_name, native, native_text,
              injected ? XFER_S_INJECTED : "");
  err->native = native;
  xfer_copy_text(err->native_name, sizeof err->native_name, native_name);
  err->retryable = retryable;
  err->injected = injected;
  return code;
}

/* vsnprintf, so that a long cause is cut short rather than warned about */
static void put_message(xfer_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put_message(xfer_error *err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
}

void xfer_err_frame(xfer_error *err, const xfer_device *from, const xfer_device *to,
                    size_t nbytes)
{
  if (!err) return;
  const char *f = from ? from->name : "", *t = to ? to->name : "";
  xfer_copy_text(err->from, sizeof err->from, f);
  xfer_copy_text(err->to, sizeof err->to, t);
  char cause[sizeof err->message];
  memcpy(cause, err->message, sizeof cause);
  const char *op = err->op, *d = err->device;
  xfer_op id = err->op_id;
  /* a device the move used on its way (host staging, the GPU whose memory an end lives in) */
  int between = d[0] && strcmp(d, f) && strcmp(d, t);
  if (id == XFER_OP_ALLOC && !from && between) /* a new tensor, in another device's memory */
    put_message(err, XFER_S_FRAME_ALLOC_ELSEWHERE, nbytes, t, d, cause);
  else if (id == XFER_OP_ALLOC && (between || (from && d[0] && !strcmp(d, f) && strcmp(d, t))))
    put_message(err, XFER_S_FRAME_ALLOC_ON_THE_WAY,
                d, nbytes, f, t, cause);
  else if (id == XFER_OP_ALLOC && !from)
    put_message(err, XFER_S_FRAME_ALLOC, nbytes, t, cause);
  else if (id == XFER_OP_ALLOC)
    put_message(err, XFER_S_FRAME_ALLOC_FOR_MOVE, nbytes, t,
                f, cause);
  else if (id == XFER_OP_PROGRESS || id == XFER_OP_DEADLINE || id == XFER_OP_CANCEL)
    put_message(err, XFER_S_FRAME_STOPPED, nbytes, f, t, cause); /* stopped between steps */
  else if (between)
    put_message(err, XFER_S_FRAME_ON_THE_WAY, op, f, t, d, cause);
  else if (id == XFER_OP_READ)
    put_message(err, XFER_S_FRAME_READ, f, t, cause);
  else if (id == XFER_OP_WRITE)
    put_message(err, XFER_S_FRAME_WRITE, t, f, cause);
  else
    put_message(err, XFER_S_FRAME_MOVE, op, f, t, cause);
}
