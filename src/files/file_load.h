/*
** file_load.h -- what file_load.c offers the file layer besides the public API: the context
** an open file belongs to. Layer 8 of docs/architecture.md's file endpoints.
*/
#ifndef XFER_FILE_LOAD_H
#define XFER_FILE_LOAD_H

#include "../core/service.h"
#include "xfer_files.h"

xfer_ctx *xfer_file_context(const xfer_file *f);

#endif
