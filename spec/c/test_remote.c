/*
** test_remote.c -- the remote runtime through the public C API, as an embedding application
** uses it: a listener serving this process's devices on a thread of its own, a peer
** connected to it, host bytes moved to the remote host and back, what the peer says of its
** lanes and of the memory UCX moves in place, and the direct path refused for host memory.
** Where UCX is missing the test says so and passes (ctest's skip code).
*/
#include <stdlib.h>

#include "check.h"
#include "xfer.h"
#include "xfer_remote.h"

#define SKIPPED 77 /* ctest: SKIP_RETURN_CODE */

static int remote_available(xfer_ctx *ctx, char *why, size_t cap)
{
  for (size_t i = 0; i < xfer_runtime_count(ctx); i++) {
    xfer_runtime_info info;
    if (xfer_runtime_get(ctx, i, &info, NULL) || strcmp(info.name, "remote")) continue;
    snprintf(why, cap, "%s", info.reason);
    return info.available;
  }
  snprintf(why, cap, "no remote runtime in this build");
  return 0;
}

static void test_moves(xfer_ctx *ctx, xfer_peer *peer)
{
  xfer_error err;
  xfer_device *host = NULL, *there = NULL;
  CHECK(xfer_device_find(ctx, "host", &host, &err) == XFER_E_OK);
  CHECK(xfer_device_find(ctx, "nodeC/host", &there, &err) == XFER_E_OK);
  if (!host || !there) return;
  size_t n = (1u << 20) + 3; /* a few requests, the last one short */
  unsigned char *bytes = malloc(n), *back = malloc(n);
  if (!bytes || !back) {
    free(bytes);
    free(back);
    CHECK(!"out of host memory");
    return;
  }
  for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)(i * 131 + 7);
  xfer_shape shape = {1, {(int64_t)n}};
  xfer_tensor *src = NULL, *remote = NULL, *home = NULL;
  CHECK(xfer_tensor_from_bytes(host, XFER_U8, &shape, bytes, n, &src, &err) == XFER_E_OK);
  CHECK(src && xfer_transfer_to(src, there, NULL, &remote, &err) == XFER_E_OK);
  CHECK(remote && xfer_transfer_to(remote, host, NULL, &home, &err) == XFER_E_OK);
  CHECK(home && xfer_tensor_read(home, back, n, &err) == XFER_E_OK && !memcmp(bytes, back, n));
  /* host memory is not what direct lends: refused, saying why */
  xfer_plan plan;
  xfer_transfer_opts direct = {.via = XFER_PATH_DIRECT};
  CHECK(src && xfer_transfer_plan(src, there, &direct, &plan, &err) == XFER_E_UNSUPPORTED);
  CHECK(strstr(err.message, "host has none it lends") != NULL);
  CHECK(src && xfer_transfer_plan(src, there, NULL, &plan, &err) == XFER_E_OK && plan.path == XFER_PATH_HOST);
  char here[32], far[32];
  xfer_peer_memory(peer, here, far, sizeof here);
  CHECK(!strcmp(here, "host") || !strcmp(here, "host cuda"));
  CHECK(!strcmp(far, "host") || !strcmp(far, "host cuda"));
  char lanes[2048];
  CHECK(xfer_peer_transports(peer, lanes, sizeof lanes) > 0 && strchr(lanes, '/'));
  xfer_tensor_release(home);
  xfer_tensor_release(remote);
  xfer_tensor_release(src);
  free(bytes);
  free(back);
}

int main(void)
{
  xfer_ctx *ctx = NULL;
  xfer_error err;
  if (xfer_ctx_open(&ctx, &err)) {
    fprintf(stderr, "test_remote: %s\n", err.message);
    return 1;
  }
  char why[512];
  if (!remote_available(ctx, why, sizeof why)) {
    printf("test_remote: skipped: the remote runtime is unavailable here: %s\n", why);
    xfer_ctx_release(ctx);
    return SKIPPED;
  }
  xfer_listener *listener = NULL;
  xfer_listen_opts lopts = {.name = "nodeC", .thread = 1};
  CHECK(xfer_listen(ctx, "ucx://127.0.0.1:0", &lopts, &listener, &err) == XFER_E_OK);
  xfer_peer *peer = NULL;
  xfer_connect_opts copts = {.timeout = 20};
  if (listener)
    CHECK(xfer_connect(ctx, xfer_listener_url(listener), &copts, &peer, &err) == XFER_E_OK);
  if (peer) {
    CHECK_STR(xfer_peer_name(peer), "nodeC");
    test_moves(ctx, peer);
    xfer_peer_close(peer);
  } else {
    fprintf(stderr, "test_remote: %s\n", err.message);
  }
  uint64_t clients = 0, served = 0, dropped = 0;
  if (listener) xfer_listener_stats(listener, &clients, &served, &dropped);
  CHECK(served >= 3); /* ALLOC, a WRITE, a READ (the buffer stays cached: no FREE yet) */
  xfer_listener_close(listener);
  xfer_ctx_release(ctx);
  return check_summary("test_remote");
}
