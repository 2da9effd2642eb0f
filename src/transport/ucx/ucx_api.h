/*
** ucx_api.h -- UCX's UCP, opened with dlopen (libucp.so.0): the calls the remote runtime
** makes, a context and worker of its own per peer or listener, and waiting with a deadline.
** The transport below the remote runtime (src/backends/remote/) and the server
** (src/server/): only they include this.
*/
#ifndef XFER_UCX_API_H
#define XFER_UCX_API_H

#include <stdio.h>
#include <ucp/api/ucp.h>

#include "../../core/memory.h"
#include "xfer_remote.h"

typedef struct ucx_api {
  void *lib, *ucs;
  ucs_status_t (*ucp_config_read)(const char *, const char *, ucp_config_t **);
  void (*ucp_config_release)(ucp_config_t *);
  ucs_status_t (*ucp_config_modify)(ucp_config_t *, const char *, const char *);
  ucs_status_t (*ucp_init_version)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
                                   ucp_context_h *);
  void (*ucp_cleanup)(ucp_context_h);
  ucs_status_t (*ucp_worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
  void (*ucp_worker_destroy)(ucp_worker_h);
  unsigned (*ucp_worker_progress)(ucp_worker_h);
  ucs_status_t (*ucp_worker_set_am_recv_handler)(ucp_worker_h, const ucp_am_handler_param_t *);
  ucs_status_t (*ucp_listener_create)(ucp_worker_h, const ucp_listener_params_t *,
                                      ucp_listener_h *);
  void (*ucp_listener_destroy)(ucp_listener_h);
  ucs_status_t (*ucp_listener_query)(ucp_listener_h, ucp_listener_attr_t *);
  ucs_status_t (*ucp_listener_reject)(ucp_listener_h, ucp_conn_request_h);
  /* optional (NULL where the library lacks it): who asks, so a door takes its client alone */
  ucs_status_t (*ucp_conn_request_query)(ucp_conn_request_h, ucp_conn_request_attr_t *);
  ucs_status_t (*ucp_ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
  ucs_status_ptr_t (*ucp_ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
  ucs_status_ptr_t (*ucp_am_send_nbx)(ucp_ep_h, unsigned, const void *, size_t, const void *,
                                      size_t, const ucp_request_param_t *);
  ucs_status_ptr_t (*ucp_am_recv_data_nbx)(ucp_worker_h, void *, void *, size_t,
                                           const ucp_request_param_t *);
  ucs_status_t (*ucp_request_check_status)(void *);
  void (*ucp_request_cancel)(ucp_worker_h, void *);
  void (*ucp_request_free)(void *);
  const char *(*ucs_status_string)(ucs_status_t);
  ucs_status_t (*ucp_mem_map)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
  ucs_status_t (*ucp_mem_unmap)(ucp_context_h, ucp_mem_h);
  void (*ucp_ep_print_info)(ucp_ep_h, FILE *);
  ucs_status_t (*ucp_worker_get_efd)(ucp_worker_h, int *);
  ucs_status_t (*ucp_worker_arm)(ucp_worker_h);
  ucs_status_t (*ucp_context_query)(ucp_context_h, ucp_context_attr_t *);
  void (*ucp_get_version)(unsigned *, unsigned *, unsigned *); /* optional (NULL: unknown) */
  ucs_status_t (*ucp_worker_query)(ucp_worker_h, ucp_worker_attr_t *);
} ucx_api;

/* Whether the library is there to load, without loading it (its constructors install
** process-wide signal handlers: UCX is loaded only when a peer connects or a server listens).
** 1 with its path; 0 with the reason. */
int xfer_ucx_find(char *path, size_t cap, char *why, size_t why_cap);

/* The library, loaded once per process (XFER_UCX_LIBRARY: another libucp); NULL with the
** reason in `why` when it cannot be. */
const ucx_api *xfer_ucx(char *why, size_t cap);

/* A UCP context with active messages and a worker on it (thread mode serialized: its owner
** serialises every call). */
typedef struct ucx_node {
  const ucx_api *api;
  xfer_ctx *ctx;                        /* whose host segments it registers */
  int registers;                        /* whether it does (XFER_UCX_REGISTER, default 1) */
  int cuda_memory;                      /* UCX moves CUDA memory in place: this build of it
                                        ** reports the memory type, and XFER_UCX_CUDA is not 0 */
  ucp_context_h context;
  ucp_worker_h worker;
  int efd;                              /* the worker's event fd (-1: none; idling sleeps) */
  size_t mapped_segments, mapped_bytes; /* host segments registered with the context (atomic) */
  size_t maps_made;                     /* registrations made, in all (atomic) */
  size_t map_failures;                  /* ucp_mem_map or unmap refused (atomic) */
  size_t header_pieces;                 /* xfer_ucx_header_pieces, once asked (0: not yet) */
} ucx_node;

/* on_message (with arg) receives the active messages of the protocol (wire.h's id) */
xfer_code xfer_ucx_node_open(ucx_node *node, xfer_ctx *ctx, ucp_am_recv_callback_t on_message,
                             void *arg, xfer_op op, xfer_error *err);
void xfer_ucx_node_close(ucx_node *node);
/* How many pieces a WRITE_MANY's header may list from this node's worker: what fits in the
** largest header it sends (its max_am_header), WIRE_HEADER_PIECES at most, 1 at least. */
size_t xfer_ucx_header_pieces(ucx_node *node);

/* ucx_reg.c: the memory handle of the host segment holding [ptr, ptr+n), mapped with the
** node's context the first time (kept until the segment goes back to the system or
** xfer_ucx_unmap_all); NULL for memory that is not a host segment or could not be mapped (UCX
** then registers what it needs itself). */
ucp_mem_h xfer_ucx_memh(ucx_node *node, const void *ptr, size_t n);
/* The handle if the segment is mapped already, never mapping: for UCX's callbacks, which
** should not make a registration while the worker progresses. */
ucp_mem_h xfer_ucx_memh_known(ucx_node *node, const void *ptr, size_t n);
/* Adds the handle to a request's parameters (nothing for NULL). */
void xfer_ucx_request_memh(ucp_request_param_t *prm, ucp_mem_h memh);
/* Tells UCX what memory a request's buffer is (nothing for host memory: UCX's default guess
** costs a lookup, and a registration handle says it already). */
void xfer_ucx_request_kind(ucp_request_param_t *prm, xfer_memory_kind kind);
void xfer_ucx_registered(const ucx_node *node, xfer_registered *out);
/* Undoes every mapping of the node: before its context is cleaned up. */
void xfer_ucx_unmap_all(ucx_node *node);

/* Progresses the worker until the request is done or `deadline` (xfer_now() seconds) passes:
** XFER_E_OK, the request's failure as `code_on_error` (its UCX status as native), or
** XFER_E_TIMEOUT (the request cancelled and completed before return). The request is freed
** in every case. A NULL request is done; an error pointer is its failure. */
xfer_code xfer_ucx_wait(ucx_node *node, ucs_status_ptr_t request, double deadline,
                        xfer_code code_on_error, xfer_op op, const char *what,
                        xfer_error *err);

/* Between polls of a worker with nothing to do: nothing for half a millisecond after the last
** progress, then short sleeps, and after 0.2 s a wait on the worker's event fd (woken by the
** next message, or after 10 ms at most: callers check their deadlines). Call
** after each ucp_worker_progress with what it returned (or whether anything was done); it
** waits not at all once `until` (xfer_now's clock) has passed, and never much past it. */
typedef struct ucx_idler {
  double since; /* xfer_now() of the first idle poll in a row (0: busy) */
} ucx_idler;
void xfer_ucx_idle(ucx_node *node, ucx_idler *idler, unsigned progressed, double until);

/* Cancels a request and lets it go, waiting for it to end until `until` (xfer_now()) at most:
** freed unfinished, it is released by UCX when it ends. */
void xfer_ucx_abandon(ucx_node *node, void *request, double until);

/* The error for a UCX status: code, op, native = status, native_name = its string. */
xfer_code xfer_ucx_fail(const ucx_api *api, xfer_code code, xfer_op op, ucs_status_t status,
                        const char *what, xfer_error *err);

/* Whether a connection over IPv6 may be made with this UCX: not with 1.13 and older, whose
** ucp_ep_create on an IPv6 connection request overruns a heap buffer (AddressSanitizer, on
** the server) and whose server then rejects the client. 0 with the reason in why. */
int xfer_ucx_takes_ipv6(const ucx_api *api, char *why, size_t cap);

/* "ucx://host:port" -> host and port; XFER_E_INVALID saying what is wrong. */
xfer_code xfer_ucx_parse_url(const char *url, xfer_op op, char *host, size_t host_cap,
                             uint16_t *port, xfer_error *err);

/* A socket address for host:port (numeric or a name resolved now). */
xfer_code xfer_ucx_sockaddr(const char *host, uint16_t port, xfer_op op,
                            struct sockaddr_storage *out, socklen_t *len, xfer_code code_on_error,
                            xfer_error *err);

/* Whether CUDA memory goes to UCX in place on this endpoint (else it is staged through host
** memory): UCX moves CUDA memory, and the endpoint has a cuda_ipc lane -- one machine, where
** UCX maps the other process's GPU memory (measured on an H200: 1.7 TB/s, where its own
** pipeline through host memory over tcp or from host memory moved 0.4-0.9 GB/s, against
** 5-7 GB/s staged) -- or XFER_UCX_CUDA=1 says any lane (GPUDirect RDMA between hosts). */
int xfer_ucx_ep_moves_cuda(const ucx_node *node, ucp_ep_h ep);

/* The lanes UCX moves this endpoint's messages on, a line each ("sysv/memory: am am_bw
** keepalive"), as UCX prints them (ucp_ep_print_info); the connection manager's lane is left
** out. How many lanes; out holds what fitted. */
size_t xfer_ucx_ep_lanes(const ucx_api *api, ucp_ep_h ep, char *out, size_t cap);

#endif
