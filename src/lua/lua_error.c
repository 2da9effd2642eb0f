/*
** lua_error.c -- xfer.Error objects: tables whose fields are an xfer_error's, with a
** metatable whose __tostring is the message, so `pcall` hands scripts a value.
*/
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

static int error_tostring(lua_State *L);
static int error_concat(lua_State *L);

static void error_metatable(lua_State *L)
{
  if (luaL_newmetatable(L, XL_ERROR)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, error_concat);
    lua_setfield(L, -2, "__concat");
    lua_pushliteral(L, XL_ERROR);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
}

/* "script.lua:12": the line of the script that called into xferlua -- the innermost Lua
** function that is not xferlua's own Lua (lua/xfer/...) -- or "?" from C alone. */
static void push_where(lua_State *L)
{
  lua_Debug ar;
  for (int level = 0; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue;
    if (!strncmp(ar.source, "@lua/xfer/", 10)) continue;
    lua_pushfstring(L, "%s:%d", ar.short_src, ar.currentline);
    return;
  }
  lua_pushliteral(L, "?");
}

void xl_push_error(lua_State *L, const xfer_error *err)
{
  error_metatable(L);
  lua_createtable(L, 0, 12);
  lua_pushstring(L, xfer_code_name(err->code));
  lua_setfield(L, -2, "code");
  lua_pushstring(L, xfer_code_what(err->code));
  lua_setfield(L, -2, "what");
  if (err->element > 0) { /* a batch's element, from 1 */
    lua_pushnumber(L, (lua_Number)err->element);
    lua_setfield(L, -2, "element");
  }
  if (err->file[0]) { /* a file endpoint's: which file, which tensor, which byte */
    lua_pushstring(L, err->file);
    lua_setfield(L, -2, "file");
    if (err->tensor[0]) {
      lua_pushstring(L, err->tensor);
      lua_setfield(L, -2, "tensor");
    }
    if (err->offset >= 0) {
      lua_pushnumber(L, (lua_Number)err->offset);
      lua_setfield(L, -2, "offset");
    }
  }
  lua_pushstring(L, err->op);
  lua_setfield(L, -2, "op");
  lua_pushstring(L, err->from);
  lua_setfield(L, -2, "from");
  lua_pushstring(L, err->to);
  lua_setfield(L, -2, "to");
  lua_pushstring(L, err->device);
  lua_setfield(L, -2, "device");
  lua_pushnumber(L, (lua_Number)err->native);
  lua_setfield(L, -2, "native");
  lua_pushstring(L, err->native_name);
  lua_setfield(L, -2, "native_name");
  lua_pushboolean(L, err->retryable);
  lua_setfield(L, -2, "retryable");
  lua_pushboolean(L, err->injected);
  lua_setfield(L, -2, "injected");
  lua_pushstring(L, err->message);
  lua_setfield(L, -2, "message");
  push_where(L);
  lua_setfield(L, -2, "where");
  luaL_getmetatable(L, XL_ERROR);
  lua_setmetatable(L, -2);
}

void xl_raise(lua_State *L, const xfer_error *err)
{
  xl_push_error(L, err);
  lua_error(L);
  for (;;) {} /* lua_error does not return; this tells the compiler so */
}

void xl_raise_code(lua_State *L, xfer_code code, const char *op, const char *fmt, ...)
{
  xfer_error err;
  memset(&err, 0, sizeof err);
  err.code = code;
  snprintf(err.op, sizeof err.op, "%s", op);
  err.op_id = xfer_op_of(op);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err.message, sizeof err.message, fmt, ap);
  va_end(ap);
  xl_raise(L, &err);
}

void xl_arg_error(lua_State *L, int arg, const char *fname, const char *what)
{
  xl_raise_code(L, XFER_E_INVALID, fname, "bad argument #%d to '%s' (%s expected, got %s)", arg,
                fname, what, luaL_typename(L, arg));
}

void xl_check_options(lua_State *L, int idx, const char *fname, const char *const *keys)
{
  if (lua_isnoneornil(L, idx)) return;
  if (!lua_istable(L, idx)) xl_arg_error(L, idx, fname, "options table");
  for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
    const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    const char *const *k = keys;
    while (key && *k && strcmp(*k, key)) k++;
    if (!key || !*k) {
      lua_pushvalue(L, -2);
      const char *shown = lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER
                              ? lua_tostring(L, -1) : luaL_typename(L, -1);
      char known[160] = "";
      size_t used = 0;
      for (k = keys; *k && used < sizeof known; k++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
                                 k == keys ? "" : ", ", *k);
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: unknown option '%s' (known: %s)", fname,
                    shown, known);
    }
  }
}

const char *xl_opt_string(lua_State *L, int idx, const char *fname, const char *key,
                          const char *def)
{
  if (lua_isnoneornil(L, idx)) return def;
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return def;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: option '%s' must be a string, not a %s", fname,
                  key, luaL_typename(L, -1));
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  if (strlen(s) != len) /* "bool\0x" must not pass for "bool" */
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: option '%s' contains a NUL byte", fname, key);
  lua_pop(L, 1); /* the options table still holds the string */
  return s;
}

int xl_opt_flag(lua_State *L, int idx, const char *fname, const char *key)
{
  if (lua_isnoneornil(L, idx)) return 0;
  lua_getfield(L, idx, key);
  int type = lua_type(L, -1), on = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (type == LUA_TNIL) return 0;
  if (type != LUA_TBOOLEAN)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: option '%s' must be true or false", fname, key);
  return on ? 1 : -1;
}

void xl_no_args_after(lua_State *L, int n, const char *fname)
{
  if (lua_gettop(L) > n)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s takes no arguments (got %d)", fname,
                  lua_gettop(L) - n);
}

void xl_no_args(lua_State *L, const char *fname)
{
  if (lua_gettop(L) > 0)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s takes no arguments (got %d)", fname,
                  lua_gettop(L));
}

int xl_read_only(lua_State *L)
{
  const char *what = luaL_typename(L, 1);
  if (lua_getmetatable(L, 1)) {
    lua_getfield(L, -1, "__name");
    if (lua_isstring(L, -1)) what = lua_tostring(L, -1);
  }
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2);
  xl_raise_code(L, XFER_E_INVALID, "newindex", "%s fields are read-only: cannot set '%s'%s", what,
                key, strcmp(what, XL_TENSOR) ? "" : " (methods of your own go in xfer.Tensor)");
}

static int error_tostring(lua_State *L)
{
  lua_getfield(L, 1, "message");
  if (!lua_isstring(L, -1)) lua_pushliteral(L, "xfer error");
  return 1;
}

static int has_metatable(lua_State *L, int idx, const char *name)
{
  if (!lua_getmetatable(L, idx)) return 0;
  luaL_getmetatable(L, name);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* "prefix: " .. e and e .. "": the message stands for the error, as tostring(e) does. */
static int error_concat(lua_State *L)
{
  for (int i = 1; i <= 2; i++) {
    if (lua_istable(L, i) && has_metatable(L, i, XL_ERROR)) {
      lua_getfield(L, i, "message");
      if (!lua_isstring(L, -1)) {
        lua_pop(L, 1);
        lua_pushliteral(L, "xfer error");
      }
    } else if (lua_type(L, i) == LUA_TSTRING || lua_type(L, i) == LUA_TNUMBER) {
      lua_pushvalue(L, i);
    } else {
      return luaL_error(L, "attempt to concatenate an xfer.Error with a %s", luaL_typename(L, i));
    }
  }
  lua_concat(L, 2);
  return 1;
}

void *xl_test_udata(lua_State *L, int idx, const char *name)
{
  void *p = lua_touserdata(L, idx);
  return p && has_metatable(L, idx, name) ? p : NULL;
}

static int is_error(lua_State *L)
{
  lua_pushboolean(L, lua_istable(L, 1) && has_metatable(L, 1, XL_ERROR));
  return 1;
}

/* xfer.error{code=, message=, op=, from=, to=, ...}: an xfer.Error made in Lua, so that
** policies written in Lua raise what the C side raises. */
static int make_error(lua_State *L)
{
  if (!lua_istable(L, 1)) xl_arg_error(L, 1, "error", "table {code=, message=, ...}");
  xfer_error err;
  memset(&err, 0, sizeof err);
  lua_getfield(L, 1, "code");
  const char *code = lua_tostring(L, -1);
  err.code = XFER_E__COUNT;
  for (int c = XFER_E_READ; code && c < XFER_E__COUNT; c++)
    if (!strcmp(code, xfer_code_name((xfer_code)c))) err.code = (xfer_code)c;
  if (err.code == XFER_E__COUNT)
    xl_raise_code(L, XFER_E_INVALID, "error", "error: unknown code '%s' (see xfer.codes)",
                  code ? code : "nil");
  static const struct { const char *key; size_t offset, size; } texts[] = {
    {"op", offsetof(xfer_error, op), sizeof err.op},
    {"from", offsetof(xfer_error, from), sizeof err.from},
    {"to", offsetof(xfer_error, to), sizeof err.to},
    {"device", offsetof(xfer_error, device), sizeof err.device},
    {"native_name", offsetof(xfer_error, native_name), sizeof err.native_name},
    {"message", offsetof(xfer_error, message), sizeof err.message},
    {"file", offsetof(xfer_error, file), sizeof err.file},
    {"tensor", offsetof(xfer_error, tensor), sizeof err.tensor},
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    lua_getfield(L, 1, texts[i].key);
    const char *text = lua_tostring(L, -1);
    if (text) snprintf((char *)&err + texts[i].offset, texts[i].size, "%s", text);
    lua_pop(L, 1);
  }
  lua_getfield(L, 1, "native");
  err.native = (long long)lua_tonumber(L, -1);
  lua_getfield(L, 1, "offset");
  err.offset = lua_isnumber(L, -1) ? (long long)lua_tonumber(L, -1) : -1;
  lua_getfield(L, 1, "element");
  err.element = lua_isnumber(L, -1) ? (long long)lua_tonumber(L, -1) : 0;
  lua_getfield(L, 1, "retryable");
  err.retryable = lua_toboolean(L, -1);
  lua_getfield(L, 1, "injected");
  err.injected = lua_toboolean(L, -1);
  xl_push_error(L, &err);
  return 1;
}

void xl_open_error(lua_State *L, int module)
{
  error_metatable(L);
  lua_pushcfunction(L, is_error);
  lua_setfield(L, module, "is_error");
  lua_pushcfunction(L, make_error);
  lua_setfield(L, module, "error");
  /* xfer.codes: the code names, for scripts that branch on e.code */
  lua_newtable(L);
  for (int c = XFER_E_READ; c < XFER_E__COUNT; c++) {
    lua_pushstring(L, xfer_code_name((xfer_code)c));
    lua_rawseti(L, -2, c);
  }
  lua_setfield(L, module, "codes");
}

/* opts.timeout: seconds (> 0), or false for none; absent: 0 (xfer.config's) */
double xl_opt_timeout(lua_State *L, int opts, const char *fname)
{
  if (lua_isnoneornil(L, opts)) return 0;
  lua_getfield(L, opts, "timeout");
  int type = lua_type(L, -1), truth = lua_toboolean(L, -1);
  double v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (type == LUA_TNIL) return 0;
  if (type == LUA_TBOOLEAN && !truth) return -1;
  if (type != LUA_TNUMBER || !(v > 0 && v <= 86400))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: option 'timeout' must be seconds (0 to 86400, "
                  "not 0) or false for none", fname);
  return v;
}
