/*
** lua_tensor.c -- xfer.Tensor userdata: constructors, fields, transfers, conversions.
** The userdata is a box holding one reference to a C tensor. Like liolib's files, the
** box is created empty before the tensor exists, so an error in between leaves
** nothing for __gc to trip over and nothing leaked.
*/
#include <math.h>
#include <string.h>

#include "binding.h"

typedef struct tensor_box {
  xfer_tensor *t;
} tensor_box;

/* The metatable is xfer_lua.c's (put together from every part's methods when the module
** opens, or when C pushes a tensor first: xfer_lua_push_tensor); a box without it would never
** be collected, so none is made. */
static tensor_box *new_box(lua_State *L)
{
  luaL_getmetatable(L, XL_TENSOR);
  if (lua_isnil(L, -1))
    xl_raise_code(L, XFER_E_INVALID, "tensor", "xfer.Tensor is not set up in this state: "
                  "require \"xfer\" first");
  tensor_box *box = lua_newuserdata(L, sizeof *box);
  box->t = NULL;
  lua_insert(L, -2);
  lua_setmetatable(L, -2);
  return box;
}

/* Puts `t` (whose reference the box takes over) into `box`, releasing what was there. */
static void box_adopt(lua_State *L, tensor_box *box, xfer_tensor *t)
{
  xfer_tensor *old = box->t;
  box->t = t;
  if (old) xfer_tensor_release(old);
  xl_gc_pressure(L, t);
}

void *xl_new_tensor_box(lua_State *L) { return new_box(L); }
void xl_tensor_box_adopt(lua_State *L, void *box, xfer_tensor *t) { box_adopt(L, box, t); }

void xl_push_tensor(lua_State *L, xfer_tensor *t)
{
  tensor_box *box = new_box(L);
  box->t = xfer_tensor_retain(t);
  xl_gc_pressure(L, t);
}

static tensor_box *to_box(lua_State *L, int idx) { return xl_test_udata(L, idx, XL_TENSOR); }

xfer_tensor *xfer_lua_to_tensor(lua_State *L, int idx)
{
  tensor_box *box = to_box(L, idx);
  return box ? box->t : NULL;
}

xfer_tensor *xl_check_tensor(lua_State *L, int idx, const char *fname)
{
  tensor_box *box = to_box(L, idx);
  if (box && box->t) return box->t;
  xl_arg_error(L, idx, fname, "xfer.Tensor");
}

/* A tensor that is still usable (not freed, device not lost). */
static xfer_tensor *check_live(lua_State *L, int idx, const char *fname)
{
  xfer_tensor *t = xl_check_tensor(L, idx, fname);
  xfer_error err;
  if (xfer_tensor_check(t, fname, &err)) xl_raise(L, &err);
  return t;
}

/* -- Options --------------------------------------------------------------------------- */

static xfer_dtype opt_dtype(lua_State *L, int opts, const char *fname)
{
  const char *name = xl_opt_string(L, opts, fname, "dtype", "f32");
  xfer_dtype dtype;
  if (xfer_dtype_parse(name, &dtype))
    xl_raise_code(L, XFER_E_INVALID, fname,
                  "%s: unknown dtype '%s' (expected f16, bf16, f32, f64, i8, i16, i32, i64, u8, "
                  "u16, u32, u64 or bool)", fname, name);
  return dtype;
}

static xfer_device *host_device(lua_State *L)
{
  xfer_device *dev;
  xfer_error err;
  if (xfer_device_find(xl_ctx(L), "host", &dev, &err)) xl_raise(L, &err);
  return dev;
}

static xfer_device *opt_device(lua_State *L, int opts, const char *fname)
{
  if (lua_isnoneornil(L, opts)) return host_device(L);
  lua_getfield(L, opts, "device");
  int type = lua_type(L, -1);
  lua_pop(L, 1);
  if (type == LUA_TNIL) return host_device(L);
  if (type == LUA_TSTRING) { /* a name, NUL-checked like every string option */
    const char *name = xl_opt_string(L, opts, fname, "device", "host");
    lua_pushstring(L, name);
  } else {
    lua_getfield(L, opts, "device");
    if (!xl_is_device(L, -1))
      xl_raise_code(L, XFER_E_INVALID, fname,
                    "%s: option 'device' must be an xfer.Device or a device name, not a %s", fname,
                    luaL_typename(L, -1));
  }
  xfer_device *dev = xl_check_device(L, lua_gettop(L), fname);
  lua_pop(L, 1);
  return dev;
}

/* A progress callback of a script's: called on the moving thread, which for to() and
** copy_from is the script's own; an error it raises stops the move and is told after. */
typedef struct progress_call {
  lua_State *L;
  int opts;                     /* the options table's stack index: its `progress` field */
  char raised[256];             /* what the callback raised ("" while it has not) */
} progress_call;

static int call_progress(void *ud, uint64_t done, uint64_t total)
{
  progress_call *pc = ud;
  lua_State *L = pc->L;
  lua_getfield(L, pc->opts, "progress");
  lua_pushnumber(L, (lua_Number)done);
  lua_pushnumber(L, (lua_Number)total);
  if (lua_pcall(L, 2, 0, 0) == 0) return 0;
  const char *why = lua_tostring(L, -1);
  if (!why && lua_istable(L, -1)) { /* an xfer.Error: its message */
    lua_getfield(L, -1, "message");
    why = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  snprintf(pc->raised, sizeof pc->raised, "%s", why ? why : "an error object");
  lua_pop(L, 1);
  return 1;
}

/* The callback and its state for the options at `opts` (a `progress` function there; the
** state a userdata left on the stack for the call's length); NULLs when there is none. */
void xl_progress_hook(lua_State *L, int opts, int (**fn)(void *, uint64_t, uint64_t), void **ud)
{
  progress_call *pc = lua_newuserdata(L, sizeof *pc);
  pc->L = L;
  pc->opts = opts > 0 ? opts : lua_gettop(L) + opts;
  pc->raised[0] = '\0';
  *fn = call_progress;
  *ud = pc;
}

void xl_progress_explain(void *ud, xfer_error *err)
{
  const progress_call *pc = ud;
  if (!pc || !pc->raised[0] || err->op_id != XFER_OP_PROGRESS) return;
  char head[sizeof err->message];
  memcpy(head, err->message, sizeof head);
  snprintf(err->message, sizeof err->message, "%.200s: %.250s", head, pc->raised);
}

/* The error of a move its progress callback stopped, with what the callback raised. */
void xl_progress_error(const xfer_transfer_opts *opts, xfer_error *err)
{
  const progress_call *pc = opts->progress_ud;
  if (!pc || !pc->raised[0] || err->op_id != XFER_OP_PROGRESS) return;
  char head[sizeof err->message];
  memcpy(head, err->message, sizeof head);
  snprintf(err->message, sizeof err->message, "%.200s: %.250s", head, pc->raised);
}

void xl_transfer_opts(lua_State *L, int opts, const char *fname, xfer_transfer_opts *out)
{
  static const char *const keys[] = {"via", "dtype", "progress", "verify", "timeout", NULL};
  xl_check_options(L, opts, fname, keys);
  const char *via = xl_opt_string(L, opts, fname, "via", "auto");
  const char *dtype = xl_opt_string(L, opts, fname, "dtype", NULL);
  memset(out, 0, sizeof *out);
  if (dtype) {
    if (!strcmp(fname, "copy_from"))
      xl_raise_code(L, XFER_E_INVALID, fname, "copy_from: the target's dtype is the dtype "
                    "(no 'dtype' option)");
    if (xfer_dtype_parse(dtype, &out->dtype))
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: unknown dtype '%s'", fname, dtype);
    out->convert = 1;
  }
  if (!lua_isnoneornil(L, opts)) {
    lua_getfield(L, opts, "progress");
    int given = !lua_isnil(L, -1), callable = lua_isfunction(L, -1);
    lua_pop(L, 1);
    if (given && !callable)
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: option 'progress' must be a function", fname);
    if (given && strcmp(fname, "to") && strcmp(fname, "copy_from"))
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: a progress callback is for to and copy_from "
                    "(a job tells its progress: job:progress())", fname);
    if (given) xl_progress_hook(L, opts, &out->progress, &out->progress_ud);
  }
  out->verify = xl_opt_flag(L, opts, fname, "verify"); /* 0: xfer.config's */
  out->timeout = xl_opt_timeout(L, opts, fname);
  out->via = XFER_PATH_AUTO;
  char known[160];
  if (strcmp(via, "auto") && xfer_path_parse(via, &out->via))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: unknown path '%s' (expected %s)", fname, via,
                  xl_path_list(known, sizeof known, 1));
}

const char *xl_path_list(char *out, size_t cap, int with_auto)
{
  size_t n = (size_t)snprintf(out, cap, "%s", with_auto ? "auto, " : "");
  for (int p = XFER_PATH_SAME_DEVICE; p < XFER_PATH__COUNT && n < cap; p++)
    n += (size_t)snprintf(out + n, cap - n, "%s%s", p == XFER_PATH__COUNT - 1 ? " or " :
                          p == XFER_PATH_SAME_DEVICE ? "" : ", ", xfer_path_name((xfer_path)p));
  return out;
}

static size_t shape_numel(const xfer_shape *shape)
{
  size_t n = 1;
  for (int i = 0; i < shape->ndim; i++) n *= (size_t)shape->dims[i];
  return n;
}

/* -- Construction -------------------------------------------------------------------- */

/* Fills box with a new host tensor (empty), raising on failure. */
static void box_empty(lua_State *L, tensor_box *box, xfer_device *dev, xfer_dtype dtype,
                      const xfer_shape *shape)
{
  xfer_tensor *t;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_tensor_empty(dev, dtype, shape, &t, &err))) xl_raise(L, &err);
  box_adopt(L, box, t);
}

/* Moves the host tensor in `box` to `dev` (built on the host, then transferred). */
static void box_move_to(lua_State *L, tensor_box *box, xfer_device *dev)
{
  if (xfer_tensor_device(box->t) == dev) return;
  xfer_tensor *moved;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_transfer_to(box->t, dev, NULL, &moved, &err))) xl_raise(L, &err);
  box_adopt(L, box, moved);
}

static void tensor_from_string(lua_State *L, tensor_box *box, xfer_dtype dtype, xfer_device *dev)
{
  size_t len, esize = xfer_dtype_size(dtype);
  const char *bytes = lua_tolstring(L, 1, &len);
  xfer_shape shape = {1, {(int64_t)(len / esize)}};
  int shaped = 0;
  if (!lua_isnoneornil(L, 2)) {
    lua_getfield(L, 2, "shape");
    shaped = !lua_isnil(L, -1);
    if (shaped) xl_check_shape(L, lua_gettop(L), "tensor", &shape);
    lua_pop(L, 1);
  }
  if (!shaped && len % esize)
    xl_raise_code(L, XFER_E_INVALID, "tensor",
                  "tensor: a byte string of %zu bytes is not a whole number of %s elements "
                  "(%zu bytes each)", len, xfer_dtype_name(dtype), esize);
  if (len != shape_numel(&shape) * esize) {
    char want[96];
    xfer_shape_format(dtype, &shape, want, sizeof want);
    xl_raise_code(L, XFER_E_INVALID, "tensor",
                  "tensor: a byte string of %zu bytes does not fill %s (%zu bytes)", len, want,
                  shape_numel(&shape) * esize);
  }
  xfer_tensor *t;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_tensor_from_bytes(dev, dtype, &shape, bytes, len, &t, &err)))
    xl_raise(L, &err);
  box_adopt(L, box, t);
}

static void tensor_from_values(lua_State *L, tensor_box *box, xfer_dtype dtype, xfer_device *dev)
{
  xfer_shape given = {0, {0}}, shape;
  if (lua_istable(L, 1))
    xl_table_shape(L, 1, &given);
  shape = given;
  if (!lua_isnoneornil(L, 2)) {
    lua_getfield(L, 2, "shape");
    if (!lua_isnil(L, -1)) xl_check_shape(L, lua_gettop(L), "tensor", &shape);
    lua_pop(L, 1);
  }
  if (shape_numel(&shape) != shape_numel(&given)) {
    char want[96];
    xfer_shape_format(dtype, &shape, want, sizeof want);
    xl_raise_code(L, XFER_E_INVALID, "tensor", "tensor: %zu values given for shape %s (%zu)",
                  shape_numel(&given), want, shape_numel(&shape));
  }
  box_empty(L, box, host_device(L), dtype, &shape);
  char *dst = xfer_tensor_host_data(box->t);
  if (lua_istable(L, 1))
    xl_table_store(L, 1, &given, dtype, dst);
  else
    xl_store_value(L, 1, dtype, dst, "tensor", "");
  box_move_to(L, box, dev);
}

static int l_tensor(lua_State *L)
{
  static const char *const keys[] = {"dtype", "shape", "device", NULL};
  lua_settop(L, 2); /* the box pushed below must not pass for absent options */
  int type = lua_type(L, 1);
  if (type != LUA_TTABLE && type != LUA_TSTRING && type != LUA_TNUMBER && type != LUA_TBOOLEAN)
    xl_arg_error(L, 1, "tensor", "table of values, byte string or number");
  xl_check_options(L, 2, "tensor", keys);
  xfer_dtype dtype = opt_dtype(L, 2, "tensor");
  xfer_device *dev = opt_device(L, 2, "tensor");
  tensor_box *box = new_box(L);
  if (type == LUA_TSTRING)
    tensor_from_string(L, box, dtype, dev);
  else
    tensor_from_values(L, box, dtype, dev);
  return 1;
}

/* empty/zeros/full: shape at 1, options at `opts`, fill value at `value` (0: none). */
static int make_filled(lua_State *L, const char *fname, int opts, int value, int zero)
{
  static const char *const keys[] = {"dtype", "device", NULL};
  xfer_shape shape;
  xl_check_shape(L, 1, fname, &shape);
  xl_check_options(L, opts, fname, keys);
  xfer_dtype dtype = opt_dtype(L, opts, fname);
  xfer_device *dev = opt_device(L, opts, fname);
  uint64_t elem[2] = {0, 0}; /* room for the largest element, zero bits */
  if (value) xl_store_value(L, value, dtype, elem, fname, "");
  tensor_box *box = new_box(L);
  box_empty(L, box, dev, dtype, &shape);
  xfer_error err;
  if ((value || zero) && xfer_tensor_fill(box->t, elem, &err)) xl_raise(L, &err);
  return 1;
}

static int l_empty(lua_State *L) { return make_filled(L, "empty", 2, 0, 0); }
static int l_zeros(lua_State *L) { return make_filled(L, "zeros", 2, 0, 1); }

static int l_full(lua_State *L)
{
  if (lua_type(L, 2) != LUA_TNUMBER && lua_type(L, 2) != LUA_TBOOLEAN)
    xl_arg_error(L, 2, "full", "number or boolean");
  return make_filled(L, "full", 3, 2, 0);
}

/* arange(stop) | arange(start, stop [, step]), then optional options */
static int l_arange(lua_State *L)
{
  static const char *const keys[] = {"dtype", "device", NULL};
  int nnum = 0;
  while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
  if (nnum == 0) xl_arg_error(L, 1, "arange", "number");
  int opts = nnum + 1;
  if (!lua_isnoneornil(L, opts + 1) || (!lua_isnoneornil(L, opts) && !lua_istable(L, opts)))
    xl_arg_error(L, opts, "arange", "options table");
  xl_check_options(L, opts, "arange", keys);
  double start = nnum > 1 ? lua_tonumber(L, 1) : 0.0;
  double stop = nnum > 1 ? lua_tonumber(L, 2) : lua_tonumber(L, 1);
  double step = nnum > 2 ? lua_tonumber(L, 3) : 1.0;
  if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step))
    xl_raise_code(L, XFER_E_INVALID, "arange",
                  "arange: start, stop and step must be finite and step not 0");
  double count = ceil((stop - start) / step);
  if (count > 1e12)
    xl_raise_code(L, XFER_E_INVALID, "arange", "arange: %.0f elements is too many", count);
  xfer_shape shape = {1, {count > 0 ? (int64_t)count : 0}};
  xfer_dtype dtype = opt_dtype(L, opts, "arange");
  xfer_device *dev = opt_device(L, opts, "arange");
  tensor_box *box = new_box(L);
  box_empty(L, box, host_device(L), dtype, &shape);
  char *dst = xfer_tensor_host_data(box->t);
  size_t esize = xfer_dtype_size(dtype);
  for (int64_t i = 0; i < shape.dims[0]; i++) {
    lua_pushnumber(L, start + (double)i * step);
    xl_store_value(L, -1, dtype, dst + (size_t)i * esize, "arange", "");
    lua_pop(L, 1);
  }
  box_move_to(L, box, dev);
  return 1;
}

/* -- Transfers -------------------------------------------------------------------------- */

static int m_to(lua_State *L)
{
  xfer_tensor *t = check_live(L, 1, "to");
  xfer_device *dev = xl_check_device(L, 2, "to");
  xfer_transfer_opts opts;
  xl_transfer_opts(L, 3, "to", &opts);
  tensor_box *box = new_box(L);
  xfer_tensor *moved;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_transfer_to(t, dev, &opts, &moved, &err))) {
    xl_progress_error(&opts, &err);
    xl_raise(L, &err);
  }
  box_adopt(L, box, moved);
  return 1;
}

/* t:to_dtype(name): a new tensor of that dtype on t's device (converted on the host). */
static int m_to_dtype(lua_State *L)
{
  xfer_tensor *t = check_live(L, 1, "to_dtype");
  if (lua_type(L, 2) != LUA_TSTRING) xl_arg_error(L, 2, "to_dtype", "dtype name");
  size_t len = 0;
  const char *name = lua_tolstring(L, 2, &len);
  xl_no_args_after(L, 2, "to_dtype");
  xfer_transfer_opts opts;
  memset(&opts, 0, sizeof opts);
  if (strlen(name) != len)
    xl_raise_code(L, XFER_E_INVALID, "to_dtype", "to_dtype: a dtype name with a NUL byte");
  if (xfer_dtype_parse(name, &opts.dtype))
    xl_raise_code(L, XFER_E_INVALID, "to_dtype", "to_dtype: unknown dtype '%s'", name);
  opts.convert = 1;
  tensor_box *box = new_box(L);
  xfer_tensor *moved;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_transfer_to(t, xfer_tensor_device(t), &opts, &moved, &err)))
    xl_raise(L, &err);
  box_adopt(L, box, moved);
  return 1;
}

static int m_copy_from(lua_State *L)
{
  xfer_tensor *dst = check_live(L, 1, "copy_from");
  xfer_tensor *src = check_live(L, 2, "copy_from");
  xfer_transfer_opts opts;
  xl_transfer_opts(L, 3, "copy_from", &opts);
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_transfer_copy(dst, src, &opts, &err))) {
    xl_progress_error(&opts, &err);
    xl_raise(L, &err);
  }
  lua_settop(L, 1);
  return 1;
}

static int m_clone(lua_State *L)
{
  xfer_tensor *t = check_live(L, 1, "clone");
  tensor_box *box = new_box(L);
  xfer_tensor *copy;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_transfer_to(t, xfer_tensor_device(t), NULL, &copy, &err)))
    xl_raise(L, &err);
  box_adopt(L, box, copy);
  return 1;
}

static int l_plan(lua_State *L)
{
  xfer_tensor *t = check_live(L, 1, "plan");
  xfer_device *dev = xl_check_device(L, 2, "plan");
  xfer_transfer_opts opts;
  xl_transfer_opts(L, 3, "plan", &opts);
  xfer_plan plan;
  xfer_error err;
  if (xfer_transfer_plan(t, dev, &opts, &plan, &err)) xl_raise(L, &err);
  xl_push_plan(L, &plan);
  return 1;
}

/* -- Reading values out ----------------------------------------------------------------- */

/* The tensor's bytes in host memory: in place for host tensors; otherwise a host copy, in a
** box left on the stack (*copy_box), so that the GC frees it if a Lua error comes first, and
** done_with_bytes gives it back at once when the caller has what it wanted: a read-back of a
** large tensor should not hold twice its size in host memory until the next collection. */
static const char *host_bytes(lua_State *L, xfer_tensor *t, tensor_box **copy_box)
{
  *copy_box = NULL;
  xfer_error err;
  if (xfer_tensor_readable(t, "read", &err)) xl_raise(L, &err); /* (in place: checked here) */
  /* in place when its elements lie packed in host memory; a view's are gathered */
  const char *in_place = xfer_tensor_is_contiguous(t) ? xfer_tensor_host_data(t) : NULL;
  if (in_place || xfer_tensor_nbytes(t) == 0) return in_place;
  tensor_box *box = new_box(L);
  xfer_tensor *copy;
  if (XL_ALLOCATING(L, xfer_transfer_to(t, host_device(L), NULL, &copy, &err))) xl_raise(L, &err);
  box_adopt(L, box, copy);
  *copy_box = box;
  return xfer_tensor_host_data(copy);
}

static void done_with_bytes(tensor_box *copy_box)
{
  if (!copy_box || !copy_box->t) return;
  xfer_tensor *copy = copy_box->t;
  copy_box->t = NULL; /* the box's __gc finds nothing */
  xfer_tensor_release(copy);
}

static int m_totable(lua_State *L)
{
  static const char *const keys[] = {"flat", NULL};
  xfer_tensor *t = check_live(L, 1, "totable");
  xl_check_options(L, 2, "totable", keys);
  int flat = 0;
  if (!lua_isnoneornil(L, 2)) {
    lua_getfield(L, 2, "flat");
    flat = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  tensor_box *copy;
  const char *bytes = host_bytes(L, t, &copy);
  xl_push_values(L, xfer_tensor_dtype(t), xfer_tensor_shape(t), bytes, flat);
  done_with_bytes(copy);
  return 1;
}

static int m_tobytes(lua_State *L)
{
  xfer_tensor *t = check_live(L, 1, "tobytes");
  tensor_box *copy;
  const char *bytes = host_bytes(L, t, &copy);
  lua_pushlstring(L, bytes ? bytes : "", xfer_tensor_nbytes(t));
  done_with_bytes(copy);
  return 1;
}

static int m_equals(lua_State *L)
{
  xfer_tensor *a = check_live(L, 1, "equals");
  xfer_tensor *b = check_live(L, 2, "equals");
  int equal;
  xfer_error err;
  if (xfer_tensor_equal(a, b, &equal, &err)) xl_raise(L, &err);
  lua_pushboolean(L, equal);
  return 1;
}

/* t:crc32c(): the CRC32C of its bytes, a number (what `verify` compares) */
static int m_crc32c(lua_State *L)
{
  xfer_tensor *t = check_live(L, 1, "crc32c");
  uint32_t crc;
  xfer_error err;
  if (xfer_tensor_crc32c(t, &crc, &err)) xl_raise(L, &err);
  lua_pushnumber(L, (lua_Number)crc);
  return 1;
}

static int m_free(lua_State *L)
{
  xfer_error err;
  if (xfer_tensor_free(xl_check_tensor(L, 1, "free"), &err)) xl_raise(L, &err);
  xl_drain_owners(L);
  return 0;
}

/* -- Metamethods --------------------------------------------------------------------- */

static int t_gc(lua_State *L)
{
  tensor_box *box = lua_touserdata(L, 1);
  if (box && box->t) xfer_tensor_release(box->t);
  if (box) box->t = NULL;
  xl_drain_owners(L); /* a wrapped tensor's owner, let go of just now or by another thread */
  return 0;
}

/* t:summary(): "xfer.Tensor(f32[2,3] on host)", or "xfer.Tensor(freed)" */
static int m_summary(lua_State *L)
{
  xfer_tensor *t = xl_check_tensor(L, 1, "summary");
  if (xfer_tensor_is_freed(t)) {
    lua_pushliteral(L, "xfer.Tensor(freed)");
    return 1;
  }
  char shape[128];
  xfer_device_info info;
  xfer_shape_format(xfer_tensor_dtype(t), xfer_tensor_shape(t), shape, sizeof shape);
  xfer_error err;
  if (xfer_device_get_info(xfer_tensor_device(t), &info, &err)) xl_raise(L, &err);
  lua_pushfstring(L, "xfer.Tensor(%s on %s)", shape, info.name);
  return 1;
}

/* tostring(t), print(t): the summary, then the values (t:format, format.lua), which a
** device that cannot be read now turns into the summary and why. The call is protected
** here, in C: a Lua pcall inside __tostring crashed LuaJIT 2.1.0-beta3's unwinder when
** tostring ran in an error handler with the JIT on (the whole spec suite, seen every time). */
static int t_tostring(lua_State *L)
{
  xfer_tensor *t = xl_check_tensor(L, 1, "tostring");
  lua_settop(L, 1);
  m_summary(L); /* 2 */
  if (xfer_tensor_is_freed(t)) return 1;
  lua_getfield(L, 1, "format"); /* 3: t:format, if format.lua is loaded */
  if (!lua_isfunction(L, 3)) {
    lua_settop(L, 2);
    return 1;
  }
  lua_pushvalue(L, 1);
  if (lua_pcall(L, 1, 1, 0) == 0 && lua_isstring(L, -1)) return 1;
  const char *why = lua_tostring(L, -1);
  if (!why && lua_istable(L, -1)) {
    lua_getfield(L, -1, "message");
    why = lua_tostring(L, -1);
  }
  lua_pushfstring(L, "%s\n(values unreadable: %s)", lua_tostring(L, 2), why ? why : "?");
  return 1;
}

static int t_len(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)xfer_tensor_numel(check_live(L, 1, "len")));
  return 1;
}

/* -- Fields: a getter each, found by name in one table lookup (no strcmp ladder) ------------ */

static void push_dims(lua_State *L, const int64_t *v, int n)
{
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushnumber(L, (lua_Number)v[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static void f_freed(lua_State *L, xfer_tensor *t) { lua_pushboolean(L, xfer_tensor_is_freed(t)); }
static void f_dtype(lua_State *L, xfer_tensor *t) { lua_pushstring(L, xfer_dtype_name(xfer_tensor_dtype(t))); }
static void f_shape(lua_State *L, xfer_tensor *t)
{
  push_dims(L, xfer_tensor_shape(t)->dims, xfer_tensor_shape(t)->ndim);
}
static void f_ndim(lua_State *L, xfer_tensor *t) { lua_pushinteger(L, xfer_tensor_shape(t)->ndim); }
static void f_numel(lua_State *L, xfer_tensor *t) { lua_pushnumber(L, (lua_Number)xfer_tensor_numel(t)); }
static void f_nbytes(lua_State *L, xfer_tensor *t) { lua_pushnumber(L, (lua_Number)xfer_tensor_nbytes(t)); }
static void f_device(lua_State *L, xfer_tensor *t) { xl_push_device(L, xfer_tensor_device(t)); }
/* in elements, as torch counts them */
static void f_strides(lua_State *L, xfer_tensor *t)
{
  push_dims(L, xfer_tensor_strides(t), xfer_tensor_shape(t)->ndim);
}
/* the first element within the memory it shares */
static void f_offset(lua_State *L, xfer_tensor *t) { lua_pushnumber(L, (lua_Number)xfer_tensor_first(t)); }

static const struct {
  const char *key;
  void (*get)(lua_State *L, xfer_tensor *t);
  int live; /* a freed tensor's, or a lost device's, raises */
} fields[] = {
  {"freed", f_freed, 0}, {"dtype", f_dtype, 1}, {"shape", f_shape, 1}, {"ndim", f_ndim, 1},
  {"numel", f_numel, 1}, {"nbytes", f_nbytes, 1}, {"device", f_device, 1},
  {"strides", f_strides, 1}, {"offset", f_offset, 1},
};

int xl_tensor_field(lua_State *L, xfer_tensor *t, int which)
{
  if (which < 0 || (size_t)which >= sizeof fields / sizeof fields[0]) return 0;
  if (fields[which].live) check_live(L, 1, fields[which].key);
  fields[which].get(L, t);
  return 1;
}

void xl_tensor_meta(lua_State *L, int mt, int methods)
{
  static const luaL_Reg fns[] = {
    {"to", m_to}, {"to_dtype", m_to_dtype}, {"copy_from", m_copy_from}, {"clone", m_clone}, {"equals", m_equals},
    {"totable", m_totable}, {"tobytes", m_tobytes}, {"free", m_free}, {"summary", m_summary},
    {"crc32c", m_crc32c}, {NULL, NULL},
  };
  lua_pushcfunction(L, t_gc);
  lua_setfield(L, mt, "__gc");
  lua_pushcfunction(L, t_tostring);
  lua_setfield(L, mt, "__tostring");
  lua_pushcfunction(L, t_len);
  lua_setfield(L, mt, "__len");
  lua_pushliteral(L, XL_TENSOR);
  lua_setfield(L, mt, "__name");
  lua_createtable(L, 0, (int)(sizeof fields / sizeof fields[0])); /* name -> getter's number */
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    lua_pushinteger(L, (lua_Integer)i);
    lua_setfield(L, -2, fields[i].key);
  }
  lua_setfield(L, mt, "fields");
  lua_pushvalue(L, methods);
  luaL_register(L, NULL, fns);
  lua_pop(L, 1);
}

static int l_is_tensor(lua_State *L)
{
  lua_pushboolean(L, to_box(L, 1) != NULL);
  return 1;
}

void xl_open_tensor(lua_State *L, int module)
{
  static const luaL_Reg constructors[] = {
    {"tensor", l_tensor}, {"empty", l_empty}, {"zeros", l_zeros}, {"full", l_full},
    {"arange", l_arange}, {"plan", l_plan}, {"is_tensor", l_is_tensor}, {NULL, NULL},
  };
  luaL_getmetatable(L, XL_TENSOR);
  lua_getfield(L, -1, "methods");
  lua_setfield(L, module, "Tensor");
  lua_pop(L, 1);
  lua_pushvalue(L, module);
  luaL_register(L, NULL, constructors);
  lua_pop(L, 1);
}
