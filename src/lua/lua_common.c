/*
** lua_common.c -- what every part of the binding stands on: the state's context (one per Lua
** state, kept in the registry) and the collector's help around it, the owners of wrapped
** memory that the core has let go of (dropped on the state's own thread), and the fields of a
** move's record. It calls lua_error.c alone.
*/
#include <pthread.h>
#include <stdlib.h>

#include "binding.h"

/* -- The state's context ----------------------------------------------------------- */

#define CTX_KEY "xfer.context"

typedef struct ctx_box {
  xfer_ctx *ctx;
  int reclaims;                 /* the context's reclaimer is this binding's */
} ctx_box;

static int ctx_box_gc(lua_State *L)
{
  ctx_box *box = lua_touserdata(L, 1);
  if (box->ctx && box->reclaims) xfer_set_reclaim(box->ctx, NULL, NULL);
  if (box->ctx) xfer_ctx_release(box->ctx);
  box->ctx = NULL;
  return 0;
}

/* -- Helping the collector ------------------------------------------------------------- */

/* The state allocating on this thread now: set only around core calls, so the reclaimer
** never runs a collection from another thread, or after the call has returned. */
static _Thread_local lua_State *allocating;

void xl_alloc_begin(lua_State *L) { allocating = L; }

xfer_code xl_alloc_end(xfer_code rc)
{
  allocating = NULL;
  return rc;
}

/* The core's reclaimer: a driver refused memory. A full collection frees the tensors
** nobody references; their blocks go back to the caches, which the core then empties. */
static void reclaim(void *arg)
{
  lua_State *L = allocating;
  if (!L) return; /* a worker thread, or no Lua call in flight */
  allocating = NULL; /* finalizers allocate nothing, but never collect twice over */
  lua_gc(L, LUA_GCCOLLECT, 0);
  xfer_gc_done(arg);
  allocating = L;
}

void xl_gc_pressure(lua_State *L, xfer_tensor *made)
{
  xfer_ctx *ctx = xfer_device_ctx(xfer_tensor_device(made)); /* no registry lookup per tensor */
  if (!xfer_gc_due(ctx)) return;
  lua_gc(L, LUA_GCCOLLECT, 0);
  xfer_gc_done(ctx);
}

/* Pushes a new, empty box in the registry; the context is put in afterwards, so that
** an error in between leaves a box that __gc can release safely. */
static ctx_box *new_ctx_box(lua_State *L)
{
  ctx_box *box = lua_newuserdata(L, sizeof *box);
  box->ctx = NULL;
  box->reclaims = 0;
  lua_newtable(L);
  lua_pushcfunction(L, ctx_box_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, CTX_KEY);
  lua_pop(L, 1);
  return box;
}

static ctx_box *find_ctx_box(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, CTX_KEY);
  ctx_box *box = lua_touserdata(L, -1);
  lua_pop(L, 1); /* the registry keeps it alive */
  return box;
}

xfer_ctx *xl_ctx(lua_State *L)
{
  ctx_box *box = find_ctx_box(L);
  if (box && box->ctx) return box->ctx;
  if (!box) box = new_ctx_box(L);
  xfer_error err;
  if (xfer_ctx_open(&box->ctx, &err) != XFER_E_OK) xl_raise(L, &err);
  xfer_set_reclaim(box->ctx, reclaim, box->ctx);
  box->reclaims = 1;
  return box->ctx;
}

int xfer_lua_set_context(lua_State *L, xfer_ctx *ctx)
{
  ctx_box *box = find_ctx_box(L);
  if (box && box->ctx) return -1;
  if (!box) box = new_ctx_box(L);
  box->ctx = xfer_ctx_retain(ctx);
  return 0;
}

void xl_set_move(lua_State *L, const char *from, const char *to, xfer_path path)
{
  lua_pushstring(L, from);
  lua_setfield(L, -2, "from");
  lua_pushstring(L, to);
  lua_setfield(L, -2, "to");
  lua_pushstring(L, xfer_path_name(path));
  lua_setfield(L, -2, "path");
}

/* -- Owners of wrapped memory ---------------------------------------------------------- */

/* The `owner` of xfer.wrap_address is held in the registry until the core lets go of the
** memory -- the tensor freed, or its last reference gone, which may be a view's or a move's
** still running on another thread. So the release only queues the reference, and the state
** drops it the next time it runs xferlua's code: no Lua call from another thread. */
typedef struct owner_ref {
  const void *registry;         /* which state's registry holds it */
  int ref;
  struct owner_ref *next;
} owner_ref;

static pthread_mutex_t released_lock = PTHREAD_MUTEX_INITIALIZER;
static owner_ref *released;     /* let go of by the core, not yet dropped (released_lock) */
static int any_released;        /* (atomic) */

void xl_owner_release(void *ud)
{
  owner_ref *o = ud;
  pthread_mutex_lock(&released_lock);
  o->next = released;
  released = o;
  __atomic_store_n(&any_released, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&released_lock);
}

void xl_drain_owners(lua_State *L)
{
  if (!__atomic_load_n(&any_released, __ATOMIC_ACQUIRE)) return;
  const void *registry = lua_topointer(L, LUA_REGISTRYINDEX);
  owner_ref *mine = NULL;
  pthread_mutex_lock(&released_lock);
  for (owner_ref **p = &released; *p;) {
    owner_ref *o = *p;
    if (o->registry == registry) {
      *p = o->next;
      o->next = mine;
      mine = o;
    } else {
      p = &o->next;
    }
  }
  __atomic_store_n(&any_released, released != NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&released_lock);
  while (mine) {
    owner_ref *next = mine->next;
    luaL_unref(L, LUA_REGISTRYINDEX, mine->ref);
    free(mine);
    mine = next;
  }
}

void *xl_owner_hold(lua_State *L, const char *fname)
{
  owner_ref *owner = malloc(sizeof *owner);
  if (owner) {
    owner->registry = lua_topointer(L, LUA_REGISTRYINDEX);
    owner->ref = luaL_ref(L, LUA_REGISTRYINDEX); /* pops it */
    owner->next = NULL;
  } else {
    xl_raise_code(L, XFER_E_ALLOC, fname, "%s", xfer_code_what(XFER_E_ALLOC));
  }
  return owner;
}

void xl_owner_drop(lua_State *L, void *ud)
{
  owner_ref *owner = ud;
  luaL_unref(L, LUA_REGISTRYINDEX, owner->ref);
  free(owner);
}

void xl_push_plan(lua_State *L, const xfer_plan *plan)
{
  lua_createtable(L, 0, 5);
  lua_pushstring(L, xfer_path_name(plan->path));
  lua_setfield(L, -2, "path");
  lua_pushstring(L, plan->reason);
  lua_setfield(L, -2, "reason");
  lua_createtable(L, plan->nsteps, 0);
  for (int i = 0; i < plan->nsteps; i++) {
    lua_pushstring(L, plan->steps[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "steps");
  lua_createtable(L, plan->nestimates, 0); /* {path =, seconds = (nil: no figure), measured =} */
  for (int i = 0; i < plan->nestimates; i++) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, xfer_path_name(plan->estimates[i].path));
    lua_setfield(L, -2, "path");
    lua_pushboolean(L, plan->estimates[i].measured);
    lua_setfield(L, -2, "measured");
    if (plan->estimates[i].measured) {
      lua_pushnumber(L, plan->estimates[i].seconds);
      lua_setfield(L, -2, "seconds");
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "estimates");
  lua_createtable(L, plan->nmoves, 0); /* {from, to, path [, runner, fallback]}: as xfer.stats() records them */
  for (int i = 0; i < plan->nmoves; i++) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, plan->moves[i].from);
    lua_setfield(L, -2, "from");
    lua_pushstring(L, plan->moves[i].to);
    lua_setfield(L, -2, "to");
    lua_pushstring(L, xfer_path_name(plan->moves[i].path));
    lua_setfield(L, -2, "path");
    if (plan->moves[i].runner[0]) {
      lua_pushstring(L, plan->moves[i].runner);
      lua_setfield(L, -2, "runner");
    }
    if (plan->moves[i].fallback) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "fallback");
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "moves");
}
