/*
** file_layout.h -- what a tensor file holds, as its header says (file_layout.c): its entries
** and metadata, and what the format readers and header writers share. Layer 2 of
** docs/architecture.md: it calls file_io.c and util.h.
**
** Every header is input from outside: an entry is kept only when its dtype is known, its
** shape's bytes are what it claims, and its bytes lie inside the file without overlapping
** another's. Each refusal is an XFER_E_INVALID naming the file, the tensor and the byte.
*/
#ifndef XFER_FILE_LAYOUT_H
#define XFER_FILE_LAYOUT_H

#include "file_io.h"

typedef enum { XFER_FORMAT_SAFETENSORS, XFER_FORMAT_NPY, XFER_FORMAT_NPZ } xfer_format_kind;

typedef struct xfer_format_entry {
  char *name;
  xfer_dtype dtype;
  xfer_shape shape;
  uint64_t offset;     /* the first element's byte in the file */
  uint64_t nbytes;     /* the elements' bytes */
  uint64_t stored;     /* bytes in the file: nbytes, or a deflated .npz member's size */
  int deflated;        /* an .npz member compressed with deflate */
  uint64_t inflated_skip; /* ... its .npy header's bytes before the elements, once inflated */
  int fortran;         /* .npy fortran_order: the elements in column-major order */
} xfer_format_entry;

typedef struct xfer_file_layout {
  xfer_format_kind format;
  uint64_t size;               /* the file's bytes */
  xfer_format_entry *entries;
  size_t count;
  char **meta_keys, **meta_values; /* safetensors "__metadata__" (strings to strings) */
  size_t meta_count;
} xfer_file_layout;

void xfer_format_free(xfer_file_layout *layout);

/* -- for the readers ------------------------------------------------------------------------ */

/* One header being read: the open file, its size, the layout filled in, the error. */
typedef struct xfer_format_reading {
  const xfer_fio *f;
  uint64_t size;
  xfer_file_layout *out;
  xfer_error *err;
} xfer_format_reading;

/* XFER_E_INVALID naming the file, the tensor (NULL: the header) and the byte. */
xfer_code xfer_format_bad(xfer_format_reading *r, const char *tensor, long long offset,
                          const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* The same as XFER_E_UNSUPPORTED: a dtype or feature xferlua has not. */
xfer_code xfer_format_unsupported(xfer_format_reading *r, const char *tensor, long long offset,
                                  const char *what);
/* A new entry named by `len` bytes of `name`, zeroed but for its name; NULL out of memory. */
xfer_format_entry *xfer_format_add_entry(xfer_format_reading *r, const char *name, size_t len);
/* The elements' bytes of a shape, 0 with *over set when they do not fit in 64 bits. */
uint64_t xfer_format_shape_bytes(const xfer_shape *shape, xfer_dtype dtype, int *over);
/* No two entries' bytes overlap (empty ones take no room). */
xfer_code xfer_format_check_overlaps(xfer_format_reading *r);

/* -- for the writers ------------------------------------------------------------------------ */

/* Text grown as a header is written; `failed` once an allocation failed (then s is kept). */
typedef struct xfer_text {
  char *s;
  size_t len, cap;
  int failed;
} xfer_text;

void xfer_text_put(xfer_text *b, const char *s, size_t n);
void xfer_text_putf(xfer_text *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A JSON string: quotes, backslashes and control characters escaped. */
void xfer_text_put_json_string(xfer_text *b, const char *s);
size_t xfer_pad_to(size_t n, size_t align);

#endif
