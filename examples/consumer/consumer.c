/*
** consumer.c -- a program built against an installed xferlua, the way a host application
** is: through CMake (CMakeLists.txt here: find_package(xfer CONFIG), xfer::xferlua) or
** pkg-config (Makefile here: pkg-config --cflags --libs xferlua). It moves a tensor in C,
** then lets a Lua state move it back, and checks the values.
*/
#include <stdio.h>

#include <lauxlib.h>
#include <lualib.h>

#include <xfer/xfer.h>     /* also "xfer.h": both include directories are given */
#include <xfer/xfer_lua.h>

int main(void)
{
  xfer_ctx *ctx;
  xfer_error err;
  if (xfer_ctx_open(&ctx, &err)) {
    fprintf(stderr, "consumer: %s\n", err.message);
    return 1;
  }
  xfer_device *host;
  xfer_tensor *t;
  xfer_shape shape = {1, {4}};
  float values[4] = {1, 2, 3, 4};
  if (xfer_device_find(ctx, "host", &host, &err) ||
      xfer_tensor_from_bytes(host, XFER_F32, &shape, values, sizeof values, &t, &err)) {
    fprintf(stderr, "consumer: %s\n", err.message);
    return 1;
  }
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  xfer_lua_preload(L);
  xfer_lua_set_context(L, ctx);
  xfer_lua_push_tensor(L, t);
  lua_setglobal(L, "input");
  const char *script = "local xfer = require 'xfer'\n"
                       "local devices = xfer.devices()\n"
                       "local there = input:to(devices[#devices])\n"
                       "return there:to('host'):totable()[4], #devices, xfer.version\n";
  if (luaL_dostring(L, script)) {
    fprintf(stderr, "consumer: %s\n", lua_tostring(L, -1));
    return 1;
  }
  printf("consumer: xferlua %s, %d devices, last value back %.1f\n", lua_tostring(L, -1),
         (int)lua_tointeger(L, -2), lua_tonumber(L, -3));
  lua_close(L);
  xfer_tensor_release(t);
  xfer_ctx_release(ctx);
  return 0;
}
