/*
** lua_convert.c -- Lua values to tensor elements and back: nested tables, shapes,
** and one element at a time through the core's exact conversions.
*/
#include <stdio.h>
#include <string.h>

#include "binding.h"

/* "[2][3]" for the element at `index` (0-based, `depth` levels) */
static void format_where(char *buf, size_t cap, const int64_t *index, int depth)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < depth && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "[%lld]", (long long)index[i] + 1);
}

void xl_store_value(lua_State *L, int idx, xfer_dtype dtype, void *dst, const char *fname,
                    const char *where)
{
  double v;
  if (lua_type(L, idx) == LUA_TNUMBER)
    v = lua_tonumber(L, idx);
  else if (lua_type(L, idx) == LUA_TBOOLEAN && dtype == XFER_BOOL)
    v = lua_toboolean(L, idx) ? 1.0 : 0.0;
  else if (lua_type(L, idx) == LUA_TBOOLEAN) /* true is no number: say which was meant */
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: element%s is a boolean, expected a number for %s",
                  fname, where, xfer_dtype_name(dtype));
  else
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: element%s is a %s, expected a number or boolean",
                  fname, where, luaL_typename(L, idx));
  xfer_error err;
  if (xfer_value_store(dtype, v, dst, &err)) {
    char why[sizeof err.message];
    snprintf(why, sizeof why, "%s", err.message);
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: element%s: %s", fname, where, why);
  }
}

void xl_table_shape(lua_State *L, int idx, xfer_shape *shape)
{
  memset(shape, 0, sizeof *shape);
  lua_pushvalue(L, idx);
  while (lua_istable(L, -1)) {
    if (shape->ndim == XFER_MAX_DIMS)
      xl_raise_code(L, XFER_E_INVALID, "tensor", "tensor: nested table deeper than %d dimensions",
                    XFER_MAX_DIMS);
    size_t n = lua_objlen(L, -1);
    shape->dims[shape->ndim++] = (int64_t)n;
    if (n == 0) break;
    lua_rawgeti(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
}

/* The table at the top of the stack has the keys 1..want and no other: a key beyond the
** length (a hole before it) or a non-integer key is refused, named. */
static void check_keys(lua_State *L, int64_t want, const int64_t *index, int depth)
{
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    lua_Number k = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
    if (!(k >= 1 && k <= (lua_Number)want && k == (lua_Number)(int64_t)k)) {
      char where[96], key[64];
      format_where(where, sizeof where, index, depth);
      if (lua_type(L, -1) == LUA_TSTRING)
        snprintf(key, sizeof key, "'%.40s'", lua_tostring(L, -1));
      else if (lua_type(L, -1) == LUA_TNUMBER)
        snprintf(key, sizeof key, "%.17g", k);
      else
        snprintf(key, sizeof key, "a %s", luaL_typename(L, -1));
      xl_raise_code(L, XFER_E_INVALID, "tensor",
                    "tensor: the table%s has the key %s: a tensor's table holds the elements 1..%lld "
                    "and nothing else (a hole, or a named field?)",
                    depth ? where : "", key, (long long)want);
    }
  }
}

/* Stores the table at the top of the stack, at nesting level `depth`. */
static void store_level(lua_State *L, const xfer_shape *shape, int depth, int64_t *index,
                        xfer_dtype dtype, char **dst)
{
  char where[96];
  size_t esize = xfer_dtype_size(dtype);
  int64_t want = shape->dims[depth];
  if ((int64_t)lua_objlen(L, -1) != want) {
    format_where(where, sizeof where, index, depth);
    xl_raise_code(L, XFER_E_INVALID, "tensor",
                  "tensor: ragged nested table: element%s has %d entries where %lld were expected",
                  depth ? where : "s at the top", (int)lua_objlen(L, -1), (long long)want);
  }
  check_keys(L, want, index, depth);
  for (index[depth] = 0; index[depth] < want; index[depth]++) {
    lua_rawgeti(L, -1, (int)index[depth] + 1);
    if (lua_isnil(L, -1)) {
      format_where(where, sizeof where, index, depth + 1);
      xl_raise_code(L, XFER_E_INVALID, "tensor", "tensor: element%s is missing (a hole in the table)",
                    where);
    }
    if (depth + 1 < shape->ndim) {
      if (!lua_istable(L, -1)) {
        format_where(where, sizeof where, index, depth + 1);
        xl_raise_code(L, XFER_E_INVALID, "tensor",
                      "tensor: ragged nested table: element%s is a %s where a table of %lld was expected",
                      where, luaL_typename(L, -1), (long long)shape->dims[depth + 1]);
      }
      store_level(L, shape, depth + 1, index, dtype, dst);
    } else {
      if (lua_istable(L, -1)) {
        format_where(where, sizeof where, index, depth + 1);
        xl_raise_code(L, XFER_E_INVALID, "tensor",
                      "tensor: ragged nested table: element%s is a table where a number was expected",
                      where);
      }
      format_where(where, sizeof where, index, depth + 1);
      xl_store_value(L, -1, dtype, *dst, "tensor", where);
      *dst += esize;
    }
    lua_pop(L, 1);
  }
}

void xl_table_store(lua_State *L, int idx, const xfer_shape *shape, xfer_dtype dtype, void *dst)
{
  int64_t index[XFER_MAX_DIMS] = {0};
  char *cursor = dst;
  if (shape->ndim == 0) return;
  lua_pushvalue(L, idx);
  store_level(L, shape, 0, index, dtype, &cursor);
  lua_pop(L, 1);
}

static void push_level(lua_State *L, xfer_dtype dtype, const xfer_shape *shape, int depth,
                       const char **src)
{
  size_t esize = xfer_dtype_size(dtype);
  int64_t n = shape->dims[depth];
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 0; i < n; i++) {
    if (depth + 1 < shape->ndim) {
      push_level(L, dtype, shape, depth + 1, src);
    } else {
      if (dtype == XFER_BOOL)
        lua_pushboolean(L, **src != 0);
      else
        lua_pushnumber(L, xfer_value_load(dtype, *src));
      *src += esize;
    }
    lua_rawseti(L, -2, (int)i + 1);
  }
}

void xl_push_values(lua_State *L, xfer_dtype dtype, const xfer_shape *shape, const void *src,
                    int flat)
{
  const char *cursor = src;
  if (shape->ndim == 0 && !flat) { /* a scalar is its value */
    if (dtype == XFER_BOOL)
      lua_pushboolean(L, *cursor != 0);
    else
      lua_pushnumber(L, xfer_value_load(dtype, cursor));
    return;
  }
  xfer_shape line = {1, {1}};
  if (flat) {
    for (int i = 0; i < shape->ndim; i++) line.dims[0] *= shape->dims[i];
    shape = &line;
  }
  luaL_checkstack(L, shape->ndim + 4, "tensor too deep");
  push_level(L, dtype, shape, 0, &cursor);
}

void xl_check_shape(lua_State *L, int idx, const char *fname, xfer_shape *shape)
{
  memset(shape, 0, sizeof *shape);
  if (lua_type(L, idx) == LUA_TNUMBER) {
    shape->ndim = 1;
    lua_Number d = lua_tonumber(L, idx);
    if (!(d >= 0 && d <= 9.0e15) || d != (lua_Number)(int64_t)d)
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: a dimension must be a whole number >= 0, not %s",
                    fname, lua_tostring(L, idx));
    shape->dims[0] = (int64_t)d;
    return;
  }
  if (!lua_istable(L, idx)) xl_arg_error(L, idx, fname, "shape (table of sizes)");
  size_t n = lua_objlen(L, idx);
  if (n > XFER_MAX_DIMS)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a tensor has at most %d dimensions, not %d",
                  fname, XFER_MAX_DIMS, (int)n);
  shape->ndim = (int)n;
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    lua_Number d = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || !(d >= 0 && d <= 9.0e15) ||
        d != (lua_Number)(int64_t)d)
      xl_raise_code(L, XFER_E_INVALID, fname,
                    "%s: dimension %d must be a whole number >= 0, not %s", fname, (int)i + 1,
                    lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
    shape->dims[i] = (int64_t)d;
    lua_pop(L, 1);
  }
  double elements = 1; /* a product that overflows size_t is refused here, naming fname */
  for (int i = 0; i < shape->ndim; i++) elements *= (double)shape->dims[i];
  if (elements > 9.0e15)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a shape of %.4g elements is more than memory holds",
                  fname, elements);
}
