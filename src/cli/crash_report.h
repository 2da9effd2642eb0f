/*
** crash_report.h -- the CLI's report of a fatal signal (crash_report.c).
*/
#ifndef XFER_CRASH_REPORT_H
#define XFER_CRASH_REPORT_H

#include <lua.h>

/* Reports SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT on stderr (the signal, the address, the
** C stack, then L's Lua stack) before the handler from before takes them; nothing under a
** sanitizer or with XFER_NO_CRASH_REPORT=1. -1 (nothing installed): XFER_NO_CRASH_REPORT is
** neither 0 nor 1. */
int xfer_crash_report_install(lua_State *L);

#endif
