/*
** embed.c -- a host application that embeds xferlua. It opens the core itself, makes a
** tensor in C, hands both to a Lua state, lets a script move the tensor (catching an
** injected failure and falling back), and reads the result back in C.
**
**   cc embed.c $(pkg-config --cflags --libs xferlua) -o embed       (after cmake --install)
**   build/xfer_embed [script.lua]                                   (built with the project)
*/
#include <stdio.h>

#include <lauxlib.h>
#include <lualib.h>

#include "xfer.h"
#include "xfer_lua.h"

static const char *default_script =
  "local xfer = require 'xfer'\n"
  "print('lua sees', input)\n"
  "xfer.faults.inject{runtime = 'host', op = 'read'}\n"
  "local ok, e = pcall(xfer.host_roundtrip, input, 'host')\n"
  "print('caught', e.code, e.message)\n"
  "output = xfer.host_roundtrip(input, 'host')\n";

int main(int argc, char **argv)
{
  xfer_ctx *ctx;
  xfer_error err;
  if (xfer_ctx_open(&ctx, &err)) {
    fprintf(stderr, "xfer: %s\n", err.message);
    return 1;
  }
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  xfer_lua_set_context(L, ctx); /* Lua and C share devices, tensors and fault rules */
  xfer_lua_preload(L);

  float values[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  xfer_shape shape = {1, {4}};
  xfer_tensor *input;
  if (xfer_tensor_from_bytes(xfer_device_at(ctx, 0), XFER_F32, &shape, values, sizeof values,
                             &input, &err)) {
    fprintf(stderr, "xfer: %s\n", err.message);
    return 1;
  }
  xfer_lua_push_tensor(L, input);
  lua_setglobal(L, "input");

  int status = argc > 1 ? luaL_dofile(L, argv[1]) : luaL_dostring(L, default_script);
  if (status) {
    /* xfer errors are tables; their message field says what happened */
    if (lua_istable(L, -1)) lua_getfield(L, -1, "message");
    fprintf(stderr, "script failed: %s\n", lua_tostring(L, -1));
  } else {
    lua_getglobal(L, "output");
    xfer_tensor *output = xfer_lua_to_tensor(L, -1);
    float back[4] = {0};
    if (output && xfer_tensor_read(output, back, sizeof back, &err) == XFER_E_OK)
      printf("C reads back %.1f %.1f %.1f %.1f\n", back[0], back[1], back[2], back[3]);
    else
      status = 1;
  }
  lua_close(L);
  xfer_tensor_release(input);
  xfer_ctx_release(ctx);
  return status ? 1 : 0;
}
