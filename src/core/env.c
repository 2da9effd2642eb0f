/*
** env.c -- the switches xferlua reads from the environment, and the clock every layer
** times itself with.
*/
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* The switches xferlua reads from the environment: unset or empty is the default, "0" off,
** "1" on, and anything else ("yes", "2") an error, not a guess. */
static const struct {
  const char *name;
  int def;
} env_flags[] = {
  {"XFER_TRACE", 0}, {"XFER_CACHE", 1}, {"XFER_SHARED_MEMORY", 1}, {"XFER_VULKAN_NO_MAP", 0},
  {"XFER_UCX_REGISTER", 1}, {"XFER_HUGE_PAGES", 1}, {"XFER_BATCH_IMPORTS", 1}, {"XFER_FILE_URING", 1},
  {"XFER_CRC_TABLES", 0}, /* 1: CRC32C by the tables even where the CPU has the instruction */
  {"XFER_DEVICE_SUMS", 2}, /* unset: devices whose memory is not the host's sum their own */
  {"XFER_VERIFY_PACE", 1}, /* 0: a verified host <-> device move's sums beside one copy, not paced */
  {"XFER_UCX_CUDA", 2}, /* unset: where an endpoint has a cuda_ipc lane (ucx_api.h) */
};

int xfer_env_flag(const char *name)
{
  const char *v = getenv(name);
  for (size_t i = 0; i < sizeof env_flags / sizeof env_flags[0]; i++)
    if (!strcmp(env_flags[i].name, name)) return v && *v ? !strcmp(v, "1") : env_flags[i].def;
  return 0;
}

xfer_code xfer_env_flags_check(xfer_error *err)
{
  for (size_t i = 0; i < sizeof env_flags / sizeof env_flags[0]; i++) {
    const char *v = getenv(env_flags[i].name);
    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_OPEN, XFER_S_SWITCH_NOT_BOOLEAN,
                         env_flags[i].name, v);
  }
  return XFER_E_OK;
}

double xfer_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
