/*
** file_format.h -- what a tensor file holds, read from its header and checked, and headers
** written (file_format.c): safetensors, NumPy's .npy and .npz (a zip of .npy members).
** Layer 2 of docs/architecture.md: it calls json.c, file_io.c and util.h.
**
** Every header is input from outside: an entry is kept only when its dtype is known, its
** shape's bytes are what it claims, and its bytes lie inside the file without overlapping
** another's. Each refusal is an XFER_E_INVALID naming the file, the tensor and the byte.
*/
#ifndef XFER_FILE_FORMAT_H
#define XFER_FILE_FORMAT_H

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

/* Reads the header of the open file (`size` bytes), whichever of the three formats its first
** bytes say, into *out (free with xfer_format_free). */
xfer_code xfer_format_read(const xfer_fio *f, uint64_t size, xfer_file_layout *out,
                           xfer_error *err);
void xfer_format_free(xfer_file_layout *layout);
const char *xfer_format_name(xfer_format_kind format);

/* The format a path's extension names (.safetensors, .npy, .npz); -1 for none. */
int xfer_format_of_path(const char *path);

/* -- writing ------------------------------------------------------------------------------ */

/* A safetensors header for `n` tensors laid one after another in the given order, padded
** with spaces so that the data starts at a multiple of `align`: the whole header (its 8-byte
** length first) in a malloc'd *out of *len bytes. Names must be unique UTF-8. */
xfer_code xfer_format_safetensors_header(const char *const *names, const xfer_dtype *dtypes,
                                         const xfer_shape *shapes, size_t n,
                                         const char *const *meta_keys,
                                         const char *const *meta_values, size_t nmeta,
                                         size_t align, char **out, size_t *len, xfer_error *err);
/* An .npy header (version 1.0, or 2.0 when it must be longer) for one array, padded so that
** the data starts at a multiple of `align` (a multiple of 64, as NumPy writes). bf16 has no
** NumPy dtype: XFER_E_UNSUPPORTED. */
xfer_code xfer_format_npy_header(xfer_dtype dtype, const xfer_shape *shape, size_t align,
                                 char **out, size_t *len, xfer_error *err);

#endif
