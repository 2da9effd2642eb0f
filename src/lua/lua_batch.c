/*
** lua_batch.c -- many copies as one: xfer.batch(...) prepares an xfer.Batch (b:run() as often
** as needed, b:done() says which elements completed), xfer.copy_many(...) prepares, runs and
** lets go at once, dst:copy_blocks(src, src_blocks, dst_blocks, block_bytes) copies blocks of
** one buffer into another (a paged KV cache's shape). Elements are numbered from 1 in errors
** (e.element); block numbers count from 0, as block tables do.
*/
#include <stdlib.h>
#include <string.h>

#include "binding.h"

#define XL_BATCH "xfer.Batch"

typedef struct batch_box {
  xfer_batch *batch;
} batch_box;

/* The items under construction: freed by the collector if an argument check raises. */
typedef struct items_box {
  xfer_batch_item *items;
  size_t n;
} items_box;

static int items_gc(lua_State *L)
{
  items_box *box = lua_touserdata(L, 1);
  free(box->items);
  box->items = NULL;
  return 0;
}

static items_box *new_items(lua_State *L, size_t n)
{
  items_box *box = lua_newuserdata(L, sizeof *box);
  box->items = NULL;
  box->n = 0;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, items_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  box->items = calloc(n ? n : 1, sizeof *box->items);
  if (!box->items) xl_raise_code(L, XFER_E_ALLOC, "batch", "%s", xfer_code_what(XFER_E_ALLOC));
  box->n = n;
  return box;
}

/* Whether the value at idx is a whole number >= 0 (a byte count, an offset, a block number). */
static int is_count(lua_State *L, int idx)
{
  lua_Number v = lua_tonumber(L, idx);
  return lua_type(L, idx) == LUA_TNUMBER && v >= 0 && v <= 9007199254740992.0 &&
         v == (lua_Number)(long long)v;
}

static size_t check_count(lua_State *L, int idx, const char *fname, const char *what)
{
  if (is_count(L, idx)) return (size_t)lua_tonumber(L, idx);
  if (lua_type(L, idx) != LUA_TNUMBER)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a whole number >= 0, not a %s", fname,
                  what, luaL_typename(L, idx));
  xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a whole number >= 0, not %g", fname,
                what, (double)lua_tonumber(L, idx));
  return 0; /* (raised) */
}

static size_t opt_count(lua_State *L, int t, const char *key, const char *fname, size_t i)
{
  lua_getfield(L, t, key);
  size_t v = 0;
  if (!lua_isnil(L, -1)) {
    char what[64];
    snprintf(what, sizeof what, "element %zu's %s", i, key);
    v = check_count(L, -1, fname, what);
  }
  lua_pop(L, 1);
  return v;
}

/* Element i (from 1) of a list: {dst, src} or {dst = , src = , dst_offset = , src_offset = ,
** nbytes = }. */
static void read_item(lua_State *L, int list, size_t i, const char *fname, xfer_batch_item *out)
{
  lua_rawgeti(L, list, (int)i);
  int e = lua_gettop(L);
  if (!lua_istable(L, e))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: element %zu must be a table {dst, src}, not a %s",
                  fname, i, luaL_typename(L, e));
  lua_rawgeti(L, e, 1);
  int positional = !lua_isnil(L, -1);
  lua_pop(L, 1);
  const char *keys[2] = {"dst", "src"};
  xfer_tensor *t[2];
  for (int k = 0; k < 2; k++) {
    if (positional) lua_rawgeti(L, e, k + 1);
    else lua_getfield(L, e, keys[k]);
    t[k] = xfer_lua_to_tensor(L, -1);
    if (!t[k])
      xl_raise_code(L, XFER_E_INVALID, fname, "%s: element %zu: its %s must be an xfer.Tensor, "
                    "not a %s", fname, i, keys[k], luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  *out = (xfer_batch_item){.dst = t[0], .src = t[1]};
  if (!positional) {
    out->dst_offset = opt_count(L, e, "dst_offset", fname, i);
    out->src_offset = opt_count(L, e, "src_offset", fname, i);
    out->nbytes = opt_count(L, e, "nbytes", fname, i);
  }
  lua_pop(L, 1);
}

/* Block numbers: a list of whole numbers, or a range {first = a, count = n}. *n: how many. */
static size_t *read_blocks(lua_State *L, int idx, const char *fname, const char *name, size_t *n)
{
  if (!lua_istable(L, idx))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s must be a list of block numbers or a range "
                  "{first = , count = }, not a %s", fname, name, luaL_typename(L, idx));
  lua_getfield(L, idx, "count");
  int ranged = !lua_isnil(L, -1);
  size_t count = ranged ? check_count(L, -1, fname, "a range's count") : lua_objlen(L, idx);
  lua_pop(L, 1);
  size_t *blocks = lua_newuserdata(L, (count ? count : 1) * sizeof *blocks); /* collected */
  size_t first = 0;
  if (ranged) {
    lua_getfield(L, idx, "first");
    first = lua_isnil(L, -1) ? 0 : check_count(L, -1, fname, "a range's first");
    lua_pop(L, 1);
  }
  for (size_t i = 0; i < count; i++) {
    if (ranged) {
      blocks[i] = first + i;
      continue;
    }
    lua_rawgeti(L, idx, (int)i + 1);
    if (!is_count(L, -1)) { /* the element's words only when it is wrong: a list is thousands long */
      char what[64];
      snprintf(what, sizeof what, "%s[%zu]", name, i + 1);
      check_count(L, -1, fname, what);
    }
    blocks[i] = (size_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  *n = count;
  return blocks;
}

static void opts_at(lua_State *L, int idx, const char *fname, xfer_transfer_opts *opts)
{
  xl_transfer_opts(L, idx, fname, opts);
  if (opts->convert)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a dtype change is made by the targets' dtypes "
                  "(no 'dtype' option)", fname);
}

static xfer_batch *prepare(lua_State *L, const items_box *items, const xfer_transfer_opts *opts)
{
  xfer_batch *b;
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_batch_prepare(items->items, items->n, opts, &b, &err))) xl_raise(L, &err);
  return b;
}

/* The items of a list (at `list`), pushed as an items box. */
static items_box *items_of_list(lua_State *L, int list, const char *fname)
{
  if (!lua_istable(L, list))
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: a list of {dst, src} elements is needed, not a %s",
                  fname, luaL_typename(L, list));
  size_t n = lua_objlen(L, list);
  items_box *box = new_items(L, n);
  for (size_t i = 0; i < n; i++) read_item(L, list, i + 1, fname, &box->items[i]);
  return box;
}

/* The items of dst:copy_blocks(src, src_blocks, dst_blocks, block_bytes): args at `at`. */
static items_box *items_of_blocks(lua_State *L, xfer_tensor *dst, xfer_tensor *src, int at,
                                  const char *fname)
{
  size_t ns, nd;
  size_t *sb = read_blocks(L, at, fname, "src_blocks", &ns);
  size_t *db = read_blocks(L, at + 1, fname, "dst_blocks", &nd);
  size_t bytes = check_count(L, at + 2, fname, "block_bytes");
  if (ns != nd)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: %zu source blocks for %zu target blocks (one "
                  "of each per copy)", fname, ns, nd);
  if (bytes == 0 && ns)
    xl_raise_code(L, XFER_E_INVALID, fname, "%s: block_bytes must be above 0", fname);
  size_t have[2] = {xfer_tensor_nbytes(src) / (bytes ? bytes : 1),
                    xfer_tensor_nbytes(dst) / (bytes ? bytes : 1)};
  const size_t *lists[2] = {sb, db};
  const char *names[2] = {"src_blocks", "dst_blocks"};
  for (int e = 0; e < 2; e++)
    for (size_t i = 0; i < ns; i++)
      if (lists[e][i] >= have[e])
        xl_raise_code(L, XFER_E_INVALID, fname, "%s: %s[%zu] = %zu is out of range: the %s holds "
                      "%zu blocks of %zu bytes (numbered from 0)", fname, names[e], i + 1,
                      lists[e][i], e ? "target" : "source", have[e], bytes);
  items_box *box = new_items(L, ns);
  for (size_t i = 0; i < ns; i++)
    box->items[i] = (xfer_batch_item){dst, src, db[i] * bytes, sb[i] * bytes, bytes};
  return box;
}

static void push_batch(lua_State *L, xfer_batch *b)
{
  batch_box *box = lua_newuserdata(L, sizeof *box);
  box->batch = b;
  luaL_getmetatable(L, XL_BATCH);
  lua_setmetatable(L, -2);
}

/* xfer.batch(list [, opts]) or xfer.batch{dst = , src = , src_blocks = , dst_blocks = ,
** block_bytes = } [, opts] */
static int l_batch(lua_State *L)
{
  xfer_transfer_opts opts;
  opts_at(L, 2, "batch", &opts);
  lua_settop(L, 2);
  items_box *items;
  int blocks = 0; /* a non-table is items_of_list's to refuse (indexing it raised a bare string) */
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "block_bytes");
    blocks = !lua_isnil(L, -1);
    lua_pop(L, 1);
  }
  if (blocks) {
    static const char *const keys[] = {"dst", "src", "src_blocks", "dst_blocks", "block_bytes", NULL};
    xl_check_options(L, 1, "batch", keys);
    lua_getfield(L, 1, "dst");
    lua_getfield(L, 1, "src");
    xfer_tensor *dst = xl_check_tensor(L, 3, "batch"), *src = xl_check_tensor(L, 4, "batch");
    lua_getfield(L, 1, "src_blocks");
    lua_getfield(L, 1, "dst_blocks");
    lua_getfield(L, 1, "block_bytes");
    items = items_of_blocks(L, dst, src, 5, "batch");
  } else {
    items = items_of_list(L, 1, "batch");
  }
  push_batch(L, prepare(L, items, &opts));
  return 1;
}

static void run(lua_State *L, xfer_batch *b)
{
  xfer_error err;
  if (XL_ALLOCATING(L, xfer_batch_run(b, &err))) xl_raise(L, &err);
}

/* xfer.copy_many(list [, opts]) */
static int l_copy_many(lua_State *L)
{
  xfer_transfer_opts opts;
  opts_at(L, 2, "copy_many", &opts);
  items_box *items = items_of_list(L, 1, "copy_many");
  push_batch(L, prepare(L, items, &opts)); /* the collector lets go of it if the run raises */
  run(L, ((batch_box *)lua_touserdata(L, -1))->batch);
  return 0;
}

/* dst:copy_blocks(src, src_blocks, dst_blocks, block_bytes [, opts]) */
static int m_copy_blocks(lua_State *L)
{
  xfer_tensor *dst = xl_check_tensor(L, 1, "copy_blocks"), *src = xl_check_tensor(L, 2, "copy_blocks");
  xfer_transfer_opts opts;
  opts_at(L, 6, "copy_blocks", &opts);
  items_box *items = items_of_blocks(L, dst, src, 3, "copy_blocks");
  push_batch(L, prepare(L, items, &opts));
  run(L, ((batch_box *)lua_touserdata(L, -1))->batch);
  lua_settop(L, 1);
  return 1;
}

static batch_box *check_batch(lua_State *L, int idx, const char *fname)
{
  batch_box *box = xl_test_udata(L, idx, XL_BATCH);
  if (box && box->batch) return box;
  if (box) xl_raise_code(L, XFER_E_FREED, fname, "%s: the batch was released", fname);
  xl_arg_error(L, idx, fname, XL_BATCH);
}

static int b_run(lua_State *L)
{
  batch_box *box = check_batch(L, 1, "run");
  xl_no_args_after(L, 1, "run");
  run(L, box->batch);
  lua_settop(L, 1);
  return 1;
}

/* b:run_async(): an xfer.Transfer whose wait() gives true or raises the run's error */
static int b_run_async(lua_State *L)
{
  batch_box *box = check_batch(L, 1, "run_async");
  xl_no_args_after(L, 1, "run_async");
  xfer_job **job = xl_new_job_box(L);
  xfer_error err;
  if (xfer_batch_start(box->batch, job, &err)) xl_raise(L, &err);
  return 1;
}

/* b:done(): one boolean per element, whether it completed in the last run */
static int b_done(lua_State *L)
{
  xfer_batch *b = check_batch(L, 1, "done")->batch;
  size_t n = xfer_batch_count(b);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushboolean(L, xfer_batch_done(b, i));
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* b:plan(): one table a group, as xfer.plan's (path, reason, steps, moves): how the prepared
** batch will move, planned once */
static int b_plan(lua_State *L)
{
  xfer_batch *b = check_batch(L, 1, "plan")->batch;
  xl_no_args_after(L, 1, "plan");
  size_t groups = 0;
  xfer_batch_groups(b, &groups, NULL);
  lua_createtable(L, (int)groups, 0);
  for (size_t g = 0; g < groups; g++) {
    xfer_plan plan;
    xfer_error err;
    if (xfer_batch_plan(b, g, &plan, &err)) xl_raise(L, &err);
    xl_push_plan(L, &plan);
    lua_rawseti(L, -2, (int)g + 1);
  }
  return 1;
}

static int b_release(lua_State *L)
{
  batch_box *box = xl_test_udata(L, 1, XL_BATCH);
  if (box) {
    xfer_batch_release(box->batch);
    box->batch = NULL;
    return 0;
  }
  xl_arg_error(L, 1, "release", XL_BATCH);
}

static int b_gc(lua_State *L)
{
  batch_box *box = lua_touserdata(L, 1);
  if (box && box->batch) xfer_batch_release(box->batch); /* never raises */
  if (box) box->batch = NULL;
  return 0;
}

static int b_index(lua_State *L)
{
  const char *key = lua_tostring(L, 2);
  luaL_getmetatable(L, XL_BATCH);
  lua_getfield(L, -1, "methods");
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  if (!lua_isnil(L, -1)) return 1; /* a method: a released batch's say so when called */
  lua_pop(L, 3);
  batch_box *box = check_batch(L, 1, key ? key : "index");
  size_t groups, at_once;
  xfer_batch_groups(box->batch, &groups, &at_once);
  if (key && !strcmp(key, "count")) lua_pushnumber(L, (lua_Number)xfer_batch_count(box->batch));
  else if (key && !strcmp(key, "bytes")) lua_pushnumber(L, (lua_Number)xfer_batch_bytes(box->batch));
  else if (key && !strcmp(key, "groups")) lua_pushnumber(L, (lua_Number)groups);
  else if (key && !strcmp(key, "at_once")) lua_pushnumber(L, (lua_Number)at_once);
  else lua_pushnil(L);
  return 1;
}

static int b_tostring(lua_State *L)
{
  batch_box *box = xl_test_udata(L, 1, XL_BATCH);
  if (!box || !box->batch) {
    lua_pushliteral(L, "xfer.Batch(released)");
    return 1;
  }
  size_t groups, at_once;
  xfer_batch_groups(box->batch, &groups, &at_once);
  lua_pushfstring(L, "xfer.Batch(%d elements, %d bytes, %d groups, %d at once)",
                  (int)xfer_batch_count(box->batch), (int)xfer_batch_bytes(box->batch),
                  (int)groups, (int)at_once);
  return 1;
}

void xl_open_batch(lua_State *L, int module, int methods)
{
  luaL_newmetatable(L, XL_BATCH);
  lua_pushcfunction(L, b_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, b_index);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, xl_read_only);
  lua_setfield(L, -2, "__newindex");
  lua_pushcfunction(L, b_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_newtable(L);
  lua_pushcfunction(L, b_run);
  lua_setfield(L, -2, "run");
  lua_pushcfunction(L, b_done);
  lua_setfield(L, -2, "done");
  lua_pushcfunction(L, b_plan);
  lua_setfield(L, -2, "plan");
  lua_pushcfunction(L, b_run_async);
  lua_setfield(L, -2, "run_async");
  lua_pushcfunction(L, b_release);
  lua_setfield(L, -2, "release");
  lua_setfield(L, -2, "methods");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_batch);
  lua_setfield(L, module, "batch");
  lua_pushcfunction(L, l_copy_many);
  lua_setfield(L, module, "copy_many");
  lua_pushcfunction(L, m_copy_blocks);
  lua_setfield(L, methods, "copy_blocks");
}
