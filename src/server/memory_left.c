/*
** memory_left.c -- see memory_left.h. Read from /proc and /sys at each call: a limit may
** change while a server runs, and an ALLOC is rare beside the moves it serves.
*/
#include "memory_left.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The first number of a file, or UINT64_MAX when it has none ("max", or no such file). */
static uint64_t read_number(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f) return UINT64_MAX;
  uint64_t v = UINT64_MAX;
  if (fscanf(f, "%" SCNu64, &v) != 1) v = UINT64_MAX;
  fclose(f);
  return v;
}

/* MemAvailable of /proc/meminfo, in bytes (UINT64_MAX when it does not say). */
static uint64_t system_available(void)
{
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return UINT64_MAX;
  char line[256];
  uint64_t kib = UINT64_MAX;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) break;
  fclose(f);
  return kib == UINT64_MAX ? kib : kib * 1024;
}

/* What this process's cgroup v2 limit leaves (UINT64_MAX: no limit, or no cgroup v2). */
static uint64_t cgroup_left(void)
{
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return UINT64_MAX;
  char line[4096], group[4096] = "";
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "0::", 3)) { /* the unified hierarchy's line */
      snprintf(group, sizeof group, "%s", line + 3);
      group[strcspn(group, "\n")] = '\0';
      break;
    }
  fclose(f);
  if (!*group) return UINT64_MAX;
  uint64_t least = UINT64_MAX;
  /* the group and each group above it may set a limit: the least room left counts */
  for (;;) {
    char path[4200];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(group, "/") ? group : "");
    uint64_t max = read_number(path);
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", strcmp(group, "/") ? group : "");
    uint64_t current = read_number(path);
    if (max != UINT64_MAX && current != UINT64_MAX) {
      uint64_t left = max > current ? max - current : 0;
      if (left < least) least = left;
    }
    char *slash = strrchr(group, '/');
    if (!slash || slash == group) break;
    *slash = '\0';
  }
  return least;
}

uint64_t xfer_memory_left(void)
{
  uint64_t sys = system_available(), group = cgroup_left();
  return sys < group ? sys : group;
}
