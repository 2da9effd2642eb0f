/*
** absent.c -- the remote runtime's entry points (xfer_remote.h's client half) in a build
** without UCX's headers: each says so (the runtime itself is listed as unavailable, with the
** same reason). The server's are in src/server/absent.c.
*/
#include "../../core/util.h"
#include "xfer_remote.h"

static xfer_code absent(xfer_op op, xfer_error *err)
{
  return xfer_err_op(err, XFER_E_UNAVAILABLE, op, "%s: built without UCX headers (install "
                      "libucx-dev and rebuild)", xfer_op_name(op));
}

xfer_code xfer_connect(xfer_ctx *ctx, const char *url, const xfer_connect_opts *opts,
                       xfer_peer **out, xfer_error *err)
{
  (void)ctx, (void)url, (void)opts;
  *out = NULL;
  return absent(XFER_OP_CONNECT, err);
}
const char *xfer_peer_name(const xfer_peer *peer) { (void)peer; return ""; }
size_t xfer_peer_device_count(const xfer_peer *peer) { (void)peer; return 0; }
xfer_device *xfer_peer_device(xfer_peer *peer, size_t index) { (void)peer, (void)index; return NULL; }
int xfer_peer_is_lost(const xfer_peer *peer) { (void)peer; return 1; }
uint64_t xfer_peer_canceled(const xfer_peer *peer) { (void)peer; return 0; }
void xfer_peer_close(xfer_peer *peer) { (void)peer; }
double xfer_peer_timeout(const xfer_peer *peer) { (void)peer; return 0; }
xfer_code xfer_peer_set_timeout(xfer_peer *peer, double seconds, xfer_error *err)
{
  (void)peer, (void)seconds;
  return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_CONNECT, "the remote runtime was not built");
}
void xfer_peer_registered(const xfer_peer *peer, xfer_registered *out)
{
  (void)peer;
  *out = (xfer_registered){0, 0, 0, 0};
}
void xfer_peer_memory(const xfer_peer *peer, char *here, char *there, size_t cap)
{
  (void)peer;
  if (cap) here[0] = there[0] = '\0';
}
size_t xfer_peer_transports(xfer_peer *peer, char *out, size_t cap)
{
  (void)peer;
  if (cap) out[0] = '\0';
  return 0;
}
