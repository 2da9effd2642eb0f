-- Packaging: `cmake --install` into a scratch prefix, then what a host application does with
-- it -- find_package(xfer CONFIG) and pkg-config -- and what the libraries export.
local h = require "support.helpers"

local build = h.xferlua():match("^(.*)/[^/]+$") -- the build directory of the binary under test
local root = build:match("^(.*)/[^/]+$")

local function run(cmd)
  local out, code = h.run(cmd)
  assert.are.equal(0, code, cmd .. "\n" .. out)
  return out
end

local prefix
local function installed()
  if not prefix then
    prefix = os.tmpname() .. "-prefix"
    run(("cmake --install '%s' --prefix '%s'"):format(build, prefix))
  end
  return prefix
end

-- the functions a public header declares: name( at the start of a declaration
local function declared(...)
  local names = {}
  for _, header in ipairs({ ... }) do
    local text = assert(io.open(root .. "/include/" .. header)):read("*a")
    for name in text:gmatch("\n[%w_ %*]-[%s%*](xfer[%w_]+)%(") do names[name] = true end
    for name in text:gmatch("\nint (luaopen_xfer)%(") do names[name] = true end
  end
  return names
end

local function exported(lib)
  local names = {}
  for line in run("nm -D --defined-only '" .. lib .. "'"):gmatch("[^\n]+") do
    local kind, name = line:match("^%x+ (%a) (%S+)$")
    if kind == "T" then names[name] = true end
  end
  return names
end

local sanitized = h.sanitized

describe("packaging #packaging", function()
  local busted_it = it
  local function it(name, fn) -- busted's it, pending for a sanitizer build
    busted_it(name, function()
      if sanitized() then
        return pending("a sanitizer build (" .. build .. "): the release build's run checks packaging")
      end
      fn()
    end)
  end
  it("installs headers under include/xfer, the libraries with sonames, a CMake package and .pc files", function()
    local p = installed()
    for _, file in ipairs({ "include/xfer/xfer.h", "include/xfer/xfer_errors.h", "include/xfer/xfer_lua.h",
                            "include/xfer/xfer_files.h", "include/xfer/xfer_remote.h",
                            "lib/cmake/xfer/xferConfig.cmake", "lib/cmake/xfer/xferConfigVersion.cmake",
                            "lib/cmake/xfer/xferTargets.cmake", "lib/pkgconfig/xfer.pc",
                            "lib/pkgconfig/xferlua.pc", "lib/lua/5.1/xfer.so", "bin/xferlua" }) do
      assert.is_truthy(io.open(p .. "/" .. file), file)
    end
    assert.is_truthy(run("readelf -d '" .. p .. "/lib/libxfer.so'"):find("SONAME%)%s+Library soname: %[libxfer%.so%.0%]"))
    assert.is_truthy(run("readelf -d '" .. p .. "/lib/libxferlua.so'"):find("Library soname: %[libxferlua%.so%.0%]"))
  end)

  it("exports exactly what the public headers declare", function()
    local p = installed()
    -- libxfer: the core (xfer.h) and its upper layers, the file endpoints and remote devices
    assert.are.same(declared("xfer.h", "xfer_files.h", "xfer_remote.h"), exported(p .. "/lib/libxfer.so"))
    local lua_api = declared("xfer_lua.h")
    assert.are.same(lua_api, exported(p .. "/lib/libxferlua.so"))
    assert.are.same({ luaopen_xfer = true }, exported(p .. "/lib/lua/5.1/xfer.so"))
  end)

  it("builds and runs a CMake project with find_package(xfer CONFIG) and xfer::xferlua", function()
    local p = installed()
    local dir = os.tmpname() .. "-cmake-consumer"
    run(("cmake -S '%s/examples/consumer' -B '%s' -DCMAKE_PREFIX_PATH='%s'"):format(root, dir, p))
    run(("cmake --build '%s'"):format(dir))
    local out = run(("LD_LIBRARY_PATH='%s/lib' '%s/consumer'"):format(p, dir))
    assert.is_truthy(out:match("^consumer: xferlua 0%.1%.0, %d+ devices, last value back 4%.0\n$"), out)
    run("rm -rf '" .. dir .. "'")
  end)

  it("builds and runs a program with pkg-config --cflags --libs xferlua", function()
    local p = installed()
    local dir = os.tmpname() .. "-pc-consumer"
    run(("mkdir -p '%s' && cp '%s/examples/consumer/consumer.c' '%s/examples/consumer/Makefile' '%s'")
        :format(dir, root, root, dir))
    run(("make -s -C '%s' PKG_CONFIG_PATH='%s/lib/pkgconfig'"):format(dir, p))
    local out = run(("LD_LIBRARY_PATH='%s/lib' '%s/consumer'"):format(p, dir))
    assert.is_truthy(out:match("^consumer: xferlua 0%.1%.0"), out)
    -- the .pc's include directory is one that exists, found from the file's own place
    local cflags = run(("PKG_CONFIG_PATH='%s/lib/pkgconfig' pkg-config --cflags xfer"):format(p))
    local include = cflags:match("%-I(%S+)")
    assert.is_truthy(io.open(include .. "/xfer.h"), cflags)
    run("rm -rf '" .. dir .. "'")
  end)

  it("writes .pc files right for a Debian libdir (lib/x86_64-linux-gnu) and prefix /usr", function()
    local dir = os.tmpname() .. "-debian-layout"
    run(("cmake -S '%s' -B '%s' -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu")
        :format(root, dir))
    local pc = assert(io.open(dir .. "/xfer.pc")):read("*a")
    assert.is_truthy(pc:find("prefix=${pcfiledir}/../../..\n", 1, true), pc)
    assert.is_truthy(pc:find("libdir=${prefix}/lib/x86_64-linux-gnu\n", 1, true), pc)
    assert.is_truthy(pc:find("includedir=${prefix}/include/xfer\n", 1, true), pc)
    run("rm -rf '" .. dir .. "'")
  end)

  it("bakes no path of this machine's LuaJIT into the installed CMake targets", function()
    local p = installed()
    local targets = assert(io.open(p .. "/lib/cmake/xfer/xferTargets.cmake")):read("*a")
    assert.is_falsy(targets:find("luajit-2.1", 1, true), "an absolute LuaJIT path in xferTargets.cmake")
    assert.is_truthy(targets:find("xfer::luajit", 1, true), targets)
  end)

  it("add_subdirectory: a project takes xferlua's source in, links xfer::xfer, includes <xfer/xfer.h>", function()
    if os.getenv("XFER_LUAROCKS_CHECK") ~= "1" then
      return pending("a full build: scripts/test runs it once, in its first spec run (XFER_LUAROCKS_CHECK=1)")
    end
    local dir = os.tmpname() .. "-subdir"
    run(("mkdir -p '%s'"):format(dir))
    local f = assert(io.open(dir .. "/CMakeLists.txt", "w"))
    f:write(("cmake_minimum_required(VERSION 3.18)\nproject(sub LANGUAGES C)\n" ..
             "add_subdirectory(%s xferlua)\nadd_executable(sub main.c)\n" ..
             "target_link_libraries(sub PRIVATE xfer::xfer)\n"):format((run("cd '" .. root .. "' && pwd"):gsub("\n$", ""))))
    f:close()
    f = assert(io.open(dir .. "/main.c", "w"))
    f:write([[
#include <stdio.h>
#include <xfer/xfer.h>
int main(void)
{
  xfer_ctx *ctx;
  xfer_error err;
  if (xfer_ctx_open(&ctx, &err)) return 1;
  printf("devices %zu\n", xfer_device_count(ctx) > 0 ? (size_t)1 : (size_t)0);
  xfer_ctx_release(ctx);
  return 0;
}
]])
    f:close()
    run(("cmake -S '%s' -B '%s/build' >/dev/null && cmake --build '%s/build' -j 2 >/dev/null"):format(dir, dir, dir))
    assert.is_falsy(io.open(dir .. "/build/xferlua/test_core"), "the subproject built its tests")
    local out = run(("'%s/build/sub'"):format(dir))
    assert.are.equal("devices 1\n", out)
    run("rm -rf '" .. dir .. "'")
  end)

  it("luarocks make builds the rock (the module and the xferlua executable), and a plain luajit requires xfer from its tree", function()
    if os.getenv("XFER_LUAROCKS_CHECK") ~= "1" then
      return pending("a full build: scripts/test runs it once, in its first spec run (XFER_LUAROCKS_CHECK=1)")
    end
    local tree = os.tmpname() .. "-rocks"
    local scratch = os.tmpname() .. "-checkout" -- luarocks builds in the directory it is run in
    run(("mkdir -p '%s' && cd '%s' && tar -cf - --exclude='./build*' --exclude=./.git . | tar -xf - -C '%s'")
        :format(scratch, root, scratch))
    local out = run(("cd '%s' && luarocks --lua-version=5.1 --tree='%s' make xferlua-scm-1.rockspec " ..
                     "LUA_INCDIR=/usr/include/luajit-2.1"):format(scratch, tree))
    assert.is_truthy(out:find("xferlua scm-1 is now installed", 1, true), out)
    local got = run(("cd / && LUA_CPATH='%s/lib/lua/5.1/?.so' luajit -e " ..
                     "'local x = require \"xfer\" print(x.version, x.arange(3):to(\"host\"):totable()[3])'"):format(tree))
    assert.are.equal("0.1.0\t2\n", got)
    -- the rock brings the executable too (luarocks puts a wrapper script in bin/)
    got = run(("cd / && '%s/bin/xferlua' -e 'print(xfer.version)'"):format(tree))
    assert.are.equal("0.1.0\n", got)
    run(("rm -rf '%s' '%s'"):format(tree, scratch))
  end)

  teardown(function()
    if prefix then h.run("rm -rf '" .. prefix .. "'") end
  end)
end)
