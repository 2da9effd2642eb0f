/*
** workers.c -- one context shared by several Lua states on several host threads, as an
** application's workers would: each thread has its own lua_State (xfer_lua_set_context),
** and all of them move tensors between every pair of devices at once -- to, copy_from,
** to_async, views, dtype changes -- checking every byte. Run by ctest; run under
** ThreadSanitizer by scripts/test (build-tsan), where it must be clean. `workers ROUNDS
** remote`: the context also serves its devices on a listener thread of its own
** (xfer_listen_opts.thread) while the workers run, to a client in another process ($XFERLUA,
** else the xferlua next to this program) that moves bytes to each of them and back.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "xfer.h"
#include "xfer_remote.h"
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

/* The remote client (workers ROUNDS remote), run by xferlua -e with the server's URL: moves
** to every device of the server and back, several rounds, every byte checked (the server's
** URL in XFER_WORKERS_URL). */
static const char *const client_script =
  "local xfer = require 'xfer'; local url = os.getenv('XFER_WORKERS_URL'); "
  "local p = xfer.connect(url, {timeout = 60}); local moves, failed = 0, 0; "
  "for round = 1, 4 do for _, d in ipairs(p.devices) do "
  "local t = xfer.arange(65536 + round * 3, {dtype = 'i32'}); "
  "local ok = pcall(function() assert(t:to(d):to('host'):equals(t)) end); "
  "moves = moves + 2; if not ok then failed = failed + 1 end end end; "
  "p:close(); print(('remote client: %d moves, %d failed'):format(moves, failed))";

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
    if (lua_pcall(L, 2, 1, 0)) {
      lua_getglobal(L, "tostring"); /* an xfer error is a table: its __tostring says what */
      lua_insert(L, -2);
      lua_pcall(L, 1, 1, 0);
      snprintf(w->failure, sizeof w->failure, "%s",
               lua_tostring(L, -1) ? lua_tostring(L, -1) : "an error object");
    }
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
  xfer_listener *listener = NULL;
  FILE *client = NULL;
  if (argc > 2 && !strcmp(argv[2], "remote")) {
    xfer_listen_opts lo = {.name = "nodeW", .thread = 1};
    if (xfer_listen(ctx, "ucx://127.0.0.1:0", &lo, &listener, &err)) {
      fprintf(stderr, "workers: %s\n", err.message);
      xfer_ctx_release(ctx);
      return 1;
    }
    /* the client, in a process of its own: $XFERLUA (scripts/test's), else the xferlua beside
    ** this program */
    char cmd[4096], beside[1024];
    const char *slash = strrchr(argv[0], '/');
    snprintf(beside, sizeof beside, "%.*sxferlua", slash ? (int)(slash - argv[0] + 1) : 0, argv[0]);
    const char *xferlua = getenv("XFERLUA") ? getenv("XFERLUA") : beside;
    snprintf(cmd, sizeof cmd, "XFER_WORKERS_URL=%s timeout 300 %s -e \"%s\"",
             xfer_listener_url(listener), xferlua, client_script);
    client = popen(cmd, "r");
    if (!client) {
      fprintf(stderr, "workers: cannot start the client\n");
      xfer_listener_close(listener);
      xfer_ctx_release(ctx);
      return 1;
    }
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
  if (client) { /* its last line says how it went */
    char line[512] = "", last[512] = "no word from the client\n";
    while (fgets(line, sizeof line, client)) snprintf(last, sizeof last, "%s", line);
    int status = pclose(client);
    printf("%s", last);
    if (status != 0 || !strstr(last, " 0 failed")) {
      fprintf(stderr, "workers: the remote client failed (status %d): %s", status, last);
      failed = 1;
    }
  }
  int served = listener != NULL;
  xfer_listener_close(listener);
  xfer_ctx_release(ctx);
  printf("workers: %d Lua states on %d threads, one context%s, %d moves checked%s\n", WORKERS,
         WORKERS, served ? " serving another process on a listener thread" : "", moves,
         failed ? ", FAILED" : "");
  return failed;
}
