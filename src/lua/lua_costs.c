/*
** lua_costs.c -- the planner's measured figures from Lua: xfer.set_cost, xfer.costs,
** xfer.forget_costs, xfer.save_costs, xfer.load_costs (xfer.calibrate, in Lua, measures and
** sets them; costs.c keeps them).
*/
#include <string.h>

#include "binding.h"

static xfer_path check_path(lua_State *L, int idx, const char *fname)
{
  const char *name = luaL_checkstring(L, idx);
  size_t len = 0;
  lua_tolstring(L, idx, &len);
  xfer_path path;
  char known[160];
  if (strlen(name) != len || xfer_path_parse(name, &path))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: unknown path '%s' (%s)", fname, name,
                  xl_path_list(known, sizeof known, 0));
  return path;
}

static double check_number(lua_State *L, int idx, const char *fname)
{
  if (lua_type(L, idx) != LUA_TNUMBER) xl_arg_error(L, idx, fname, "number");
  return lua_tonumber(L, idx);
}

/* {{bytes, seconds}, ...} at idx into bytes/seconds: how many (raises on a malformed list) */
static int check_points(lua_State *L, int idx, double *bytes, double *seconds)
{
  int n = (int)lua_objlen(L, idx);
  if (n < 2 || n > XFER_COST_POINTS)
    xl_raise_code(L, XFER_E_INVALID, "set_cost", "set_cost: points are 2 to %d {bytes, seconds} pairs, "
                  "not %d", XFER_COST_POINTS, n);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, idx, i + 1);
    int ok = lua_istable(L, -1);
    if (ok) {
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      ok = lua_type(L, -2) == LUA_TNUMBER && lua_type(L, -1) == LUA_TNUMBER;
      bytes[i] = lua_tonumber(L, -2);
      seconds[i] = lua_tonumber(L, -1);
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
    if (!ok)
      xl_raise_code(L, XFER_E_INVALID, "set_cost", "set_cost: point %d is no {bytes, seconds} pair of numbers",
                    i + 1);
  }
  return n;
}

/* xfer.set_cost(from, to, path, latency_seconds, bandwidth_bytes_per_second), or
** xfer.set_cost(from, to, path, {{bytes, seconds}, ...}): times measured at those sizes */
static int l_set_cost(lua_State *L)
{
  xfer_device *from = xl_check_device(L, 1, "set_cost");
  xfer_device *to = xl_check_device(L, 2, "set_cost");
  xfer_path path = check_path(L, 3, "set_cost");
  if (lua_istable(L, 4)) {
    double bytes[XFER_COST_POINTS], seconds[XFER_COST_POINTS];
    int n = check_points(L, 4, bytes, seconds);
    xfer_error err;
    if (xfer_cost_set_points(xl_ctx(L), from, to, path, bytes, seconds, n, &err)) xl_raise(L, &err);
    return 0;
  }
  double latency = check_number(L, 4, "set_cost"), bandwidth = check_number(L, 5, "set_cost");
  xfer_error err;
  if (xfer_cost_set(xl_ctx(L), from, to, path, latency, bandwidth, &err)) xl_raise(L, &err);
  return 0;
}

/* xfer.costs(): {{from, to, path, latency, bandwidth, when[, points]}, ...} */
static int l_costs(lua_State *L)
{
  xl_no_args(L, "costs");
  xfer_ctx *ctx = xl_ctx(L);
  size_t n = xfer_costs_list(ctx, NULL, 0);
  xfer_cost *list = n ? lua_newuserdata(L, n * sizeof *list) : NULL;
  size_t now = n ? xfer_costs_list(ctx, list, n) : 0;
  if (now < n) n = now; /* forgotten meanwhile */
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 6);
    xl_set_move(L, list[i].from, list[i].to, list[i].path);
    lua_pushnumber(L, list[i].latency);
    lua_setfield(L, -2, "latency");
    lua_pushnumber(L, list[i].bandwidth);
    lua_setfield(L, -2, "bandwidth");
    lua_pushnumber(L, (lua_Number)list[i].when);
    lua_setfield(L, -2, "when");
    if (list[i].npoints) {
      lua_createtable(L, list[i].npoints, 0);
      for (int k = 0; k < list[i].npoints; k++) {
        lua_createtable(L, 2, 0);
        lua_pushnumber(L, list[i].bytes[k]);
        lua_rawseti(L, -2, 1);
        lua_pushnumber(L, list[i].seconds[k]);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, k + 1);
      }
      lua_setfield(L, -2, "points");
    }
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int l_forget_costs(lua_State *L)
{
  xl_no_args(L, "forget_costs");
  xfer_costs_forget(xl_ctx(L));
  return 0;
}

/* an optional file name at idx: NULL for the cache file */
static const char *opt_file(lua_State *L, int idx, const char *fname)
{
  if (lua_isnoneornil(L, idx)) return NULL;
  if (lua_type(L, idx) != LUA_TSTRING) xl_arg_error(L, idx, fname, "file name (string)");
  size_t len;
  const char *file = lua_tolstring(L, idx, &len);
  if (!len || strlen(file) != len)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a file name, not empty and without NUL bytes",
                  fname);
  return file;
}

/* xfer.save_costs([file]): the cache file by default */
static int l_save_costs(lua_State *L)
{
  const char *file = opt_file(L, 1, "save_costs");
  xfer_error err;
  if (xfer_costs_save(xl_ctx(L), file, &err)) xl_raise(L, &err);
  return 0;
}

/* xfer.load_costs([file]) -> how many figures of devices here it held */
static int l_load_costs(lua_State *L)
{
  const char *file = opt_file(L, 1, "load_costs");
  size_t loaded = 0;
  xfer_error err;
  if (xfer_costs_load(xl_ctx(L), file, &loaded, &err)) xl_raise(L, &err);
  lua_pushnumber(L, (lua_Number)loaded);
  return 1;
}

void xl_open_costs(lua_State *L, int module)
{
  static const luaL_Reg fns[] = {
    {"set_cost", l_set_cost}, {"costs", l_costs}, {"forget_costs", l_forget_costs},
    {"save_costs", l_save_costs}, {"load_costs", l_load_costs}, {NULL, NULL},
  };
  lua_pushvalue(L, module);
  luaL_register(L, NULL, fns);
  lua_pop(L, 1);
}
