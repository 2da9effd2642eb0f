/*
** binding.h -- shared pieces of the Lua binding. The binding uses only Lua's official
** API and xfer.h: no driver, no core internals.
*/
#ifndef XFER_BINDING_H
#define XFER_BINDING_H

#include <lauxlib.h>
#include <lua.h>

#include "xfer.h"
#include "xfer_lua.h"

#define XL_TENSOR "xfer.Tensor"
#define XL_DEVICE "xfer.Device"
#define XL_ERROR "xfer.Error"

#if defined(__GNUC__)
#define XL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define XL_NORETURN __attribute__((noreturn))
#else
#define XL_PRINTF(f, a)
#define XL_NORETURN
#endif

/* The userdata at `idx` when its metatable is the one registered as `name`, else NULL
** (luaL_testudata of Lua 5.2, which LuaJIT lacks). */
void *xl_test_udata(lua_State *L, int idx, const char *name);

/* lua_error.c: errors are raised as xfer.Error tables, never as strings. */
void xl_push_error(lua_State *L, const xfer_error *err);
XL_NORETURN void xl_raise(lua_State *L, const xfer_error *err);
XL_NORETURN void xl_raise_code(lua_State *L, xfer_code code, const char *op, const char *fmt, ...)
    XL_PRINTF(4, 5);
/* "bad argument #n to 'fname' (<what> expected, got <type>)", code invalid */
XL_NORETURN void xl_arg_error(lua_State *L, int arg, const char *fname, const char *what);
void xl_open_error(lua_State *L, int module);

/* Raises `invalid` when a function that takes no arguments is given some (xfer.stats("json")
** must not look as if it did something with them). */
void xl_no_args(lua_State *L, const char *fname);
/* The same for a method: nothing after its first `n` arguments (the tensor). */
void xl_no_args_after(lua_State *L, int n, const char *fname);

/* __newindex of userdata whose fields are read-only (tensors, devices): an xfer.Error. */
int xl_read_only(lua_State *L);

/* Option tables: NULL-terminated list of the keys `fname` understands. */
void xl_check_options(lua_State *L, int idx, const char *fname, const char *const *keys);
/* Field `key` of the options at `idx` as a string, or `def` when absent. */
const char *xl_opt_string(lua_State *L, int idx, const char *fname, const char *key,
                          const char *def);
/* Field `key` of the options at `idx` as a flag: 1 true, -1 false, 0 absent; anything else
** raises invalid ("option 'verify' must be true or false"). */
int xl_opt_flag(lua_State *L, int idx, const char *fname, const char *key);
/* Field `timeout` of the options at `idx`: seconds (> 0, at most a day), -1 for false (none),
** 0 when absent (xfer.config's); anything else raises invalid. */
double xl_opt_timeout(lua_State *L, int idx, const char *fname);

/* lua_common.c: the state's context; owners of wrapped memory; a move's fields */
xfer_ctx *xl_ctx(lua_State *L);
/* Sets `from`, `to` and `path` in the table on top of the stack (stats, health, costs). */
void xl_set_move(lua_State *L, const char *from, const char *to, xfer_path path);
/* A plan in words as xfer.plan returns it: {path, reason, steps, estimates, moves}. */
void xl_push_plan(lua_State *L, const xfer_plan *plan);
/* Around a core call that may allocate: when a driver refuses memory, the core's reclaimer
** may then run a full collection of this state (tensors nobody references give their
** blocks back), on this thread only. XL_ALLOCATING(L, call) is the call's result. */
void xl_alloc_begin(lua_State *L);
xfer_code xl_alloc_end(xfer_code rc);
#define XL_ALLOCATING(L, call) (xl_alloc_begin(L), xl_alloc_end(call))
/* After a new tensor is boxed: a full collection when the tensor bytes made since the last
** one call for it (the collector sees a small userdata, not the memory behind it). */
void xl_gc_pressure(lua_State *L, xfer_tensor *made);
/* The value on top of the stack held (popped) until the core lets go of what it owns:
** xl_owner_release is the core's release callback (any thread: queued), xl_drain_owners drops
** the queued ones of this state, xl_owner_drop one that was never handed to the core. */
void *xl_owner_hold(lua_State *L, const char *fname);
void xl_owner_release(void *owner);
void xl_owner_drop(lua_State *L, void *owner);
void xl_drain_owners(lua_State *L);

/* lua_device.c */
void xl_push_device(lua_State *L, xfer_device *dev);
/* An xfer.Device or a device name at `idx`. */
xfer_device *xl_check_device(lua_State *L, int idx, const char *fname);
int xl_is_device(lua_State *L, int idx);
void xl_open_device(lua_State *L, int module);

/* lua_tensor.c */
xfer_tensor *xl_check_tensor(lua_State *L, int idx, const char *fname);
void xl_open_tensor(lua_State *L, int module);
/* xfer.Tensor's own part of its metatable `mt` (collection, tostring, length, name, the
** fields' table) and its methods, into the table at `methods` (xfer_lua.c puts the whole
** metatable together; xl_tensor_access needs `fields` set first). */
void xl_tensor_meta(lua_State *L, int mt, int methods);
/* Field number `which` (the metatable's `fields` maps each name -- dtype, shape, device, ...
** -- to its number) of the tensor at stack index 1, pushed: 1; 0 for no such number. */
int xl_tensor_field(lua_State *L, xfer_tensor *t, int which);
/* An empty tensor userdata pushed first (so that nothing leaks if Lua runs out of memory),
** then given a new tensor whose reference it takes over. Raises when the state has no
** xfer.Tensor metatable yet. */
void *xl_new_tensor_box(lua_State *L);
void xl_tensor_box_adopt(lua_State *L, void *box, xfer_tensor *t);
/* A new reference to `t`, boxed and pushed. */
void xl_push_tensor(lua_State *L, xfer_tensor *t);
/* lua_wrap.c: xfer.wrap_address and t:address(), t:is_wrapped() */
void xl_open_wrap(lua_State *L, int module, int methods);
/* lua_view.c: views, elements, in-place writes (methods of xfer.Tensor, at `methods`) */
void xl_view_methods(lua_State *L, int methods);
/* xfer.Tensor's __index (methods, fields, t[i] and t[{...}]) and __newindex (t[i] = v; other
** keys are read-only) into the metatable at `mt`. */
void xl_tensor_access(lua_State *L, int mt, int methods);

/* The {via=...} options of a move at `idx` (absent: the planner chooses). */
void xl_transfer_opts(lua_State *L, int idx, const char *fname, xfer_transfer_opts *out);
/* The paths' names in the planner's order, "same_device, ..., staged or host" ("auto, " first
** when with_auto): for messages that list what is known. */
const char *xl_path_list(char *out, size_t cap, int with_auto);
/* A `progress` function in the options at `opts` as a C callback (its state a userdata pushed
** on the stack, kept there for the call's length); xl_progress_explain adds what the callback
** raised to the error of a call it stopped. */
void xl_progress_hook(lua_State *L, int opts, int (**fn)(void *, uint64_t, uint64_t), void **ud);
void xl_progress_explain(void *ud, xfer_error *err);
/* After a move its progress callback stopped: the error says what the callback raised. */
void xl_progress_error(const xfer_transfer_opts *opts, xfer_error *err);

/* lua_remote.c: xfer.connect, xfer.listen */
void xl_open_remote(lua_State *L, int module);

/* lua_costs.c: the planner's measured figures */
void xl_open_costs(lua_State *L, int module);

/* lua_batch.c: xfer.batch, xfer.copy_many, t:copy_blocks (a method, at `methods`) */
void xl_open_batch(lua_State *L, int module, int methods);

/* lua_file.c: xfer.open, xfer.load, xfer.save (files as endpoints) */
void xl_open_file(lua_State *L, int module);
/* lua_job.c: asynchronous transfers */
int xl_to_async(lua_State *L);
/* An empty xfer.Transfer pushed, its job to be set (the collector detaches it). */
xfer_job **xl_new_job_box(lua_State *L);
/* The job box at idx builds its result when first waited for: the function on top of the
** stack (popped) is called with the job (light userdata) once the job ended well, and what it
** returns is every wait's result (a load's table). */
void xl_job_finish_with(lua_State *L, int idx);
void xl_open_job(lua_State *L, int module);

/* lua_convert.c: Lua values <-> tensor elements */
/* Shape of the nested table at `idx` (numbers and booleans at the leaves). */
void xl_table_shape(lua_State *L, int idx, xfer_shape *shape);
/* Writes the elements of the nested table at `idx`, of shape `shape`, into `dst`. */
void xl_table_store(lua_State *L, int idx, const xfer_shape *shape, xfer_dtype dtype, void *dst);
/* Pushes the elements at `src` as nested tables of `shape` (flat: one list). */
void xl_push_values(lua_State *L, xfer_dtype dtype, const xfer_shape *shape, const void *src,
                    int flat);
/* One Lua value (number or boolean) at `idx` stored as dtype at dst, or raises. */
void xl_store_value(lua_State *L, int idx, xfer_dtype dtype, void *dst, const char *fname,
                    const char *where);
/* A shape: a table of whole numbers >= 0, or one number for a 1-D shape. */
void xl_check_shape(lua_State *L, int idx, const char *fname, xfer_shape *shape);

#endif
