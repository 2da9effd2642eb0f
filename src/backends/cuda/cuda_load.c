/*
** cuda_load.c -- opening libcuda.so.1 with dlopen, resolving the entry points through
** cuGetProcAddress (as NCCL does), initialising the driver, and naming its errors.
*/
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_api.h"

/* cuGetProcAddress before CUDA 12 had no status argument. */
typedef CUresult (*get_proc_v2)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1)(const char *, void **, int, cuuint64_t);

xfer_code xfer_cu_load(cu_api *api, xfer_error *err)
{
  const char *path;
  api->lib = xfer_driver_open("XFER_CUDA_LIBRARY", "libcuda.so.1", "the CUDA driver", &path, err);
  if (!api->lib) return XFER_E_UNAVAILABLE;
  get_proc_v2 proc2;
  get_proc_v1 proc1;
  *(void **)&proc2 = dlsym(api->lib, "cuGetProcAddress_v2");
  *(void **)&proc1 = dlsym(api->lib, "cuGetProcAddress");
  if (!proc2 && !proc1)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN,
                        "%s has no cuGetProcAddress (a CUDA 11.3 or newer driver is needed)", path);
#define XFER_CU_RESOLVE(name)                                                              \
  {                                                                                         \
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;                    \
    CUresult r = proc2 ? proc2(#name, (void **)&api->name, XFER_CUDA_API_VERSION,            \
                               CU_GET_PROC_ADDRESS_DEFAULT, &status)                        \
                       : proc1(#name, (void **)&api->name, XFER_CUDA_API_VERSION,            \
                               CU_GET_PROC_ADDRESS_DEFAULT);                                \
    if (r == CUDA_ERROR_STUB_LIBRARY)                                                       \
      return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN,                                  \
                          "%s is the CUDA stub library, not a driver: "                     \
                          "CUDA_ERROR_STUB_LIBRARY (34)", path);                            \
    if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !api->name)           \
      return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN,                                  \
                          "%s has no %s for CUDA %d.%d (error %d)", path, #name,             \
                          XFER_CUDA_API_VERSION / 1000, XFER_CUDA_API_VERSION % 1000 / 10,   \
                          (int)r);                                                           \
  }
  XFER_CU_FUNCTIONS(XFER_CU_RESOLVE)
#undef XFER_CU_RESOLVE
  CUresult r = api->cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name, *text;
    xfer_cu_describe(api, r, &name, &text);
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "cuInit failed: %s (%d): %s", name,
                        (int)r, text);
  }
  return XFER_E_OK;
}

void xfer_cu_describe(const cu_api *api, CUresult r, const char **name, const char **text)
{
  *name = NULL;
  *text = NULL;
  if (api->cuGetErrorName) api->cuGetErrorName(r, name);
  if (api->cuGetErrorString) api->cuGetErrorString(r, text);
  if (!*name) *name = "CUDA_ERROR_UNRECOGNIZED";
  if (!*text) *text = "the driver has no description of this error";
}
