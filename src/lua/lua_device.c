/*
** lua_device.c -- xfer.Device userdata: a boxed device pointer holding a reference to
** its context, plus xfer.devices() and xfer.device(name).
*/
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "binding.h"

typedef struct device_box {
  xfer_device *dev;
} device_box;

static void device_metatable(lua_State *L);

void xl_push_device(lua_State *L, xfer_device *dev)
{
  device_metatable(L);
  device_box *box = lua_newuserdata(L, sizeof *box);
  box->dev = NULL;
  luaL_getmetatable(L, XL_DEVICE);
  lua_setmetatable(L, -2);
  xfer_ctx_retain(xfer_device_ctx(dev));
  xfer_device_retain(dev);
  box->dev = dev;
}

static device_box *to_device_box(lua_State *L, int idx)
{
  return xl_test_udata(L, idx, XL_DEVICE);
}

xfer_device *xl_check_device(lua_State *L, int idx, const char *fname)
{
  if (lua_type(L, idx) == LUA_TSTRING) {
    xfer_device *dev;
    xfer_error err;
    size_t len;
    const char *name = lua_tolstring(L, idx, &len);
    if (strlen(name) != len) /* "host\0x" must not pass for "host" */
      xl_raise_code(L, XFER_E_INVALID, fname, "bad argument #%d to '%s' (a device name with a NUL "
                    "byte)", idx, fname);
    if (xfer_device_find(xl_ctx(L), name, &dev, &err) == XFER_E_OK) return dev;
    if (strcmp(fname, "device")) { /* "to: unknown device 'gpu' (devices here: ...)" */
      char why[sizeof err.message - 64];
      memcpy(why, err.message, sizeof why - 1);
      why[sizeof why - 1] = '\0';
      snprintf(err.message, sizeof err.message, "%.40s: %s", fname, why);
    }
    xl_raise(L, &err);
  }
  device_box *box = to_device_box(L, idx);
  if (box && box->dev) return box->dev;
  xl_arg_error(L, idx, fname, "xfer.Device or device name");
}

static int device_gc(lua_State *L)
{
  device_box *box = lua_touserdata(L, 1);
  if (box->dev) {
    xfer_ctx *ctx = xfer_device_ctx(box->dev);
    xfer_device_release(box->dev); /* (before the context, which may go with it) */
    xfer_ctx_release(ctx);
  }
  box->dev = NULL;
  return 0;
}

static int device_eq(lua_State *L)
{
  device_box *a = to_device_box(L, 1), *b = to_device_box(L, 2);
  lua_pushboolean(L, a && b && a->dev == b->dev);
  return 1;
}

static int device_tostring(lua_State *L)
{
  xfer_device *dev = xl_check_device(L, 1, "tostring");
  xfer_device_info info;
  xfer_error err;
  if (xfer_device_get_info(dev, &info, &err)) xl_raise(L, &err);
  lua_pushfstring(L, "xfer.Device(%s: %s)", info.name, info.label);
  return 1;
}

static void push_uuid(lua_State *L, const uint8_t *u)
{
  char text[37];
  xfer_uuid_text(u, text, sizeof text);
  lua_pushstring(L, text);
}

/* xfer.memory(dev): the device's caching allocator, as torch.cuda.memory_stats counts it. */
static int l_memory(lua_State *L)
{
  static const struct {
    const char *key;
    size_t offset;
  } counts[] = {
#define XL_COUNT(name) {#name, offsetof(xfer_memory_info, name)}
    XL_COUNT(in_use), XL_COUNT(peak), XL_COUNT(allocated), XL_COUNT(peak_allocated),
    XL_COUNT(reserved), XL_COUNT(peak_reserved), XL_COUNT(cached), XL_COUNT(buffers),
    XL_COUNT(segments), XL_COUNT(driver_allocs), XL_COUNT(driver_frees), XL_COUNT(cache_hits),
    XL_COUNT(oom_retries), XL_COUNT(objects), XL_COUNT(held),
#undef XL_COUNT
  };
  xfer_device *dev = xl_check_device(L, 1, "memory");
  xfer_memory_info m;
  xfer_device_memory(dev, &m);
  lua_createtable(L, 0, (int)(sizeof counts / sizeof counts[0]));
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    uint64_t value;
    memcpy(&value, (const char *)&m + counts[i].offset, sizeof value);
    lua_pushnumber(L, (lua_Number)value);
    lua_setfield(L, -2, counts[i].key);
  }
  return 1;
}

/* dev:close(): the device's memory and driver objects back; xfer.device(name) opens it. */
static int l_close(lua_State *L)
{
  xfer_device *dev = xl_check_device(L, 1, "close");
  if (lua_gettop(L) > 1)
    xl_raise_code(L, XFER_E_INVALID, "close", "close takes no arguments but the device (got %d)",
                  lua_gettop(L) - 1);
  xfer_error err;
  if (xfer_device_close(dev, &err)) xl_raise(L, &err);
  return 0;
}

/* -- Fields: a getter each, found by name in one table lookup --------------------------------- */

/* Each pushes the field of the device at stack index 1 (1), or nothing for nil (0). */
typedef int (*device_getter)(lua_State *L, xfer_device *dev, const xfer_device_info *info);

/* A field the info holds as it is pushed: a string, a whole number, a flag. */
#define INFO_FIELD(field, push)                                                            \
  static int g_##field(lua_State *L, xfer_device *d, const xfer_device_info *i)             \
  {                                                                                         \
    (void)d;                                                                                \
    push(L, i->field);                                                                      \
    return 1;                                                                               \
  }
INFO_FIELD(name, lua_pushstring)
INFO_FIELD(runtime, lua_pushstring)
INFO_FIELD(index, lua_pushinteger)
INFO_FIELD(label, lua_pushstring)
INFO_FIELD(platform, lua_pushstring)
INFO_FIELD(pci_bus_id, lua_pushstring)
INFO_FIELD(vendor, lua_pushstring)
INFO_FIELD(unified, lua_pushboolean)
INFO_FIELD(closed, lua_pushboolean)
#undef INFO_FIELD
static int g_total_memory(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  lua_pushnumber(L, (lua_Number)i->total_memory);
  return 1;
}
static int g_max_alloc(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  lua_pushnumber(L, (lua_Number)i->max_alloc);
  return 1;
}
static int g_max_import(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  if (!i->max_import) return 0; /* nil: no limit */
  lua_pushnumber(L, (lua_Number)i->max_import);
  return 1;
}
static int g_free_memory(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)i;
  uint64_t free_bytes;
  xfer_error err;
  xfer_code rc = xfer_device_free_memory(d, &free_bytes, &err);
  if (rc == XFER_E_UNSUPPORTED) return 0; /* the driver cannot tell */
  if (rc) xl_raise(L, &err);
  lua_pushnumber(L, (lua_Number)free_bytes);
  return 1;
}
static int g_backing(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  if (!i->backing[0]) return 0;
  lua_pushstring(L, i->backing);
  return 1;
}
static int g_compute_capability(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  if (!i->cc_major) return 0;
  lua_pushfstring(L, "%d.%d", i->cc_major, i->cc_minor);
  return 1;
}
static int g_uuid(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  if (!i->has_uuid) return 0;
  push_uuid(L, i->uuid);
  return 1;
}
static int g_driver_uuid(lua_State *L, xfer_device *d, const xfer_device_info *i)
{
  (void)d;
  if (!i->has_driver_uuid) return 0;
  push_uuid(L, i->driver_uuid);
  return 1;
}

static const struct {
  const char *key;
  device_getter get;
} device_fields[] = {
  {"name", g_name}, {"runtime", g_runtime}, {"index", g_index}, {"label", g_label},
  {"total_memory", g_total_memory}, {"free_memory", g_free_memory}, {"max_alloc", g_max_alloc},
  {"max_import", g_max_import}, {"platform", g_platform}, {"pci_bus_id", g_pci_bus_id},
  {"backing", g_backing}, {"compute_capability", g_compute_capability}, {"vendor", g_vendor},
  {"unified", g_unified}, {"closed", g_closed}, {"uuid", g_uuid}, {"driver_uuid", g_driver_uuid},
};

/* __index: a method (memory, close) or a field, by the upvalue's table: name -> the method, or
** the field's getter number. */
static int device_index(lua_State *L)
{
  xfer_device *dev = xl_check_device(L, 1, "index");
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  if (lua_isfunction(L, -1)) return 1; /* a method: dev:memory() == xfer.memory(dev) */
  if (!lua_isnumber(L, -1)) return 0;
  size_t which = (size_t)lua_tointeger(L, -1);
  xfer_device_info info;
  xfer_error err;
  if (xfer_device_get_info(dev, &info, &err)) xl_raise(L, &err);
  return device_fields[which].get(L, dev, &info);
}

/* The runtime a devices() filter names, or its alias ("cpu" is the host's): an unknown one is
** refused, naming those there are. */
static const char *filter_runtime(lua_State *L, int idx)
{
  size_t len;
  const char *name = lua_tolstring(L, idx, &len);
  if (strlen(name) != len)
    xl_raise_code(L, XFER_E_INVALID, "devices", "devices: a runtime name with a NUL byte");
  xfer_ctx *ctx = xl_ctx(L);
  char known[160] = "";
  size_t used = 0;
  for (size_t r = 0; r < xfer_runtime_count(ctx); r++) {
    xfer_runtime_info info;
    xfer_error err;
    if (xfer_runtime_get(ctx, r, &info, &err)) continue;
    if (!strcmp(info.name, name) || (info.alias[0] && !strcmp(info.alias, name))) return info.name;
    used += (size_t)snprintf(known + used, sizeof known - used, "%s%s%s%s%s", r ? ", " : "",
                             info.name, info.alias[0] ? " (or " : "", info.alias,
                             info.alias[0] ? ")" : "");
    if (used >= sizeof known) used = sizeof known - 1;
  }
  xl_raise_code(L, XFER_E_INVALID, "devices", "devices: unknown runtime '%s' (runtimes: %s)",
                name, known);
}

/* xfer.devices([filter]): every device, or those of one runtime ("cuda"), or those matching
** a table {runtime = "opencl", unified = true}. */
static int l_devices(lua_State *L)
{
  static const char *const keys[] = {"runtime", "unified", NULL};
  const char *runtime = NULL;
  int unified = -1; /* -1: either */
  if (lua_gettop(L) > 1)
    xl_raise_code(L, XFER_E_INVALID, "devices", "devices takes at most one argument (got %d)",
                  lua_gettop(L));
  if (lua_type(L, 1) == LUA_TSTRING) {
    runtime = filter_runtime(L, 1);
  } else if (lua_istable(L, 1)) {
    xl_check_options(L, 1, "devices", keys);
    lua_getfield(L, 1, "runtime");
    if (lua_type(L, -1) == LUA_TSTRING) runtime = filter_runtime(L, lua_gettop(L));
    else if (!lua_isnil(L, -1))
      xl_raise_code(L, XFER_E_INVALID, "devices", "devices: filter 'runtime' must be a string, not a %s",
                    luaL_typename(L, -1));
    lua_getfield(L, 1, "unified");
    if (lua_type(L, -1) == LUA_TBOOLEAN) unified = lua_toboolean(L, -1);
    else if (!lua_isnil(L, -1))
      xl_raise_code(L, XFER_E_INVALID, "devices", "devices: filter 'unified' must be a boolean, not a %s",
                    luaL_typename(L, -1));
    lua_pop(L, 2);
  } else if (!lua_isnoneornil(L, 1)) {
    xl_arg_error(L, 1, "devices", "runtime name or filter table");
  }
  xfer_ctx *ctx = xl_ctx(L);
  size_t n = xfer_device_count(ctx);
  int found = 0;
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    xfer_device *dev = xfer_device_at(ctx, i);
    xfer_device_info info;
    xfer_error err;
    if (xfer_device_get_info(dev, &info, &err)) xl_raise(L, &err);
    if (!xfer_device_listed(dev)) continue; /* a lost peer's */
    if (runtime && strcmp(runtime, info.runtime)) continue;
    if (unified >= 0 && unified != (info.unified != 0)) continue;
    xl_push_device(L, dev);
    lua_rawseti(L, -2, ++found);
  }
  return 1;
}

static int l_device(lua_State *L)
{
  if (lua_type(L, 1) != LUA_TSTRING) xl_arg_error(L, 1, "device", "device name");
  xl_push_device(L, xl_check_device(L, 1, "device"));
  return 1;
}

static void device_metatable(lua_State *L)
{
  if (!luaL_newmetatable(L, XL_DEVICE)) {
    lua_pop(L, 1);
    return;
  }
  lua_pushcfunction(L, device_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, device_eq);
  lua_setfield(L, -2, "__eq");
  lua_pushcfunction(L, device_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_createtable(L, 0, (int)(sizeof device_fields / sizeof device_fields[0]) + 2);
  for (size_t i = 0; i < sizeof device_fields / sizeof device_fields[0]; i++) {
    lua_pushinteger(L, (lua_Integer)i);
    lua_setfield(L, -2, device_fields[i].key);
  }
  lua_pushcfunction(L, l_memory);
  lua_setfield(L, -2, "memory");
  lua_pushcfunction(L, l_close);
  lua_setfield(L, -2, "close");
  lua_pushcclosure(L, device_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, xl_read_only);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, XL_DEVICE);
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
}

int xl_is_device(lua_State *L, int idx) { return xl_test_udata(L, idx, XL_DEVICE) != NULL; }

static int l_is_device(lua_State *L)
{
  lua_pushboolean(L, xl_is_device(L, 1));
  return 1;
}

void xl_open_device(lua_State *L, int module)
{
  static const luaL_Reg fns[] = {
    {"devices", l_devices}, {"device", l_device}, {"memory", l_memory},
    {"is_device", l_is_device}, {NULL, NULL},
  };
  device_metatable(L);
  lua_pushvalue(L, module);
  luaL_register(L, NULL, fns);
  lua_pop(L, 1);
}
