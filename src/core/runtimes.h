/*
** runtimes.h -- the runtimes xferlua knows, one line each, in the order xfer.runtimes() lists
** them: XFER_RUNTIME_LIST(X) calls X(name, missing) for each. The runtime's table is
** xfer_backend_<name>, defined in its folder under src/backends/; a build without that folder
** (its headers were missing) lists the runtime unavailable, saying `missing`. This list is
** expanded into the tables' declarations (backend.h), their count (types.h) and the context's
** table (context.c). Adding a runtime: its folder, a line here, its sources in
** CMakeLists.txt (docs/architecture.md, "Adding a runtime"). Nothing outside a runtime's
** folder names it: what the core needs to know of one is in its table (types.h: the memory a
** wrap of it takes, its DLPack device type, an alias).
*/
#ifndef XFER_RUNTIMES_H
#define XFER_RUNTIMES_H

#define XFER_RUNTIME_LIST(X)                                                                 \
  X(host, NULL)                                                                              \
  X(cuda, "built without cuda.h (install the CUDA Toolkit and rebuild)")                     \
  X(vulkan, "built without Vulkan headers (install libvulkan-dev and rebuild)")              \
  X(opencl, "built without OpenCL headers (install opencl-headers and rebuild)")             \
  /* last: its devices come with xfer_connect, after every other runtime's */                \
  X(remote, "built without UCX headers (install libucx-dev and rebuild)")

#endif
