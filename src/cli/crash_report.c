/*
** crash_report.c -- what the CLI leaves behind when the process dies of a fatal signal
** (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT): one line naming the signal and the faulting
** address, and the C stack, on stderr -- the way Python's faulthandler does it. Without it a
** crash in LuaJIT or a driver ended in a bare "Segmentation fault" and nothing to go on (issue
** 27, defect 3). Then the handler that was there before (the default: a core dump, exit status
** 128+signal) takes the signal as if nothing had come between. Last, on a best-effort basis,
** the script's Lua stack: read without allocating, but from a state the crash may have left
** half-written -- so only after the C stack is out, and with the handler from before back in
** place should it fault again.
** Only the CLI installs it: a host application embedding xferlua owns its signals. Under
** AddressSanitizer the sanitizer's own report says more, so nothing is installed there.
** XFER_NO_CRASH_REPORT=1 leaves the signals alone.
*/
#include <execinfo.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>

#include "crash_report.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define NSIGNALS (sizeof fatal_signals / sizeof fatal_signals[0])

static struct sigaction previous[NSIGNALS];
static lua_State *script_state;
/* a stack of its own: a stack overflow is one of the crashes it reports */
static char alt_stack[64 * 1024];

/* write(2) until done or failing: all a signal handler may use to print */
static void say(const char *s)
{
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

/* v in `base` (10 or 16) without allocating */
static void say_number(unsigned long v, unsigned base)
{
  char buf[3 * sizeof v + 1];
  char *p = buf + sizeof buf - 1;
  *p = '\0';
  do {
    *--p = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  say(p);
}

/* lua_getstack and lua_getinfo("Sl") read the frames and their debug information in place */
static void say_lua_stack(lua_State *L)
{
  say("xferlua: Lua stack (best effort):\n");
  lua_Debug ar;
  for (int level = 0; level < 24 && lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar)) break;
    say("  ");
    say(ar.short_src);
    if (ar.currentline > 0) {
      say(":");
      say_number((unsigned long)ar.currentline, 10);
    }
    say("\n");
  }
}

static const char *signal_name(int sig)
{
  switch (sig) {
  case SIGSEGV: return "SIGSEGV (segmentation fault)";
  case SIGBUS: return "SIGBUS (bus error)";
  case SIGILL: return "SIGILL (illegal instruction)";
  case SIGFPE: return "SIGFPE (arithmetic error)";
  default: return "SIGABRT (aborted)";
  }
}

static void on_fatal(int sig, siginfo_t *info, void *context)
{
  (void)context;
  say("xferlua: fatal signal ");
  say(signal_name(sig));
  if (sig != SIGABRT && info) {
    say(" at address 0x");
    say_number((unsigned long)(uintptr_t)info->si_addr, 16);
  }
  say("\nxferlua: this is a bug -- in xferlua, LuaJIT or a driver; please report it with the "
      "lines below and the script that ran\nxferlua: C stack:\n");
  void *frames[64];
  int n = backtrace(frames, 64); /* loaded at install: no allocation here */
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  /* the handler from before, first: a fault while reading the Lua stack goes to it; SA_NODEFER
  ** lets raise() reach it now (a hardware fault would also come back when this returns) */
  for (size_t i = 0; i < NSIGNALS; i++)
    if (fatal_signals[i] == sig) sigaction(sig, &previous[i], NULL);
  if (script_state) say_lua_stack(script_state);
  raise(sig);
}

int xfer_crash_report_install(lua_State *L)
{
  script_state = L;
  const char *off = getenv("XFER_NO_CRASH_REPORT");
  if (off && *off && strcmp(off, "0") && strcmp(off, "1")) return -1; /* a switch: 0 or 1 */
  if (UNDER_SANITIZER || (off && !strcmp(off, "1"))) return 0;
  void *warm[1];
  backtrace(warm, 1); /* backtrace() loads libgcc on its first call: not in a signal handler */
  stack_t st = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0};
  int on_own_stack = sigaltstack(&st, NULL) == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | (on_own_stack ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < NSIGNALS; i++)
    if (sigaction(fatal_signals[i], &sa, &previous[i]) != 0)
      previous[i].sa_handler = SIG_DFL;
  return 0;
}
