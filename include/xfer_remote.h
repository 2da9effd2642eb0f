/*
** xfer_remote.h -- remote devices: another machine's devices joining a context over UCX
** (xfer_connect, the remote runtime of src/backends/remote/), and serving this context's
** devices to such clients (xfer_listen, src/server/). Both sit on the UCX transport of
** src/transport/ucx/; a program that moves tensors on one machine needs only xfer.h.
*/
#ifndef XFER_REMOTE_H
#define XFER_REMOTE_H

#include "xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* -- Remote devices (the remote runtime, over UCX) ------------------------------------------ */

/* A connection to a server of another machine's devices; they join the context as
** "<name>/<device>" ("nodeB/cuda:0") and move like any other (their calls are requests,
** each with a deadline: a peer that misses one is lost, and its devices raise
** XFER_E_PEER_LOST). */
typedef struct xfer_peer xfer_peer;
typedef struct xfer_connect_opts {
  double timeout;        /* seconds per request (0: xfer_config's remote_timeout) */
  const char *token;     /* the server's shared token (NULL: none) */
} xfer_connect_opts;

/* url: "ucx://host:port". XFER_E_UNREACHABLE (nothing answers there), XFER_E_UNAUTHORIZED
** (wrong token), XFER_E_VERSION_MISMATCH, XFER_E_TIMEOUT, XFER_E_UNAVAILABLE (no UCX). */
xfer_code xfer_connect(xfer_ctx *ctx, const char *url, const xfer_connect_opts *opts,
                       xfer_peer **out, xfer_error *err);
const char *xfer_peer_name(const xfer_peer *peer);
size_t xfer_peer_device_count(const xfer_peer *peer);
xfer_device *xfer_peer_device(xfer_peer *peer, size_t index);
int xfer_peer_is_lost(const xfer_peer *peer);
/* Requests the server answered `canceled` without touching their memory: this side told it
** (WIRE_CANCEL) that a canceled job or a move past its deadline no longer wants them. */
uint64_t xfer_peer_canceled(const xfer_peer *peer);
/* Host memory registered with UCX for moves to and from this peer (ucp_mem_map, once per
** host segment of xferlua's pool): segments and their bytes now, registrations made since the
** connection (each segment once while it lives), and mappings UCX refused. */
typedef struct xfer_registered {
  size_t segments, bytes, made, refused;
} xfer_registered;
void xfer_peer_registered(const xfer_peer *peer, xfer_registered *out);
/* The transports UCX moves this peer's messages on, a line each: "transport/device: uses"
** ("sysv/memory: am am_bw keepalive", "tcp/lo: rma_bw"). How many (0 once lost); `out` holds
** what fits in `cap` bytes. */
size_t xfer_peer_transports(xfer_peer *peer, char *out, size_t cap);
/* The memory UCX moves in place for moves with this peer, on this side (`here`) and on the
** server's (`there`), as words: "host", or "host cuda" where UCX is a CUDA-enabled build (and
** XFER_UCX_CUDA is not 0). CUDA memory here goes straight to the transport (the path
** "direct"); CUDA memory there is received into and sent from in place by the server. */
void xfer_peer_memory(const xfer_peer *peer, char *here, char *there, size_t cap);
/* How long the server may stay silent before a request to it times out (the connect's
** timeout at first), and setting it for the requests from now on: XFER_E_INVALID outside
** 0.001 to 86400 seconds. */
double xfer_peer_timeout(const xfer_peer *peer);
xfer_code xfer_peer_set_timeout(xfer_peer *peer, double seconds, xfer_error *err);
/* Disconnects: its devices (and their tensors) raise XFER_E_PEER_LOST from now on. */
void xfer_peer_close(xfer_peer *peer);

/* A server of this context's devices (not its remote ones) on `url` ("ucx://0.0.0.0:13337":
** that address only). It serves while xfer_listener_progress runs, or all the time on a
** thread of its own (opts->thread). */
typedef struct xfer_listener xfer_listener;
typedef struct xfer_listen_opts {
  const char *name;      /* what clients call this machine (default "node"; at most 16
                         ** characters, no '/', ':' or spaces) */
  const char *token;     /* clients must say it (NULL: anyone may connect) */
  int thread;            /* nonzero: serve on a thread of its own until xfer_listener_close
                         ** (xfer_listener_progress is then refused: XFER_E_INVALID) */
  uint64_t client_memory; /* bytes of buffers one client may hold, on all devices together
                         ** (0: no quota). Whatever it is, an ALLOC of memory the host backs
                         ** (host, PoCL, lavapipe) larger than the memory left to the server
                         ** -- the system's, or its control group's -- is refused (XFER_E_ALLOC) */
} xfer_listen_opts;

xfer_code xfer_listen(xfer_ctx *ctx, const char *url, const xfer_listen_opts *opts,
                      xfer_listener **out, xfer_error *err);
/* Serves requests for `seconds` (0: what has arrived, then returns). */
xfer_code xfer_listener_progress(xfer_listener *listener, double seconds, xfer_error *err);
/* Clients connected now, requests served, clients dropped (for breaking the protocol, or gone). */
void xfer_listener_stats(const xfer_listener *listener, uint64_t *clients, uint64_t *served,
                         uint64_t *dropped);
/* Requests the listener answered `canceled` untouched: their client's CANCEL (a canceled
** job, a move past its deadline) came before their turn. */
uint64_t xfer_listener_canceled(const xfer_listener *listener);
/* The server's registrations, as xfer_peer_registered. */
void xfer_listener_registered(const xfer_listener *listener, xfer_registered *out);
void xfer_listener_close(xfer_listener *listener);
/* "ucx://host:port": where it listens (the port chosen when port 0 was asked for). */
const char *xfer_listener_url(const xfer_listener *listener);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
