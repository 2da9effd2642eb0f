/*
** lua_job.c -- xfer.Transfer userdata: t:to_async(dev) returns one; :wait() gives the
** tensor or raises the move's error, :done() polls, xfer.wait_all(list) waits for many.
*/
#include <string.h>

#include "binding.h"

#define XL_TRANSFER "xfer.Transfer"

typedef struct job_box {
  xfer_job *job;
  int finishes;                 /* its uservalue holds {finisher, result}: a load's table */
} job_box;

static job_box *check_job(lua_State *L, int idx, const char *fname)
{
  job_box *box = xl_test_udata(L, idx, XL_TRANSFER);
  if (box && box->job) return box;
  xl_arg_error(L, idx, fname, XL_TRANSFER);
}

/* What the job at idx, ended well, gives: its tensor (t), a load's table (its finisher's, made
** once and kept), or true (a batch run, a save). */
static void push_result(lua_State *L, int idx, job_box *box, xfer_tensor *t)
{
  if (t) {
    xl_push_tensor(L, t);
    xfer_tensor_release(t); /* the userdata holds its own reference */
    return;
  }
  if (!box->finishes) {
    lua_pushboolean(L, 1);
    return;
  }
  lua_getfenv(L, idx);
  lua_rawgeti(L, -1, 2);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_rawgeti(L, -1, 1);
    lua_pushlightuserdata(L, box->job);
    lua_call(L, 1, 1);
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, 2);
  }
  lua_remove(L, -2);
}

static int job_wait(lua_State *L)
{
  job_box *box = check_job(L, 1, "wait");
  xfer_tensor *t;
  xfer_error err;
  if (xfer_job_wait(box->job, &t, &err)) xl_raise(L, &err);
  push_result(L, 1, box, t);
  return 1;
}

void xl_job_finish_with(lua_State *L, int idx)
{
  job_box *box = lua_touserdata(L, idx);
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  lua_createtable(L, 2, 0);
  lua_insert(L, -2);
  lua_rawseti(L, -2, 1);
  lua_setfenv(L, idx);
  box->finishes = 1;
}

/* job:cancel(): returns once nothing more will be written into the job's targets; the job
** then ends canceled (job:wait() raises it) unless it had ended already. */
static int job_cancel(lua_State *L)
{
  xfer_job_cancel(check_job(L, 1, "cancel")->job); /* (a no-op for one that ended) */
  return 0;
}

static int job_done(lua_State *L)
{
  lua_pushboolean(L, xfer_job_done(check_job(L, 1, "done")->job));
  return 1;
}

static int job_gc(lua_State *L)
{
  job_box *box = lua_touserdata(L, 1);
  /* never waits: the collector may run inside a move (the reclaimer) that this job's
  ** thread is waiting for; a running move finishes on its own and drops its result */
  if (box && box->job) xfer_job_detach(box->job);
  if (box) box->job = NULL;
  return 0;
}

static int job_tostring(lua_State *L)
{
  job_box *box = check_job(L, 1, "tostring");
  lua_pushfstring(L, "xfer.Transfer(%s)", xfer_job_done(box->job) ? "done" : "running");
  return 1;
}

xfer_job **xl_new_job_box(lua_State *L)
{
  job_box *box = lua_newuserdata(L, sizeof *box);
  box->job = NULL;
  box->finishes = 0;
  luaL_getmetatable(L, XL_TRANSFER);
  lua_setmetatable(L, -2);
  return &box->job;
}

/* t:to_async(dev, {via=...}) */
int xl_to_async(lua_State *L)
{
  xfer_tensor *t = xl_check_tensor(L, 1, "to_async");
  xfer_device *dev = xl_check_device(L, 2, "to_async");
  xfer_transfer_opts opts;
  xl_transfer_opts(L, 3, "to_async", &opts);
  xfer_job **job = xl_new_job_box(L);
  xfer_error err;
  if (xfer_transfer_start(t, dev, &opts, job, &err)) xl_raise(L, &err);
  return 1;
}

/* job:progress(): bytes done and the total so far */
static int m_progress(lua_State *L)
{
  job_box *box = check_job(L, 1, "progress");
  uint64_t done, total;
  xfer_job_progress(box->job, &done, &total);
  lua_pushnumber(L, (lua_Number)done);
  lua_pushnumber(L, (lua_Number)total);
  return 2;
}

/* xfer.wait_all(list): waits for every transfer, then returns their tensors in order, or
** raises the first failure's error. */
static int l_wait_all(lua_State *L)
{
  if (!lua_istable(L, 1)) xl_arg_error(L, 1, "wait_all", "list of xfer.Transfer");
  int n = (int)lua_objlen(L, 1);
  for (int i = 1; i <= n; i++) { /* check them all before waiting for any */
    lua_rawgeti(L, 1, i);
    job_box *box = xl_test_udata(L, -1, XL_TRANSFER);
    if (!box || !box->job)
      xl_raise_code(L, XFER_E_INVALID, "wait_all", "wait_all: element %d is a %s, not an %s", i,
                    luaL_typename(L, -1), XL_TRANSFER);
    lua_pop(L, 1);
  }
  lua_createtable(L, n, 0);
  int results = lua_gettop(L), failed = 0;
  xfer_error first;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    job_box *box = lua_touserdata(L, -1);
    xfer_tensor *t;
    xfer_error err;
    if (xfer_job_wait(box->job, &t, &err)) {
      lua_pop(L, 1);
      if (!failed) first = err;
      failed = 1;
      continue;
    }
    push_result(L, lua_gettop(L), box, t);
    lua_rawseti(L, results, i);
    lua_pop(L, 1);
  }
  if (failed) xl_raise(L, &first);
  return 1;
}

void xl_open_job(lua_State *L, int module)
{
  if (luaL_newmetatable(L, XL_TRANSFER)) {
    static const luaL_Reg methods[] = {{"wait", job_wait}, {"done", job_done},
                                       {"progress", m_progress}, {"cancel", job_cancel},
                                       {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, job_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, job_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, XL_TRANSFER);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_wait_all);
  lua_setfield(L, module, "wait_all");
}
