/*
** lua_wrap.c -- memory a script already has, as a tensor without a copy:
** xfer.wrap_address(address, opts) (xfer.wrap in lua/xfer/wrap.lua turns FFI pointers into
** addresses first) and t:address() (t:ptr() gives it as an FFI pointer).
**
** The `owner` option is held in the registry until the core lets go of the memory -- the
** tensor freed, or its last reference gone, which may be a view's or a move's still running
** on another thread. So the release only queues the reference, and the state drops it the
** next time it runs xferlua's code (xl_drain_owners, lua_common.c): no Lua call from another
** thread.
*/
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

static int64_t whole_field(lua_State *L, int opts, const char *key, int64_t def)
{
  lua_getfield(L, opts, key);
  int64_t v = def;
  if (!lua_isnil(L, -1)) {
    lua_Number n = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || n < 0 || n != (lua_Number)(int64_t)n || n > 9.0e15)
      xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: option '%s' must be a whole number >= 0",
                    key);
    v = (int64_t)n;
  }
  lua_pop(L, 1);
  return v;
}

/* The address argument: a number (a whole one >= 0), a light userdata, or nil (a Vulkan
** buffer needs none). */
static void *address_arg(lua_State *L, int idx)
{
  if (lua_type(L, idx) == LUA_TLIGHTUSERDATA) return lua_touserdata(L, idx);
  if (lua_type(L, idx) == LUA_TNUMBER) {
    lua_Number n = lua_tonumber(L, idx);
    if (n < 0 || n != (lua_Number)(uint64_t)n)
      xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: an address must be a whole number >= 0");
    return (void *)(uintptr_t)n;
  }
  if (!lua_isnil(L, idx)) xl_arg_error(L, idx, "wrap", "address (number, light userdata or FFI pointer)");
  return NULL;
}

/* Option `strides` of the options at `opts`, one whole number >= 0 per dimension: 1 with them
** in `strides`, 0 when absent (packed). */
static int strides_option(lua_State *L, int opts, const xfer_shape *shape, int64_t *strides)
{
  lua_getfield(L, opts, "strides");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1) || (int)lua_objlen(L, -1) != shape->ndim)
    xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: option 'strides' must list %d strides",
                  shape->ndim);
  for (int i = 0; i < shape->ndim; i++) {
    lua_rawgeti(L, -1, i + 1);
    lua_Number n = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || n < 0 || n != (lua_Number)(int64_t)n)
      xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: stride %d must be a whole number >= 0",
                    i + 1);
    strides[i] = (int64_t)n;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return 1;
}

/* xfer.wrap_address(address, {dtype, shape, strides, device, size, offset, owner,
** vk_buffer, vk_memory}) */
static int l_wrap_address(lua_State *L)
{
  static const char *const keys[] = {"dtype", "shape", "strides", "device", "size", "offset",
                                     "owner", "vk_buffer", "vk_memory", "pin", NULL};
  void *address = address_arg(L, 1);
  if (!lua_istable(L, 2)) xl_arg_error(L, 2, "wrap", "options table");
  xl_check_options(L, 2, "wrap", keys);
  xfer_dtype dtype;
  const char *name = xl_opt_string(L, 2, "wrap", "dtype", "f32");
  if (xfer_dtype_parse(name, &dtype))
    xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: unknown dtype '%s'", name);
  lua_getfield(L, 2, "device");
  xfer_device *dev = lua_isnil(L, -1) ? NULL : xl_check_device(L, lua_gettop(L), "wrap");
  lua_pop(L, 1);
  if (!dev) {
    xfer_error err;
    if (xfer_device_find(xl_ctx(L), "host", &dev, &err)) xl_raise(L, &err);
  }
  xfer_device_info info;
  xfer_error err;
  if (xfer_device_get_info(dev, &info, &err)) xl_raise(L, &err);
  xfer_external mem;
  memset(&mem, 0, sizeof mem);
  mem.kind = (xfer_external_kind)info.external_kind; /* what the device's runtime wraps */
  mem.ptr = address;
  mem.offset = (size_t)whole_field(L, 2, "offset", 0);
  mem.vk_buffer = (uint64_t)whole_field(L, 2, "vk_buffer", 0);
  mem.vk_memory = (uint64_t)whole_field(L, 2, "vk_memory", 0);
  lua_getfield(L, 2, "pin");
  mem.pin = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (mem.kind != XFER_EXTERNAL_VULKAN && !address)
    xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: a NULL address");
  xfer_shape shape;
  lua_getfield(L, 2, "shape");
  if (lua_isnil(L, -1))
    xl_raise_code(L, XFER_E_INVALID, "wrap", "wrap: option 'shape' is needed");
  xl_check_shape(L, lua_gettop(L), "wrap", &shape);
  lua_pop(L, 1);
  int64_t strides[XFER_MAX_DIMS] = {0};
  int has_strides = strides_option(L, 2, &shape, strides);
  size_t packed = xfer_dtype_size(dtype);
  for (int i = 0; i < shape.ndim; i++) packed *= (size_t)shape.dims[i];
  mem.size = (size_t)whole_field(L, 2, "size", (int64_t)packed);
  xl_drain_owners(L);
  void *box = xl_new_tensor_box(L);
  void *owner = NULL;
  lua_getfield(L, 2, "owner");
  if (!lua_isnil(L, -1)) owner = xl_owner_hold(L, "wrap"); /* pops it */
  else lua_pop(L, 1);
  xfer_tensor *t;
  if (xfer_tensor_wrap(dev, &mem, dtype, &shape, has_strides ? strides : NULL,
                       owner ? xl_owner_release : NULL, owner, &t, &err)) {
    if (owner) xl_owner_drop(L, owner);
    xl_raise(L, &err);
  }
  xl_tensor_box_adopt(L, box, t);
  return 1;
}

/* t:address(): a host tensor's first element's address, as a number */
static int m_address(lua_State *L)
{
  xfer_tensor *t = xl_check_tensor(L, 1, "address");
  xfer_error err;
  if (xfer_tensor_check(t, "address", &err)) xl_raise(L, &err);
  void *at = xfer_tensor_host_data(t);
  if (!at && xfer_tensor_nbytes(t)) {
    xfer_device_info info;
    if (xfer_device_get_info(xfer_tensor_device(t), &info, &err)) xl_raise(L, &err);
    xl_raise_code(L, XFER_E_UNSUPPORTED, "address", "address: only host tensors have an address "
                  "the CPU can use (this one is on %s)", info.name);
  }
  lua_pushnumber(L, (lua_Number)(uintptr_t)at);
  return 1;
}

static int versioned_opt(lua_State *L, int idx, const char *fname)
{
  static const char *const keys[] = {"versioned", NULL};
  xl_check_options(L, idx, fname, keys);
  if (lua_isnoneornil(L, idx)) return 1;
  lua_getfield(L, idx, "versioned");
  int v = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* t:to_dlpack([{versioned = true}]): a DLManagedTensorVersioned (or DLManagedTensor) as a
** light userdata, for a consumer that calls its deleter */
static int m_to_dlpack(lua_State *L)
{
  xfer_tensor *t = xl_check_tensor(L, 1, "to_dlpack");
  int versioned = versioned_opt(L, 2, "to_dlpack");
  void *managed;
  xfer_error err;
  if (xfer_tensor_to_dlpack(t, versioned, &managed, &err)) xl_raise(L, &err);
  lua_pushlightuserdata(L, managed);
  return 1;
}

/* xfer.from_dlpack_address(ptr, [{versioned = true}]): the producer's tensor, wrapped */
static int l_from_dlpack(lua_State *L)
{
  void *managed = NULL;
  if (lua_type(L, 1) == LUA_TLIGHTUSERDATA) managed = lua_touserdata(L, 1);
  else if (lua_type(L, 1) == LUA_TNUMBER) managed = (void *)(uintptr_t)lua_tonumber(L, 1);
  else xl_arg_error(L, 1, "from_dlpack", "DLPack tensor (light userdata, address or FFI pointer)");
  int versioned = versioned_opt(L, 2, "from_dlpack");
  xl_drain_owners(L);
  void *box = xl_new_tensor_box(L);
  xfer_tensor *t;
  xfer_error err;
  if (xfer_tensor_from_dlpack(xl_ctx(L), managed, versioned, &t, &err)) xl_raise(L, &err);
  xl_tensor_box_adopt(L, box, t);
  return 1;
}

static int l_is_wrapped(lua_State *L)
{
  lua_pushboolean(L, xfer_tensor_is_wrapped(xl_check_tensor(L, 1, "is_wrapped")));
  return 1;
}

void xl_open_wrap(lua_State *L, int module, int methods)
{
  lua_pushcfunction(L, l_wrap_address);
  lua_setfield(L, module, "wrap_address");
  lua_pushcfunction(L, m_address);
  lua_setfield(L, methods, "address");
  lua_pushcfunction(L, l_is_wrapped);
  lua_setfield(L, methods, "is_wrapped");
  lua_pushcfunction(L, m_to_dlpack);
  lua_setfield(L, methods, "to_dlpack");
  lua_pushcfunction(L, l_from_dlpack);
  lua_setfield(L, module, "from_dlpack_address");
}
