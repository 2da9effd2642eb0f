/*
** file_safetensors.h -- the safetensors format read and written (file_safetensors.c).
** Layer 2 of docs/architecture.md: it calls file_layout.c and json.c.
*/
#ifndef XFER_FILE_SAFETENSORS_H
#define XFER_FILE_SAFETENSORS_H

#include "file_layout.h"

/* The header of a file whose first bytes are a length and '{': every entry checked. */
xfer_code xfer_safetensors_read(xfer_format_reading *r);
/* A safetensors header for `n` tensors laid one after another in the given order, padded
** with spaces so that the data starts at a multiple of `align`: the whole header (its 8-byte
** length first) in a malloc'd *out of *len bytes; value_at (NULL: not wanted): where in it each
** metadata value's text begins. Names must be unique UTF-8. */
xfer_code xfer_format_safetensors_header(const char *const *names, const xfer_dtype *dtypes,
                                         const xfer_shape *shapes, size_t n,
                                         const char *const *meta_keys,
                                         const char *const *meta_values, size_t nmeta,
                                         size_t align, size_t *value_at, char **out, size_t *len,
                                         xfer_error *err);

#endif
