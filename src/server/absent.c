/*
** absent.c -- the server's entry points (xfer_remote.h's xfer_listen half) in a build without
** UCX's headers: each says so.
*/
#include "../core/util.h"
#include "xfer_remote.h"

static xfer_code absent(xfer_op op, xfer_error *err)
{
  return xfer_err_op(err, XFER_E_UNAVAILABLE, op, "%s: built without UCX headers (install "
                      "libucx-dev and rebuild)", xfer_op_name(op));
}

void xfer_listener_registered(const xfer_listener *l, xfer_registered *out)
{
  (void)l;
  *out = (xfer_registered){0, 0, 0, 0};
}

xfer_code xfer_listen(xfer_ctx *ctx, const char *url, const xfer_listen_opts *opts,
                      xfer_listener **out, xfer_error *err)
{
  (void)ctx, (void)url, (void)opts;
  *out = NULL;
  return absent(XFER_OP_LISTEN, err);
}
xfer_code xfer_listener_progress(xfer_listener *l, double seconds, xfer_error *err)
{
  (void)l, (void)seconds;
  return absent(XFER_OP_PROGRESS, err);
}
void xfer_listener_stats(const xfer_listener *l, uint64_t *clients, uint64_t *served, uint64_t *dropped)
{
  (void)l;
  if (clients) *clients = 0;
  if (served) *served = 0;
  if (dropped) *dropped = 0;
}
void xfer_listener_close(xfer_listener *l) { (void)l; }
const char *xfer_listener_url(const xfer_listener *l)
{
  (void)l;
  return "";
}

uint64_t xfer_listener_canceled(const xfer_listener *l)
{
  (void)l;
  return 0;
}
