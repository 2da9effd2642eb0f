/*
** file_format.h -- which of the formats a file is, and its header read (file_format.c).
** Layer 2 of docs/architecture.md: it calls file_safetensors.c and file_numpy.c.
*/
#ifndef XFER_FILE_FORMAT_H
#define XFER_FILE_FORMAT_H

#include "file_layout.h"

/* Reads the header of the open file (`size` bytes), whichever of the three formats its first
** bytes say, into *out (free with xfer_format_free). */
xfer_code xfer_format_read(const xfer_fio *f, uint64_t size, xfer_file_layout *out,
                           xfer_error *err);
const char *xfer_format_name(xfer_format_kind format);

/* The format a path's extension names (.safetensors, .npy, .npz); -1 for none. */
int xfer_format_of_path(const char *path);

#endif
