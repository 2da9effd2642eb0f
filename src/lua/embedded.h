/*
** embedded.h -- the Lua files under lua/ compiled into the binding
** (scripts/embed-lua.cmake writes the table).
*/
#ifndef XFER_EMBEDDED_H
#define XFER_EMBEDDED_H

#include <stddef.h>

typedef struct xfer_embedded_lua {
  const char *module;    /* "xfer.prelude" */
  const char *chunkname; /* "@lua/xfer/prelude.lua", for error messages */
  const char *source;
  size_t size;
} xfer_embedded_lua;

/* Ends with an entry whose module is NULL. */
extern const xfer_embedded_lua xfer_embedded_lua_files[];

#endif
