/*
** lua_file.c -- files as endpoints in Lua: xfer.open(path) gives an xfer.File (names, shapes,
** one tensor or all loaded at once), xfer.load(path, opts) and xfer.save(path, tensors, opts).
*/
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "xfer_files.h"

#define XL_FILE "xfer.File"

typedef struct file_box {
  xfer_file *file;
} file_box;

static xfer_file *check_file(lua_State *L, int idx, const char *fname)
{
  file_box *box = xl_test_udata(L, idx, XL_FILE);
  if (box && box->file) return box->file;
  if (box) xl_raise_code(L, XFER_E_INVALID, fname, "%s: the file is closed", fname);
  xl_arg_error(L, idx, fname, XL_FILE);
}

static void push_shape(lua_State *L, const xfer_shape *shape)
{
  lua_createtable(L, shape->ndim, 0);
  for (int d = 0; d < shape->ndim; d++) {
    lua_pushnumber(L, (lua_Number)shape->dims[d]);
    lua_rawseti(L, -2, d + 1);
  }
}

static void push_info(lua_State *L, const xfer_file_info *info)
{
  lua_createtable(L, 0, 8);
  lua_pushstring(L, info->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, xfer_dtype_name(info->dtype));
  lua_setfield(L, -2, "dtype");
  push_shape(L, &info->shape);
  lua_setfield(L, -2, "shape");
  lua_pushnumber(L, (lua_Number)info->offset);
  lua_setfield(L, -2, "offset");
  lua_pushnumber(L, (lua_Number)info->nbytes);
  lua_setfield(L, -2, "nbytes");
  lua_pushboolean(L, info->deflated);
  lua_setfield(L, -2, "deflated");
  lua_pushboolean(L, info->fortran);
  lua_setfield(L, -2, "fortran_order");
}

static void push_route(lua_State *L, const xfer_file_route *r)
{
  lua_createtable(L, 0, 8);
  lua_pushboolean(L, r->direct);
  lua_setfield(L, -2, "direct");
  lua_pushstring(L, r->engine == XFER_FILE_ENGINE_URING ? "io_uring" : "threads");
  lua_setfield(L, -2, "engine");
  lua_pushnumber(L, (lua_Number)r->chunk);
  lua_setfield(L, -2, "chunk");
  lua_pushinteger(L, r->depth);
  lua_setfield(L, -2, "depth");
  lua_pushinteger(L, r->threads);
  lua_setfield(L, -2, "threads");
  lua_pushnumber(L, r->cached);
  lua_setfield(L, -2, "cached");
  lua_pushstring(L, r->reason);
  lua_setfield(L, -2, "reason");
  lua_pushboolean(L, r->gds);
  lua_setfield(L, -2, "gds");
  if (r->gds_reason[0]) {
    lua_pushstring(L, r->gds_reason);
    lua_setfield(L, -2, "gds_reason");
  }
  lua_createtable(L, r->nsteps, 0);
  for (int i = 0; i < r->nsteps; i++) {
    lua_pushstring(L, r->steps[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "steps");
}

/* The I/O options shared by loads and saves: direct, engine, chunk, depth (and sync). */
static void io_opts(lua_State *L, int idx, const char *fname, xfer_file_opts *o)
{
  memset(o, 0, sizeof *o);
  if (lua_isnoneornil(L, idx)) return;
  lua_getfield(L, idx, "direct");
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1))
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: direct is true or false, not a %s", fname,
                    luaL_typename(L, -1));
    o->direct = lua_toboolean(L, -1) ? XFER_FILE_DIRECT_ON : XFER_FILE_DIRECT_OFF;
  }
  lua_pop(L, 1);
  const char *engine = xl_opt_string(L, idx, fname, "engine", NULL);
  if (engine) {
    if (!strcmp(engine, "io_uring")) o->engine = XFER_FILE_ENGINE_URING;
    else if (!strcmp(engine, "threads")) o->engine = XFER_FILE_ENGINE_THREADS;
    else xl_raise_code(L, XFER_E_INVALID, fname, "%s: engine is \"io_uring\" or \"threads\", not "
                       "\"%s\"", fname, engine);
  }
  static const char *const counts[] = { "chunk", "depth" };
  for (int i = 0; i < 2; i++) {
    lua_getfield(L, idx, counts[i]);
    if (!lua_isnil(L, -1)) {
      lua_Number v = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || v < 1 || v != (lua_Number)(long long)v ||
          v > 1e12)
        xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s is a whole number of %s", fname,
                      counts[i], i ? "requests" : "bytes");
      if (i) o->depth = (int)v;
      else o->chunk = (size_t)v;
    }
    lua_pop(L, 1);
  }
  lua_getfield(L, idx, "sync");
  if (!lua_isnil(L, -1)) o->sync = lua_toboolean(L, -1) ? 0 : -1;
  lua_pop(L, 1);
  o->verify = xl_opt_flag(L, idx, fname, "verify") > 0;
  o->timeout = xl_opt_timeout(L, idx, fname);
  lua_getfield(L, idx, "progress");
  int given = !lua_isnil(L, -1), callable = lua_isfunction(L, -1);
  lua_pop(L, 1);
  if (given && !callable)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: option 'progress' must be a function", fname);
  if (given) xl_progress_hook(L, idx, &o->progress, &o->progress_ud);
}

/* -- xfer.open ---------------------------------------------------------------------------- */

static int l_open(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  xl_no_args_after(L, 1, "open");
  file_box *box = lua_newuserdata(L, sizeof *box);
  box->file = NULL;
  luaL_getmetatable(L, XL_FILE);
  lua_setmetatable(L, -2);
  xfer_error err;
  if (xfer_file_open(xl_ctx(L), path, &box->file, &err)) xl_raise(L, &err);
  return 1;
}

/* A list of every entry: its name (names = 1) or its info table. */
static int entry_list(lua_State *L, const char *fname, int names)
{
  xfer_file *f = check_file(L, 1, fname);
  size_t n = xfer_file_count(f);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    xfer_file_info info;
    xfer_file_entry(f, i, &info, NULL);
    if (names) lua_pushstring(L, info.name);
    else push_info(L, &info);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int f_names(lua_State *L) { return entry_list(L, "names", 1); }
static int f_entries(lua_State *L) { return entry_list(L, "entries", 0); }

static long find_entry(lua_State *L, xfer_file *f, int idx, const char *fname)
{
  const char *name = luaL_checkstring(L, idx);
  long i = xfer_file_find(f, name);
  if (i < 0) {
    xfer_error err;
    memset(&err, 0, sizeof err);
    err.code = XFER_E_INVALID;
    snprintf(err.op, sizeof err.op, "%s", fname);
    err.op_id = XFER_OP_OTHER;
    snprintf(err.file, sizeof err.file, "%s", xfer_file_path(f));
    snprintf(err.tensor, sizeof err.tensor, "%s", name);
    err.offset = -1;
    snprintf(err.message, sizeof err.message, "%s has no tensor named '%s' (%zu tensors: "
             "f:names() lists them)", xfer_file_path(f), name, xfer_file_count(f));
    xl_raise(L, &err);
  }
  return i;
}

static int f_info(lua_State *L)
{
  xfer_file *f = check_file(L, 1, "info");
  long i = find_entry(L, f, 2, "info");
  xfer_file_info info;
  xfer_file_entry(f, (size_t)i, &info, NULL);
  push_info(L, &info);
  return 1;
}

static int f_metadata(lua_State *L)
{
  xfer_file *f = check_file(L, 1, "metadata");
  lua_newtable(L);
  const char *key, *value;
  for (size_t i = 0; xfer_file_metadata(f, i, &key, &value); i++) {
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
  }
  return 1;
}

/* The device of one entry: opts.device is a device, a name, or function(name, info) giving
** one (nil: host). */
static xfer_device *entry_device(lua_State *L, int opts, xfer_file *f, size_t i,
                                 const char *fname)
{
  if (lua_isnoneornil(L, opts)) lua_pushliteral(L, "host");
  else lua_getfield(L, opts, "device");
  if (lua_isfunction(L, -1)) {
    xfer_file_info info;
    xfer_file_entry(f, i, &info, NULL);
    lua_pushstring(L, info.name);
    push_info(L, &info);
    lua_call(L, 2, 1);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushliteral(L, "host");
    }
  } else if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushliteral(L, "host");
  }
  xfer_device *dev = xl_check_device(L, lua_gettop(L), fname);
  lua_pop(L, 1);
  return dev;
}

/* opts[key] for entry i (its info into *info), pushed: the value, or what it gives when it is
** a function(name, info) (*fn 1); 0, nothing pushed, where that is nil or opts is absent. */
static int entry_option(lua_State *L, int opts, xfer_file *f, size_t i, const char *key,
                        xfer_file_info *info, int *fn)
{
  *fn = 0;
  if (lua_isnoneornil(L, opts)) return 0;
  xfer_file_entry(f, i, info, NULL);
  lua_getfield(L, opts, key);
  if ((*fn = lua_isfunction(L, -1))) {
    lua_pushstring(L, info->name);
    push_info(L, info);
    lua_call(L, 2, 1);
  }
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

/* opts.dtype: a dtype every floating-point tensor is converted to (integers and bools stay),
** or function(name, info) giving one (nil: as stored). */
static int entry_dtype(lua_State *L, int opts, xfer_file *f, size_t i, const char *fname,
                       xfer_dtype *out)
{
  xfer_file_info info;
  int fn;
  if (!entry_option(L, opts, f, i, "dtype", &info, &fn)) return 0;
  const char *name = lua_tostring(L, -1);
  if (!name || xfer_dtype_parse(name, out) != 0)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: dtype '%s' is not a dtype (f16 bf16 f32 f64 "
                  "i8 ... bool)", fname, name ? name : luaL_typename(L, -1));
  lua_pop(L, 1);
  if (!fn && !xfer_dtype_is_float(info.dtype)) return 0;
  return *out != info.dtype;
}

static const char *const load_keys[] = { "device", "dtype", "names", "shard", "direct", "engine",
                                         "chunk", "depth", "progress", "verify", "timeout", NULL };

/* opts.shard for entry i: {dim = d, devices = {...}} (the entry split along dimension d, a part
** on each device, as numpy.array_split cuts it), or function(name, info) giving one or nil.
** Returns the parts (0: loaded whole), the devices' list pushed when there are parts. */
static int entry_shard(lua_State *L, int opts, xfer_file *f, size_t i, const char *fname, int *dim)
{
  xfer_file_info info;
  int fn;
  if (!entry_option(L, opts, f, i, "shard", &info, &fn)) return 0;
  int spec = lua_gettop(L);
  if (!lua_istable(L, spec))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: shard of '%s' is {dim = d, devices = {...}} (or "
                  "a function(name, info) giving one), not a %s", fname, info.name,
                  luaL_typename(L, spec));
  lua_getfield(L, spec, "dim");
  lua_getfield(L, spec, "devices");
  lua_Number d = lua_tonumber(L, -2);
  int parts = lua_istable(L, -1) ? (int)lua_objlen(L, -1) : 0;
  if (!lua_isnumber(L, -2) || d != (lua_Number)(int)d || parts < 1)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: shard of '%s' needs dim (a whole number) and "
                  "devices (a list of one device or more)", fname, info.name);
  *dim = (int)d;
  lua_replace(L, spec); /* the devices' list where the spec was */
  lua_pop(L, 1);
  return parts;
}

/* The items of the entries `which` per opts (each device, dtype and shard asked of its function
** now), kept on the stack, *count of them; parts[k] the items of entry k (0: one, whole), also
** kept on the stack. */
static xfer_load_item *load_items(lua_State *L, xfer_file *f, const size_t *which, size_t n, int opts,
                                  const char *fname, size_t *count, int **parts)
{
  *parts = lua_newuserdata(L, (n ? n : 1) * sizeof **parts);
  lua_createtable(L, (int)n, 0); /* each split entry's devices' list, by entry */
  int lists = lua_gettop(L);
  int dim = 0;
  size_t m = 0;
  for (size_t k = 0; k < n; k++) {
    (*parts)[k] = entry_shard(L, opts, f, which[k], fname, &dim);
    if ((*parts)[k]) {
      lua_pushinteger(L, dim);
      lua_rawseti(L, -2, 0); /* the dimension beside the devices */
      lua_rawseti(L, lists, (int)k + 1);
    }
    m += (*parts)[k] ? (size_t)(*parts)[k] : 1;
  }
  xfer_load_item *items = lua_newuserdata(L, (m ? m : 1) * sizeof *items);
  lua_insert(L, lists); /* kept on the stack under the lists, which go at the end */
  lists++;
  for (size_t k = 0, i = 0; k < n; k++) {
    xfer_file_info info;
    xfer_file_entry(f, which[k], &info, NULL);
    xfer_dtype dtype = XFER_U8;
    int convert = entry_dtype(L, opts, f, which[k], fname, &dtype);
    if (!(*parts)[k]) {
      items[i] = (xfer_load_item){ .entry = which[k], .convert = convert, .dtype = dtype,
                                   .dev = entry_device(L, opts, f, which[k], fname) };
      i++;
      continue;
    }
    lua_rawgeti(L, lists, (int)k + 1);
    lua_rawgeti(L, -1, 0);
    dim = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    for (int p = 0; p < (*parts)[k]; p++, i++) {
      lua_rawgeti(L, -1, p + 1);
      items[i] = (xfer_load_item){ .entry = which[k], .convert = convert, .dtype = dtype,
                                   .dev = xl_check_device(L, lua_gettop(L), fname), .sliced = 1,
                                   .dim = dim };
      lua_pop(L, 1);
      int64_t size = dim >= 0 && dim < info.shape.ndim ? info.shape.dims[dim] : 0;
      xfer_split_part(size, (*parts)[k], p, &items[i].begin, &items[i].end);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1); /* the lists */
  *count = m;
  return items;
}

/* The names of the entries `which` and their parts (0: whole), as two lists pushed: what a
** load's result is made by (push_loaded), kept while a job runs. */
static void push_entry_lists(lua_State *L, xfer_file *f, const size_t *which, size_t n,
                             const int *parts)
{
  lua_createtable(L, (int)n, 0);
  lua_createtable(L, (int)n, 0);
  for (size_t k = 0; k < n; k++) {
    xfer_file_info info;
    xfer_file_entry(f, which[k], &info, NULL);
    lua_pushstring(L, info.name);
    lua_rawseti(L, -3, (int)k + 1);
    lua_pushinteger(L, parts[k]);
    lua_rawseti(L, -2, (int)k + 1);
  }
}

/* The result of a load: {name = tensor}, a split entry's name to the list of its parts (in its
** devices' order), from the lists at `names` and `parts`; take(i) pushes item i's tensor (0:
** none, nothing pushed). */
static void push_loaded(lua_State *L, int names, int parts,
                        int (*take)(lua_State *L, void *ud, size_t i), void *ud)
{
  size_t n = lua_objlen(L, names);
  lua_createtable(L, 0, (int)n);
  for (size_t k = 0, i = 0; k < n; k++) {
    lua_rawgeti(L, names, (int)k + 1);
    lua_rawgeti(L, parts, (int)k + 1);
    int split = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (split) lua_createtable(L, split, 0);
    for (int p = 0; p < (split ? split : 1); p++, i++) {
      if (!take(L, ud, i)) lua_pushnil(L);
      if (split) lua_rawseti(L, -2, p + 1);
    }
    lua_settable(L, -3);
  }
}

/* load_entries' take: item i's box, given its tensor, pushed */
typedef struct {
  int boxes;
  xfer_tensor **out;
} boxed;

static int take_boxed(lua_State *L, void *ud, size_t i)
{
  boxed *b = ud;
  lua_rawgeti(L, b->boxes, (int)i + 1);
  xl_tensor_box_adopt(L, lua_touserdata(L, -1), b->out[i]);
  b->out[i] = NULL;
  return 1;
}

/* Loads the entries `which` (indices, n of them) per opts at `opts`; leaves a table name ->
** tensor on the stack. */
static void load_entries(lua_State *L, xfer_file *f, const size_t *which, size_t n, int opts,
                         const char *fname)
{
  size_t m;
  int *parts;
  xfer_load_item *items = load_items(L, f, which, n, opts, fname, &m, &parts);
  push_entry_lists(L, f, which, n, parts);
  int lists = lua_gettop(L) - 1;
  xfer_tensor **out = lua_newuserdata(L, (m ? m : 1) * sizeof *out);
  lua_createtable(L, (int)m, 0); /* the boxes, made before anything is allocated */
  int boxes = lua_gettop(L);
  for (size_t i = 0; i < m; i++) {
    xl_new_tensor_box(L);
    lua_rawseti(L, boxes, (int)i + 1);
  }
  xfer_file_opts io;
  io_opts(L, opts, fname, &io);
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_file_load(f, items, m, &io, out, &err))) {
    xl_progress_explain(io.progress_ud, &err);
    xl_raise(L, &err);
  }
  boxed b = { boxes, out };
  push_loaded(L, lists, lists + 1, take_boxed, &b);
}

/* load_job_result's take: item i's tensor from the job, pushed */
static int take_from_job(lua_State *L, void *ud, size_t i)
{
  xfer_tensor *t = xfer_file_load_take(ud, i);
  if (!t) return 0;
  xl_push_tensor(L, t);
  xfer_tensor_release(t); /* the userdata holds its own reference */
  return 1;
}

/* A load job's result, made when it is first waited for: what xfer.load gives (upvalues: the
** entries' names, their parts, and whether it is an .npy file's: then the tensor itself). */
static int load_job_result(lua_State *L)
{
  push_loaded(L, lua_upvalueindex(1), lua_upvalueindex(2), take_from_job, lua_touserdata(L, 1));
  if (lua_toboolean(L, lua_upvalueindex(3))) lua_getfield(L, -1, "");
  return 1;
}

/* Starts the load of the entries `which` as a job; leaves its xfer.Transfer on the stack. */
static void start_load(lua_State *L, xfer_file *f, const size_t *which, size_t n, int opts,
                       const char *fname)
{
  if (!lua_isnoneornil(L, opts)) { /* a Lua callback cannot run on the job's thread */
    lua_getfield(L, opts, "progress");
    if (!lua_isnil(L, -1))
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: option 'progress' is not taken (a Lua function "
                    "cannot run on the job's thread): ask job:done() or job:wait()", fname);
    lua_pop(L, 1);
  }
  size_t m;
  int *parts;
  xfer_load_item *items = load_items(L, f, which, n, opts, fname, &m, &parts);
  xfer_file_opts io;
  io_opts(L, opts, fname, &io);
  push_entry_lists(L, f, which, n, parts);
  lua_pushboolean(L, !strcmp(xfer_file_format(f), "npy"));
  lua_pushcclosure(L, load_job_result, 3);
  xfer_job **job = xl_new_job_box(L);
  xfer_error err;
  if (xfer_file_load_start(f, items, m, &io, job, &err)) xl_raise(L, &err);
  lua_pushvalue(L, -2);
  xl_job_finish_with(L, -2);
}

/* The entries opts.names lists (all when absent), in file order of the list. */
static size_t *chosen_entries(lua_State *L, xfer_file *f, int opts, size_t *n, const char *fname)
{
  size_t count = xfer_file_count(f);
  if (!lua_isnoneornil(L, opts)) {
    lua_getfield(L, opts, "names");
    if (!lua_isnil(L, -1)) {
      if (!lua_istable(L, -1))
        xl_raise_code(L, XFER_E_INVALID, fname, "%s: names is a list of tensor names", fname);
      int names = lua_gettop(L);
      size_t m = lua_objlen(L, names);
      size_t *which = lua_newuserdata(L, (m ? m : 1) * sizeof *which);
      for (size_t i = 0; i < m; i++) {
        lua_rawgeti(L, names, (int)i + 1);
        which[i] = (size_t)find_entry(L, f, lua_gettop(L), fname);
        lua_pop(L, 1);
      }
      lua_replace(L, names); /* keeps the userdata alive on the stack */
      *n = m;
      return which;
    }
    lua_pop(L, 1);
  }
  size_t *which = lua_newuserdata(L, (count ? count : 1) * sizeof *which);
  for (size_t i = 0; i < count; i++) which[i] = i;
  *n = count;
  return which;
}

/* f:load(opts) -> {name = tensor}; f:load(name, opts) -> the tensor */
static int f_load(lua_State *L)
{
  xfer_file *f = check_file(L, 1, "load");
  lua_settop(L, 3); /* absent options are nil in their place, under what is pushed */
  if (lua_type(L, 2) == LUA_TSTRING) {
    size_t which = (size_t)find_entry(L, f, 2, "load");
    xl_check_options(L, 3, "load", load_keys);
    load_entries(L, f, &which, 1, 3, "load");
    xfer_file_info info;
    xfer_file_entry(f, which, &info, NULL);
    lua_getfield(L, -1, info.name);
    return 1;
  }
  xl_check_options(L, 2, "load", load_keys);
  size_t n;
  size_t *which = chosen_entries(L, f, 2, &n, "load");
  load_entries(L, f, which, n, 2, "load");
  return 1;
}

/* f:load_async(opts) -> an xfer.Transfer whose :wait() gives what f:load(opts) would */
static int f_load_async(lua_State *L)
{
  xfer_file *f = check_file(L, 1, "load_async");
  lua_settop(L, 2);
  xl_check_options(L, 2, "load_async", load_keys);
  size_t n;
  size_t *which = chosen_entries(L, f, 2, &n, "load_async");
  start_load(L, f, which, n, 2, "load_async");
  return 1;
}

/* f:plan(opts): how a load with these options would read the file */
static int f_plan(lua_State *L)
{
  xfer_file *f = check_file(L, 1, "plan");
  lua_settop(L, 2);
  xl_check_options(L, 2, "plan", load_keys);
  size_t n;
  size_t *which = chosen_entries(L, f, 2, &n, "plan");
  size_t m;
  int *parts;
  xfer_load_item *items = load_items(L, f, which, n, 2, "plan", &m, &parts);
  for (size_t i = 0; i < m; i++) items[i].convert = 0; /* the plan of the reads and moves */
  xfer_file_opts io;
  io_opts(L, 2, "plan", &io);
  xfer_file_route route;
  xfer_error err;
  if (xfer_file_plan(f, items, m, &io, &route, &err)) xl_raise(L, &err);
  push_route(L, &route);
  return 1;
}

static int f_close(lua_State *L)
{
  file_box *box = xl_test_udata(L, 1, XL_FILE);
  if (box) {
    xfer_file_close(box->file);
    box->file = NULL;
    return 0;
  }
  xl_arg_error(L, 1, "close", XL_FILE);
}

static int f_index(lua_State *L)
{
  const char *key = lua_tostring(L, 2);
  file_box *box = xl_test_udata(L, 1, XL_FILE);
  if (key && box && box->file) {
    if (!strcmp(key, "path")) return lua_pushstring(L, xfer_file_path(box->file)), 1;
    if (!strcmp(key, "format")) return lua_pushstring(L, xfer_file_format(box->file)), 1;
    if (!strcmp(key, "size")) return lua_pushnumber(L, (lua_Number)xfer_file_size(box->file)), 1;
    if (!strcmp(key, "count")) return lua_pushnumber(L, (lua_Number)xfer_file_count(box->file)), 1;
  }
  lua_getmetatable(L, 1);
  lua_getfield(L, -1, "methods");
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

static int f_tostring(lua_State *L)
{
  file_box *box = xl_test_udata(L, 1, XL_FILE);
  if (!box || !box->file) {
    lua_pushliteral(L, "xfer.File(closed)");
    return 1;
  }
  lua_pushfstring(L, "xfer.File(%s: %s, %d tensors, %f MB)", xfer_file_path(box->file),
                  xfer_file_format(box->file), (int)xfer_file_count(box->file),
                  (lua_Number)xfer_file_size(box->file) / 1e6);
  return 1;
}

static int f_gc(lua_State *L)
{
  file_box *box = lua_touserdata(L, 1);
  if (box && box->file) xfer_file_close(box->file);
  if (box) box->file = NULL;
  return 0;
}

/* xfer.load's and load_async's file (path at 1, options at 2), opened, its box at *fi, and the
** entries its options name (*which, *n). */
static xfer_file *open_to_load(lua_State *L, const char *fname, int *fi, size_t **which, size_t *n)
{
  luaL_checkstring(L, 1);
  xl_check_options(L, 2, fname, load_keys);
  lua_settop(L, 2);
  lua_pushcfunction(L, l_open);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  *fi = lua_gettop(L);
  xfer_file *f = check_file(L, *fi, fname);
  *which = chosen_entries(L, f, 2, n, fname);
  return f;
}

/* xfer.load_async(path, opts) -> an xfer.Transfer whose :wait() gives what xfer.load would */
static int l_load_async(lua_State *L)
{
  int fi;
  size_t n, *which;
  xfer_file *f = open_to_load(L, "load_async", &fi, &which, &n);
  start_load(L, f, which, n, 2, "load_async"); /* (the job reads its own opening of the path) */
  xfer_file_close(f);
  ((file_box *)lua_touserdata(L, fi))->file = NULL;
  return 1;
}

/* xfer.load(path, opts): every tensor ({name = tensor}); an .npy file's one array as itself,
** as numpy.load gives it */
static int l_load(lua_State *L)
{
  int fi;
  size_t n, *which;
  xfer_file *f = open_to_load(L, "load", &fi, &which, &n);
  load_entries(L, f, which, n, 2, "load");
  int npy = !strcmp(xfer_file_format(f), "npy");
  xfer_file_close(f);
  ((file_box *)lua_touserdata(L, fi))->file = NULL;
  if (npy) lua_getfield(L, -1, "");
  return 1;
}

/* xfer.save(path, tensors, opts): tensors is {name = tensor} (saved in name order) or, for an
** .npy file, one tensor */
/* opts.metadata of a save (at idx, a table or nil): its keys and values, kept on the stack
** until the save returns; how many. */
static size_t save_metadata(lua_State *L, int idx, const char ***keys, const char ***values)
{
  size_t n = 0;
  if (lua_isnoneornil(L, idx)) return 0;
  lua_getfield(L, idx, "metadata");
  if (lua_isnil(L, -1)) return 0;
  if (!lua_istable(L, -1))
    xl_raise_code(L, XFER_E_INVALID, "save", "save: metadata is a table of strings");
  int meta = lua_gettop(L);
  for (lua_pushnil(L); lua_next(L, meta); lua_pop(L, 1)) n++;
  *keys = lua_newuserdata(L, (n ? n : 1) * sizeof **keys);
  *values = lua_newuserdata(L, (n ? n : 1) * sizeof **values);
  size_t i = 0;
  for (lua_pushnil(L); lua_next(L, meta); lua_pop(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      xl_raise_code(L, XFER_E_INVALID, "save", "save: metadata maps strings to strings");
    (*keys)[i] = lua_tostring(L, -2);
    (*values)[i++] = lua_tostring(L, -1);
  }
  return n;
}

/* A save's arguments, checked, their arrays and strings kept on the stack. */
typedef struct save_args {
  const char *path, *format;
  const char **names, **keys, **values;
  xfer_tensor **tensors;
  size_t n, nmeta;
  xfer_file_opts io;
} save_args;

static void check_save(lua_State *L, const char *fname, save_args *a)
{
  a->path = luaL_checkstring(L, 1);
  static const char *const keys[] = { "format", "metadata", "direct", "engine", "chunk",
                                      "depth", "sync", "progress", "verify", "timeout", NULL };
  xl_check_options(L, 3, fname, keys);
  a->format = xl_opt_string(L, 3, fname, "format", NULL);
  size_t n = 0;
  if (xl_test_udata(L, 2, "xfer.Tensor")) {
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, "");
    lua_replace(L, 2);
  } else if (!lua_istable(L, 2)) {
    xl_arg_error(L, 2, fname, "table {name = tensor} or an xfer.Tensor");
  }
  /* the names, sorted, so that a file's order does not depend on a table's */
  lua_newtable(L);
  int names = lua_gettop(L);
  for (lua_pushnil(L); lua_next(L, 2); lua_pop(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: tensor names are strings, not %s", fname,
                    luaL_typename(L, -2));
    xl_check_tensor(L, -1, fname);
    lua_pushvalue(L, -2);
    lua_rawseti(L, names, (int)++n);
  }
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushvalue(L, names);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
  a->n = n;
  a->names = lua_newuserdata(L, (n ? n : 1) * sizeof *a->names);
  a->tensors = lua_newuserdata(L, (n ? n : 1) * sizeof *a->tensors);
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, names, (int)i + 1);
    a->names[i] = lua_tostring(L, -1); /* the names table keeps the strings */
    lua_gettable(L, 2);
    a->tensors[i] = xl_check_tensor(L, -1, fname);
    lua_pop(L, 1);
  }
  a->keys = a->values = NULL;
  a->nmeta = save_metadata(L, 3, &a->keys, &a->values);
  io_opts(L, 3, fname, &a->io);
}

static int l_save(lua_State *L)
{
  save_args a;
  check_save(L, "save", &a);
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_file_save(xl_ctx(L), a.path, a.format, a.names,
                                       (xfer_tensor *const *)a.tensors, a.n, a.keys, a.values, a.nmeta,
                                       &a.io, &err))) {
    xl_progress_explain(a.io.progress_ud, &err);
    xl_raise(L, &err);
  }
  return 0;
}

/* xfer.save_async(path, tensors, opts) -> an xfer.Transfer whose :wait() gives true once saved;
** the tensors are busy meanwhile (freeing one waits for the save) */
static int l_save_async(lua_State *L)
{
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "progress");
    if (!lua_isnil(L, -1))
      xl_raise_code(L, XFER_E_INVALID, "save_async", "save_async: option 'progress' is not taken (a "
                    "Lua function cannot run on the job's thread): ask job:done() or job:wait()");
    lua_pop(L, 1);
  }
  save_args a;
  check_save(L, "save_async", &a);
  xfer_job **job = xl_new_job_box(L);
  xfer_error err;
  if (xfer_file_save_start(xl_ctx(L), a.path, a.format, a.names, (xfer_tensor *const *)a.tensors, a.n,
                           a.keys, a.values, a.nmeta, &a.io, job, &err))
    xl_raise(L, &err);
  return 1;
}

/* xfer.file_route(): how the last load or save on this thread read or wrote its file */
static int l_file_route(lua_State *L)
{
  xl_no_args(L, "file_route");
  push_route(L, xfer_file_last_route());
  return 1;
}

void xl_open_file(lua_State *L, int module)
{
  if (luaL_newmetatable(L, XL_FILE)) {
    static const luaL_Reg methods[] = {
      {"names", f_names}, {"info", f_info}, {"entries", f_entries}, {"metadata", f_metadata},
      {"load", f_load}, {"load_async", f_load_async}, {"plan", f_plan}, {"close", f_close},
      {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "methods");
    lua_pushcfunction(L, f_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, f_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, f_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, xl_read_only);
    lua_setfield(L, -2, "__newindex");
    lua_pushliteral(L, XL_FILE);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"open", l_open}, {"load", l_load}, {"save", l_save},
                                 {"load_async", l_load_async}, {"save_async", l_save_async},
                                 {"file_route", l_file_route}, {NULL, NULL}};
  for (const luaL_Reg *r = fns; r->name; r++) {
    lua_pushcfunction(L, r->func);
    lua_setfield(L, module, r->name);
  }
}
