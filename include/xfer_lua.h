/*
** xfer_lua.h -- embedding xferlua's Lua binding in a host application.
**
**   lua_State *L = luaL_newstate();
**   luaL_openlibs(L);
**   xfer_lua_preload(L);            -- scripts can now `require "xfer"`
**
** A host that already opened an xfer_ctx (xfer.h) can hand it over first with
** xfer_lua_set_context(L, ctx), so Lua and C see the same devices and tensors.
*/
#ifndef XFER_LUA_H
#define XFER_LUA_H

#include <lua.h>

#include "xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is its API, the
** only symbols it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* The module opener: returns the `xfer` table. Safe to call more than once per state. */
int luaopen_xfer(lua_State *L);
/* Registers luaopen_xfer in package.preload["xfer"]. */
void xfer_lua_preload(lua_State *L);
/* Makes `ctx` the context this state's `xfer` uses (takes a reference). Call before the
** first require "xfer"; returns 0, or -1 when the state already has a context. */
int xfer_lua_set_context(lua_State *L, xfer_ctx *ctx);
/* Pushes a tensor as the Lua userdata `xfer.Tensor` (takes a reference). */
void xfer_lua_push_tensor(lua_State *L, xfer_tensor *t);
/* The tensor at `idx` or NULL (no reference taken). */
xfer_tensor *xfer_lua_to_tensor(lua_State *L, int idx);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
