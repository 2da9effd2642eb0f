/*
** file_numpy.h -- NumPy's .npy and .npz read, the .npy header written (file_numpy.c).
** Layer 2 of docs/architecture.md: it calls file_layout.c.
*/
#ifndef XFER_FILE_NUMPY_H
#define XFER_FILE_NUMPY_H

#include "file_layout.h"

/* An .npy file's one array (its name ""). */
xfer_code xfer_npy_read(xfer_format_reading *r);
/* An .npz file's members (each "name.npy", named "name"), stored or deflated. */
xfer_code xfer_npz_read(xfer_format_reading *r);
/* An .npy header (version 1.0, or 2.0 when it must be longer) for one array, padded so that
** the data starts at a multiple of `align` (a multiple of 64, as NumPy writes). bf16 has no
** NumPy dtype: XFER_E_UNSUPPORTED. */
xfer_code xfer_format_npy_header(xfer_dtype dtype, const xfer_shape *shape, size_t align,
                                 char **out, size_t *len, xfer_error *err);

#endif
