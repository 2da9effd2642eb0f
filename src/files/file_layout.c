/*
** file_layout.c -- what the format readers share (file_layout.h): a layout's entries made,
** checked (bytes of a shape, no two overlapping) and freed, the error naming the file, the
** tensor and the byte, and the text the header writers build.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_layout.h"

xfer_code xfer_format_bad(xfer_format_reading *r, const char *tensor, long long offset,
                          const char *fmt, ...)
{
  char cause[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cause, sizeof cause, fmt, ap);
  va_end(ap);
  xfer_error *err = r->err;
  if (!err) return XFER_E_INVALID;
  if (tensor)
    xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, r->f->path, offset,
                   "%s: tensor '%s': %s", r->f->path, tensor, cause);
  else
    xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, r->f->path, offset, "%s: %s",
                   r->f->path, cause);
  if (tensor) xfer_copy_text(err->tensor, sizeof err->tensor, tensor);
  return XFER_E_INVALID;
}

xfer_code xfer_format_unsupported(xfer_format_reading *r, const char *tensor, long long offset,
                                  const char *what)
{
  xfer_format_bad(r, tensor, offset, "%s", what);
  if (r->err) r->err->code = XFER_E_UNSUPPORTED;
  return XFER_E_UNSUPPORTED;
}

void xfer_format_free(xfer_file_layout *layout)
{
  if (!layout) return;
  for (size_t i = 0; i < layout->count; i++) free(layout->entries[i].name);
  free(layout->entries);
  for (size_t i = 0; i < layout->meta_count; i++) {
    free(layout->meta_keys[i]);
    free(layout->meta_values[i]);
  }
  free(layout->meta_keys);
  free(layout->meta_values);
  memset(layout, 0, sizeof *layout);
}

xfer_format_entry *xfer_format_add_entry(xfer_format_reading *r, const char *name, size_t len)
{
  xfer_file_layout *l = r->out;
  /* room doubles (8, 16, 32, ...: the capacity is the count's next power of two, from 8): grown
  ** an entry at a time, 200k tensors copied the array 200k times (minutes under ASan) */
  size_t n = l->count;
  if (n == 0 || (n >= 8 && !(n & (n - 1)))) {
    xfer_format_entry *grown = realloc(l->entries, (n ? 2 * n : 8) * sizeof *grown);
    if (!grown) return NULL;
    l->entries = grown;
  }
  xfer_format_entry *e = &l->entries[n];
  memset(e, 0, sizeof *e);
  e->name = malloc(len + 1);
  if (!e->name) return NULL;
  memcpy(e->name, name, len);
  e->name[len] = '\0';
  l->count++;
  return e;
}

uint64_t xfer_format_shape_bytes(const xfer_shape *shape, xfer_dtype dtype, int *over)
{
  uint64_t n = xfer_dtype_size(dtype);
  *over = 0;
  for (int d = 0; d < shape->ndim; d++) {
    uint64_t dim = (uint64_t)shape->dims[d];
    if (dim && n > UINT64_MAX / dim) { *over = 1; return 0; }
    n *= dim;
  }
  return n;
}

static int by_offset(const void *a, const void *b)
{
  const xfer_format_entry *x = *(xfer_format_entry *const *)a, *y = *(xfer_format_entry *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

xfer_code xfer_format_check_overlaps(xfer_format_reading *r)
{
  xfer_file_layout *l = r->out;
  if (l->count < 2) return XFER_E_OK;
  xfer_format_entry **order = malloc(l->count * sizeof *order);
  if (!order) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  for (size_t i = 0; i < l->count; i++) order[i] = &l->entries[i];
  qsort(order, l->count, sizeof *order, by_offset);
  xfer_code code = XFER_E_OK;
  const xfer_format_entry *last = NULL;
  for (size_t i = 0; i < l->count && !code; i++) {
    const xfer_format_entry *e = order[i];
    if (!e->stored) continue;
    if (last && e->offset < last->offset + last->stored)
      code = xfer_format_bad(r, e->name, (long long)e->offset,
                 "its bytes [%llu, %llu) overlap those of '%s' [%llu, %llu)",
                 (unsigned long long)e->offset, (unsigned long long)e->offset + e->stored,
                 last->name, (unsigned long long)last->offset,
                 (unsigned long long)last->offset + last->stored);
    last = e;
  }
  free(order);
  return code;
}

void xfer_text_put(xfer_text *b, const char *s, size_t n)
{
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *grown = realloc(b->s, cap);
    if (!grown) { b->failed = 1; return; }
    b->s = grown;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void xfer_text_putf(xfer_text *b, const char *fmt, ...)
{
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  xfer_text_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void xfer_text_put_json_string(xfer_text *b, const char *s)
{
  xfer_text_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { xfer_text_put(b, "\\", 1); xfer_text_put(b, s, 1); }
    else if (c < 0x20) xfer_text_putf(b, "\\u%04x", c);
    else xfer_text_put(b, s, 1);
  }
  xfer_text_put(b, "\"", 1);
}

size_t xfer_pad_to(size_t n, size_t align) { return (n + align - 1) / align * align; }

