/*
** opencl_load.c -- opening the OpenCL ICD loader with dlopen and resolving the entry
** points, and the names of OpenCL's error codes.
*/
#include <dlfcn.h>
#include <stdlib.h>

#include "opencl_api.h"

xfer_code xfer_cl_load(cl_api *api, xfer_error *err)
{
  const char *path;
  api->lib = xfer_driver_open("XFER_OPENCL_LIBRARY", "libOpenCL.so.1", "the OpenCL ICD loader",
                              &path, err);
  if (!api->lib) return XFER_E_UNAVAILABLE;
#define XFER_CL_RESOLVE(name)                                                          \
  *(void **)&api->name = dlsym(api->lib, #name);                                        \
  if (!api->name)                                                                       \
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "%s has no %s", path, #name);
  XFER_CL_FUNCTIONS(XFER_CL_RESOLVE)
#undef XFER_CL_RESOLVE
  /* optional: an OpenCL 3.0 loader has it, older ones do not */
  *(void **)&api->create_with_properties = dlsym(api->lib, "clCreateBufferWithProperties");
  return XFER_E_OK;
}

const char *xfer_cl_error_name(cl_int code)
{
  static const struct { cl_int code; const char *name; } names[] = {
#define N(x) {x, #x}
    N(CL_SUCCESS), N(CL_DEVICE_NOT_FOUND), N(CL_DEVICE_NOT_AVAILABLE),
    N(CL_COMPILER_NOT_AVAILABLE), N(CL_MEM_OBJECT_ALLOCATION_FAILURE),
    N(CL_OUT_OF_RESOURCES), N(CL_OUT_OF_HOST_MEMORY), N(CL_PROFILING_INFO_NOT_AVAILABLE),
    N(CL_MEM_COPY_OVERLAP), N(CL_IMAGE_FORMAT_MISMATCH), N(CL_IMAGE_FORMAT_NOT_SUPPORTED),
    N(CL_BUILD_PROGRAM_FAILURE), N(CL_MAP_FAILURE), N(CL_MISALIGNED_SUB_BUFFER_OFFSET),
    N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST), N(CL_COMPILE_PROGRAM_FAILURE),
    N(CL_LINKER_NOT_AVAILABLE), N(CL_LINK_PROGRAM_FAILURE), N(CL_DEVICE_PARTITION_FAILED),
    N(CL_KERNEL_ARG_INFO_NOT_AVAILABLE), N(CL_INVALID_VALUE), N(CL_INVALID_DEVICE_TYPE),
    N(CL_INVALID_PLATFORM), N(CL_INVALID_DEVICE), N(CL_INVALID_CONTEXT),
    N(CL_INVALID_QUEUE_PROPERTIES), N(CL_INVALID_COMMAND_QUEUE), N(CL_INVALID_HOST_PTR),
    N(CL_INVALID_MEM_OBJECT), N(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR), N(CL_INVALID_IMAGE_SIZE),
    N(CL_INVALID_SAMPLER), N(CL_INVALID_BINARY), N(CL_INVALID_BUILD_OPTIONS),
    N(CL_INVALID_PROGRAM), N(CL_INVALID_PROGRAM_EXECUTABLE), N(CL_INVALID_KERNEL_NAME),
    N(CL_INVALID_KERNEL_DEFINITION), N(CL_INVALID_KERNEL), N(CL_INVALID_ARG_INDEX),
    N(CL_INVALID_ARG_VALUE), N(CL_INVALID_ARG_SIZE), N(CL_INVALID_KERNEL_ARGS),
    N(CL_INVALID_WORK_DIMENSION), N(CL_INVALID_WORK_GROUP_SIZE), N(CL_INVALID_WORK_ITEM_SIZE),
    N(CL_INVALID_GLOBAL_OFFSET), N(CL_INVALID_EVENT_WAIT_LIST), N(CL_INVALID_EVENT),
    N(CL_INVALID_OPERATION), N(CL_INVALID_GL_OBJECT), N(CL_INVALID_BUFFER_SIZE),
    N(CL_INVALID_MIP_LEVEL), N(CL_INVALID_GLOBAL_WORK_SIZE), N(CL_INVALID_PROPERTY),
    N(CL_INVALID_IMAGE_DESCRIPTOR), N(CL_INVALID_COMPILER_OPTIONS), N(CL_INVALID_LINKER_OPTIONS),
    N(CL_INVALID_DEVICE_PARTITION_COUNT), N(CL_PLATFORM_NOT_FOUND_KHR),
#undef N
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].code == code) return names[i].name;
  return "CL_UNKNOWN_ERROR";
}
