-- luarocks make: builds xferlua's Lua module (xfer.so, for LuaJIT) and the `xferlua`
-- executable with CMake and installs them into the rock tree, so that a plain `luajit` can
-- `require "xfer"` and the tree's bin/ has `xferlua`.
rockspec_format = "3.0"
package = "xferlua"
version = "scm-1"
source = {
  url = "git+file:///dev/null", -- built from a checkout: `luarocks make` in its root
}
description = {
  summary = "Move tensors between host, CUDA, Vulkan and OpenCL from LuaJIT; failures are values",
  detailed = [[
xferlua's C core and Lua binding as the module `xfer`: devices, tensors, views and moves
between runtimes (CUDA, Vulkan and OpenCL drivers are opened at run time), with structured
errors a script catches with pcall.]],
  homepage = "https://example.invalid/xferlua",
  license = "MIT", -- LICENSE
}
dependencies = {
  "lua == 5.1", -- LuaJIT
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    XFER_LUAROCKS_LIBDIR = "$(LIBDIR)",
    XFER_LUAROCKS_BINDIR = "$(BINDIR)",
    XFER_WERROR = "OFF",
  },
}
