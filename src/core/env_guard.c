/*
** env_guard.c -- a driver's initialisation leaves the process environment as it found it.
** PoCL sets OCL_ICD_FILENAMES=libpocl.so.2 and HWLOC_PLUGINS_PATH=/dev/null while its platform
** opens (seen on the H200 machine): every program the script then starts (os.execute, a
** `xferlua --serve`, a benchmark's child) inherited them, and its OpenCL ICD loader listed
** PoCL alone -- NVIDIA's OpenCL devices were missing there. So each runtime is opened between
** a snapshot of the environment and its restoration: what the driver added is removed, what it
** changed or removed is put back. (Opening runs before the context is shared between threads,
** as setenv needs.)
*/
#include <stdlib.h>
#include <string.h>

#include "util.h"

extern char **environ;

char **xfer_env_snapshot(void)
{
  size_t n = 0;
  while (environ && environ[n]) n++;
  char **copy = calloc(n + 1, sizeof *copy);
  if (!copy) return NULL;
  for (size_t i = 0; i < n; i++)
    if (!(copy[i] = strdup(environ[i]))) {
      xfer_env_free(copy);
      return NULL;
    }
  return copy;
}

void xfer_env_free(char **snapshot)
{
  if (!snapshot) return;
  for (size_t i = 0; snapshot[i]; i++) free(snapshot[i]);
  free(snapshot);
}

/* the entry "NAME=value" of `list` whose name is that of `entry`, or NULL */
static const char *same_name(char **list, const char *entry)
{
  size_t len = strcspn(entry, "=");
  for (size_t i = 0; list && list[i]; i++)
    if (!strncmp(list[i], entry, len) && list[i][len] == '=') return list[i];
  return NULL;
}

void xfer_env_restore(char **snapshot)
{
  if (!snapshot) return;
  char **now = xfer_env_snapshot(); /* setenv and unsetenv edit environ: walk a copy */
  for (size_t i = 0; now && now[i]; i++) {
    if (same_name(snapshot, now[i])) continue;
    now[i][strcspn(now[i], "=")] = '\0';
    unsetenv(now[i]); /* added by the driver */
  }
  for (size_t i = 0; snapshot[i]; i++) {
    size_t len = strcspn(snapshot[i], "=");
    char *name = strndup(snapshot[i], len);
    if (!name) continue;
    const char *value = getenv(name);
    if (!value || strcmp(value, snapshot[i] + len + 1)) setenv(name, snapshot[i] + len + 1, 1);
    free(name);
  }
  xfer_env_free(now);
}
