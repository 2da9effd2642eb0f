/*
** workers.c -- one context shared by several Lua states on several host threads, as an
** application's workers would: each thread has its own lua_State (xfer_lua_set_context),
** and all of them move tensors between every pair of devices at once -- to, copy_from,
** to_async, views, dtype changes -- checking every byte. Run by ctest; run under
** ThreadSanitizer by scripts/test (build-tsan), where it must be clean.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lualib.h>

#include "xfer.h"
#include "xfer_lua.h"

#define WORKERS 4

static const char *const script =
  "local xfer = require 'xfer'\n"
  "local worker, rounds = ...\n"
  "local devices, moves = xfer.devices(), 0\n"
  "for round = 1, rounds do\n"
  "  for _, a in ipairs(devices) do\n"
  "    for _, b in ipairs(devices) do\n"
  "      local n = 4096 * worker + round * 7\n"
  "      local src = xfer.arange(n, {dtype = 'i32', device = a})\n"
  "      local want = src:tobytes()\n"
  "      assert(src:to(b):tobytes() == want, 'to')\n"
  "      local dst = xfer.empty({n}, {dtype = 'i32', device = b})\n"
  "      assert(dst:copy_from(src):tobytes() == want, 'copy_from')\n"
  "      assert(src:to_async(b):wait():tobytes() == want, 'to_async')\n"
  "      local m = src:view(-1, 1):transpose()\n"
  "      assert(m:to(b):tobytes() == want, 'a view')\n"
  "      assert(src:narrow(1, 2, 10):to(b, {dtype = 'f64'}):totable()[10] == 10, 'dtype')\n"
  "      moves = moves + 5\n"
  "      if round % 2 == 0 then collectgarbage() end\n"
  "    end\n"
  "  end\n"
  "end\n"
  "return moves\n";

typedef struct worker {
  xfer_ctx *ctx;
  int index, rounds;
  int moves;
  char failure[512];
} worker;

static void *run(void *arg)
{
  worker *w = arg;
  lua_State *L = luaL_newstate();
  if (!L) {
    snprintf(w->failure, sizeof w->failure, "no Lua state");
    return NULL;
  }
  luaL_openlibs(L);
  xfer_lua_preload(L);
  xfer_lua_set_context(L, w->ctx);
  if (luaL_loadstring(L, script)) {
    snprintf(w->failure, sizeof w->failure, "%s", lua_tostring(L, -1));
  } else {
    lua_pushinteger(L, w->index + 1);
    lua_pushinteger(L, w->rounds);
    if (lua_pcall(L, 2, 1, 0))
      snprintf(w->failure, sizeof w->failure, "%s",
               lua_tostring(L, -1) ? lua_tostring(L, -1) : "an error object");
    else
      w->moves = (int)lua_tointeger(L, -1);
  }
  lua_close(L);
  return NULL;
}

int main(int argc, char **argv)
{
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  xfer_ctx *ctx;
  xfer_error err;
  if (xfer_ctx_open(&ctx, &err)) {
    fprintf(stderr, "workers: %s\n", err.message);
    return 1;
  }
  worker w[WORKERS] = {{0}};
  pthread_t threads[WORKERS];
  for (int i = 0; i < WORKERS; i++) {
    w[i] = (worker){.ctx = ctx, .index = i, .rounds = rounds};
    if (pthread_create(&threads[i], NULL, run, &w[i])) {
      fprintf(stderr, "workers: cannot start a thread\n");
      return 1;
    }
  }
  int failed = 0, moves = 0;
  for (int i = 0; i < WORKERS; i++) {
    pthread_join(threads[i], NULL);
    if (w[i].failure[0]) {
      fprintf(stderr, "worker %d: %s\n", i + 1, w[i].failure);
      failed = 1;
    }
    moves += w[i].moves;
  }
  xfer_ctx_release(ctx);
  printf("workers: %d Lua states on %d threads, one context, %d moves checked%s\n", WORKERS,
         WORKERS, moves, failed ? ", FAILED" : "");
  return failed;
}
