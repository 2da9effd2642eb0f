/*
** driver_library.c -- opening a runtime's driver library with dlopen: the library name
** can be overridden from the environment (another loader, or none to test its absence),
** and a failure is the runtime's reason for being unavailable.
*/
#include <dlfcn.h>
#include <stdlib.h>

#include "util.h"

void *xfer_driver_open(const char *env, const char *library, const char *what, const char **path,
                       xfer_error *err)
{
  const char *chosen = getenv(env);
  if (!chosen || !*chosen) chosen = library;
  *path = chosen;
  void *lib = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, XFER_S_LIBRARY_NOT_LOADED, what, chosen,
                dlerror());
  return lib;
}
