/*
** xferlua.c -- the `xferlua` executable: LuaJIT's command line with `xfer` preloaded,
** plus --devices. Options, `arg` and exit codes follow luajit/lua.c.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "crash_report.h"
#include "xfer.h"
#include "xfer_lua.h"

#define PROGNAME "xferlua"

static const char *const progname = PROGNAME;
static lua_State *global_L = NULL;

/* --help: the program's name goes in twice (the usage line, the error prefix). */
static const char usage_text[] =
  "usage: %s [options] [script [args]]\n"
  "Run Lua scripts on LuaJIT with the `xfer` module preloaded: tensors that move\n"
  "between host, CUDA, Vulkan and OpenCL devices.\n"
  "\n"
  "Options:\n"
  "  -e chunk    Execute the string 'chunk'.\n"
  "  -l name     Require library 'name' into the global 'name'.\n"
  "  -j cmd      Perform a LuaJIT control command (on, off, flush, or a jit.* module\n"
  "              such as -jv or -jdump).\n"
  "  -O[opt]     Control LuaJIT optimizations (as luajit -O).\n"
  "  -i          Enter interactive mode after running the script.\n"
  "  -b ...      Save or list bytecode (the rest is jit.bcsave's, as luajit -b).\n"
  "  -v, --version  Show version information.\n"
  "  -E          Ignore the environment variables LUA_INIT, LUA_PATH and LUA_CPATH.\n"
  "  --devices   List every runtime (available, or why not) and every device;\n"
  "              with --json, as JSON (xfer.json(xfer.inventory())).\n"
  "  --selftest  Move a known pattern between every pair of devices by every path\n"
  "              that applies, check it, time it (--quick: small sizes; --json);\n"
  "              exits 1 when a default path fails.\n"
  "  --calibrate [--sizes 4K,1M,...]\n"
  "              Time every path between every pair of devices at a few sizes (by\n"
  "              default 4K,64K,1M,16M,64M,256M), give the planner the times (it then\n"
  "              chooses by size) and save them to the plan cache (XFER_PLAN_CACHE;\n"
  "              --json: the figures as JSON).\n"
  "  --serve URL [--name NAME] [--token-file FILE] [--client-memory SIZE]\n"
  "              Serve this machine's devices on URL (ucx://address:port, clients\n"
  "              knock there; port 0: any free one) until stopped; clients see\n"
  "              them as NAME/device (default node); FILE holds a token clients\n"
  "              must give; SIZE (as 512M, 4G) is the most one client may hold.\n"
  "              A line on stderr says what is served at which URL.\n"
  "  --load FILE [--device DEV]\n"
  "              Load every tensor of FILE (safetensors, .npy, .npz) onto DEV (default\n"
  "              host): prints each name and shape, how the file was read, the\n"
  "              seconds and GB/s (--json: as JSON).\n"
  "  -h, --help  Show this help.\n"
  "  --          Stop handling options.\n"
  "  -           Execute stdin and stop handling options.\n"
  "\n"
  "With no script and no -e, reads a script from stdin, or starts the interactive\n"
  "prompt when stdin is a terminal.\n"
  "\n"
  "Environment:\n"
  "  XFER_FAULTS=runtime:op[:nth[:count[:native]]],...  make driver calls fail on purpose\n"
  "  XFER_TRACE=1       print one line per move (path, bytes, time, GB/s), and what a\n"
  "                     verified one's check cost beside its copy\n"
  "  XFER_CUDA_LIBRARY, XFER_VULKAN_LIBRARY, XFER_OPENCL_LIBRARY  load another driver\n"
  "  XFER_UCX_LIBRARY=path  another UCX (its libucp.so.0) for remote devices\n"
  "  XFER_VULKAN_NO_MAP=1  stage or import even where Vulkan tensors could be mapped\n"
  "  XFER_CACHE=0       no caching allocator: every allocation and free reaches the driver\n"
  "  XFER_FILE_URING=0  file reads and writes on threads, not io_uring\n"
  "  XFER_FILE_CHUNK=16M, XFER_FILE_THREADS=8  a file request's bytes, page-cache readers\n"
  "  XFER_SHARED_MEMORY=0  OpenCL tensors in OpenCL's own memory, not CUDA's\n"
  "  XFER_HUGE_PAGES=0  host blocks in 4 KiB pages, not transparent huge pages\n"
  "  XFER_UCX_REGISTER=0  no host memory registered with UCX (ucp_mem_map)\n"
  "  XFER_UCX_CUDA=0|1  CUDA memory to UCX in place (the direct path): never, or over\n"
  "                     any lane (unset: over cuda_ipc lanes, where UCX has CUDA)\n"
  "  XFER_FAIL_AT=k     fail the k-th fallible driver call (torture)\n"
  "  XFER_PLAN_CACHE=file  the planner's measured figures (default\n"
  "                     ~/.cache/xferlua/plan-cache.tsv; off: none)\n"
  "  XFER_SELFTEST=1    run the quick self-test when xfer loads\n"
  "  XFER_NO_CRASH_REPORT=1  no report of a fatal signal (below)\n"
  "  (switches take 0 or 1; anything else is refused)\n"
  "\n"
  "An uncaught error prints '%s: <message>' and a traceback, and exits with 1.\n"
  "A crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) prints the signal, the C stack\n"
  "and the script's Lua stack on stderr, then ends as the signal does (a bug: report\n"
  "it).\n";

static void print_usage(FILE *out) { fprintf(out, usage_text, progname, progname); }

static void print_version(void)
{
  printf("xferlua %s (%s) -- tensors across host, CUDA, Vulkan and OpenCL\n", XFER_VERSION,
         LUAJIT_VERSION);
  fflush(stdout);
}

/* -- Errors ------------------------------------------------------------------------------ */

static void report(lua_State *L, int status)
{
  if (status && !lua_isnil(L, -1)) {
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = "(error object is not a string)";
    fprintf(stderr, "%s: %s\n", progname, msg);
    fflush(stderr);
    lua_pop(L, 1);
  }
}

/* Message handler: the error as text (xfer.Error objects through __tostring), plus a
** traceback. */
static int traceback(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) return 1; /* error() with no value: exit 1 quietly, as lua.c */
  if (!lua_isstring(L, 1)) {
    if (!luaL_callmeta(L, 1, "__tostring") || !lua_isstring(L, -1))
      lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    lua_replace(L, 1);
  }
  lua_getfield(L, LUA_GLOBALSINDEX, "debug");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "traceback");
    if (lua_isfunction(L, -1)) {
      lua_pushvalue(L, 1);
      lua_pushinteger(L, 2);
      lua_call(L, 2, 1);
      return 1;
    }
  }
  lua_settop(L, 1);
  return 1;
}

static void stop_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static volatile sig_atomic_t interrupted; /* Ctrl-C came: the script is being stopped */

static void on_sigint(int sig)
{
  signal(sig, SIG_DFL); /* a second Ctrl-C ends the process */
  interrupted = 1;
  /* lua.c's own way to stop a script: lua_sethook only stores the hook and its mask */
  lua_sethook(global_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1); // NOLINT(bugprone-signal-handler)
}

static int docall(lua_State *L, int narg, int nresults)
{
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  signal(SIGINT, on_sigint);
  int status = lua_pcall(L, narg, nresults, base);
  signal(SIGINT, SIG_DFL);
  lua_remove(L, base);
  if (status) lua_gc(L, LUA_GCCOLLECT, 0); /* an error may have left tensors behind */
  return status;
}

/* -- Running chunks -------------------------------------------------------------------------- */

static int dostring(lua_State *L, const char *s, const char *name)
{
  int status = luaL_loadbuffer(L, s, strlen(s), name) || docall(L, 0, 0);
  report(L, status);
  return status;
}

static int dolibrary(lua_State *L, const char *name)
{
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  int status = docall(L, 1, 1);
  if (status == 0) lua_setglobal(L, name);
  report(L, status);
  return status;
}

/* -jcmd[=arg,...]: jit.on/off/flush, or require("jit.<cmd>").start(args) */
static int dojitcmd(lua_State *L, const char *cmd)
{
  const char *eq = strchr(cmd, '=');
  size_t len = eq ? (size_t)(eq - cmd) : strlen(cmd);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "jit");
  if (docall(L, 1, 1)) return report(L, 1), 1;
  lua_pushlstring(L, cmd, len);
  lua_gettable(L, -2);
  if (lua_isfunction(L, -1)) { /* jit.on, jit.off, jit.flush */
    lua_remove(L, -2);
  } else {
    lua_pop(L, 2);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "jit.");
    lua_pushlstring(L, cmd, len);
    lua_concat(L, 2);
    if (docall(L, 1, 1)) { /* luajit's own words: no module or no command of that name */
      lua_pop(L, 1);
      fprintf(stderr, "%s: unknown luaJIT command or jit.* modules not installed\n", progname);
      return 1;
    }
    lua_getfield(L, -1, "start");
    if (!lua_isfunction(L, -1)) {
      fprintf(stderr, "%s: unknown luaJIT command or jit.* modules not installed\n", progname);
      lua_pop(L, 2);
      return 1;
    }
    lua_remove(L, -2);
  }
  int nargs = 0;
  for (const char *a = eq ? eq + 1 : NULL; a; nargs++) {
    const char *comma = strchr(a, ',');
    lua_pushlstring(L, a, comma ? (size_t)(comma - a) : strlen(a));
    a = comma ? comma + 1 : NULL;
  }
  int status = docall(L, nargs, 0);
  report(L, status);
  return status;
}

/* -O[opt,...]: require("jit.opt").start(opts) */
static int dojitopt(lua_State *L, const char *opts)
{
  lua_getglobal(L, "require");
  lua_pushliteral(L, "jit.opt");
  if (docall(L, 1, 1)) return report(L, 1), 1;
  lua_getfield(L, -1, "start");
  lua_remove(L, -2);
  int nargs = 0;
  for (const char *a = *opts ? opts : NULL; a; nargs++) {
    const char *comma = strchr(a, ',');
    lua_pushlstring(L, a, comma ? (size_t)(comma - a) : strlen(a));
    a = comma ? comma + 1 : NULL;
  }
  int status = docall(L, nargs, 0);
  report(L, status);
  return status;
}

/* --selftest [--quick] [--json]: the report, and the exit status of its verdict */
static int run_selftest(lua_State *L, int quick, int json)
{
  char chunk[768];
  /* on a terminal, a progress line on stderr (not when the output goes to a file or pipe) */
  int line = !json && isatty(1) && isatty(2);
  snprintf(chunk, sizeof chunk,
           "local xfer = require 'xfer'\n"
           "local r = xfer.selftest{quick = %s, progress = %s}\n"
           "return %s, r.ok",
           quick ? "true" : "false",
           line ? "function(d, n) io.stderr:write(('\\rselftest: pair %d of %d'):format(d, n), "
                  "d == n and '\\r\\27[K' or '') end" : "nil",
           json ? "xfer.json(r, {indent = 2})" : "xfer.selftest_report(r)");
  int status = luaL_loadbuffer(L, chunk, strlen(chunk), "=--selftest");
  if (status == 0) status = docall(L, 0, 2);
  if (status == 0) {
    printf("%s\n", lua_tostring(L, -2));
    int ok = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return !ok;
  }
  report(L, status);
  return status;
}

/* -- The tool modes (--load, --serve): xfer.cli's functions ---------------------------------- */

/* Set by the message handler of a tool mode: the error was an xfer.Error, a user's mistake
** (a missing file, a bad URL), told in one line with exit status 2 -- not a traceback of our
** chunks. */
static int tool_mistake;

static int is_xfer_error(lua_State *L, int idx)
{
  if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return 0;
  lua_getfield(L, -1, "__name");
  int yes = lua_isstring(L, -1) && !strcmp(lua_tostring(L, -1), "xfer.Error");
  lua_pop(L, 2);
  return yes;
}

static int tool_message(lua_State *L)
{
  if (interrupted) { /* Ctrl-C: the hook's error, said as what it is */
    lua_pushliteral(L, "interrupted (SIGINT)");
    return 1;
  }
  if (!is_xfer_error(L, 1)) return traceback(L);
  tool_mistake = 1;
  if (!luaL_callmeta(L, 1, "__tostring") || !lua_isstring(L, -1)) lua_pushliteral(L, "(an xfer.Error)");
  return 1;
}

/* Calls require("xfer.cli")[fn](args...) (nargs strings, NULL for nil, then a boolean); 0, or
** the exit status: 2 for a mistake, 130 for Ctrl-C, 1 for anything else (with a traceback). */
static int run_tool(lua_State *L, const char *fn, const char *const *args, int nargs, int flag)
{
  lua_pushcfunction(L, tool_message);
  int handler = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "xfer.cli");
  int status = lua_pcall(L, 1, 1, handler);
  if (!status) {
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    for (int i = 0; i < nargs; i++) {
      if (args[i]) lua_pushstring(L, args[i]);
      else lua_pushnil(L);
    }
    lua_pushboolean(L, flag);
    tool_mistake = 0;
    interrupted = 0;
    signal(SIGINT, on_sigint);
    status = lua_pcall(L, nargs + 1, 0, handler);
    signal(SIGINT, SIG_DFL);
  }
  if (status) {
    report(L, status);
    status = interrupted ? 130 : tool_mistake ? 2 : 1;
  }
  if (status == 130) {
    /* Ctrl-C on a tool mode (--serve, --load): what it holds goes back with the process. The
    ** drivers' teardown (CUDA, Vulkan and OpenCL contexts) took 1.3 s on the H200 -- "at
    ** once" is the line said and the process gone; nothing of the tools' is left unwritten */
    fflush(NULL);
    _exit(130);
  }
  lua_settop(L, handler - 1);
  if (status) lua_gc(L, LUA_GCCOLLECT, 0); /* an error may have left tensors behind */
  return status;
}

/* --serve URL [--name N] [--token-file F] [--client-memory SIZE]: this machine's devices,
** served until the process is stopped; a line on stderr says what is served where */
static int run_serve(lua_State *L, const char *serve, const char *name, const char *token_file,
                     const char *client_memory)
{
  const char *args[] = {serve, name, token_file, client_memory};
  return run_tool(L, "serve", args, 4, 0);
}

/* --load FILE [--device DEV] [--json]: every tensor loaded, the names, shapes and speed said */
static int run_load(lua_State *L, const char *file, const char *device, int json)
{
  const char *args[] = {file, device};
  return run_tool(L, "load", args, 2, json);
}

/* --calibrate [--sizes LIST] [--json]: the figures, saved to the plan cache; 1 when they
** could not be saved */
static int run_calibrate(lua_State *L, int json, const char *sizes)
{
  char chunk[1024];
  int line = !json && isatty(1) && isatty(2);
  snprintf(chunk, sizeof chunk,
           "local xfer = require 'xfer'\n"
           "local list, sizes = ...\n"
           "if list then\n"
           "  sizes = {}\n"
           "  local parse = require('xfer.bench').parse_size\n"
           "  for text in list:gmatch('[^,]+') do sizes[#sizes + 1] = parse(text) end\n"
           "end\n"
           "local r = xfer.calibrate{sizes = sizes, progress = %s}\n"
           "return %s, r.saved",
           line ? "function(d, n) io.stderr:write(('\\rcalibrate: pair %d of %d'):format(d, n), "
                  "d == n and '\\r\\27[K' or '') end" : "nil",
           json ? "xfer.json(r, {indent = 2})" : "xfer.calibrate_report(r)");
  int status = luaL_loadbuffer(L, chunk, strlen(chunk), "=--calibrate");
  if (status == 0) {
    if (sizes) lua_pushstring(L, sizes);
    else lua_pushnil(L);
    status = docall(L, 1, 2);
  }
  if (status == 0) {
    printf("%s\n", lua_tostring(L, -2));
    int saved = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return !saved;
  }
  report(L, status);
  return status;
}

static int print_devices(lua_State *L, int json)
{
  static const char *const report_text =
    "local xfer = require 'xfer'\n"
    "return 'xferlua ' .. xfer.version .. '\\n' .. xfer.describe()";
  static const char *const report_json =
    "local xfer = require 'xfer'\n"
    "return xfer.json(xfer.inventory(), {indent = 2})";
  const char *chunk = json ? report_json : report_text;
  int status = luaL_loadbuffer(L, chunk, strlen(chunk), "=--devices");
  if (status == 0) status = docall(L, 0, 1);
  if (status == 0) {
    printf("%s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  report(L, status);
  return status;
}

/* -- The arg table and the script ------------------------------------------------------------ */

/* arg[0] is the script, arg[1..] its arguments, arg[-1..] the interpreter and options. */
static void create_arg_table(lua_State *L, char **argv, int argc, int script)
{
  lua_createtable(L, argc - script - 1, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int handle_script(lua_State *L, char **argv, int argc, int script)
{
  const char *fname = argv[script];
  if (!strcmp(fname, "-") && strcmp(argv[script - 1], "--")) fname = NULL; /* stdin */
  int status = luaL_loadfile(L, fname);
  if (status == 0) {
    int nargs = argc - script - 1;
    luaL_checkstack(L, nargs + 3, "too many arguments to script");
    for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
    status = docall(L, nargs, 0);
  }
  report(L, status);
  return status;
}

/* -- Interactive mode ------------------------------------------------------------------------ */

static int incomplete(lua_State *L, int status)
{
  if (status != LUA_ERRSYNTAX) return 0;
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  if (len >= 7 && !strcmp(msg + len - 7, "'<eof>'")) {
    lua_pop(L, 1);
    return 1;
  }
  return 0;
}

static int read_line(lua_State *L, int first)
{
  char buf[512];
  fputs(first ? "> " : ">> ", stdout);
  fflush(stdout);
  if (!fgets(buf, sizeof buf, stdin)) return 0;
  size_t len = strlen(buf);
  if (len && buf[len - 1] == '\n') buf[--len] = '\0';
  if (first && buf[0] == '=')
    lua_pushfstring(L, "return %s", buf + 1);
  else
    lua_pushlstring(L, buf, len);
  return 1;
}

/* One statement, possibly over several lines; tries "return <line>" first, so that
** typing an expression prints it. */
static int load_statement(lua_State *L)
{
  lua_settop(L, 0);
  if (!read_line(L, 1)) return -1;
  lua_pushfstring(L, "return %s", lua_tostring(L, 1));
  if (luaL_loadbuffer(L, lua_tostring(L, -1), lua_strlen(L, -1), "=stdin") == 0) {
    lua_remove(L, -2);
    lua_remove(L, 1);
    return 0;
  }
  lua_pop(L, 2);
  for (;;) {
    int status = luaL_loadbuffer(L, lua_tostring(L, 1), lua_strlen(L, 1), "=stdin");
    if (!incomplete(L, status)) {
      lua_remove(L, 1);
      return status;
    }
    if (!read_line(L, 0)) return -1;
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

static void dotty(lua_State *L)
{
  int status;
  while ((status = load_statement(L)) != -1) {
    if (status == 0) status = docall(L, 0, LUA_MULTRET);
    report(L, status);
    if (status == 0 && lua_gettop(L) > 0) {
      lua_getglobal(L, "print");
      lua_insert(L, 1);
      if (lua_pcall(L, lua_gettop(L) - 1, 0, 0))
        fprintf(stderr, "%s: error calling print (%s)\n", progname, lua_tostring(L, -1));
    }
  }
  lua_settop(L, 0);
  fputs("\n", stdout);
  fflush(stdout);
}

/* -- main -------------------------------------------------------------------------------- */

typedef struct cli {
  int script;          /* index of the script in argv, or 0 */
  int interactive, version, no_env, devices, json, help, has_e;
  int bytecode;        /* index of a -b option, or 0 */
  int selftest, quick, calibrate;
  const char *serve, *name, *token_file; /* --serve URL [--name N] [--token-file F] */
  const char *client_memory;           /* ... [--client-memory SIZE] */
  const char *sizes;   /* --calibrate --sizes 4K,1M,... */
  const char *load, *device; /* --load FILE [--device DEV] */
  int bad;             /* index of an option that is wrong, or 0 */
} cli;

static void scan_args(char **argv, int argc, cli *c)
{
  memset(c, 0, sizeof *c);
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-') break;
    if (!strcmp(a, "--")) { i++; break; }
    if (!strcmp(a, "-")) break;
    if (a[1] == 'b') { /* the rest is jit.bcsave's */
      c->bytecode = i;
      return;
    }
    if (!strcmp(a, "--devices")) c->devices = 1;
    else if (!strcmp(a, "--json")) c->json = 1;
    else if (!strcmp(a, "--selftest")) c->selftest = 1;
    else if (!strcmp(a, "--quick")) c->quick = 1;
    else if (!strcmp(a, "--calibrate")) c->calibrate = 1;
    else if (!strcmp(a, "--serve") || !strcmp(a, "--name") || !strcmp(a, "--token-file") ||
             !strcmp(a, "--sizes") || !strcmp(a, "--load") || !strcmp(a, "--device") ||
             !strcmp(a, "--client-memory")) {
      if (++i >= argc) { c->bad = i - 1; return; }
      *(!strcmp(a, "--serve") ? &c->serve : !strcmp(a, "--name") ? &c->name
        : !strcmp(a, "--sizes") ? &c->sizes : !strcmp(a, "--load") ? &c->load
        : !strcmp(a, "--device") ? &c->device : !strcmp(a, "--client-memory") ? &c->client_memory
        : &c->token_file) = argv[i];
    }

    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) c->help = 1;
    else if (!strcmp(a, "-i")) c->interactive = c->version = 1;
    else if (!strcmp(a, "-v") || !strcmp(a, "--version")) c->version = 1;
    else if (!strcmp(a, "-E")) c->no_env = 1;
    else if (a[1] == 'O') continue;
    else if (a[1] == 'e' || a[1] == 'l' || a[1] == 'j') {
      if (a[1] == 'e') c->has_e = 1;
      if (a[2] == '\0' && ++i >= argc) { c->bad = i - 1; return; }
    } else {
      c->bad = i;
      return;
    }
  }
  c->script = i < argc ? i : 0;
}

/* Runs -e, -l, -j and -O in command-line order. */
static int run_options(lua_State *L, char **argv, int last)
{
  for (int i = 1; i < last; i++) {
    const char *a = argv[i];
    char opt = a[1];
    if (!strcmp(a, "--serve") || !strcmp(a, "--name") || !strcmp(a, "--token-file") ||
        !strcmp(a, "--sizes") || !strcmp(a, "--load") || !strcmp(a, "--device")) {
      i++; /* its value, whatever it looks like */
      continue;
    }
    if (a[0] != '-' || (opt != 'e' && opt != 'l' && opt != 'j' && opt != 'O')) continue;
    const char *val = opt == 'O' || a[2] ? a + 2 : argv[++i];
    int status = opt == 'e'   ? dostring(L, val, "=(command line)")
                 : opt == 'l' ? dolibrary(L, val)
                 : opt == 'j' ? dojitcmd(L, val)
                              : dojitopt(L, val);
    if (status) return status;
  }
  return 0;
}

/* -b...: the rest of the command line is jit.bcsave's (save or list bytecode), as luajit -b:
** "-bl x.lua" is bcsave.start("-l", "x.lua"). */
static int dobytecode(lua_State *L, char **argv, int at, int argc)
{
  lua_getglobal(L, "require");
  lua_pushliteral(L, "jit.bcsave");
  if (docall(L, 1, 1)) {
    lua_pop(L, 1);
    fprintf(stderr, "%s: unknown luaJIT command or jit.* modules not installed\n", progname);
    return 1;
  }
  lua_getfield(L, -1, "start");
  lua_remove(L, -2);
  int nargs = 0;
  if (argv[at][2]) { /* -bl: "-l" */
    lua_pushfstring(L, "-%s", argv[at] + 2);
    nargs++;
  }
  for (int i = at + 1; i < argc; i++, nargs++) lua_pushstring(L, argv[i]);
  int status = docall(L, nargs, 0);
  report(L, status);
  return status;
}

static int handle_init(lua_State *L)
{
  const char *init = getenv("LUA_INIT");
  if (!init) return 0;
  if (init[0] == '@') {
    int status = luaL_loadfile(L, init + 1) || docall(L, 0, 0);
    report(L, status);
    return status;
  }
  return dostring(L, init, "=LUA_INIT");
}

static int run(lua_State *L, const cli *cp, char **argv, int argc)
{
  cli c = *cp;
  /* arg first: LUA_INIT sees it, as in luajit */
  create_arg_table(L, argv, argc, c.script ? c.script : argc);
  if (!c.no_env && handle_init(L)) return 1;
  if (c.version) print_version();
  if (c.devices && print_devices(L, c.json)) return 1;
  if (c.selftest && run_selftest(L, c.quick, c.json)) return 1;
  if (c.calibrate && run_calibrate(L, c.json, c.sizes)) return 1;
  if (c.load) {
    int status = run_load(L, c.load, c.device, c.json);
    if (status) return status;
  }
  if (c.serve) return run_serve(L, c.serve, c.name, c.token_file, c.client_memory);
  if (run_options(L, argv, c.bytecode ? c.bytecode : c.script ? c.script : argc)) return 1;
  if (c.bytecode) return dobytecode(L, argv, c.bytecode, argc);
  if (c.script && handle_script(L, argv, argc, c.script)) return 1;
  if (c.interactive) {
    dotty(L);
  } else if (!c.script && !c.has_e && !c.version && !c.devices && !c.selftest && !c.calibrate &&
             !c.load) {
    if (isatty(0)) {
      print_version();
      dotty(L);
    } else {
      /* stdin read because nothing else was given: its error is reported, and the exit
      ** status stays 0, as luajit's (which runs it with dofile and drops the status);
      ** `xferlua -` exits 1 on an error, as `luajit -` does */
      (void)handle_script(L, (char *[]){argv[0], "-"}, 2, 1);
    }
  }
  return 0;
}

/* `xfer` as a global, as the help says: required on its first use (opening the runtimes costs
** time `xferlua -v` should not pay, and a bad XFER_FAULTS then fails the script that uses it,
** as `require "xfer"` would), through _G's __index -- a script that sets a metatable of its own
** on _G keeps `require "xfer"`. */
static void global_xfer(lua_State *L)
{
  static const char chunk[] =
    "setmetatable(_G, {__index = function(g, key)\n"
    "  if key ~= 'xfer' then return nil end\n"
    "  local xfer = require 'xfer'\n"
    "  rawset(g, 'xfer', xfer)\n"
    "  return xfer\n"
    "end})\n";
  /* protected: out of memory this early leaves `require "xfer"` working, and no panic */
  if (luaL_loadbuffer(L, chunk, sizeof chunk - 1, "=xferlua") || lua_pcall(L, 0, 0, 0))
    lua_pop(L, 1);
}

int main(int argc, char **argv)
{
  cli c;
  scan_args(argv, argc, &c);
  if (c.bad) {
    fprintf(stderr, "%s: unrecognized option or missing argument: '%s'\n", progname,
            argv[c.bad]);
    print_usage(stderr);
    return 1;
  }
  if ((c.json && !c.devices && !c.selftest && !c.calibrate && !c.load) ||
      (c.quick && !c.selftest) || (c.sizes && !c.calibrate) || (c.device && !c.load)) {
    fprintf(stderr, "%s: --json goes with --devices, --selftest, --calibrate or --load, --quick "
            "with --selftest, --sizes with --calibrate, --device with --load\n",
            progname);
    return 1;
  }
  if (c.help) {
    print_usage(stdout);
    return 0;
  }
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "%s: cannot create a Lua state: not enough memory\n", progname);
    return 1;
  }
  global_L = L;
  if (xfer_crash_report_install(L)) {
    fprintf(stderr, "%s: XFER_NO_CRASH_REPORT must be 0 or 1, not '%.40s'\n", progname,
            getenv("XFER_NO_CRASH_REPORT"));
    lua_close(L);
    return 1;
  }
  if (c.no_env) { /* LuaJIT's package library then ignores LUA_PATH and LUA_CPATH */
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  lua_gc(L, LUA_GCSTOP, 0);
  luaL_openlibs(L);
  lua_gc(L, LUA_GCRESTART, 0);
  xfer_lua_preload(L);
  global_xfer(L);
  int status = run(L, &c, argv, argc);
  lua_close(L);
  return status;
}
