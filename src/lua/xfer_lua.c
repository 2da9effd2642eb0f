/*
** xfer_lua.c -- the `xfer` module, at the top of the binding: it opens every part (each
** below it), puts xfer.Tensor's metatable together from theirs, and has the module's own
** functions -- runtimes, stats, health, settings, fault injection -- and the Lua files shipped
** inside the binding. The state's context is lua_common.c's.
*/
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "binding.h"
#include "embedded.h"

/* -- Runtimes -------------------------------------------------------------- */

static int l_runtimes(lua_State *L)
{
  xl_no_args(L, "runtimes");
  xfer_ctx *ctx = xl_ctx(L);
  size_t n = xfer_runtime_count(ctx);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    xfer_runtime_info info;
    xfer_error err;
    if (xfer_runtime_get(ctx, i, &info, &err)) xl_raise(L, &err);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, info.name);
    lua_setfield(L, -2, "name");
    lua_pushboolean(L, info.available);
    lua_setfield(L, -2, "available");
    lua_pushstring(L, info.reason);
    lua_setfield(L, -2, "reason");
    lua_pushinteger(L, (lua_Integer)info.device_count);
    lua_setfield(L, -2, "devices");
    lua_pushnumber(L, (lua_Number)info.objects);
    lua_setfield(L, -2, "objects");
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* -- Stats, trace, settings ------------------------------------------------------------ */

static int l_stats(lua_State *L)
{
  xl_no_args(L, "stats");
  xfer_ctx *ctx = xl_ctx(L);
  xfer_stat stats[256];
  size_t n = xfer_stats(ctx, stats, sizeof stats / sizeof stats[0]);
  if (n > sizeof stats / sizeof stats[0]) n = sizeof stats / sizeof stats[0];
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 6);
    xl_set_move(L, stats[i].from, stats[i].to, stats[i].path);
    if (stats[i].runner[0]) {
      lua_pushstring(L, stats[i].runner);
      lua_setfield(L, -2, "runner");
    }
    lua_pushnumber(L, (lua_Number)stats[i].count);
    lua_setfield(L, -2, "count");
    lua_pushnumber(L, (lua_Number)stats[i].bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushnumber(L, stats[i].seconds);
    lua_setfield(L, -2, "seconds");
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int l_stats_reset(lua_State *L)
{
  xl_no_args(L, "stats_reset");
  xfer_stats_reset(xl_ctx(L));
  return 0;
}

/* xfer.empty_cache([dev]): one device's cache, or every device's. */
static int l_empty_cache(lua_State *L)
{
  xfer_device *dev = lua_isnoneornil(L, 1) ? NULL : xl_check_device(L, 1, "empty_cache");
  xfer_empty_cache(xl_ctx(L), dev);
  return 0;
}

/* xfer.health(): what the planner set aside ({from, to, path, failures, injected, when,
** reason}), the devices lost, and how often a set-aside path was passed over. */
static int l_health(lua_State *L)
{
  xl_no_args(L, "health");
  xfer_ctx *ctx = xl_ctx(L);
  uint64_t decisions = 0;
  size_t n = xfer_health(ctx, NULL, 0, &decisions);
  xfer_health_info *info = n ? lua_newuserdata(L, n * sizeof *info) : NULL;
  size_t now = n ? xfer_health(ctx, info, n, &decisions) : 0; /* fewer, if forgotten meanwhile */
  if (now < n) n = now;
  lua_createtable(L, 0, 3);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 7);
    xl_set_move(L, info[i].from, info[i].to, info[i].path);
    if (info[i].runner[0]) {
      lua_pushstring(L, info[i].runner);
      lua_setfield(L, -2, "runner");
    }
    lua_pushinteger(L, info[i].failures);
    lua_setfield(L, -2, "failures");
    lua_pushboolean(L, info[i].injected);
    lua_setfield(L, -2, "injected");
    lua_pushnumber(L, (lua_Number)info[i].when);
    lua_setfield(L, -2, "when");
    lua_pushstring(L, info[i].reason);
    lua_setfield(L, -2, "reason");
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "set_aside");
  lua_newtable(L);
  int lost = 0;
  for (size_t d = 0; d < xfer_device_count(ctx); d++) {
    xfer_device *dev = xfer_device_at(ctx, d);
    xfer_error err;
    if (xfer_device_is_lost(dev)) {
      xfer_device_info di;
      if (!xfer_device_get_info(dev, &di, &err)) {
        lua_pushstring(L, di.name);
        lua_rawseti(L, -2, ++lost);
      }
    }
  }
  lua_setfield(L, -2, "lost");
  lua_pushnumber(L, (lua_Number)decisions);
  lua_setfield(L, -2, "decisions");
  return 1;
}

/* xfer.forget_failures([from, to]): what the planner remembers of those pairs (every pair by
** default) is forgotten. */
static int l_forget_failures(lua_State *L)
{
  xfer_device *from = lua_isnoneornil(L, 1) ? NULL : xl_check_device(L, 1, "forget_failures");
  xfer_device *to = lua_isnoneornil(L, 2) ? NULL : xl_check_device(L, 2, "forget_failures");
  xfer_forget_failures(xl_ctx(L), from, to);
  return 0;
}

/* xfer.synchronize(): waits for every move started with to_async, detached ones too. */
static int l_synchronize(lua_State *L)
{
  xl_no_args(L, "synchronize");
  xfer_synchronize(xl_ctx(L));
  xl_drain_owners(L); /* what the moves that ended let go of */
  return 0;
}

static int l_trace(lua_State *L)
{
  if (lua_type(L, 1) != LUA_TBOOLEAN) xl_arg_error(L, 1, "trace", "boolean");
  xfer_trace(xl_ctx(L), lua_toboolean(L, 1));
  return 0;
}

/* -- xfer.config: the settings, as a table of what each is -------------------------------- */

typedef enum {
  SETTING_BYTES,    /* a whole number >= 0 in a size_t or uint64_t */
  SETTING_COUNT,    /* a whole number >= 0 in an int */
  SETTING_FLAG,     /* a boolean in an int */
  SETTING_SECONDS   /* a number in a double */
} setting_kind;

#define SETTING(field, kind) {#field, kind, offsetof(xfer_config, field), sizeof(((xfer_config *)0)->field)}
static const struct {
  const char *key;
  setting_kind kind;
  size_t at, size;  /* the field in xfer_config */
} settings[] = {
  SETTING(staging_chunk, SETTING_BYTES), SETTING(staging_depth, SETTING_COUNT),
  SETTING(cache, SETTING_FLAG), SETTING(cache_limit, SETTING_BYTES),
  SETTING(setaside_after, SETTING_COUNT), SETTING(remote_timeout, SETTING_SECONDS),
  SETTING(remote_chunk, SETTING_BYTES), SETTING(remote_depth, SETTING_COUNT),
  SETTING(remote_device_chunk, SETTING_BYTES), SETTING(verify, SETTING_FLAG),
  SETTING(timeout, SETTING_SECONDS),
};
#undef SETTING
#define NSETTINGS (sizeof settings / sizeof settings[0])

/* The value at the top of the stack into setting i of cfg, or raises saying what it takes (the
** core checks the ranges). */
static void setting_store(lua_State *L, size_t i, xfer_config *cfg)
{
  char *field = (char *)cfg + settings[i].at;
  const char *key = settings[i].key;
  lua_Number v = lua_tonumber(L, -1);
  if (settings[i].kind == SETTING_FLAG) {
    if (!lua_isboolean(L, -1))
      xl_raise_code(L, XFER_E_INVALID, "config", "config: '%s' must be a boolean, not %s", key,
                    luaL_typename(L, -1));
    int flag = lua_toboolean(L, -1);
    memcpy(field, &flag, sizeof flag);
  } else if (settings[i].kind == SETTING_SECONDS) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      xl_raise_code(L, XFER_E_INVALID, "config", "config: '%s' must be a number of seconds, not %s",
                    key, luaL_typename(L, -1));
    double seconds = v;
    memcpy(field, &seconds, sizeof seconds);
  } else {
    if (lua_type(L, -1) != LUA_TNUMBER || v != (lua_Number)(int64_t)v || v < 0)
      xl_raise_code(L, XFER_E_INVALID, "config", "config: '%s' must be a whole number", key);
    if (settings[i].kind == SETTING_COUNT) {
      int count = v > 10000000 ? 10000000 : (int)v; /* the core refuses it, saying its range */
      memcpy(field, &count, sizeof count);
    } else if (settings[i].size == sizeof(size_t)) {
      size_t bytes = (size_t)v;
      memcpy(field, &bytes, sizeof bytes);
    } else {
      uint64_t bytes = (uint64_t)v;
      memcpy(field, &bytes, sizeof bytes);
    }
  }
}

static void setting_push(lua_State *L, size_t i, const xfer_config *cfg)
{
  const char *field = (const char *)cfg + settings[i].at;
  int whole;
  double seconds;
  size_t bytes;
  uint64_t wide;
  switch (settings[i].kind) {
  case SETTING_FLAG:
    memcpy(&whole, field, sizeof whole);
    lua_pushboolean(L, whole);
    break;
  case SETTING_COUNT:
    memcpy(&whole, field, sizeof whole);
    lua_pushinteger(L, whole);
    break;
  case SETTING_SECONDS:
    memcpy(&seconds, field, sizeof seconds);
    lua_pushnumber(L, seconds);
    break;
  default:
    if (settings[i].size == sizeof(size_t)) {
      memcpy(&bytes, field, sizeof bytes);
      lua_pushnumber(L, (lua_Number)bytes);
    } else {
      memcpy(&wide, field, sizeof wide);
      lua_pushnumber(L, (lua_Number)wide);
    }
  }
}

/* xfer.config{staging_chunk=, ..., remote_device_chunk=} sets what it names; returns the
** settings. */
static int l_config(lua_State *L)
{
  const char *keys[NSETTINGS + 1];
  for (size_t i = 0; i < NSETTINGS; i++) keys[i] = settings[i].key;
  keys[NSETTINGS] = NULL;
  xfer_ctx *ctx = xl_ctx(L);
  xfer_config cfg;
  xfer_config_get(ctx, &cfg);
  if (!lua_isnoneornil(L, 1)) {
    xl_check_options(L, 1, "config", keys);
    for (size_t i = 0; i < NSETTINGS; i++) {
      lua_getfield(L, 1, settings[i].key);
      if (!lua_isnil(L, -1)) setting_store(L, i, &cfg);
      lua_pop(L, 1);
    }
    xfer_error err;
    if (xfer_config_set(ctx, &cfg, &err)) xl_raise(L, &err);
  }
  lua_createtable(L, 0, (int)NSETTINGS);
  for (size_t i = 0; i < NSETTINGS; i++) {
    setting_push(L, i, &cfg);
    lua_setfield(L, -2, settings[i].key);
  }
  return 1;
}

/* -- Fault injection -------------------------------------------------------------------- */

static void copy_name_field(lua_State *L, const char *key, char *dst, size_t cap)
{
  lua_getfield(L, 1, key);
  if (lua_type(L, -1) != LUA_TSTRING)
    xl_raise_code(L, XFER_E_INVALID, "inject", "faults.inject: '%s' must be a string, not %s",
                  key, luaL_typename(L, -1));
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  if (strlen(s) != len)
    xl_raise_code(L, XFER_E_INVALID, "inject", "faults.inject: '%s' contains a NUL byte", key);
  if (len >= cap)
    xl_raise_code(L, XFER_E_INVALID, "inject", "faults.inject: '%s' is too long: '%s'", key, s);
  memcpy(dst, s, len + 1);
  lua_pop(L, 1);
}

static int int_field(lua_State *L, const char *key, int def)
{
  lua_getfield(L, 1, key);
  int v = def;
  if (!lua_isnil(L, -1)) {
    lua_Number n = lua_tonumber(L, -1);
    /* range first: converting a double beyond int is undefined */
    if (lua_type(L, -1) != LUA_TNUMBER || !(n >= INT_MIN && n <= INT_MAX) || n != (lua_Number)(int)n)
      xl_raise_code(L, XFER_E_INVALID, "inject",
                    "faults.inject: '%s' must be a whole number from %d to %d", key, INT_MIN,
                    INT_MAX);
    v = (int)n;
  }
  lua_pop(L, 1);
  return v;
}

static int l_faults_inject(lua_State *L)
{
  static const char *const keys[] = {"runtime", "op", "nth", "count", "native", NULL};
  if (!lua_istable(L, 1))
    xl_arg_error(L, 1, "inject", "table {runtime=, op=, nth=, count=, native=}");
  xl_check_options(L, 1, "inject", keys);
  xfer_fault fault;
  memset(&fault, 0, sizeof fault);
  copy_name_field(L, "runtime", fault.runtime, sizeof fault.runtime);
  copy_name_field(L, "op", fault.op, sizeof fault.op);
  fault.nth = int_field(L, "nth", 1);
  fault.count = int_field(L, "count", 1);
  fault.native = int_field(L, "native", 0);
  xfer_error err;
  if (xfer_fault_inject(xl_ctx(L), &fault, &err)) xl_raise(L, &err);
  return 0;
}

static int l_faults_clear(lua_State *L)
{
  xl_no_args(L, "faults.clear");
  xfer_fault_clear(xl_ctx(L));
  return 0;
}

static int l_faults_list(lua_State *L)
{
  xl_no_args(L, "faults.list");
  xfer_fault rules[64];
  size_t n = xfer_fault_list(xl_ctx(L), rules, sizeof rules / sizeof rules[0]);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n && i < sizeof rules / sizeof rules[0]; i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, rules[i].runtime);
    lua_setfield(L, -2, "runtime");
    lua_pushstring(L, rules[i].op);
    lua_setfield(L, -2, "op");
    lua_pushinteger(L, rules[i].nth);
    lua_setfield(L, -2, "nth");
    lua_pushinteger(L, rules[i].count);
    lua_setfield(L, -2, "count");
    if (rules[i].native) {
      lua_pushnumber(L, (lua_Number)rules[i].native);
      lua_setfield(L, -2, "native");
    }
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* The kind of point at idx: "call" (absent too), "wait" or "step". */
static xfer_point point_kind(lua_State *L, int idx, const char *fname)
{
  if (!lua_isnoneornil(L, idx) && lua_type(L, idx) != LUA_TSTRING)
    xl_raise_code(L, XFER_E_INVALID, fname, "bad argument #%d to '%s' (\"call\", \"wait\" or \"step\" "
                  "expected, got %s)", idx, fname, luaL_typename(L, idx));
  const char *kind = luaL_optstring(L, idx, "call");
  if (!strcmp(kind, "call")) return XFER_POINT_CALL;
  if (!strcmp(kind, "wait")) return XFER_POINT_WAIT;
  if (!strcmp(kind, "step")) return XFER_POINT_STEP;
  xl_raise_code(L, XFER_E_INVALID, fname, "bad argument #%d to '%s' (\"call\", \"wait\" or \"step\" "
                "expected, got \"%s\")", idx, fname, kind);
}

/* faults.fail_at(k [, kind]): the k-th point of the kind from now (0: none) fails -- a
** fallible driver call ("call"), stalls -- a wait for a device's work ("wait") -- or cancels
** the move there -- a step ("step"). */
static int l_faults_fail_at(lua_State *L)
{
  lua_Number k = lua_tonumber(L, 1);
  if (lua_type(L, 1) != LUA_TNUMBER || !(k >= 0 && k <= 9007199254740992.0) || k != floor(k))
    xl_raise_code(L, XFER_E_INVALID, "fail_at",
                  "bad argument #1 to 'fail_at' (a call number >= 0 expected, got %s)",
                  lua_type(L, 1) == LUA_TNUMBER ? lua_tostring(L, 1) : luaL_typename(L, 1));
  xfer_fault_fail_at_point(xl_ctx(L), point_kind(L, 2, "fail_at"), (uint64_t)k);
  return 0;
}

/* faults.calls([kind]): points of the kind seen since the last fail_at */
static int l_faults_calls(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)xfer_fault_points(xl_ctx(L), point_kind(L, 1, "faults.calls")));
  return 1;
}

/* faults.failed(): {runtime, op, call} of the call fail_at failed, or nil. */
static int l_faults_failed(lua_State *L)
{
  xl_no_args(L, "faults.failed");
  xfer_fault f;
  if (!xfer_fault_failed(xl_ctx(L), &f)) return 0;
  lua_createtable(L, 0, 3);
  lua_pushstring(L, f.runtime);
  lua_setfield(L, -2, "runtime");
  lua_pushstring(L, f.op);
  lua_setfield(L, -2, "op");
  lua_pushinteger(L, f.nth);
  lua_setfield(L, -2, "call");
  return 1;
}

static void open_faults(lua_State *L, int module)
{
  static const luaL_Reg fns[] = {
    {"inject", l_faults_inject}, {"clear", l_faults_clear}, {"list", l_faults_list},
    {"fail_at", l_faults_fail_at}, {"calls", l_faults_calls}, {"failed", l_faults_failed},
    {NULL, NULL},
  };
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  lua_newtable(L);
  const char *const *ops = xfer_fault_ops();
  for (int i = 0; ops[i]; i++) {
    lua_pushstring(L, ops[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "ops");
  lua_setfield(L, module, "faults");
}

/* -- xfer.Tensor ------------------------------------------------------------------------ */

/* Its metatable, once per state, from every part's methods: lua_tensor.c's (moves, values),
** lua_view.c's (views, elements, t[i]) and lua_job.c's to_async; the module adds the wrap and
** batch methods when it opens. A tensor pushed from C before any require "xfer"
** (xfer_lua_push_tensor) gets it too. The methods are xfer.Tensor, so scripts can add their
** own (as torch users did). */
static void tensor_type(lua_State *L)
{
  if (!luaL_newmetatable(L, XL_TENSOR)) {
    lua_pop(L, 1);
    return;
  }
  int mt = lua_gettop(L);
  lua_newtable(L);
  int methods = lua_gettop(L);
  xl_tensor_meta(L, mt, methods);
  xl_view_methods(L, methods);
  lua_pushcfunction(L, xl_to_async);
  lua_setfield(L, methods, "to_async");
  xl_tensor_access(L, mt, methods);
  lua_setfield(L, mt, "methods");
  lua_pop(L, 1);
}

void xfer_lua_push_tensor(lua_State *L, xfer_tensor *t)
{
  tensor_type(L);
  xl_push_tensor(L, t);
}

/* -- The module ------------------------------------------------------------------------ */

/* Embedded files that add to `xfer` itself: run with the module table as argument. */
static int extends_module(const char *name)
{
  return !strcmp(name, "xfer.prelude") || !strcmp(name, "xfer.fallback") ||
         !strcmp(name, "xfer.format") || !strcmp(name, "xfer.values") || !strcmp(name, "xfer.json") || !strcmp(name, "xfer.wrap") ||
         !strcmp(name, "xfer.selftest") || !strcmp(name, "xfer.calibrate") ||
         !strcmp(name, "xfer.files");
}

static void run_prelude(lua_State *L, int module)
{
  for (const xfer_embedded_lua *f = xfer_embedded_lua_files; f->module; f++) {
    if (!extends_module(f->module)) continue;
    if (luaL_loadbuffer(L, f->source, f->size, f->chunkname)) lua_error(L);
    lua_pushvalue(L, module);
    lua_call(L, 1, 0);
  }
}

/* Every other embedded file (xfer.bench, ...) becomes requireable: package.preload. */
static void preload_embedded(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  for (const xfer_embedded_lua *f = xfer_embedded_lua_files; f->module; f++) {
    if (extends_module(f->module)) continue;
    if (luaL_loadbuffer(L, f->source, f->size, f->chunkname)) lua_error(L);
    lua_setfield(L, -2, f->module);
  }
  lua_pop(L, 2);
}

/* Seconds on a monotonic clock, for timing moves (os.clock is CPU time). */
static int l_clock(lua_State *L)
{
  xl_no_args(L, "clock");
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

int luaopen_xfer(lua_State *L)
{
  static const luaL_Reg fns[] = {
    {"runtimes", l_runtimes}, {"clock", l_clock}, {"stats", l_stats},
    {"stats_reset", l_stats_reset}, {"trace", l_trace}, {"config", l_config},
    {"empty_cache", l_empty_cache}, {"synchronize", l_synchronize}, {"health", l_health},
    {"forget_failures", l_forget_failures}, {NULL, NULL},
  };
  lua_newtable(L);
  int module = lua_gettop(L);
  xl_open_error(L, module); /* first: every later failure raises an xfer.Error */
  xl_ctx(L); /* opens the runtimes now, so a bad XFER_FAULTS fails the require */
  luaL_register(L, NULL, fns);
  lua_pushliteral(L, XFER_VERSION);
  lua_setfield(L, module, "version");
  lua_newtable(L); /* the paths' names, in the planner's order: one list for every module */
  for (int p = XFER_PATH_SAME_DEVICE; p < XFER_PATH__COUNT; p++) {
    lua_pushstring(L, xfer_path_name((xfer_path)p));
    lua_rawseti(L, -2, p);
  }
  lua_setfield(L, module, "paths");
  xl_open_device(L, module);
  tensor_type(L);
  xl_open_tensor(L, module);
  luaL_getmetatable(L, XL_TENSOR);
  lua_getfield(L, -1, "methods");
  xl_open_wrap(L, module, lua_gettop(L));
  xl_open_batch(L, module, lua_gettop(L));
  lua_pop(L, 2);
  xl_open_job(L, module);
  xl_open_file(L, module);
  xl_open_costs(L, module);
  xl_open_remote(L, module);
  open_faults(L, module);
  run_prelude(L, module);
  preload_embedded(L);
  return 1;
}

void xfer_lua_preload(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_xfer);
  lua_setfield(L, -2, "xfer");
  lua_pop(L, 2);
  preload_embedded(L);
}
