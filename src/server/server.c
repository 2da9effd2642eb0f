/*
** server.c -- serving this machine's devices to remote runtimes (xferlua --serve,
** xfer_listen). Not a backend: a client of the public API, like the CLI, over the remote
** runtime's UCX layer (ucx_api.h, wire.h). Its port is a gate (gate_front.c), not UCX: a
** client knocks there with the protocol version and the token, and only then is a door
** opened for it -- a UCX listener of its own on a port of its own, closed once the client's
** endpoint is made -- so nothing a stranger sends reaches UCX (whose connection manager
** aborts the process on some malformed first bytes). One endpoint per client, and a loop the
** caller runs (xfer_listener_progress) or the listener's own thread runs (opts->thread) that
** answers each request in order with the public API on the listener's context. A client says HELLO with the protocol version and the token
** first; every header is checked (wire.h) and a client that breaks the protocol is dropped,
** alone. Buffers a client allocates are its own: handles of another client are unknown to it,
** and a dropped client's buffers are freed.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../transport/ucx/ucx_api.h"
#include "../transport/ucx/wire.h"
#include "door_filter.h"
#include "gate_front.h"
#include "memory_left.h"

#define MAX_HANDLES 65536            /* buffers one client may hold */
/* the largest message a client sends: a batch's pieces and a chunk of bytes */
#define MAX_MESSAGE (WIRE_CHUNK + (size_t)WIRE_MANY_MAX * sizeof(wire_copy))
/* bytes of one client's requests waiting to be served: what remote_depth's most in flight
** can be (4 x 66.5 MiB), and a MiB for small ones -- a client keeping to the protocol is
** never over it (256 MiB was: four 64 MiB WRITE_MANY and their pieces) */
#define MAX_QUEUED ((size_t)WIRE_DEPTH_MAX * MAX_MESSAGE + ((size_t)1 << 20))
/* bytes of one client's replies on their way, not yet taken: a client keeping to the protocol
** has its depth's answers at most, and as many whose receipt the server has not heard of yet;
** one that asks and never reads is dropped, its memory given back */
#define MAX_REPLYING ((size_t)2 * WIRE_DEPTH_MAX * MAX_MESSAGE)
#define MAX_DOORS 64                 /* doors open at once (the oldest closes first) */
#define DOOR_SECONDS 10.0            /* a door waits this long for its client's endpoint */

typedef struct buffer_entry {
  uint64_t handle;
  xfer_tensor *t;
} buffer_entry;

typedef struct conn {
  ucp_ep_h ep;
  int authorized, broken, closing;
  int cuda;                          /* its CUDA memory goes to UCX in place (xfer_ucx_ep_moves_cuda) */
  double closing_since;              /* refused: dropped when it goes, or after a while */
  uint64_t held;                     /* bytes of its buffers, on every device */
  size_t replying;                   /* bytes of its replies on their way */
  uint64_t id;
  buffer_entry *buffers;
  size_t nbuffers, cap;
  uint64_t next_handle;
  size_t queued;                     /* bytes of its messages not served yet */
  size_t waiting;                    /* its messages not served yet */
  size_t frees_waiting;              /* of which FREEs: a buffer may go before they are served */
  unsigned waits_in;                 /* the pass over the queue in which a message of its waits
                                     ** for its payload: its later ones wait too (serve_ready) */
  struct conn *next;
} conn;

typedef struct message {
  conn *c;
  wire_header h;
  char *data;                        /* the payload, NULL when none: malloc'd, or the memory */
  xfer_tensor *staging;              /* of this host tensor (large ones: see staging_for) */
  size_t len;
  size_t unstaged;                   /* a payload of this many bytes found no host memory */
  int direct;                        /* a WRITE received straight into its buffer: host memory,
                                     ** or device memory UCX writes in place */
  int on_device;                     /* ... device memory: a failed receive is the WRITE's
                                     ** error, not the connection's */
  wire_piece *pieces;                /* a WRITE_MANY's, copied out of its header */
  ucp_dt_iov_t *iov;                 /* ... its buffers' bytes, when it lands straight in them
                                     ** (direct): host buffers of its client, none going */
  ucs_status_t received;             /* how the rendezvous receive ended */
  void *receiving;                   /* a rendezvous receive in progress */
  int canceled;                      /* its client's CANCEL came first: answered canceled */
  struct message *next;
} message;

typedef struct sending {             /* a reply on its way, and what it sends from: UCX reads
                                     ** the header and the data until the send is done */
  void *request;
  struct conn *c;                    /* whose (NULL once it is dropped) */
  size_t len;
  wire_header header;
  char *data;                        /* freed when sent, unless it is held's memory */
  xfer_tensor *held;                 /* a host buffer sent from in place, released when sent */
  ucp_dt_iov_t *iov;                 /* or pieces of host buffers, gathered as they are sent: */
  size_t pieces;                     /* ... how many, and the buffers, each held until sent */
  xfer_tensor **holds;
  size_t nholds;
  struct sending *next;
} sending;

typedef struct door {                /* a UCX listener opened for one client that knocked */
  struct xfer_listener *l;
  ucp_listener_h listener;           /* NULL: a free slot */
  struct sockaddr_storage client;    /* the address and port the knock named: the only one let in */
  double deadline;
  int used;                          /* its client came in: closed at the next serve */
} door;

struct xfer_listener {
  xfer_ctx *ctx;
  ucx_node node;
  gate_front front;                  /* the port clients knock on */
  uint64_t client_memory;            /* bytes of buffers one client may hold (0: no quota) */
  door doors[MAX_DOORS];
  char name[WIRE_NAME_MAX + 1];
  char token[256];
  size_t token_len;
  uint64_t generation;               /* told to clients: a handle of another is refused */
  uint64_t next_conn;
  uint64_t clients;                  /* conns listed (atomic: read by xfer_listener_stats) */
  int threaded;                      /* serves on `thread` until stop is set */
  int stop;                          /* (atomic) */
  pthread_t thread;
  ucx_idler idler;                   /* kept from one xfer_listener_progress to the next: a
                                     ** server idle for long waits on events, not polls */
  conn *conns;
  message *head, *tail;
  unsigned passes;                   /* over the queue (serve_ready), counted */
  sending *sends;
  uint64_t served, dropped, canceled;
  char url[300]; /* where it listens, the port the system chose for port 0 */
};

/* -- Connections ---------------------------------------------------------------------------- */

static conn *conn_of(xfer_listener *l, ucp_ep_h ep)
{
  for (conn *c = l->conns; c; c = c->next)
    if (c->ep == ep) return c;
  return NULL;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
  (void)status;
  conn *c = conn_of(arg, ep);
  if (c) c->broken = 1;
}

/* Whether two socket addresses are one: address and port. */
static int same_address(const struct sockaddr_storage *a, const struct sockaddr *b)
{
  if (a->ss_family != b->sa_family) return 0;
  if (b->sa_family == AF_INET) {
    const struct sockaddr_in *x = (const struct sockaddr_in *)a, *y = (const struct sockaddr_in *)b;
    return x->sin_port == y->sin_port && !memcmp(&x->sin_addr, &y->sin_addr, sizeof x->sin_addr);
  }
  if (b->sa_family == AF_INET6) {
    const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a, *y = (const struct sockaddr_in6 *)b;
    return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr);
  }
  return 0;
}

/* A client that knocked connects at its door: its endpoint is made, the door closes (at the
** next serve: not inside the listener's own callback). Someone else at the door -- from
** another address, or another port than the knock named -- is turned away (the kernel's
** filter, door_filter.h, drops their packets before; this says it again where UCX tells). */
static void on_conn_request(ucp_conn_request_h request, void *arg)
{
  door *d = arg;
  xfer_listener *l = d->l;
  if (d->used || !d->listener) {
    l->node.api->ucp_listener_reject(d->listener, request);
    return;
  }
  if (l->node.api->ucp_conn_request_query) {
    ucp_conn_request_attr_t attr;
    memset(&attr, 0, sizeof attr);
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (l->node.api->ucp_conn_request_query(request, &attr) != UCS_OK ||
        !same_address(&d->client, (const struct sockaddr *)&attr.client_address)) {
      l->node.api->ucp_listener_reject(d->listener, request);
      return;
    }
  }
  d->used = 1;
  conn *c = calloc(1, sizeof *c);
  if (!c) {
    l->node.api->ucp_listener_reject(d->listener, request);
    return;
  }
  ucp_ep_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.conn_request = request;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = on_ep_error;
  p.err_handler.arg = l;
  if (l->node.api->ucp_ep_create(l->node.worker, &p, &c->ep) != UCS_OK) {
    free(c);
    return;
  }
  c->id = ++l->next_conn;
  c->next_handle = 1;
  c->next = l->conns;
  l->conns = c;
  __atomic_add_fetch(&l->clients, 1, __ATOMIC_RELAXED);
}

static void drop_conn(xfer_listener *l, conn *c)
{
  /* unlisted first: messages that arrive while the endpoint closes find no client */
  for (conn **at = &l->conns; *at; at = &(*at)->next)
    if (*at == c) {
      *at = c->next;
      __atomic_sub_fetch(&l->clients, 1, __ATOMIC_RELAXED);
      break;
    }
  for (message *m = l->head; m; m = m->next)
    if (m->c == c) {
      m->c = NULL; /* its queued messages are dropped when they come up */
      /* a payload still on its way from a client gone may never come: ended here, so that
      ** the message is let go at once */
      if (m->receiving) l->node.api->ucp_request_cancel(l->node.worker, m->receiving);
    }
  for (sending *s = l->sends; s; s = s->next)
    if (s->c == c) s->c = NULL; /* its replies end with its endpoint, and are let go then */
  for (size_t i = 0; i < c->nbuffers; i++) xfer_tensor_release(c->buffers[i].t);
  free(c->buffers);
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void *r = l->node.api->ucp_ep_close_nbx(c->ep, &p);
  xfer_ucx_wait(&l->node, r, xfer_now() + 1.0, XFER_E_PEER_LOST, XFER_OP_LISTEN, "closing", NULL);
  free(c);
  __atomic_add_fetch(&l->dropped, 1, __ATOMIC_RELAXED);
}

static buffer_entry *buffer_of(conn *c, uint64_t handle);

/* -- Receiving -------------------------------------------------------------------------------- */

static void on_received(void *request, ucs_status_t status, size_t length, void *arg)
{
  (void)request;
  (void)length;
  message *m = arg;
  m->received = status;
  if (status != UCS_OK && m->c && !m->on_device) m->c->broken = 1;
}

/* A message not taken (its client dropped, when c is given). UCS_OK without a receive started
** tells UCX the data is not wanted, and UCX lets a rendezvous one go itself: releasing it here
** too (ucp_am_data_release inside the callback) freed UCX 1.13's descriptor twice -- the
** server died of every rendezvous-sized message it turned away. */
static ucs_status_t discard(conn *c)
{
  if (c) c->broken = 1;
  return UCS_OK;
}

/* Host memory for `len` bytes of payload on their way to or from a device: a large one is a
** host tensor, so it comes from the host pool (reused from message to message: no page
** faults on fresh memory, and a GPU's driver registers it once and moves it at pinned speed);
** a small one is malloc'd. NULL when there is no memory. */
#define STAGING_MIN (64u << 10)
static char *staging_for(xfer_listener *l, size_t len, xfer_tensor **staging)
{
  *staging = NULL;
  if (len < STAGING_MIN) return malloc(len);
  xfer_shape shape = {1, {(int64_t)len}};
  xfer_error e;
  if (xfer_tensor_empty(xfer_host_of(l->ctx), XFER_U8, &shape, staging, &e)) return NULL;
  return xfer_tensor_host_data(*staging);
}

static void staging_done(char *data, xfer_tensor *staging)
{
  if (staging) xfer_tensor_release(staging);
  else free(data);
}

static void message_free(message *m)
{
  staging_done(m->data, m->staging);
  free(m->pieces);
  free(m->iov);
  free(m);
}

/* m at the end of the queue, counted as its client's (serve_ready takes the counts back) */
static ucs_status_t enqueue(xfer_listener *l, message *m)
{
  m->c->queued += m->len;
  m->c->waiting++;
  if (m->h.type == WIRE_FREE) m->c->frees_waiting++;
  if (l->tail) l->tail->next = m;
  else l->head = m;
  l->tail = m;
  return UCS_OK;
}

/* Where a WRITE's payload lands without a copy, or NULL (it is staged). A WRITE into a host
** buffer lands straight in the buffer, unless a FREE of this client's waits in the queue before
** it (it might be this buffer's; what comes after the WRITE waits for it). A client's pipelined
** WRITEs each land in place. So does one into device memory UCX writes in place, when it comes
** by rendezvous (an eager one is in host memory already: it is staged and written as before);
** *device then says which memory. */
static char *write_in_place(conn *c, const wire_header *h, size_t len,
                            const ucp_am_recv_param_t *param, xfer_memory *device)
{
  if (h->type != WIRE_WRITE || !len || !c->authorized || c->frees_waiting) return NULL;
  buffer_entry *b = buffer_of(c, h->handle);
  if (!b || h->offset + len > xfer_tensor_nbytes(b->t)) return NULL;
  char *host = xfer_tensor_host_data(b->t);
  if (host) return host + h->offset;
  if (c->cuda && (h->flags & WIRE_FLAG_DEVICE) && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
      !xfer_tensor_device_memory(b->t, h->offset, device, NULL))
    return device->address;
  return NULL;
}

/* Where a piece lies in one of its client's host buffers (*b: that buffer), or NULL: no such
** buffer, a device buffer, no bytes, or bytes outside it. */
static char *piece_in_host_buffer(conn *c, const wire_piece *d, buffer_entry **b)
{
  *b = buffer_of(c, d->handle);
  char *host = *b ? xfer_tensor_host_data((*b)->t) : NULL;
  size_t size = host ? xfer_tensor_nbytes((*b)->t) : 0;
  if (!host || !d->length || d->offset > size || d->length > size - d->offset) return NULL;
  return host + d->offset;
}

/* A WRITE_MANY's pieces, copied out of its header (*pieces, NULL when out of memory), and where
** its bytes land without a copy: straight in its client's host buffers, each piece inside its
** buffer and the pieces' bytes the payload's, unless a FREE waits before it (as a WRITE). NULL:
** it is staged and moved as a batch (device buffers; a piece the batch then refuses). */
static ucp_dt_iov_t *many_in_place(conn *c, const wire_header *h, const void *header, size_t len,
                                   wire_piece **pieces)
{
  size_t n = (size_t)h->offset;
  *pieces = malloc(n * sizeof **pieces);
  if (!*pieces) return NULL;
  memcpy(*pieces, (const char *)header + sizeof *h, n * sizeof **pieces);
  if (!c->authorized || c->frees_waiting) return NULL;
  ucp_dt_iov_t *iov = malloc(n * sizeof *iov);
  size_t total = 0;
  for (size_t i = 0; iov && i < n; i++) {
    const wire_piece *d = &(*pieces)[i];
    buffer_entry *b;
    char *at = piece_in_host_buffer(c, d, &b);
    if (!at) {
      free(iov);
      return NULL;
    }
    iov[i] = (ucp_dt_iov_t){at, d->length};
    total += d->length;
  }
  if (iov && total != len) {
    free(iov);
    return NULL;
  }
  return iov;
}

/* The payload into `into` (of `kind`), or into m->iov's buffers: by rendezvous, received now (the message
** waits until it is in); else here already, copied. */
static void receive(xfer_listener *l, conn *c, message *m, void *data, char *into, size_t len,
                    xfer_memory_kind kind, const ucp_am_recv_param_t *param)
{
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    if (!m->iov) {
      memcpy(into, data, len);
      return;
    }
    for (size_t i = 0, at = 0; i < m->h.offset; at += m->iov[i++].length)
      memcpy(m->iov[i].buffer, (char *)data + at, m->iov[i].length);
    return;
  }
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = on_received;
  p.user_data = m;
  if (m->iov) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = ucp_dt_make_iov();
  } else if (m->on_device) {
    xfer_ucx_request_kind(&p, kind);
  } else {
    xfer_ucx_request_memh(&p, xfer_ucx_memh_known(&l->node, into, len));
  }
  void *r = l->node.api->ucp_am_recv_data_nbx(l->node.worker, data,
                                              m->iov ? (void *)m->iov : into,
                                              m->iov ? (size_t)m->h.offset : len, &p);
  if (UCS_PTR_IS_ERR(r)) c->broken = 1;
  else m->receiving = r;
}

/* A client's CANCEL, taken as it arrives (not queued behind what it cancels): its requests up
** to number `upto` still waiting their turn will be answered canceled, their memory untouched.
** ALLOCs and FREEs are served all the same: the client must know which buffers it has. */
static ucs_status_t cancel_queued(xfer_listener *l, conn *c, uint64_t upto)
{
  for (message *m = l->head; m; m = m->next)
    if (m->c == c && m->h.request <= upto && m->h.type != WIRE_ALLOC && m->h.type != WIRE_FREE &&
        m->h.type != WIRE_HELLO)
      m->canceled = 1;
  return UCS_OK;
}

static ucs_status_t on_message(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param)
{
  xfer_listener *l = arg;
  conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? conn_of(l, param->reply_ep) : NULL;
  if (!c || c->broken) return discard(NULL);
  wire_header h;
  int other_version;
  const char *bad = wire_check(header, header_len, len, &h, &other_version);
  if (bad && !other_version)
    return discard(c); /* a malformed message: this client is dropped, no one else */
  if (other_version) { /* answered in words it reads, then dropped */
    h.type = WIRE_HELLO;
    len = 0;
  }
  if (h.type == WIRE_CANCEL && !bad && c->authorized) return cancel_queued(l, c, h.handle);
  if (c->queued + len > MAX_QUEUED) return discard(c); /* more than its share */
  xfer_memory device = {NULL, XFER_MEMORY_HOST};
  char *direct = write_in_place(c, &h, len, param, &device);
  message *m = calloc(1, sizeof *m);
  if (m && h.type == WIRE_WRITE_MANY && !other_version) {
    m->iov = many_in_place(c, &h, header, len, &m->pieces);
    if (!m->pieces) {
      free(m);
      m = NULL;
    }
  }
  xfer_tensor *staging = NULL;
  char *copy = m && len && !direct && !m->iov ? staging_for(l, len, &staging) : NULL;
  if (!m) return discard(c); /* not even a message's worth of memory */
  m->c = c;
  m->h = h;
  if (len && !direct && !copy && !m->iov) {
    /* no host memory to take the payload: the request is answered XFER_E_ALLOC when its
    ** turn comes (the client's move fails, its connection stays), the data left to UCX */
    m->unstaged = len;
    return enqueue(l, m);
  }
  if (other_version) m->h.version = 0; /* marks the mismatch for serve() */
  m->data = copy;
  m->staging = staging;
  m->direct = direct != NULL || m->iov != NULL;
  m->on_device = device.kind != XFER_MEMORY_HOST;
  m->len = len;
  if (len) receive(l, c, m, data, direct ? direct : copy, len, device.kind, param);
  return enqueue(l, m);
}

/* -- Replying --------------------------------------------------------------------------------- */

static void sent(sending *s)
{
  if (s->held) xfer_tensor_release(s->held);
  else free(s->data);
  for (size_t i = 0; i < s->nholds; i++) xfer_tensor_release(s->holds[i]);
  free(s->holds);
  free(s->iov);
  free(s);
}

/* data: malloc'd (freed when sent), or the memory of `held` (released when sent): host
** memory, or device memory UCX reads in place (kind); by rendezvous when the request said
** so (WIRE_FLAG_RNDV: the client receives into device memory) */
static void reply_from(xfer_listener *l, conn *c, wire_header h, char *data, size_t len,
                       xfer_tensor *held, xfer_memory_kind kind, uint32_t flags)
{
  sending *s = calloc(1, sizeof *s); /* the header must outlive this call (UCX 1.13 sends from it) */
  if (!s) {
    if (held) xfer_tensor_release(held);
    else free(data);
    c->broken = 1;
    return;
  }
  s->header = h;
  s->header.length = len;
  s->data = data;
  s->held = held;
  s->c = c;
  s->len = len;
  c->replying += len;
  if (c->replying > MAX_REPLYING) c->broken = 1; /* asks and never reads: see MAX_REPLYING */
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY | (len && (flags & WIRE_FLAG_RNDV) ? UCP_AM_SEND_FLAG_RNDV : 0);
  if (kind != XFER_MEMORY_HOST) xfer_ucx_request_kind(&p, kind);
  else if (held) xfer_ucx_request_memh(&p, xfer_ucx_memh(&l->node, data, len)); /* host segment memory */
  void *r = l->node.api->ucp_am_send_nbx(c->ep, WIRE_AM_ID, &s->header, sizeof s->header, data, len, &p);
  if (r == NULL || UCS_PTR_IS_ERR(r)) { /* sent already, or never */
    if (r) c->broken = 1;
    c->replying -= len;
    sent(s);
    return;
  }
  s->request = r;
  s->next = l->sends;
  l->sends = s;
}

/* A READ_MANY's DATA gathered from its pieces in its client's host buffers, by UCX as it sends
** (no copy here); each buffer held until sent. 0, nothing sent, when a piece is not in a host
** buffer of the client or memory runs out: the pieces are then packed by a batch. */
static int reply_gathered(xfer_listener *l, conn *c, const message *m)
{
  size_t n = (size_t)m->h.offset, total = 0;
  sending *s = calloc(1, sizeof *s);
  ucp_dt_iov_t *iov = s ? malloc(n * sizeof *iov) : NULL;
  xfer_tensor **holds = iov ? malloc(n * sizeof *holds) : NULL;
  size_t nholds = 0;
  int ok = holds != NULL;
  for (size_t i = 0; ok && i < n; i++) {
    wire_piece d;
    memcpy(&d, m->data + i * sizeof d, sizeof d);
    buffer_entry *b;
    char *at = piece_in_host_buffer(c, &d, &b);
    ok = at != NULL;
    if (ok && (!nholds || holds[nholds - 1] != b->t)) holds[nholds++] = xfer_tensor_retain(b->t);
    if (ok) iov[i] = (ucp_dt_iov_t){at, d.length};
    total += ok ? d.length : 0;
  }
  if (!ok || total != m->h.length) {
    for (size_t i = 0; holds && i < nholds; i++) xfer_tensor_release(holds[i]);
    free(holds);
    free(iov);
    free(s);
    return 0;
  }
  *s = (sending){.c = c, .len = total, .header = wire_make(WIRE_DATA, m->h.request), .iov = iov,
                 .pieces = n, .holds = holds, .nholds = nholds};
  s->header.length = total;
  c->replying += total;
  if (c->replying > MAX_REPLYING) c->broken = 1; /* asks and never reads: see MAX_REPLYING */
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  p.datatype = ucp_dt_make_iov();
  void *r = l->node.api->ucp_am_send_nbx(c->ep, WIRE_AM_ID, &s->header, sizeof s->header, iov, n, &p);
  if (r == NULL || UCS_PTR_IS_ERR(r)) { /* sent already, or never */
    if (r) c->broken = 1;
    c->replying -= total;
    sent(s);
    return 1;
  }
  s->request = r;
  s->next = l->sends;
  l->sends = s;
  return 1;
}

static void reply(xfer_listener *l, conn *c, wire_header h, char *data, size_t len)
{
  reply_from(l, c, h, data, len, NULL, XFER_MEMORY_HOST, 0);
}

static void reply_error(xfer_listener *l, conn *c, const wire_header *req, const xfer_error *e)
{
  wire_header h = wire_make(WIRE_REPLY, req->request);
  h.code = (int32_t)e->code;
  h.native = e->native;
  char *text = malloc(WIRE_MAX_TEXT);
  size_t n = 0;
  if (text) /* op, native name, message: what the client's error carries */
    n = (size_t)snprintf(text, WIRE_MAX_TEXT, "%s\t%s\t%d\t%d\t%s", e->op, e->native_name,
                         e->retryable, e->injected, e->message);
  reply(l, c, h, text, n < WIRE_MAX_TEXT ? n : WIRE_MAX_TEXT - 1);
}

static void reply_done(xfer_listener *l, conn *c, const wire_header *req, uint64_t handle)
{
  wire_header h = wire_make(WIRE_REPLY, req->request);
  h.handle = handle;
  reply(l, c, h, NULL, 0);
}

static void reply_refusal(xfer_listener *l, conn *c, const wire_header *req, xfer_code code,
                          const char *text)
{
  xfer_error e;
  memset(&e, 0, sizeof e);
  e.code = code;
  snprintf(e.op, sizeof e.op, "%s", xfer_op_name(XFER_OP_CONNECT));
  e.op_id = XFER_OP_CONNECT;
  snprintf(e.message, sizeof e.message, "%s", text);
  reply_error(l, c, req, &e);
  /* dropped when the client closes on reading the refusal, or after a while: closing at once
  ** could cut the refusal off before it arrives */
  c->closing = 1;
  c->closing_since = xfer_now();
}

/* -- Serving ---------------------------------------------------------------------------------- */

/* constant time in the token's bytes: no early exit that tells how much matched */
static int token_equal(const char *a, size_t alen, const char *b, size_t blen)
{
  size_t n = alen > blen ? alen : blen;
  unsigned diff = (unsigned)(alen ^ blen);
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)(i < alen ? a[i] : 0) ^ (unsigned char)(i < blen ? b[i] : 0);
  return diff == 0;
}

/* the devices this machine serves: its own, not those it reaches remotely itself */
static size_t served_devices(xfer_listener *l, xfer_device **out, size_t cap)
{
  size_t n = 0;
  for (size_t d = 0; d < xfer_device_count(l->ctx) && n < cap; d++) {
    xfer_device *dev = xfer_device_at(l->ctx, d);
    xfer_device_info info;
    if (xfer_device_get_info(dev, &info, NULL) || info.remote) continue;
    out[n++] = dev;
  }
  return n;
}

static void hello(xfer_listener *l, conn *c, const message *m)
{
  if (m->h.version != WIRE_VERSION) {
    char text[160];
    snprintf(text, sizeof text, "the server speaks protocol version %d", WIRE_VERSION);
    reply_refusal(l, c, &m->h, XFER_E_VERSION_MISMATCH, text);
    return;
  }
  if (l->token_len && !token_equal(l->token, l->token_len, m->data ? m->data : "", m->len)) {
    reply_refusal(l, c, &m->h, XFER_E_UNAUTHORIZED, "the server refused the token");
    return;
  }
  c->authorized = 1;
  c->cuda = xfer_ucx_ep_moves_cuda(&l->node, c->ep); /* its lanes are up now */
  char *text = malloc(WIRE_MAX_TEXT);
  if (!text) {
    c->broken = 1;
    return;
  }
  size_t n = (size_t)snprintf(text, WIRE_MAX_TEXT, "%s\t%s\n", l->name,
                              c->cuda ? "host cuda" : "host");
  xfer_device *devs[WIRE_MAX_DEVICES];
  size_t count = served_devices(l, devs, WIRE_MAX_DEVICES);
  for (size_t i = 0; i < count && n < WIRE_MAX_TEXT; i++) {
    xfer_device_info info;
    xfer_device_get_info(devs[i], &info, NULL);
    char uuid[40] = "-";
    if (info.has_uuid) xfer_uuid_text(info.uuid, uuid, sizeof uuid);
    char label[128];
    snprintf(label, sizeof label, "%s", info.label);
    for (char *ch = label; *ch; ch++)
      if (*ch == '\t' || *ch == '\n') *ch = ' ';
    n += (size_t)snprintf(text + n, WIRE_MAX_TEXT - n, "%s\t%s\t%llu\t%llu\t%s\t%s\n", info.name,
                          label, (unsigned long long)info.total_memory,
                          (unsigned long long)info.max_alloc, uuid,
                          xfer_device_memory_kind(devs[i]) == XFER_MEMORY_CUDA ? "cuda" : "none");
  }
  wire_header h = wire_make(WIRE_WELCOME, m->h.request);
  h.handle = l->generation;
  reply(l, c, h, text, n < WIRE_MAX_TEXT ? n : WIRE_MAX_TEXT - 1);
}

/* -- Doors: a UCX listener for each client that knocked ------------------------------------ */

static void door_close(door *d)
{
  if (d->listener) d->l->node.api->ucp_listener_destroy(d->listener);
  memset(d, 0, sizeof *d);
}

/* The door's port (UCX chose it), 0 when it cannot tell. */
static uint16_t door_port(door *d)
{
  ucp_listener_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (d->l->node.api->ucp_listener_query(d->listener, &attr) != UCS_OK) return 0;
  if (attr.sockaddr.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&attr.sockaddr)->sin_port);
  if (attr.sockaddr.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&attr.sockaddr)->sin6_port);
  return 0;
}

/* The gate's decision on a whole knock (gate_front.h's gate_decide). A door is opened on the
** address the client reached -- the interface it came in on, as UCX would have seen it -- at
** a port of UCX's choosing. */
static gate_status decide(void *arg, uint32_t version, const char *token, size_t token_len,
                          const struct sockaddr *local, const struct sockaddr *peer, uint16_t *port)
{
  xfer_listener *l = arg;
  if (version != WIRE_VERSION) return GATE_OTHER_VERSION;
  if (l->token_len && !token_equal(l->token, l->token_len, token, token_len)) return GATE_REFUSED;
  door *d = NULL;
  for (int i = 0; i < MAX_DOORS && !d; i++)
    if (!l->doors[i].listener) d = &l->doors[i];
  if (!d) { /* the oldest door goes: its client is late */
    d = &l->doors[0];
    for (int i = 1; i < MAX_DOORS; i++)
      if (l->doors[i].deadline < d->deadline) d = &l->doors[i];
    door_close(d);
  }
  struct sockaddr_storage at;
  memset(&at, 0, sizeof at);
  size_t at_len = local->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  memcpy(&at, local, at_len);
  if (at.ss_family == AF_INET6) ((struct sockaddr_in6 *)&at)->sin6_port = 0;
  else ((struct sockaddr_in *)&at)->sin_port = 0;
  d->l = l;
  memcpy(&d->client, peer, peer->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
  d->deadline = xfer_now() + DOOR_SECONDS;
  ucp_listener_params_t lp;
  memset(&lp, 0, sizeof lp);
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = (const struct sockaddr *)&at;
  lp.sockaddr.addrlen = (socklen_t)at_len;
  lp.conn_handler.cb = on_conn_request;
  lp.conn_handler.arg = d;
  if (l->node.api->ucp_listener_create(l->node.worker, &lp, &d->listener) != UCS_OK) {
    d->listener = NULL;
    door_close(d);
    return GATE_BUSY;
  }
  *port = door_port(d);
  /* shut to every other address before the answer tells anyone where it is (door_filter.h):
  ** a door that cannot be shut is not opened */
  if (!*port || xfer_door_admit_only(at.ss_family, *port, peer)) {
    door_close(d);
    return GATE_BUSY;
  }
  return GATE_OPEN;
}

/* Doors whose client came in, or did not in time, close. 1 when one did. */
static int close_doors(xfer_listener *l)
{
  int did = 0;
  double now = xfer_now();
  for (int i = 0; i < MAX_DOORS; i++) {
    door *d = &l->doors[i];
    if (d->listener && (d->used || now > d->deadline)) {
      door_close(d);
      did = 1;
    }
  }
  return did;
}

static buffer_entry *buffer_of(conn *c, uint64_t handle)
{
  for (size_t i = 0; i < c->nbuffers; i++)
    if (c->buffers[i].handle == handle) return &c->buffers[i];
  return NULL;
}

/* The error of a handle that names no buffer of this client: `stale` when it named one freed
** since -- a client's handles are numbered from 1 and never given twice, so a handle below the
** next one was given and freed, and never names another buffer's bytes -- else `invalid`. */
static void no_buffer(const conn *c, uint64_t handle, xfer_op op, const char *what, xfer_error *e)
{
  if (handle && handle < c->next_handle)
    xfer_err_op(e, XFER_E_STALE, op, "%sbuffer %llu of this client was freed: its handle names "
                "nothing now", what, (unsigned long long)handle);
  else
    xfer_err_op(e, XFER_E_INVALID, op, "%sno buffer %llu on this server for this client", what,
                (unsigned long long)handle);
}

static void unknown_handle(xfer_listener *l, conn *c, const message *m, xfer_op op)
{
  xfer_error e;
  no_buffer(c, m->h.handle, op, "", &e);
  reply_error(l, c, &m->h, &e);
}

static void alloc_buffer(xfer_listener *l, conn *c, const message *m)
{
  xfer_device *devs[WIRE_MAX_DEVICES];
  size_t count = served_devices(l, devs, WIRE_MAX_DEVICES);
  xfer_error e;
  if (m->h.device >= count) {
    xfer_err_op(&e, XFER_E_INVALID, XFER_OP_ALLOC, "no device %u on this server", m->h.device);
    reply_error(l, c, &m->h, &e);
    return;
  }
  if (c->nbuffers == MAX_HANDLES || m->h.length > (uint64_t)INT64_MAX) {
    xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_ALLOC, "a client holds at most %d buffers here", MAX_HANDLES);
    reply_error(l, c, &m->h, &e);
    return;
  }
  if (c->nbuffers == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 16;
    buffer_entry *grown = realloc(c->buffers, cap * sizeof *grown);
    if (!grown) {
      xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_ALLOC, "%s on the server", xfer_code_what(XFER_E_ALLOC));
      reply_error(l, c, &m->h, &e);
      return;
    }
    c->buffers = grown;
    c->cap = cap;
  }
  if (l->client_memory && m->h.length > l->client_memory - c->held) { /* (held never passes the quota) */
    xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_ALLOC, "a client holds at most %llu bytes here (its quota); "
                "it holds %llu, and asked for %llu more", (unsigned long long)l->client_memory,
                (unsigned long long)c->held, (unsigned long long)m->h.length);
    reply_error(l, c, &m->h, &e);
    return;
  }
  xfer_device_info info;
  uint64_t left;
  if (!xfer_device_get_info(devs[m->h.device], &info, NULL) && (info.unified || !strcmp(info.runtime, "host")) &&
      m->h.length > (left = xfer_memory_left())) {
    /* host memory is promised before it is there: the kernel's answer to too much is the
    ** OOM killer, later, so the server says no now */
    xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_ALLOC, "%llu bytes on %s: the server has %llu bytes of memory "
                "left", (unsigned long long)m->h.length, info.name, (unsigned long long)left);
    reply_error(l, c, &m->h, &e);
    return;
  }
  xfer_shape shape = {1, {(int64_t)m->h.length}};
  xfer_tensor *t;
  if (xfer_tensor_empty(devs[m->h.device], XFER_U8, &shape, &t, &e)) {
    reply_error(l, c, &m->h, &e);
    return;
  }
  c->held += m->h.length;
  buffer_entry *b = &c->buffers[c->nbuffers++];
  b->handle = c->next_handle++;
  b->t = t;
  char *host = xfer_tensor_host_data(t); /* WRITEs land in it: registered before they come */
  if (host) xfer_ucx_memh(&l->node, host, xfer_tensor_nbytes(t));
  reply_done(l, c, &m->h, b->handle);
}

static void free_buffer(xfer_listener *l, conn *c, const message *m)
{
  buffer_entry *b = buffer_of(c, m->h.handle);
  if (!b) {
    unknown_handle(l, c, m, XFER_OP_FREE);
    return;
  }
  c->held -= xfer_tensor_nbytes(b->t);
  xfer_tensor_release(b->t);
  *b = c->buffers[--c->nbuffers];
  reply_done(l, c, &m->h, 0);
}

/* the bytes [offset, offset+length) of buffer `handle`, as a view; NULL with the reply sent */
static xfer_tensor *range_at(xfer_listener *l, conn *c, const message *m, uint64_t handle,
                             uint64_t offset, xfer_op op)
{
  buffer_entry *b = buffer_of(c, handle);
  xfer_error e;
  if (!b) {
    no_buffer(c, handle, op, "", &e);
    reply_error(l, c, &m->h, &e);
    return NULL;
  }
  uint64_t end = offset + m->h.length; /* (wire_check refused a sum that wraps) */
  if (end > xfer_tensor_nbytes(b->t)) {
    xfer_err_op(&e, XFER_E_INVALID, op, "bytes %llu to %llu are outside buffer %llu (%zu bytes)",
                 (unsigned long long)offset, (unsigned long long)end, (unsigned long long)handle,
                 xfer_tensor_nbytes(b->t));
    reply_error(l, c, &m->h, &e);
    return NULL;
  }
  xfer_shape shape = {1, {(int64_t)m->h.length}};
  int64_t stride = 1;
  xfer_tensor *v;
  if (xfer_tensor_view(b->t, &shape, &stride, (int64_t)offset, &v, &e)) {
    reply_error(l, c, &m->h, &e);
    return NULL;
  }
  return v;
}

static xfer_tensor *range_of(xfer_listener *l, conn *c, const message *m, xfer_op op)
{
  return range_at(l, c, m, m->h.handle, m->h.offset, op);
}

/* the CRC32C of a range of a buffer, as the server's device sums it (or reads it back) */
static void crc_buffer(xfer_listener *l, conn *c, const message *m)
{
  xfer_tensor *v = m->h.length ? range_of(l, c, m, XFER_OP_VERIFY) : NULL;
  if (m->h.length && !v) return; /* answered */
  uint32_t crc = 0;
  xfer_error e;
  xfer_code rc = v ? xfer_tensor_crc32c(v, &crc, &e) : XFER_E_OK;
  xfer_tensor_release(v);
  if (rc) reply_error(l, c, &m->h, &e);
  else reply_done(l, c, &m->h, crc);
}

/* within the server: one of its device's copies (or whatever path joins two of its devices) */
static void copy_buffer(xfer_listener *l, conn *c, const message *m)
{
  if (!m->h.length) {
    reply_done(l, c, &m->h, 0);
    return;
  }
  xfer_tensor *dst = range_of(l, c, m, XFER_OP_COPY);
  xfer_tensor *src = dst ? range_at(l, c, m, m->h.src_handle, m->h.src_offset, XFER_OP_COPY) : NULL;
  xfer_error e;
  if (src) {
    if (xfer_transfer_copy(dst, src, NULL, &e)) reply_error(l, c, &m->h, &e);
    else reply_done(l, c, &m->h, 0);
  }
  xfer_tensor_release(src);
  xfer_tensor_release(dst);
}

static void write_buffer(xfer_listener *l, conn *c, const message *m)
{
  if (m->direct && m->received != UCS_OK) { /* UCX could not write the device memory */
    xfer_error e;
    xfer_ucx_fail(l->node.api, XFER_E_WRITE, XFER_OP_WRITE, m->received,
                  "write: receiving into device memory", &e);
    reply_error(l, c, &m->h, &e);
    return;
  }
  if (m->direct) { /* landed in place */
    reply_done(l, c, &m->h, 0);
    return;
  }
  xfer_tensor *v = range_of(l, c, m, XFER_OP_WRITE);
  if (!v) return;
  xfer_error e;
  xfer_code rc = m->len ? xfer_tensor_write(v, m->data, m->len, &e) : XFER_E_OK;
  xfer_tensor_release(v);
  if (rc) reply_error(l, c, &m->h, &e);
  else reply_done(l, c, &m->h, 0);
}

static void read_buffer(xfer_listener *l, conn *c, const message *m)
{
  xfer_tensor *v = range_of(l, c, m, XFER_OP_READ);
  if (!v) return;
  char *host = m->h.length ? xfer_tensor_host_data(v) : NULL;
  if (host) { /* a host buffer is sent from in place, the view held until it has gone */
    wire_header h = wire_make(WIRE_DATA, m->h.request);
    reply_from(l, c, h, host, m->h.length, v, XFER_MEMORY_HOST, m->h.flags);
    return;
  }
  xfer_memory device; /* so is device memory UCX reads in place */
  if (m->h.length && c->cuda && !xfer_tensor_device_memory(v, 0, &device, NULL)) {
    wire_header h = wire_make(WIRE_DATA, m->h.request);
    reply_from(l, c, h, device.address, m->h.length, v, device.kind, m->h.flags);
    return;
  }
  xfer_error e;
  xfer_tensor *staging = NULL;
  char *bytes = m->h.length ? staging_for(l, m->h.length, &staging) : NULL;
  xfer_code rc = XFER_E_OK;
  if (m->h.length && !bytes) rc = xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_READ, "%s on the server", xfer_code_what(XFER_E_ALLOC));
  if (!rc && m->h.length) rc = xfer_tensor_read(v, bytes, m->h.length, &e);
  xfer_tensor_release(v);
  if (rc) {
    staging_done(bytes, staging);
    reply_error(l, c, &m->h, &e);
    return;
  }
  wire_header h = wire_make(WIRE_DATA, m->h.request);
  /* sent from the staging tensor's memory */
  reply_from(l, c, h, bytes, m->h.length, staging, XFER_MEMORY_HOST, m->h.flags);
}

/* -- Batches: a message's pieces as one batch of the server's ---------------------------------- */

/* The buffer tensor a piece names and the range inside it, checked; 0 with the reply sent. */
static int piece_buffer(xfer_listener *l, conn *c, const message *m, uint64_t handle,
                        uint64_t offset, uint64_t length, size_t i, xfer_tensor **out)
{
  buffer_entry *b = buffer_of(c, handle);
  xfer_error e;
  if (!b) {
    char what[48];
    snprintf(what, sizeof what, "batch piece %zu: ", i + 1);
    no_buffer(c, handle, XFER_OP_COPY, what, &e);
    reply_error(l, c, &m->h, &e);
    return 0;
  }
  if (!length || offset + length < offset || offset + length > xfer_tensor_nbytes(b->t)) {
    xfer_err_op(&e, XFER_E_INVALID, XFER_OP_COPY, "batch piece %zu: %s", i + 1,
                !length ? "no bytes" : "bytes outside its buffer");
    reply_error(l, c, &m->h, &e);
    return 0;
  }
  *out = b->t;
  return 1;
}

/* The pieces' items: one buffer end each (dst: writes and copies), the other `packed` at the
** pieces' bytes one after another from `at` (writes and reads), or a buffer (copies). NULL with
** the reply sent. */
static xfer_batch_item *many_items(xfer_listener *l, conn *c, const message *m, const char *list,
                                   xfer_tensor *packed, size_t at, size_t *total)
{
  size_t count = m->h.offset;
  xfer_batch_item *items = calloc(count, sizeof *items);
  xfer_error e;
  if (!items) {
    xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_COPY, "%s on the server", xfer_code_what(XFER_E_ALLOC));
    reply_error(l, c, &m->h, &e);
    return NULL;
  }
  *total = 0;
  for (size_t i = 0; i < count; i++) {
    xfer_tensor *buf = NULL, *other = NULL;
    int ok;
    if (m->h.type == WIRE_COPY_MANY) {
      wire_copy d;
      memcpy(&d, list + i * sizeof d, sizeof d);
      ok = piece_buffer(l, c, m, d.dst_handle, d.dst_offset, d.length, i, &buf) &&
           piece_buffer(l, c, m, d.src_handle, d.src_offset, d.length, i, &other);
      if (ok) items[i] = (xfer_batch_item){buf, other, d.dst_offset, d.src_offset, d.length};
      *total += ok ? d.length : 0;
    } else {
      wire_piece d;
      memcpy(&d, list + i * sizeof d, sizeof d);
      ok = piece_buffer(l, c, m, d.handle, d.offset, d.length, i, &buf);
      if (ok && d.length > xfer_tensor_nbytes(packed) - at - *total) {
        xfer_err_op(&e, XFER_E_INVALID, XFER_OP_COPY, "batch piece %zu: more bytes than the message "
                     "has", i + 1);
        reply_error(l, c, &m->h, &e);
        ok = 0;
      }
      if (ok && m->h.type == WIRE_WRITE_MANY)
        items[i] = (xfer_batch_item){buf, packed, d.offset, at + *total, d.length};
      else if (ok)
        items[i] = (xfer_batch_item){packed, buf, at + *total, d.offset, d.length};
      *total += ok ? d.length : 0;
    }
    if (!ok) {
      free(items);
      return NULL;
    }
  }
  return items;
}

/* A host tensor of n bytes (a staging tensor of the host pool); NULL with the reply sent. */
static xfer_tensor *host_bytes(xfer_listener *l, conn *c, const message *m, size_t n)
{
  xfer_shape shape = {1, {(int64_t)n}};
  xfer_tensor *t = NULL;
  xfer_error e;
  if (xfer_tensor_empty(xfer_host_of(l->ctx), XFER_U8, &shape, &t, &e)) {
    reply_error(l, c, &m->h, &e);
    return NULL;
  }
  return t;
}

/* WRITE_MANY, COPY_MANY, READ_MANY: the pieces checked, moved as one batch, answered. */
static void serve_many(xfer_listener *l, conn *c, const message *m)
{
  if (m->h.type == WIRE_WRITE_MANY && m->direct) { /* landed in its buffers */
    reply_done(l, c, &m->h, 0);
    return;
  }
  if (m->h.type == WIRE_READ_MANY && !(m->h.flags & WIRE_FLAG_RNDV) && reply_gathered(l, c, m))
    return;
  /* the pieces: a write's from its header (its payload is their bytes), else the payload */
  const char *list = m->h.type == WIRE_WRITE_MANY ? (const char *)m->pieces : m->data;
  size_t listed = m->h.type == WIRE_WRITE_MANY ? 0
                  : m->h.offset * (m->h.type == WIRE_COPY_MANY ? sizeof(wire_copy) : sizeof(wire_piece));
  xfer_tensor *packed = NULL;
  if (m->h.type == WIRE_WRITE_MANY) { /* the bytes in a host tensor: the batch's source */
    if (m->staging) {
      packed = xfer_tensor_retain(m->staging);
    } else if ((packed = host_bytes(l, c, m, m->len))) {
      memcpy(xfer_tensor_host_data(packed), m->data, m->len);
    } else {
      return;
    }
  } else if (m->h.type == WIRE_READ_MANY && !(packed = host_bytes(l, c, m, listed + m->h.length))) {
    return;
  }
  size_t total = 0;
  xfer_batch_item *items = many_items(l, c, m, list, packed, listed, &total);
  xfer_error e;
  xfer_code rc = XFER_E_OK;
  if (items && m->h.type == WIRE_WRITE_MANY && total != m->len - listed)
    rc = xfer_err_op(&e, XFER_E_INVALID, XFER_OP_COPY, "a batch of %zu bytes with %zu bytes of "
                      "pieces", m->len - listed, total);
  if (items && !rc) rc = xfer_transfer_batch(items, m->h.offset, NULL, &e);
  if (items && rc) reply_error(l, c, &m->h, &e);
  if (items && !rc && m->h.type == WIRE_READ_MANY) { /* sent from the packed tensor's memory */
    wire_header h = wire_make(WIRE_DATA, m->h.request);
    reply_from(l, c, h, (char *)xfer_tensor_host_data(packed) + listed, m->h.length, packed, XFER_MEMORY_HOST,
               m->h.flags);
    packed = NULL; /* released when sent */
  } else if (items && !rc) {
    reply_done(l, c, &m->h, 0);
  }
  free(items);
  xfer_tensor_release(packed);
}

static void serve(xfer_listener *l, message *m)
{
  conn *c = m->c;
  if (!c || c->broken || c->closing) return;
  if (m->h.type == WIRE_HELLO) {
    if (c->authorized) c->broken = 1; /* said twice */
    else hello(l, c, m);
    return;
  }
  if (!c->authorized) { /* anything before a good HELLO */
    c->broken = 1;
    return;
  }
  if (m->unstaged) {
    xfer_error e;
    xfer_err_op(&e, XFER_E_ALLOC, XFER_OP_WRITE, "no host memory on the server for the %zu bytes of "
                "this request", m->unstaged);
    reply_error(l, c, &m->h, &e);
    return;
  }
  if (m->canceled) {
    xfer_error e;
    xfer_err_op(&e, XFER_E_CANCELED, XFER_OP_CANCEL, "canceled by the client before it was served");
    reply_error(l, c, &m->h, &e);
    __atomic_add_fetch(&l->canceled, 1, __ATOMIC_RELAXED);
    return;
  }
  switch (m->h.type) {
  case WIRE_ALLOC: alloc_buffer(l, c, m); break;
  case WIRE_FREE: free_buffer(l, c, m); break;
  case WIRE_WRITE: write_buffer(l, c, m); break;
  case WIRE_READ: read_buffer(l, c, m); break;
  case WIRE_COPY: copy_buffer(l, c, m); break;
  case WIRE_CRC: crc_buffer(l, c, m); break;
  case WIRE_WRITE_MANY:
  case WIRE_READ_MANY:
  case WIRE_COPY_MANY: serve_many(l, c, m); break;
  default: c->broken = 1; break; /* a server's message from a client */
  }
  __atomic_add_fetch(&l->served, 1, __ATOMIC_RELAXED);
}

/* Whether the host pool keeps freed memory for later tensors (xfer_config's cache). */
static int pool_keeps(xfer_listener *l)
{
  xfer_config cfg;
  xfer_config_get(l->ctx, &cfg);
  return cfg.cache;
}

/* Serves what has arrived; 1 when anything was done. */
static int serve_ready(xfer_listener *l)
{
  int did = gate_front_poll(&l->front, decide, l), orphans = 0;
  did |= close_doors(l);
  /* Each client's requests in its order; one whose payload is still on its way holds back
  ** its client's later ones, no one else's: a client that died or stalled mid-send held the
  ** whole queue, and every other client's requests waited (CI: a torture run's writes
  ** "answered nothing within 10 s", twelve times). Messages arriving meanwhile join the tail. */
  unsigned pass = ++l->passes;
  for (message **at = &l->head, *before = NULL; *at;) {
    /* before each request, what has arrived (UCX hands over a message or a few per call): a
    ** CANCEL behind it, of it and those still queued, is heard before it is served */
    for (int k = 0; k < 16 && l->node.api->ucp_worker_progress(l->node.worker); k++) continue;
    message *m = *at;
    int held = m->c && m->c->waits_in == pass;
    if (!held && m->receiving && l->node.api->ucp_request_check_status(m->receiving) == UCS_INPROGRESS) {
      if (m->c) m->c->waits_in = pass;
      held = 1;
    }
    if (held) {
      before = m;
      at = &m->next;
      continue;
    }
    if (m->receiving) {
      l->node.api->ucp_request_free(m->receiving);
      m->receiving = NULL;
    }
    *at = m->next;
    if (l->tail == m) l->tail = before;
    serve(l, m);
    if (m->c) {
      m->c->queued -= m->len;
      m->c->waiting--;
      if (m->h.type == WIRE_FREE) m->c->frees_waiting--;
    }
    /* the staging tensor's memory goes back to the pool, to take a later message: mapped
    ** now (not in the callback that received into it), the next one carries the handle --
    ** unless the pool keeps nothing (XFER_CACHE=0), when it goes back to the system at once */
    if (m->staging && pool_keeps(l)) xfer_ucx_memh(&l->node, m->data, m->len);
    message_free(m);
    did = 1;
  }
  for (sending **at = &l->sends; *at;) {
    sending *s = *at;
    if (l->node.api->ucp_request_check_status(s->request) == UCS_INPROGRESS) {
      at = &s->next;
      continue;
    }
    l->node.api->ucp_request_free(s->request);
    *at = s->next;
    if (s->c) s->c->replying -= s->len;
    else orphans = 1;
    sent(s);
    did = 1;
  }
  /* a dropped client's replies (up to MAX_REPLYING of staging) gone: the host pool gives the
  ** memory back rather than keep it for clients that may never come */
  if (orphans) xfer_empty_cache(l->ctx, xfer_host_of(l->ctx));
  for (conn *c = l->conns, *next; c; c = next) {
    next = c->next;
    if (c->broken || (c->closing && xfer_now() - c->closing_since > 5.0)) {
      drop_conn(l, c);
      did = 1;
    }
  }
  return did;
}

/* Serves for `seconds` (0: what has arrived), on whichever thread owns the listener. */
static void serve_for(xfer_listener *l, double seconds)
{
  double until = xfer_now() + (seconds > 0 ? seconds : 0);
  do {
    unsigned progressed = l->node.api->ucp_worker_progress(l->node.worker);
    int served = serve_ready(l);
    xfer_ucx_idle(&l->node, &l->idler, progressed || served, until);
    if (!progressed && !served && xfer_now() >= until) break;
  } while (xfer_now() < until);
}

xfer_code xfer_listener_progress(xfer_listener *l, double seconds, xfer_error *err)
{
  if (l->threaded) /* its worker is its thread's alone */
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_PROGRESS,
                        "progress: this listener serves on a thread of its own");
  serve_for(l, seconds);
  return XFER_E_OK;
}

/* The listener's own thread (xfer_listen_opts.thread): serves until xfer_listener_close says
** stop, looking at the flag at least every tenth of a second (an idle worker waits on its
** event fd in between: xfer_ucx_idle). */
static void *serving_thread(void *arg)
{
  xfer_listener *l = arg;
  while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) serve_for(l, 0.1);
  return NULL;
}

/* l->url: the host as given, the port as bound (port 0: the one the system chose). */
static xfer_code bound_url(xfer_listener *l, const char *host, xfer_error *err)
{
  uint16_t port = gate_front_port(&l->front);
  if (!port)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_LISTEN, "listen: cannot tell which port was bound: %s",
                        strerror(errno));
  int v6 = strchr(host, ':') && host[0] != '[';
  snprintf(l->url, sizeof l->url, "ucx://%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", (unsigned)port);
  return XFER_E_OK;
}

const char *xfer_listener_url(const xfer_listener *l) { return l->url; }

xfer_code xfer_listen(xfer_ctx *ctx, const char *url, const xfer_listen_opts *opts,
                      xfer_listener **out, xfer_error *err)
{
  *out = NULL;
  char host[256];
  uint16_t port;
  xfer_code rc = xfer_ucx_parse_url(url, XFER_OP_LISTEN, host, sizeof host, &port, err);
  if (rc) return rc;
  const char *name = opts && opts->name ? opts->name : "";
  if (strlen(name) > WIRE_NAME_MAX || strpbrk(name, "/\t\n :"))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_LISTEN, "listen: a name of at most %d characters, "
                        "without '/', ':', spaces or tabs, not '%.40s'", WIRE_NAME_MAX, name);
  const char *token = opts && opts->token ? opts->token : NULL;
  if (token && !*token) /* an empty token would read as none: every client let in */
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_LISTEN, "listen: an empty token admits "
                        "anyone: give one of 1 to 255 bytes, or none (nil) to serve without");
  if (!token) token = "";
  if (strlen(token) >= sizeof ((xfer_listener *)0)->token)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_LISTEN, "listen: a token of at most 255 bytes");
  xfer_listener *l = calloc(1, sizeof *l);
  if (!l) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_LISTEN);
  gate_front_init(&l->front);
  l->ctx = xfer_ctx_retain(ctx);
  snprintf(l->name, sizeof l->name, "%s", *name ? name : "node");
  snprintf(l->token, sizeof l->token, "%s", token);
  l->token_len = strlen(token);
  l->client_memory = opts ? opts->client_memory : 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  l->generation = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)(uintptr_t)l << 7);
  rc = xfer_ucx_node_open(&l->node, l->ctx, on_message, l, XFER_OP_LISTEN, err);
  struct sockaddr_storage addr;
  socklen_t addr_len = 0;
  if (!rc) rc = xfer_ucx_sockaddr(host, port, XFER_OP_LISTEN, &addr, &addr_len, XFER_E_INVALID, err);
  char why[256];
  if (!rc && addr.ss_family == AF_INET6 && !xfer_ucx_takes_ipv6(l->node.api, why, sizeof why))
    rc = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_LISTEN, "listen: %.200s: %s", url, why);
  if (!rc) { /* the gate, not UCX, listens on the port: see the head of this file */
    int e = gate_front_open(&l->front, (const struct sockaddr *)&addr, addr_len);
    if (e)
      rc = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_LISTEN, "listen: cannot listen on %.200s: %s", url,
                        strerror(e));
    if (e && err) err->native = e;
  }
  if (!rc) rc = bound_url(l, host, err);
  if (!rc && opts && opts->thread) {
    int e = pthread_create(&l->thread, NULL, serving_thread, l);
    if (e) rc = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_LISTEN, "listen: cannot start its thread: %s",
                             strerror(e));
    else l->threaded = 1;
  }
  if (rc) {
    gate_front_close(&l->front);
    xfer_ucx_node_close(&l->node);
    xfer_ctx_release(l->ctx);
    free(l);
    return rc;
  }
  *out = l;
  return XFER_E_OK;
}

void xfer_listener_stats(const xfer_listener *l, uint64_t *clients, uint64_t *served,
                         uint64_t *dropped)
{
  /* atomics: a listener on its own thread counts while another reads */
  if (clients) *clients = __atomic_load_n(&l->clients, __ATOMIC_RELAXED);
  if (served) *served = __atomic_load_n(&l->served, __ATOMIC_RELAXED);
  if (dropped) *dropped = __atomic_load_n(&l->dropped, __ATOMIC_RELAXED);
}

uint64_t xfer_listener_canceled(const xfer_listener *l)
{
  return __atomic_load_n(&l->canceled, __ATOMIC_RELAXED);
}

void xfer_listener_registered(const xfer_listener *l, xfer_registered *out)
{
  xfer_ucx_registered(&l->node, out);
}

void xfer_listener_close(xfer_listener *l)
{
  if (!l) return;
  if (l->threaded) { /* it stops within a tenth of a second; then this thread owns it all */
    __atomic_store_n(&l->stop, 1, __ATOMIC_RELEASE);
    pthread_join(l->thread, NULL);
    l->threaded = 0;
  }
  while (l->conns) drop_conn(l, l->conns);
  while (l->sends) {
    sending *s = l->sends;
    l->sends = s->next;
    xfer_ucx_wait(&l->node, s->request, xfer_now() + 1.0, XFER_E_PEER_LOST, XFER_OP_LISTEN, "closing", NULL);
    sent(s);
  }
  while (l->head) {
    message *m = l->head;
    l->head = m->next;
    if (m->receiving) {
      l->node.api->ucp_request_cancel(l->node.worker, m->receiving);
      xfer_ucx_wait(&l->node, m->receiving, xfer_now() + 1.0, XFER_E_PEER_LOST, XFER_OP_LISTEN, "closing", NULL);
    }
    message_free(m);
  }
  gate_front_close(&l->front);
  for (int i = 0; i < MAX_DOORS; i++) door_close(&l->doors[i]);
  xfer_ucx_node_close(&l->node);
  xfer_ctx_release(l->ctx);
  free(l);
}
