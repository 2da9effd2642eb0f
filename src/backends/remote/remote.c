/*
** remote.c -- the remote runtime: devices of another machine, served there (server.c) and
** reached over UCX. xfer_connect says HELLO (protocol version, token), and the server's
** devices join this context as "<name>/<device>" ("nodeB/cuda:0"). Their buffers are handles
** on the server; the backend's calls are requests, one at a time per peer, each with a
** deadline of its own: a peer that does not answer in time is lost (its endpoint closed by
** force), and so are its devices (peer_lost), never a hang. Bytes move as active messages in
** chunks of at most WIRE_CHUNK (rendezvous for large ones).
*/
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/backend.h"
#include "../../core/backend_call.h"
#include "../../transport/ucx/gate.h"
#include "../../transport/ucx/ucx_api.h"
#include "../../transport/ucx/wire.h"

#define RESERVED_DEVICES 128 /* remote devices a context may gain after it opened */
/* Requests a move keeps in flight to one peer: the next chunk is on its way while the server
** writes the last one to its device and answers (the round trips do not add up). */
#define CONNECT_ATTEMPTS 3 /* doors knocked for by one connect, at most (xfer_connect) */
#define PIPELINE WIRE_DEPTH_MAX /* the most requests of a move in flight (xfer_config remote_depth) */
/* A peer given up on (a deadline passed, or lost) has this long, in all, for its endpoint's
** forced close and its unfinished requests to end; then they are let go of (UCX releases
** them when they end). It bounds how late a timeout surfaces: each of them waited up to a
** quarter of a second, and a pipelined move's error once came 290 ms past its deadline. */
#define GIVE_UP_SECONDS 0.1
/* Sends and receives of requests a move's deadline left behind, kept until they end (the
** device is stalled meanwhile: memory freed is held): more than this, and the peer is lost. */
#define ORPHANS 64

typedef struct pending {          /* a request on its way, and its answer */
  uint64_t id;                    /* 0: the slot is free */
  wire_header header;             /* sent from here: UCX reads it until the send is done */
  void *sending;                  /* the send, until it is done */
  double deadline;
  int answered;
  wire_header answer;
  char *read_into;                /* a READ's destination, read_len bytes */
  size_t read_len;
  xfer_memory_kind read_kind;     /* what memory read_into is (device memory: by rendezvous) */
  ucp_mem_h read_memh;            /* read_into's registration (ucx_reg.c), or NULL */
  size_t read_pieces;             /* read_into is a ucp_dt_iov_t list of this many host pieces
                                  ** (a READ_MANY's ends), not the memory (0) */
  void *receiving;                /* a rendezvous receive into it, in progress */
  size_t text_len;
  char text[WIRE_MAX_TEXT + 1];   /* a REPLY's or WELCOME's words */
} pending;

struct xfer_peer {
  xfer_ctx *ctx;
  ucx_node node;
  ucp_ep_h ep;
  pthread_mutex_t lock;           /* one request at a time; every UCX call under it */
  int refs;                       /* the application's, and one per device (atomic) */
  int detached;                   /* its context closed: its devices are gone */
  int broken;                     /* the endpoint failed (UCX said so) */
  int lost;                       /* given up: devices lost, endpoint closed */
  char name[WIRE_NAME_MAX + 1];
  char url[256];
  int server_cuda_memory;         /* the server moves its CUDA memory to UCX in place */
  int direct_cuda;                /* so does this side (xfer_ucx_ep_moves_cuda) */
  uint64_t generation;
  uint64_t next_request;
  double timeout;                 /* seconds the server may stay silent */
  double heard;                   /* xfer_now() of its last answer: a request is due `timeout`
                                  ** after it was sent or after the last answer, the later */
  double settle_by;               /* given up on: what it leaves unfinished is let go of by then */
  int closed;                     /* the application let go of it (or never had it: a failed
                                  ** connect): its lost devices may give their places back */
  xfer_device *devices[WIRE_MAX_DEVICES]; /* its devices in the context */
  size_t ndevices;
  pending slot[PIPELINE];         /* the requests on their way (a move keeps remote_depth) */
  wire_header answer;             /* the answer of the request awaited last, and its text */
  char text[WIRE_MAX_TEXT + 1];
  int bad_answer;                 /* the server broke the protocol */
  const char *bad_why;            /* how */
  /* what a move's deadline left unfinished: a send that still reads the move's memory, a
  ** receive that still writes it (copy->idle: none left) */
  void *orphans[ORPHANS];
  int norphans;
  /* the last CANCEL told (tell_cancel): its header, read by UCX until its send is done */
  wire_header cancel_header;
  void *canceling;
  uint64_t canceled;              /* answers "canceled, untouched" (late ones too) (atomic) */
  double cancel_by;               /* the move was canceled and the server told: it has until
                                  ** then to answer (0: not yet; each move starts at 0) */
};

/* The runtime's state: devices that gave their places back, kept until the context closes
** (another thread may still be reading one it found in the list a moment ago). */
typedef struct remote_rt {
  xfer_device **retired;
  size_t nretired, cap;
} remote_rt;

/* Held while a connection adds its devices to the context's list (places taken, devices
** retired): connects on two threads at once take turns. */
static pthread_mutex_t listing = PTHREAD_MUTEX_INITIALIZER;

typedef struct remote_dev {
  xfer_peer *peer;
  uint32_t index;                 /* the device's index on its server */
  int cuda;                       /* its memory is CUDA's (moved in place there, if at all) */
} remote_dev;

static xfer_peer *peer_of(const xfer_device *dev) { return ((remote_dev *)dev->impl)->peer; }

/* -- Losing a peer ---------------------------------------------------------------------------- */

/* (peer->lock held) Its devices raise peer_lost from now on; the endpoint is closed by force. */
static void lose(xfer_peer *p, const char *why)
{
  if (p->lost) return;
  p->settle_by = xfer_now() + GIVE_UP_SECONDS;
  __atomic_store_n(&p->lost, 1, __ATOMIC_RELEASE);
  for (size_t d = 0; !p->detached && d < p->ndevices; d++) {
    xfer_device *dev = p->devices[d];
    snprintf(dev->lost_note, sizeof dev->lost_note, "%s", why);
    dev->lost_code = XFER_E_PEER_LOST;
    __atomic_store_n(&dev->lost, 1, __ATOMIC_RELEASE);
  }
  if (p->ep) {
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *r = p->node.api->ucp_ep_close_nbx(p->ep, &prm);
    /* forced: it ends at once, as a rule; one that does not is let go of (its failure is
    ** being raised, and should not wait on it) */
    if (r && !UCS_PTR_IS_ERR(r)) xfer_ucx_abandon(&p->node, r, p->settle_by);
    p->ep = NULL;
  }
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
  (void)ep;
  (void)status;
  xfer_peer *p = arg;
  p->broken = 1; /* seen by the request waiting, under the lock (callbacks run in progress) */
}

/* -- Answers ---------------------------------------------------------------------------------- */

/* An answer not taken. UCS_OK without a receive started tells UCX the data is not wanted: it
** lets a rendezvous one go itself (ucp_am_data_release here, inside the callback, released it
** twice: UCX 1.13 frees the descriptor again when the callback returns). */
static ucs_status_t drop_data(xfer_peer *p, void *data, const ucp_am_recv_param_t *param)
{
  (void)p, (void)data, (void)param;
  return UCS_OK;
}

/* An answer's payload into `into` (a READ_MANY's DATA: into the pieces its list names): by
** rendezvous, received now (the request waits for it); else here already, copied. 0: UCX
** refused the receive (the peer is broken). */
static int answer_receive(xfer_peer *p, pending *w, void *data, char *into, size_t len,
                           const ucp_am_recv_param_t *param)
{
  size_t pieces = w->answer.type == WIRE_DATA ? w->read_pieces : 0;
  const ucp_dt_iov_t *iov = (const ucp_dt_iov_t *)into;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    if (!pieces) memcpy(into, data, len);
    for (size_t i = 0, at = 0; i < pieces; at += iov[i++].length) /* scattered */
      memcpy(iov[i].buffer, (const char *)data + at, iov[i].length);
    return 1;
  }
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof prm);
  if (pieces) { /* straight into the pieces' memory */
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    prm.datatype = ucp_dt_make_iov();
  } else if (w->answer.type == WIRE_DATA) {
    xfer_ucx_request_memh(&prm, w->read_memh);
    xfer_ucx_request_kind(&prm, w->read_kind);
  }
  void *r = p->node.api->ucp_am_recv_data_nbx(p->node.worker, data, into, pieces ? pieces : len,
                                              &prm);
  if (UCS_PTR_IS_ERR(r)) {
    p->broken = 1;
    return 0;
  }
  w->receiving = r; /* NULL: done at once */
  return 1;
}

static ucs_status_t on_answer(void *arg, const void *header, size_t header_len, void *data,
                              size_t len, const ucp_am_recv_param_t *param)
{
  xfer_peer *p = arg;
  wire_header h;
  int other_version;
  const char *bad = wire_check(header, header_len, len, &h, &other_version);
  if (bad || (h.type != WIRE_WELCOME && h.type != WIRE_REPLY && h.type != WIRE_DATA)) {
    p->bad_answer = 1;
    p->bad_why = bad ? bad : "a client's message";
    return drop_data(p, data, param);
  }
  if (h.type == WIRE_REPLY && h.code == XFER_E_CANCELED) __atomic_add_fetch(&p->canceled, 1, __ATOMIC_RELAXED);
  pending *w = NULL;
  for (int i = 0; i < PIPELINE; i++)
    if (p->slot[i].id && p->slot[i].id == h.request && !p->slot[i].answered) w = &p->slot[i];
  if (!w) return drop_data(p, data, param); /* a late one (its request was given up) */
  p->heard = xfer_now(); /* alive: the requests queued behind this one wait on */
  char *into = NULL;
  if (h.type == WIRE_DATA) {
    if (len != w->read_len) {
      p->bad_answer = 1;
      p->bad_why = "data of another length than asked";
      return drop_data(p, data, param);
    }
    into = w->read_into;
    if (w->read_kind != XFER_MEMORY_HOST && len && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
      p->bad_answer = 1; /* asked for by rendezvous (WIRE_FLAG_RNDV): memcpy cannot reach it */
      p->bad_why = "data for device memory not sent by rendezvous";
      return drop_data(p, data, param);
    }
  } else {
    into = w->text;
    w->text_len = len;
    w->text[len] = '\0';
  }
  w->answer = h;
  if (!len || answer_receive(p, w, data, into, len, param)) w->answered = 1;
  return UCS_OK;
}

/* -- Requests --------------------------------------------------------------------------------- */

static xfer_code lost_error(xfer_peer *p, xfer_op op, xfer_error *err)
{
  return xfer_err_op(err, XFER_E_PEER_LOST, op, "peer %s (%s) was lost", p->name, p->url);
}

/* The server's error, as this side's: its code, op, native code and words. */
static xfer_code remote_error(xfer_peer *p, const xfer_device *dev, xfer_error *err)
{
  int32_t code = p->answer.code;
  if (code <= 0 || code >= XFER_E__COUNT) code = XFER_E_INVALID;
  if (!err) return (xfer_code)code;
  /* "op \t native_name \t retryable \t injected \t message" */
  char *fields[5] = {0};
  char *at = p->text;
  for (int i = 0; i < 4; i++) {
    char *tab = strchr(at, '\t');
    if (!tab) break;
    *tab = '\0';
    fields[i] = at;
    at = tab + 1;
  }
  fields[4] = at;
  /* the server's op, by its name (it may be an API call's) */
  xfer_err_op(err, (xfer_code)code, XFER_OP_OTHER, "%s (on %s)", fields[4] ? fields[4] : "",
              p->name);
  xfer_err_call(err, fields[0] ? fields[0] : "remote");
  err->native = p->answer.native;
  snprintf(err->native_name, sizeof err->native_name, "%s", fields[1] ? fields[1] : "");
  err->retryable = fields[2] && fields[2][0] == '1';
  err->injected = fields[3] && fields[3][0] == '1';
  if (dev) snprintf(err->device, sizeof err->device, "%s", dev->name);
  return (xfer_code)code;
}

/* Injected faults (XFER_FAULTS=remote:op...): alloc, read, write fail as the server's device
** would (the peer stays); send fails as a broken connection, recv as an answer that never
** comes -- both lose the peer, as the real failures do. */
static xfer_code injected(xfer_peer *p, const xfer_device *dev, xfer_op fault, xfer_error *err)
{
  long long native;
  if (!xfer_fault_hit(p->ctx, "remote", fault, &native)) return XFER_E_OK;
  xfer_code code = fault == XFER_OP_SEND   ? XFER_E_PEER_LOST
                   : fault == XFER_OP_RECV ? XFER_E_TIMEOUT
                                           : xfer_op_failure(fault); /* as the server's device */
  const char *name = code == XFER_E_PEER_LOST ? "UCS_ERR_CONNECTION_RESET"
                     : code == XFER_E_TIMEOUT ? "UCS_ERR_TIMED_OUT" : "injected";
  xfer_err_native(err, code, fault, native ? native : code == XFER_E_PEER_LOST ? UCS_ERR_CONNECTION_RESET
                                                    : code == XFER_E_TIMEOUT ? UCS_ERR_TIMED_OUT : 0,
                  name, code == XFER_E_PEER_LOST ? "the connection broke"
                        : code == XFER_E_TIMEOUT ? "no answer came" : "the request failed on the server",
                  code == XFER_E_ALLOC, 1);
  if (err) snprintf(err->device, sizeof err->device, "%s", dev ? dev->name : p->name);
  if (code == XFER_E_PEER_LOST || code == XFER_E_TIMEOUT)
    lose(p, code == XFER_E_PEER_LOST ? "an injected send failure" : "an injected lost answer");
  return code;
}

/* A send or receive of a request that ends now: done (freed), or given up on (cancelled; UCX
** frees it when it is through with it). UCS_OK or how it ended. */
static ucs_status_t settle_request(xfer_peer *p, void **request)
{
  if (!*request) return UCS_OK;
  const ucx_api *api = p->node.api;
  ucs_status_t s = api->ucp_request_check_status(*request);
  /* a peer given up on shares one grace among all it leaves unfinished (GIVE_UP_SECONDS):
  ** its timeout surfaces that long after the deadline at most */
  if (s == UCS_INPROGRESS) xfer_ucx_abandon(&p->node, *request, p->lost ? p->settle_by : xfer_now() + 0.25);
  else api->ucp_request_free(*request);
  *request = NULL;
  return s;
}

/* A request that could not be sent: peer_lost with UCX's status. */
static xfer_code send_failed(xfer_peer *p, xfer_op op, ucs_status_t status, xfer_error *err)
{
  char what[96];
  snprintf(what, sizeof what, "%s: sending to %s", xfer_op_name(op), p->name);
  return xfer_ucx_fail(p->node.api, XFER_E_PEER_LOST, op, status, what, err);
}

/* (peer->lock held) Sends a request from slot w, without waiting for it: its deadline is the
** peer's timeout from now. `kind`: the memory the payload is, or a READ's destination. */
/* What a request carries besides its header: a payload of `len` bytes of `kind` memory, or room
** for a read's answer; and, for a WRITE_MANY, `head`: the header's room (its first
** sizeof(wire_header) bytes, written by post) with the pieces after it, head_len bytes.
** `pieces` (batches): the payload, or read_into, is a ucp_dt_iov_t list of that many pieces of
** host memory, `len` bytes in all: UCX gathers them as it sends, or scatters an answer into
** them as it receives -- no copy on this side. */
typedef struct request_body {
  const void *payload;
  size_t len;
  char *read_into;
  xfer_memory_kind kind;
  void *head;
  size_t head_len;
  size_t pieces;
} request_body;

static xfer_code post(xfer_peer *p, const xfer_device *dev, pending *w, wire_header h,
                      const request_body *b, xfer_op op, xfer_error *err)
{
  const void *payload = b->payload;
  size_t len = b->len;
  char *read_into = b->read_into;
  xfer_memory_kind kind = b->kind;
  if (p->lost || !p->ep) return lost_error(p, op, err);
  xfer_code fault = XFER_E_OK;
  if (op == XFER_OP_ALLOC || op == XFER_OP_READ || op == XFER_OP_WRITE || op == XFER_OP_COPY)
    fault = injected(p, dev, op, err);
  if (!fault) fault = injected(p, dev, XFER_OP_SEND, err);
  if (fault) return fault;
  h.request = ++p->next_request;
  int reads = h.type == WIRE_READ || h.type == WIRE_READ_MANY;
  h.length = reads || h.type == WIRE_ALLOC || h.type == WIRE_COPY || h.type == WIRE_COPY_MANY ||
                         h.type == WIRE_CRC
                 ? h.length : len;
  memset(w, 0, offsetof(pending, text));
  w->id = h.request;
  w->header = h;
  w->deadline = xfer_now() + p->timeout;
  w->read_into = read_into;
  w->read_len = reads ? h.length : 0;
  w->read_kind = kind;
  w->read_pieces = reads ? b->pieces : 0;
  int host = kind == XFER_MEMORY_HOST;
  if (w->read_len && !host) w->header.flags |= WIRE_FLAG_RNDV;
  /* host segments are registered with UCX once (ucx_reg.c): here, not in on_answer's callback */
  w->read_memh = w->read_len && host && !w->read_pieces
                     ? xfer_ucx_memh(&p->node, read_into, w->read_len) : NULL;
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof prm);
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = UCP_AM_SEND_FLAG_REPLY;
  size_t gather = reads ? 0 : b->pieces;
  if (gather) { /* UCX gathers the pieces (registering what it needs itself) */
    prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    prm.datatype = ucp_dt_make_iov();
  } else if (len && host) {
    xfer_ucx_request_memh(&prm, xfer_ucx_memh(&p->node, payload, len));
  }
  if (len) xfer_ucx_request_kind(&prm, kind);
  if (len && !host) w->header.flags |= WIRE_FLAG_DEVICE;
  void *head = &w->header; /* UCX reads the header until the send is done */
  if (b->head) head = memcpy(b->head, &w->header, sizeof w->header);
  void *r = p->node.api->ucp_am_send_nbx(p->ep, WIRE_AM_ID, head,
                                         b->head ? b->head_len : sizeof w->header, payload,
                                         gather ? gather : len, &prm);
  if (UCS_PTR_IS_ERR(r)) {
    w->id = 0;
    send_failed(p, op, UCS_PTR_STATUS(r), err);
    lose(p, "it could not be sent to");
    if (err) snprintf(err->device, sizeof err->device, "%s", dev ? dev->name : p->name);
    return XFER_E_PEER_LOST;
  }
  w->sending = r; /* NULL: sent already */
  return XFER_E_OK;
}

/* (peer->lock held) Whether a send or a receive of a request in flight is unfinished. */
static int moving(xfer_peer *p)
{
  const ucx_api *api = p->node.api;
  for (int i = 0; i < PIPELINE; i++) {
    pending *s = &p->slot[i];
    if (!s->id) continue;
    if ((s->sending && api->ucp_request_check_status(s->sending) == UCS_INPROGRESS) ||
        (s->receiving && api->ucp_request_check_status(s->receiving) == UCS_INPROGRESS))
      return 1;
  }
  return 0;
}

/* (peer->lock held) The orphans that have ended, let go of. */
static void orphans_prune(xfer_peer *p)
{
  const ucx_api *api = p->node.api;
  for (int i = p->norphans; i-- > 0;) {
    if (api->ucp_request_check_status(p->orphans[i]) == UCS_INPROGRESS) continue;
    api->ucp_request_free(p->orphans[i]);
    p->orphans[i] = p->orphans[--p->norphans];
  }
}

/* (peer->lock held) Before its UCX worker goes: the last CANCEL and the requests deadlines left
** behind (orphans) let go of while the worker can still end them -- each is UCX's memory, freed
** with the worker, and asked of after that (copy->idle settling a stalled device, a later
** move's settle in passing) it read freed memory: a save after a closed peer's 1 GiB
** deadlines died of SIGBUS in ucp_request_free, or of "corrupted double-linked list", on the
** H100. After this the peer's UCX state is never touched again. */
static void requests_let_go(xfer_peer *p)
{
  if (!p->node.worker) return; /* (gone already) */
  if (p->canceling) xfer_ucx_abandon(&p->node, p->canceling, xfer_now() + 0.25);
  p->canceling = NULL;
  double until = p->lost ? p->settle_by : xfer_now() + GIVE_UP_SECONDS;
  for (int i = 0; i < p->norphans; i++) xfer_ucx_abandon(&p->node, p->orphans[i], until);
  p->norphans = 0;
}

/* How long a canceled move waits for the server's answers once it has told it: a server that is
** serving one of the move's requests answers when that is done (a 64 MiB chunk: milliseconds) */
#define CANCEL_GRACE 0.05

/* (peer->lock held) A move stopped early (canceled, past its deadline, failed): the server is
** told that its requests sent so far and not yet begun are to be answered `canceled` untouched
** (WIRE_CANCEL), so that the requests still on their way end at once rather than move bytes no
** one wants -- a canceled job returns when their answers are in, a move past its deadline
** orphans them. One CANCEL at a time: while the last is still being sent, the server hears of
** none later (the requests after it are then served as they come). */
static void tell_cancel(xfer_peer *p)
{
  const ucx_api *api = p->node.api;
  if (p->lost || !p->ep) return;
  if (p->canceling) {
    if (api->ucp_request_check_status(p->canceling) == UCS_INPROGRESS) return;
    api->ucp_request_free(p->canceling);
    p->canceling = NULL;
  }
  p->cancel_header = wire_make(WIRE_CANCEL, ++p->next_request);
  p->cancel_header.handle = p->cancel_header.request - 1; /* every request before it */
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof prm);
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = UCP_AM_SEND_FLAG_REPLY; /* the server knows its clients by their reply endpoint */
  void *r = api->ucp_am_send_nbx(p->ep, WIRE_AM_ID, &p->cancel_header, sizeof p->cancel_header, NULL, 0, &prm);
  if (!UCS_PTR_IS_ERR(r)) p->canceling = r; /* (a failed send: the connection's own error tells) */
}

/* (peer->lock held) Slot w's request outlived its move's deadline: the slot is freed (a late
** answer finds no request and is dropped, its bytes never received), its send or receive still
** under way kept as an orphan -- it reads or writes the move's memory until it ends, so the
** device is stalled (memory freed meanwhile is held) until copy->idle sees none left. The peer
** is not lost: a slow server is not a broken one. */
static xfer_code orphan(xfer_peer *p, xfer_device *dev, pending *w, xfer_op op, double waited,
                        int faulted, xfer_error *err)
{
  const ucx_api *api = p->node.api;
  void *under_way[2] = {w->sending, w->receiving};
  for (int k = 0; k < 2; k++) {
    if (!under_way[k]) continue;
    if (api->ucp_request_check_status(under_way[k]) != UCS_INPROGRESS) api->ucp_request_free(under_way[k]);
    else if (p->norphans < ORPHANS) p->orphans[p->norphans++] = under_way[k];
    else lose(p, "too many requests left behind by deadlines"); /* (the forced close ends it) */
  }
  w->sending = w->receiving = NULL;
  w->id = 0;
  tell_cancel(p); /* the server skips it if it has not begun it yet */
  if (p->lost) { /* its requests end with the forced close: let go of them now */
    for (int i = 0; i < p->norphans; i++) xfer_ucx_abandon(&p->node, p->orphans[i], p->settle_by);
    p->norphans = 0;
  }
  xfer_code rc = xfer_device_stalled(dev, op, "ucp_worker_progress", waited, faulted, err);
  if (err) snprintf(err->device, sizeof err->device, "%s", dev ? dev->name : p->name);
  return rc;
}

/* copy->idle: no send or receive a deadline left behind is still under way. Once the peer's
** worker is gone (closed), none can be asked of: the server was told by the forced close, and
** is given until settle_by to stop touching this process's memory. */
static int remote_idle(xfer_device *dev)
{
  xfer_peer *p = peer_of(dev);
  pthread_mutex_lock(&p->lock);
  double asked = xfer_now(); /* none left: none of those made by now */
  if (!p->node.worker) {
    int idle = asked >= p->settle_by;
    if (idle) dev->idle_upto = asked;
    pthread_mutex_unlock(&p->lock);
    return idle;
  }
  if (!p->lost) p->node.api->ucp_worker_progress(p->node.worker);
  orphans_prune(p);
  int idle = p->norphans == 0;
  if (idle) dev->idle_upto = asked;
  pthread_mutex_unlock(&p->lock);
  return idle;
}

/* (peer->lock held) Waits for slot w's request to be sent and answered, by its deadline; the
** answer (and its words) become p->answer and p->text. Frees the slot whatever happens. */
static xfer_code await(xfer_peer *p, xfer_device *dev, pending *w, xfer_op op,
                       xfer_error *err)
{
  const ucx_api *api = p->node.api;
  xfer_code rc = p->lost ? lost_error(p, op, err) : injected(p, dev, XFER_OP_RECV, err);
  /* a move's own deadline bounds the wait for its bytes (not an ALLOC's or a FREE's answer:
  ** one given up on would leave a buffer, or free one, unknown to this side); the stall fault
  ** is a server that never answers */
  long long native;
  wire_type type = (wire_type)w->header.type;
  int moves_bytes = dev && type != WIRE_HELLO && type != WIRE_ALLOC && type != WIRE_FREE;
  double deadline = moves_bytes ? xfer_watch_deadline() : 0, start = xfer_now();
  int stalled = !rc && moves_bytes && xfer_fault_hit(p->ctx, "remote", XFER_OP_STALL, &native);
  ucx_idler idler = {0};
  while (!rc && !p->broken && !p->bad_answer &&
         ((w->sending && api->ucp_request_check_status(w->sending) == UCS_INPROGRESS) ||
          !w->answered || stalled ||
          (w->receiving && api->ucp_request_check_status(w->receiving) == UCS_INPROGRESS))) {
    if (deadline && xfer_now() > deadline) return orphan(p, dev, w, op, xfer_now() - start, stalled, err);
    if (moves_bytes && !p->cancel_by && xfer_watch_canceled()) {
      tell_cancel(p); /* its requests not begun are answered at once, untouched */
      p->cancel_by = xfer_now() + CANCEL_GRACE;
    }
    /* a server silent past the grace is taken for stalled, unless bytes of the answer are
    ** landing in the move's memory: those are waited for, so that none land after cancel */
    if (p->cancel_by && xfer_now() > p->cancel_by &&
        !(w->receiving && api->ucp_request_check_status(w->receiving) == UCS_INPROGRESS)) {
      orphan(p, dev, w, op, xfer_now() - start, stalled, err);
      return xfer_err_op(err, XFER_E_CANCELED, XFER_OP_CANCEL, "%s: canceled; %s had not answered %g s after "
                         "being told (its memory is held until it does)", xfer_op_name(op), p->name, CANCEL_GRACE);
    }
    unsigned progressed = api->ucp_worker_progress(p->node.worker);
    /* a deadline is how long the server may stay silent, not how long a move may take: a
    ** pipelined request waits behind the others while their answers come, and while the
    ** bytes of requests in flight move (four 64 MiB writes share one link: the first answer
    ** comes after all four are nearly across; a 256 MiB move to a slow server missed a 3 s
    ** deadline with nothing wrong). Bytes moving are UCX events while a send or a receive
    ** of ours is unfinished; a stopped server's stall none (its socket buffers full, its
    ** shared-memory rings full). */
    if (progressed && moving(p)) p->heard = xfer_now();
    /* a HELLO is due at its own deadline, the connect's timeout: no server has been heard yet,
    ** and UCX's events while its first connection is under way are not the server's (CI saw
    ** a connect given 10 s wait 135 s, the kernel's SYN retries to an address no door lets in) */
    double due = type == WIRE_HELLO || w->deadline > p->heard + p->timeout ? w->deadline
                                                                           : p->heard + p->timeout;
    xfer_ucx_idle(&p->node, &idler, progressed, due);
    if (progressed) continue;
    if (xfer_now() > due) {
      rc = xfer_err_op(err, XFER_E_TIMEOUT, op, "%s: %s answered nothing within %g s", xfer_op_name(op), p->name,
                        p->timeout);
      break;
    }
  }
  /* a peer given up on is closed first: the forced close ends the requests still on their
  ** way to it (a rendezvous send to a partitioned peer cannot be cancelled), so that settling
  ** them below takes no time, and the timeout surfaces at the deadline */
  if (rc == XFER_E_TIMEOUT) {
    char why[96];
    snprintf(why, sizeof why, "%s did not answer in time", p->name);
    lose(p, why);
  }
  ucs_status_t sent = settle_request(p, &w->sending);
  int received = settle_request(p, &w->receiving) == UCS_OK; /* the answer's payload landed */
  int answered = w->answered;
  w->id = 0;
  if (!rc && sent != UCS_OK && !answered) rc = send_failed(p, op, sent, err);
  /* an answer that arrived whole counts, even if the connection broke just after (a server
  ** closes on a client it refused) */
  int whole = answered && !p->bad_answer && received;
  if (!rc && !whole && (p->broken || p->bad_answer || p->lost)) {
    rc = p->bad_answer ? xfer_err_op(err, XFER_E_PEER_LOST, op, "%s: %s broke the protocol (%s)", xfer_op_name(op),
                                      p->name, p->bad_why ? p->bad_why : "?")
                       : lost_error(p, op, err);
  }
  if (rc == XFER_E_TIMEOUT || rc == XFER_E_PEER_LOST) {
    char why[96];
    snprintf(why, sizeof why, "%s %s", p->name, rc == XFER_E_TIMEOUT ? "did not answer in time" : "was lost");
    lose(p, why);
    if (err) snprintf(err->device, sizeof err->device, "%s", dev ? dev->name : p->name);
    return rc;
  }
  if (rc) return rc;
  p->answer = w->answer;
  if (w->answer.type != WIRE_DATA) memcpy(p->text, w->text, w->text_len + 1);
  if (p->answer.type == WIRE_REPLY && p->answer.code) return remote_error(p, dev, err);
  return XFER_E_OK;
}

/* (peer->lock held) Sends a request and waits for its answer, by the peer's deadline. */
static xfer_code request(xfer_peer *p, xfer_device *dev, wire_header h, const void *payload,
                         size_t len, char *read_into, xfer_op op, xfer_error *err)
{
  request_body body = {payload, len, read_into, XFER_MEMORY_HOST, NULL, 0, 0};
  p->cancel_by = 0; /* a move of its own */
  xfer_code rc = post(p, dev, &p->slot[0], h, &body, op, err);
  return rc ? rc : await(p, dev, &p->slot[0], op, err);
}

/* -- The backend ------------------------------------------------------------------------------ */

static xfer_code remote_open(xfer_runtime *rt, xfer_error *err)
{
  /* found, not loaded: UCX's constructors install process-wide handlers (SIGSEGV and more),
  ** which a process that never connects should not get -- it is loaded at connect or listen */
  char why[512], path[512];
  if (!xfer_ucx_find(path, sizeof path, why, sizeof why))
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "%s", why);
  /* room for the devices peers bring later, so the list never moves under a running move */
  xfer_ctx *ctx = rt->ctx;
  if (!(rt->impl = calloc(1, sizeof(remote_rt))))
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  if (ctx->cap < ctx->ndevices + RESERVED_DEVICES) {
    xfer_device **grown = realloc(ctx->devices, (ctx->ndevices + RESERVED_DEVICES) * sizeof *grown);
    if (!grown) {
      free(rt->impl);
      rt->impl = NULL;
      return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
    }
    ctx->devices = grown;
    ctx->cap = ctx->ndevices + RESERVED_DEVICES;
  }
  return XFER_E_OK; /* no devices until xfer_connect */
}

static void peer_release(xfer_peer *p);

static void remote_close(xfer_runtime *rt)
{
  remote_rt *state = rt->impl;
  for (size_t i = 0; state && i < state->nretired; i++) xfer_device_destroy(state->retired[i]);
  if (state) free(state->retired);
  free(state);
  rt->impl = NULL;
  /* each device holds its peer: the last one lets it go */
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices; d++) {
    xfer_device *dev = rt->ctx->devices[d];
    remote_dev *rd = dev->impl;
    if (!rd) continue;
    dev->impl = NULL;
    xfer_peer *p = rd->peer;
    free(rd);
    p->detached = 1; /* the devices go with the context; the application may hold the peer */
    peer_release(p);
  }
}

static xfer_code remote_alloc(xfer_device *dev, size_t nbytes, void **buf, xfer_error *err)
{
  xfer_peer *p = peer_of(dev);
  wire_header h = wire_make(WIRE_ALLOC, 0);
  h.device = ((remote_dev *)dev->impl)->index;
  h.length = nbytes;
  pthread_mutex_lock(&p->lock);
  xfer_code rc = request(p, dev, h, NULL, 0, NULL, XFER_OP_ALLOC, err);
  uint64_t handle = p->answer.handle;
  pthread_mutex_unlock(&p->lock);
  if (!rc && !handle) rc = xfer_err_op(err, XFER_E_ALLOC, XFER_OP_ALLOC, "%s answered no buffer",
                                       p->name);
  if (!rc) {
    *buf = (void *)(uintptr_t)handle;
    xfer_objects(dev, 1);
  }
  return rc;
}

static void remote_free(xfer_device *dev, void *buf, size_t nbytes)
{
  (void)nbytes;
  xfer_objects(dev, -1);
  if (!dev->impl) return; /* retired: its peer went long ago */
  xfer_peer *p = peer_of(dev);
  wire_header h = wire_make(WIRE_FREE, 0);
  h.handle = (uint64_t)(uintptr_t)buf;
  pthread_mutex_lock(&p->lock);
  if (!p->lost) request(p, dev, h, NULL, 0, NULL, XFER_OP_FREE, NULL); /* a lost peer freed it */
  pthread_mutex_unlock(&p->lock);
}

/* This runtime's own settings (remote_config_defaults, remote_check_config), kept in the
** context by open.c and written atomically by xfer_config_set. */
static size_t chunk_setting(const size_t *setting)
{
  size_t asked = __atomic_load_n(setting, __ATOMIC_RELAXED);
  return asked < WIRE_CHUNK ? asked : (size_t)WIRE_CHUNK; /* the most a request carries */
}

static size_t depth_setting(const xfer_ctx *ctx)
{
  int depth = __atomic_load_n(&ctx->config.remote_depth, __ATOMIC_RELAXED);
  return depth >= 1 && depth <= PIPELINE ? (size_t)depth : 2;
}

/* local memory (host, or device memory UCX moves in place: `kind`) <-> a remote buffer, a
** request per chunk of at most WIRE_CHUNK bytes, remote_depth of them in flight. The first
** failure is the move's; the requests still on their way are awaited all the same (their
** memory is the caller's until then). */
static xfer_code move_chunks(xfer_device *dev, void *buf, size_t offset, char *local,
                             xfer_memory_kind kind, size_t n, int to_remote, xfer_error *err)
{
  xfer_peer *p = peer_of(dev);
  xfer_op op = to_remote ? XFER_OP_WRITE : XFER_OP_READ;
  xfer_code rc = XFER_E_OK;
  xfer_error later; /* what a request after the first failure says: not the move's */
  size_t posted = 0, awaited = 0; /* requests, in order: slot = number % depth */
  size_t chunk = chunk_setting(kind == XFER_MEMORY_HOST ? &p->ctx->config.remote_chunk
                                                        : &p->ctx->config.remote_device_chunk);
  size_t depth = depth_setting(p->ctx);
  int told = 0, watched = xfer_progress_wanted();
  pthread_mutex_lock(&p->lock);
  p->cancel_by = 0;
  for (size_t done = 0; done < n || awaited < posted;) {
    int room = posted - awaited < depth;
    if (done < n && !rc && room && watched) rc = xfer_watch_check(done, n, err); /* canceled, late */
    if (done < n && !rc && room) {
      size_t len = n - done < chunk ? n - done : chunk;
      wire_header h = wire_make(to_remote ? WIRE_WRITE : WIRE_READ, 0);
      h.handle = (uint64_t)(uintptr_t)buf;
      h.offset = offset + done;
      h.length = len;
      pending *w = &p->slot[posted % depth];
      request_body to = {local + done, len, NULL, kind, NULL, 0, 0};
      request_body from = {NULL, 0, local + done, kind, NULL, 0, 0};
      rc = post(p, dev, w, h, to_remote ? &to : &from, op, err);
      if (!rc) posted++;
      done += len;
      continue;
    }
    if (awaited == posted) break; /* failed before anything was on its way */
    if (rc && !told) tell_cancel(p), told = 1;
    pending *w = &p->slot[awaited % depth];
    xfer_error *into = rc ? &later : err;
    xfer_code r = await(p, dev, w, op, into);
    if (!r && !to_remote && p->answer.type != WIRE_DATA)
      r = xfer_err_op(into, XFER_E_PEER_LOST, op, "%s answered a read with no data", p->name);
    if (!rc) rc = r;
    awaited++;
    if (rc) done = n; /* nothing more is sent */
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}



/* -- Batches: pieces coalesced into requests ----------------------------------------------- */

/* One request of a batch being made: its pieces' descriptors, then (a write) their bytes,
** packed in host memory of the host pool (registered with UCX once, reused). */
typedef struct many_msg {
  xfer_block *block;
  char *at;                       /* the block's memory: descriptors, then bytes */
  size_t cap, count, bytes;       /* room; pieces and bytes in it now */
  size_t list_at, data_at;        /* where its pieces go (a write's after room for the header:
                                  ** they go in it) and a write's bytes or a read's answer */
  const xfer_piece *first;        /* reads: the pieces it carries, to scatter the answer */
  size_t first_off, npieces;      /* ... from byte first_off of the first, npieces pieces */
} many_msg;

static size_t entry_size(wire_type t) { return t == WIRE_COPY_MANY ? sizeof(wire_copy) : sizeof(wire_piece); }

/* Adds bytes [off, off+len) of piece p to message m (room checked by the caller). */
static void many_add(many_msg *m, wire_type t, const xfer_piece *p, size_t off, size_t len)
{
  if (t == WIRE_COPY_MANY) {
    wire_copy c = {(uint64_t)(uintptr_t)p->dst.buf, p->dst.offset + off, (uint64_t)(uintptr_t)p->src.buf,
                   p->src.offset + off, len};
    memcpy(m->at + m->list_at + m->count * sizeof c, &c, sizeof c);
  } else {
    const xfer_piece_end *remote = t == WIRE_WRITE_MANY ? &p->dst : &p->src;
    wire_piece d = {(uint64_t)(uintptr_t)remote->buf, remote->offset + off, len};
    memcpy(m->at + m->list_at + m->count * sizeof d, &d, sizeof d);
  }
  if (!m->count) m->first = p, m->first_off = off;
  m->count++;
  m->bytes += len;
}

/* The message's pieces as a list of host memory (after its descriptors' room): a write's
** sources, gathered by UCX as it sends, or a read's targets, which its answer lands in. The
** number of entries. */
static size_t many_iov(many_msg *m, int sources)
{
  ucp_dt_iov_t *iov = (ucp_dt_iov_t *)(m->at + m->data_at);
  size_t at = 0, k = 0;
  const xfer_piece *p = m->first;
  for (size_t off = m->first_off; at < m->bytes; p++, off = 0, k++) {
    size_t len = p->n - off < m->bytes - at ? p->n - off : m->bytes - at;
    iov[k].buffer = (char *)(sources ? p->src.host : p->dst.host) + off;
    iov[k].length = len;
    at += len;
  }
  return k;
}

/* Posts message m, its pieces added, as a request of kind t. */
static xfer_code many_post(xfer_peer *p, const xfer_device *dev, pending *w, wire_type t,
                           many_msg *m, xfer_op op, xfer_error *err)
{
  wire_header h = wire_make(t, 0);
  h.offset = m->count;
  request_body body = {m->at, m->count * entry_size(t), NULL, XFER_MEMORY_HOST, NULL, 0, 0};
  if (t == WIRE_WRITE_MANY) { /* the pieces in the header, their bytes (gathered) the payload */
    size_t k = many_iov(m, 1);
    body = (request_body){m->at + m->data_at, m->bytes, NULL, XFER_MEMORY_HOST, m->at,
                          wire_many_header_size(m->count), k};
  } else if (t == WIRE_READ_MANY) { /* the answer lands in the pieces' targets */
    h.length = m->bytes;
    body.read_into = m->at + m->data_at;
    body.pieces = many_iov(m, 0);
  }
  return post(p, dev, w, h, &body, op, err);
}

/* The pieces of kind t, as requests of at most `chunk` bytes and WIRE_MANY_MAX pieces, `depth`
** in flight (each with its own message memory); the first failure is the batch's, the requests
** on their way awaited all the same. */
static xfer_code many_send(xfer_device *dev, wire_type t, const xfer_piece *pieces, size_t n,
                           int (*is)(const xfer_piece *), size_t chunk, size_t depth,
                           xfer_error *err)
{
  xfer_peer *p = peer_of(dev);
  xfer_op op = t == WIRE_WRITE_MANY ? XFER_OP_WRITE : t == WIRE_READ_MANY ? XFER_OP_READ : XFER_OP_COPY;
  /* a write's pieces go in its header (the server receives the bytes straight into its
  ** buffers), as many as the worker's largest header holds */
  int writes = t == WIRE_WRITE_MANY;
  size_t each = entry_size(t);
  size_t max_pieces = writes ? xfer_ucx_header_pieces(&p->node) : WIRE_MANY_MAX;
  size_t data_room = t == WIRE_COPY_MANY ? 0 : chunk;
  many_msg msg[PIPELINE];
  memset(msg, 0, sizeof msg);
  xfer_code rc = XFER_E_OK;
  xfer_device *host = xfer_host_of(dev->ctx);
  for (size_t s = 0; s < depth && !rc; s++) {
    msg[s].list_at = writes ? sizeof(wire_header) : 0;
    msg[s].data_at = msg[s].list_at + max_pieces * each;
    msg[s].cap = msg[s].data_at + (t == WIRE_COPY_MANY ? 0 : max_pieces * sizeof(ucp_dt_iov_t));
    rc = xfer_mem_alloc(host, msg[s].cap, &msg[s].block, err);
    if (!rc) msg[s].at = xfer_be_host_address(host, msg[s].block->buf, msg[s].block->offset);
  }
  xfer_error later;
  size_t posted = 0, awaited = 0, i = 0, off = 0;
  int told = 0, watched = xfer_progress_wanted();
  uint64_t total = 0, sent = 0; /* bytes, for a cancel's words */
  for (size_t k = 0; watched && k < n; k++) total += is(&pieces[k]) ? pieces[k].n : 0;
  pthread_mutex_lock(&p->lock);
  p->cancel_by = 0;
  while (!rc || awaited < posted) {
    while (i < n && (!is(&pieces[i]) || pieces[i].n == 0)) i++, off = 0;
    /* canceled or late: nothing more is sent (no progress callback: the runner tells the move's) */
    if (i < n && !rc && watched && posted - awaited < depth) rc = xfer_watch_check(sent, total, err);
    int more = i < n && !rc;
    if (more && posted - awaited < depth) { /* fill the next message and post it */
      many_msg *m = &msg[posted % depth];
      m->count = m->bytes = 0;
      while (i < n && m->count < max_pieces && (t == WIRE_COPY_MANY || m->bytes < data_room)) {
        if (!is(&pieces[i]) || pieces[i].n == 0) {
          i++, off = 0;
          continue;
        }
        size_t len = pieces[i].n - off;
        if (t != WIRE_COPY_MANY && len > data_room - m->bytes) len = data_room - m->bytes;
        many_add(m, t, &pieces[i], off, len);
        off += len;
        if (off == pieces[i].n) i++, off = 0;
      }
      rc = many_post(p, dev, &p->slot[posted % depth], t, m, op, err);
      if (!rc) posted++, sent += m->bytes;
      continue;
    }
    if (awaited == posted) break;
    if (rc && !told) tell_cancel(p), told = 1;
    xfer_error *into = rc ? &later : err;
    xfer_code r = await(p, dev, &p->slot[awaited % depth], op, into);
    if (!r && t == WIRE_READ_MANY && p->answer.type != WIRE_DATA)
      r = xfer_err_op(into, XFER_E_PEER_LOST, op, "%s answered a read with no data", p->name);
    if (!rc) rc = r;
    awaited++;
  }
  pthread_mutex_unlock(&p->lock);
  for (size_t s = 0; s < depth; s++) xfer_mem_free(msg[s].block);
  return rc;
}

static int is_write(const xfer_piece *p) { return p->dst.buf && !p->src.buf; }
static int is_read(const xfer_piece *p) { return p->src.buf && !p->dst.buf; }
static int is_copy(const xfer_piece *p) { return p->src.buf && p->dst.buf; }

/* A batch to and from one remote device, and within it: its pieces coalesced into as few
** requests as fit (remote_chunk bytes each, remote_depth in flight), each moved on the server as
** one batch -- where a copy_from a piece cost a round trip. Writes first, then copies, then
** reads (no piece of a batch reads what another writes). */
static xfer_code remote_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  if (!dev->impl) /* retired: its peer went long ago */
    return xfer_err_op(err, XFER_E_PEER_LOST, XFER_OP_COPY, "%s was lost", dev->name);
  size_t chunk = chunk_setting(&dev->ctx->config.remote_chunk);
  size_t depth = depth_setting(dev->ctx);
  xfer_code rc = many_send(dev, WIRE_WRITE_MANY, pieces, n, is_write, chunk, depth, err);
  if (!rc) rc = many_send(dev, WIRE_COPY_MANY, pieces, n, is_copy, chunk, 1, err);
  if (!rc) rc = many_send(dev, WIRE_READ_MANY, pieces, n, is_read, chunk, depth, err);
  return rc;
}

/* The direct path: another runtime's device memory, which UCX reads and writes in place, to
** and from a remote buffer -- where both ends are CUDA memory and the connection has a lane
** that moves it in place (cuda_ipc: one machine; any lane with XFER_UCX_CUDA=1, for GPUDirect
** RDMA between two), decided at connect (xfer_ucx_ep_moves_cuda) on each side. */
static int remote_direct_joins(const xfer_device *dev, const xfer_device *other, char *why,
                               size_t cap)
{
  const remote_dev *rd = dev->impl;
  if (!rd) { /* retired: its peer went long ago */
    if (why) snprintf(why, cap, "%s was lost", dev->name);
    return 0;
  }
  const xfer_peer *p = rd->peer;
  int cuda_here = xfer_be_memory_kind(other) == XFER_MEMORY_CUDA;
  if (cuda_here && p->direct_cuda && p->server_cuda_memory && rd->cuda) return 1;
  if (!why) return 0;
  if (!cuda_here)
    snprintf(why, cap, "direct moves CUDA memory; %s's is not", other->name);
  else if (!xfer_env_flag("XFER_UCX_CUDA"))
    snprintf(why, cap, "direct is turned off (XFER_UCX_CUDA=0)");
  else if (!p->node.cuda_memory)
    snprintf(why, cap, "direct needs a UCX that moves %s's memory in place; the one %s uses reports "
             "no CUDA memory (a CUDA-enabled build does: XFER_UCX_LIBRARY)", other->name, p->name);
  else if (!p->direct_cuda)
    snprintf(why, cap, "direct needs a lane that moves CUDA memory in place to %s (cuda_ipc: one "
             "machine), or XFER_UCX_CUDA=1 for any (GPUDirect RDMA); UCX's own pipeline through host "
             "memory is slower than staging", p->name);
  else if (!rd->cuda)
    snprintf(why, cap, "direct moves between CUDA memory at both ends; %s is not CUDA's", dev->name);
  else
    snprintf(why, cap, "direct needs %s to move its CUDA memory in place too, and it does not "
             "(its UCX, or its XFER_UCX_CUDA)", p->name);
  return 0;
}

static xfer_code remote_direct(xfer_device *dev, void *buf, size_t offset, const xfer_memory *mem,
                               size_t n, int into_buf, xfer_error *err)
{
  return move_chunks(dev, buf, offset, mem->address, mem->kind, n, into_buf, err);
}

/* within one remote device: the server copies, nothing crosses the network */
static xfer_code remote_copy(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                             size_t src_offset, size_t n, xfer_error *err)
{
  xfer_peer *p = peer_of(dev);
  wire_header h = wire_make(WIRE_COPY, 0);
  h.handle = (uint64_t)(uintptr_t)dst;
  h.offset = dst_offset;
  h.src_handle = (uint64_t)(uintptr_t)src;
  h.src_offset = src_offset;
  h.length = n;
  pthread_mutex_lock(&p->lock);
  xfer_code rc = request(p, dev, h, NULL, 0, NULL, XFER_OP_COPY, err);
  pthread_mutex_unlock(&p->lock);
  return rc;
}

/* copy->crc32c: the server sums the bytes where they are (its device's own sum where it has
** one): a request and a reply per range, where reading the range back moved all of it */
static xfer_code remote_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count,
                               uint32_t *crc, xfer_error *err)
{
  if (!dev->impl) /* retired: its peer went long ago */
    return xfer_err_op(err, XFER_E_PEER_LOST, XFER_OP_VERIFY, "%s was lost", dev->name);
  xfer_peer *p = peer_of(dev);
  xfer_code rc = XFER_E_OK;
  pthread_mutex_lock(&p->lock);
  for (size_t i = 0; i < count && !rc; i++) {
    wire_header h = wire_make(WIRE_CRC, 0);
    h.handle = (uint64_t)(uintptr_t)pieces[i].buf;
    h.offset = pieces[i].offset;
    h.length = pieces[i].n;
    rc = request(p, dev, h, NULL, 0, NULL, XFER_OP_VERIFY, err);
    if (!rc) crc[i] = (uint32_t)p->answer.handle;
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

/* between two devices of one server: the server moves the bytes (its own planner chooses
** how), nothing crosses the network */
static xfer_code remote_peer(xfer_device *dst_dev, void *dst, size_t dst_offset, xfer_device *src_dev,
                             void *src, size_t src_offset, size_t n, xfer_error *err)
{
  (void)src_dev; /* (one server: peer_joins) */
  return remote_copy(dst_dev, dst, dst_offset, src, src_offset, n, err);
}

static int remote_peer_joins(const xfer_device *src_dev, const xfer_device *dst_dev)
{
  return peer_of(src_dev) == peer_of(dst_dev);
}

static xfer_code remote_host_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                                  int to_device, xfer_error *err)
{
  return move_chunks(dev, buf, offset, host, XFER_MEMORY_HOST, n, to_device, err);
}

/* The remote runtime's own settings: the core keeps them, only this runtime reads them. */
static void remote_config_defaults(xfer_config *config)
{
  config->remote_timeout = 10.0;
  /* H200, 256 MiB host -> each remote device and back, tcp and shm, in turns: four 4 MiB
  ** requests in flight were as fast as two of 16 MiB to the remote host and 5-20% faster to
  ** its devices (the server's device writes pipelined finer); on a 2-core VM 10-15% faster */
  config->remote_depth = 4;
  config->remote_chunk = (size_t)4 << 20;
  config->remote_device_chunk = (size_t)64 << 20;
}

static xfer_code remote_check_config(const xfer_config *config, xfer_error *err)
{
  if (!(config->remote_timeout >= 0.001 && config->remote_timeout <= 86400))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG,
                        "remote_timeout must be 0.001 to 86400 seconds, not %g", config->remote_timeout);
  if (config->remote_chunk < 4096 || config->remote_chunk > ((size_t)64 << 20))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG,
                        "remote_chunk must be 4096 to 67108864 bytes, not %zu", config->remote_chunk);
  if (config->remote_device_chunk < 4096 || config->remote_device_chunk > ((size_t)64 << 20))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG,
                        "remote_device_chunk must be 4096 to 67108864 bytes, not %zu",
                        config->remote_device_chunk);
  if (config->remote_depth < 1 || config->remote_depth > PIPELINE)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONFIG, "remote_depth must be 1 to %d, not %d",
                        PIPELINE, config->remote_depth);
  return XFER_E_OK;
}

static const xfer_runtime_ops remote_runtime_ops = {
  .open = remote_open,
  .close = remote_close,
  .check_config = remote_check_config,
  .config_defaults = remote_config_defaults,
};
static const xfer_memory_ops remote_memory_ops = {
  .alloc = remote_alloc,
  .free = remote_free,
};
static const xfer_copy_ops remote_copies = {
  .host = remote_host_move,
  .within = remote_copy,
  .many = remote_many,
  .crc32c = remote_crc32c,
  .idle = remote_idle,
  .peer = remote_peer,
  .peer_joins = remote_peer_joins,
};
static const xfer_transport_ops remote_transport = {
  .direct_joins = remote_direct_joins,
  .direct = remote_direct,
};
const xfer_backend xfer_backend_remote = {
  .version = XFER_BACKEND_VERSION,
  .name = "remote",
  .alias = NULL,
  .external_kind = XFER_EXTERNAL_NONE /* it wraps nothing */,
  .dlpack_device_type = -1,
  .runtime = &remote_runtime_ops,
  .memory = &remote_memory_ops,
  .copy = &remote_copies,
  .transport = &remote_transport,
};

/* -- Connecting ------------------------------------------------------------------------------- */

static void peer_release(xfer_peer *p)
{
  if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  pthread_mutex_lock(&p->lock);
  requests_let_go(p); /* while the endpoint is still open (none left if the peer was closed) */
  lose(p, "disconnected");
  pthread_mutex_unlock(&p->lock);
  xfer_ucx_node_close(&p->node);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

static xfer_runtime *remote_runtime(xfer_ctx *ctx)
{
  for (size_t r = 0; r < ctx->nruntimes; r++)
    if (!strcmp(ctx->runtimes[r].name, "remote")) return &ctx->runtimes[r];
  return NULL;
}

static int parse_uuid(const char *text, uint8_t out[16])
{
  int n = 0;
  for (const char *c = text; *c && n < 32; c++) {
    if (*c == '-') continue;
    int v = (*c >= '0' && *c <= '9') ? *c - '0' : (*c >= 'a' && *c <= 'f') ? *c - 'a' + 10 : -1;
    if (v < 0) return 0;
    if (n % 2 == 0) out[n / 2] = (uint8_t)(v << 4);
    else out[n / 2] |= (uint8_t)v;
    n++;
  }
  return n == 32;
}

/* A place in the context's list a new device may take: one of a closed peer's lost devices
** that no tensor and no handle of the application refers to (SIZE_MAX: none). That device is
** retired: its cache given back, its peer let go of, the device itself kept until close. */
static size_t retire_one(xfer_runtime *rt)
{
  remote_rt *state = rt->impl;
  xfer_ctx *ctx = rt->ctx;
  if (!state) return SIZE_MAX;
  for (size_t d = rt->first_device; d < rt->first_device + rt->ndevices; d++) {
    xfer_device *dev = ctx->devices[d];
    remote_dev *rd = dev->impl;
    if (!rd || !__atomic_load_n(&dev->lost, __ATOMIC_ACQUIRE) || !rd->peer->closed ||
        __atomic_load_n(&dev->refs, __ATOMIC_ACQUIRE))
      continue;
    if (state->nretired == state->cap) {
      size_t cap = state->cap ? state->cap * 2 : 16;
      xfer_device **grown = realloc(state->retired, cap * sizeof *grown);
      if (!grown) return SIZE_MAX;
      state->retired = grown;
      state->cap = cap;
    }
    xfer_empty_cache(ctx, dev); /* (its peer is lost: nothing is sent) */
    dev->impl = NULL;
    peer_release(rd->peer); /* the device's hold on it */
    free(rd);
    state->retired[state->nretired++] = dev;
    return d;
  }
  return SIZE_MAX;
}

/* WELCOME's text: "name \t memory\n" (memory: what the server moves to UCX in place for this
** client, "host" or "host cuda"), then a line per device, "name \t label \t total \t
** max_alloc \t uuid \t memory" (memory: "cuda" or "none", what its buffers are for UCX) */
static xfer_code add_devices(xfer_peer *p, xfer_runtime *rt, xfer_error *err)
{
  char *save = NULL;
  char *line = strtok_r(p->text, "\n", &save);
  char *memory = line ? strchr(line, '\t') : NULL;
  if (memory) *memory++ = '\0';
  if (!line || !*line || strlen(line) > WIRE_NAME_MAX || strpbrk(line, "/\t :") || !memory)
    return xfer_err_op(err, XFER_E_PEER_LOST, XFER_OP_CONNECT, "connect: %s named itself badly",
                       p->url);
  p->server_cuda_memory = strstr(memory, "cuda") != NULL;
  snprintf(p->name, sizeof p->name, "%s", line);
  xfer_ctx *ctx = p->ctx;
  for (size_t d = 0; d < ctx->ndevices; d++) /* one peer per name: its devices' names are unique */
    if (!strncmp(ctx->devices[d]->name, p->name, strlen(p->name)) &&
        ctx->devices[d]->name[strlen(p->name)] == '/' && !ctx->devices[d]->lost)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONNECT, "connect: a peer named %s is connected "
                          "already (close it first, or name the server otherwise: --name)", p->name);
  uint32_t index = 0;
  while ((line = strtok_r(NULL, "\n", &save)) && index < WIRE_MAX_DEVICES) {
    char *f[6], *s2 = NULL;
    int n = 0;
    for (char *tok = strtok_r(line, "\t", &s2); tok && n < 6; tok = strtok_r(NULL, "\t", &s2)) f[n++] = tok;
    if (n != 6 || strlen(f[0]) > 14) {
      return xfer_err_op(err, XFER_E_PEER_LOST, XFER_OP_CONNECT,
                         "connect: %s listed a device badly", p->url);
    }
    size_t slot = retire_one(rt);
    if (slot == SIZE_MAX && ctx->ndevices >= ctx->cap)
      return xfer_err_op(err, XFER_E_ALLOC, XFER_OP_CONNECT, "connect: this context holds %d remote "
                          "devices in use, and no more (close peers, let their tensors go)",
                          RESERVED_DEVICES);
    remote_dev *rd = calloc(1, sizeof *rd);
    xfer_device *dev = !rd ? NULL : slot == SIZE_MAX ? xfer_runtime_add_device(rt, err)
                                                     : xfer_runtime_replace_device(rt, slot, err);
    if (!dev) {
      free(rd);
      return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_CONNECT);
    }
    if (slot == SIZE_MAX) rt->ndevices++;
    rd->peer = p;
    rd->index = index++;
    rd->cuda = !strcmp(f[5], "cuda");
    dev->impl = rd;
    snprintf(dev->name, sizeof dev->name, "%s/%s", p->name, f[0]);
    snprintf(dev->label, sizeof dev->label, "%s", f[1]);
    snprintf(dev->platform, sizeof dev->platform, "remote %.80s", p->url);
    dev->total_memory = strtoull(f[2], NULL, 10);
    dev->max_alloc = strtoull(f[3], NULL, 10);
    dev->has_uuid = parse_uuid(f[4], dev->uuid);
    p->devices[p->ndevices++] = dev;
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
  }
  return XFER_E_OK;
}

/* Knocks at the server's gate (gate.h) with the version and the token; on XFER_E_OK, addr's
** port is the door the server opened for this client, where its UCX connects from r->from
** (whose port r holds reserved until gate_release). */
static xfer_code knock(const char *url, struct sockaddr_storage *addr, socklen_t addr_len, const char *token,
                       double deadline, gate_reply *reply, xfer_error *err)
{
  gate_reply r;
  gate_knock((const struct sockaddr *)addr, addr_len, WIRE_VERSION, token, strlen(token), deadline, &r);
  *reply = r;
  xfer_code rc = XFER_E_OK;
  if (r.io_errno == ETIMEDOUT)
    rc = xfer_err_op(err, XFER_E_TIMEOUT, XFER_OP_CONNECT, "connect: %s did not answer in time",
                     url);
  else if (r.io_errno == EPROTO || r.io_errno == ECONNRESET)
    rc = xfer_err_op(err, XFER_E_UNREACHABLE, XFER_OP_CONNECT,
                     "connect: cannot reach %s: it did not answer as an xferlua server (protocol %d) does",
                     url, WIRE_VERSION);
  else if (r.io_errno)
    rc = xfer_err_op(err, XFER_E_UNREACHABLE, XFER_OP_CONNECT, "connect: cannot reach %s: %s", url,
                     strerror(r.io_errno));
  else if (r.status == GATE_REFUSED)
    rc = xfer_err_op(err, XFER_E_UNAUTHORIZED, XFER_OP_CONNECT,
                     "connect: %s: the server refused the token", url);
  else if (r.status == GATE_OTHER_VERSION)
    rc = xfer_err_op(err, XFER_E_VERSION_MISMATCH, XFER_OP_CONNECT,
                     "connect: %s speaks protocol version %u, this xferlua speaks %d", url, r.version,
                     WIRE_VERSION);
  else if (r.status != GATE_OPEN)
    rc = xfer_err_op(err, XFER_E_UNREACHABLE, XFER_OP_CONNECT,
                     "connect: %s could not take a client now", url);
  if (rc) {
    if (err && r.io_errno) {
      err->native = r.io_errno;
      const char *name = strerrorname_np(r.io_errno);
      snprintf(err->native_name, sizeof err->native_name, "%s", name ? name : "");
    }
    gate_release(reply);
    return rc;
  }
  if (addr->ss_family == AF_INET6) ((struct sockaddr_in6 *)addr)->sin6_port = htons(r.port);
  else ((struct sockaddr_in *)addr)->sin_port = htons(r.port);
  return XFER_E_OK;
}

/* The endpoint to the server, from the port the knock named (the door lets no other in:
** gate.h); the port is held until now, and let go of here. */
static xfer_code open_endpoint(xfer_peer *p, const char *url, const struct sockaddr_storage *addr,
                               socklen_t addr_len, gate_reply *door, xfer_error *err)
{
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = (const struct sockaddr *)addr;
  ep.sockaddr.addrlen = addr_len;
  ep.local_sockaddr.addr = (const struct sockaddr *)&door->from;
  ep.local_sockaddr.addrlen = door->from_len;
  gate_release(door);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = on_ep_error;
  ep.err_handler.arg = p;
  ucs_status_t s = p->node.api->ucp_ep_create(p->node.worker, &ep, &p->ep);
  if (s == UCS_OK) return XFER_E_OK;
  char what[320];
  snprintf(what, sizeof what, "connect: cannot reach %.200s", url);
  return xfer_ucx_fail(p->node.api, XFER_E_UNREACHABLE, XFER_OP_CONNECT, s, what, err);
}

/* HELLO (the version in the header, the token as the payload), the WELCOME, and the server's
** devices listed; a failure loses the peer. */
static xfer_code say_hello(xfer_peer *p, xfer_runtime *rt, const char *url, const char *token,
                           xfer_error *err)
{
  pthread_mutex_lock(&p->lock);
  wire_header h = wire_make(WIRE_HELLO, 0);
  xfer_code rc = request(p, NULL, h, token, strlen(token), NULL, XFER_OP_CONNECT, err);
  if (rc == XFER_E_PEER_LOST && err && !p->bad_answer) { /* no connection came up */
    char what[448];
    snprintf(what, sizeof what, "connect: cannot reach %.200s: %.200s", url, err->message);
    xfer_error cause = *err; /* its UCX status, and whether a fault was injected, stay */
    xfer_err_op(err, XFER_E_UNREACHABLE, XFER_OP_CONNECT, "%s", what);
    err->native = cause.native;
    memcpy(err->native_name, cause.native_name, sizeof err->native_name);
    err->injected = cause.injected;
    rc = XFER_E_UNREACHABLE;
  }
  if (!rc && p->answer.type != WIRE_WELCOME)
    rc = xfer_err_op(err, XFER_E_PEER_LOST, XFER_OP_CONNECT,
                     "connect: %s answered HELLO with no welcome", url);
  if (!rc) {
    p->generation = p->answer.handle;
    p->direct_cuda = xfer_ucx_ep_moves_cuda(&p->node, p->ep); /* its lanes are up now */
    pthread_mutex_lock(&listing); /* two connects at once: one edits the list at a time */
    rc = add_devices(p, rt, err);
    pthread_mutex_unlock(&listing);
  }
  if (rc) lose(p, "the connection failed");
  pthread_mutex_unlock(&p->lock);
  return rc;
}

/* Knocks, and connects through the door the knock opened: the peer in *out, or an error --
** *again where the knock was answered but the connection to the door failed, no device listed
** and no fault injected (another door may do). */
static xfer_code connect_once(xfer_ctx *ctx, xfer_runtime *rt, const char *url, const char *host,
                              const struct sockaddr_storage *server, socklen_t addr_len,
                              const char *token, double timeout, double deadline,
                              xfer_peer **out, int *again, xfer_error *err)
{
  struct sockaddr_storage addr = *server; /* its port becomes the door's */
  gate_reply door;
  xfer_code rc = knock(url, &addr, addr_len, token, deadline, &door, err);
  if (rc) return rc;
  xfer_peer *p = calloc(1, sizeof *p);
  if (!p) {
    gate_release(&door);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_CONNECT);
  }
  p->ctx = ctx;
  p->refs = 1;
  p->timeout = timeout;
  snprintf(p->url, sizeof p->url, "%s", url);
  snprintf(p->name, sizeof p->name, "%.16s", host);
  pthread_mutex_init(&p->lock, NULL);
  rc = xfer_ucx_node_open(&p->node, p->ctx, on_answer, p, XFER_OP_CONNECT, err);
  if (rc) gate_release(&door);
  if (!rc) rc = open_endpoint(p, url, &addr, addr_len, &door, err);
  if (!rc) rc = say_hello(p, rt, url, token, err);
  if (!rc) {
    *out = p;
    return XFER_E_OK;
  }
  if (p->ndevices) { /* devices already listed stay, lost; they hold the peer */
    p->closed = 1; /* (no one has it) */
    requests_let_go(p);
    xfer_ucx_node_close(&p->node);
    peer_release(p);
    return rc;
  }
  *again = rc == XFER_E_UNREACHABLE && !(err && err->injected);
  xfer_ucx_node_close(&p->node);
  pthread_mutex_destroy(&p->lock);
  free(p);
  return rc;
}

xfer_code xfer_connect(xfer_ctx *ctx, const char *url, const xfer_connect_opts *opts,
                       xfer_peer **out, xfer_error *err)
{
  *out = NULL;
  char host[256];
  uint16_t port;
  xfer_code rc = xfer_ucx_parse_url(url, XFER_OP_CONNECT, host, sizeof host, &port, err);
  if (rc) return rc;
  double timeout = opts && opts->timeout > 0 ? opts->timeout : ctx->config.remote_timeout;
  const char *token = opts && opts->token ? opts->token : "";
  if (strlen(token) > 255) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONNECT,
                                              "connect: a token of at most 255 bytes");
  xfer_runtime *rt = remote_runtime(ctx);
  if (!rt || !rt->available)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_CONNECT, "connect: the remote runtime is unavailable: %s",
                        rt ? rt->reason : "not built");
  struct sockaddr_storage addr;
  socklen_t addr_len;
  rc = xfer_ucx_sockaddr(host, port, XFER_OP_CONNECT, &addr, &addr_len, XFER_E_UNREACHABLE, err);
  char why[256];
  const ucx_api *api = rc || addr.ss_family != AF_INET6 ? NULL : xfer_ucx(why, sizeof why);
  if (api && !xfer_ucx_takes_ipv6(api, why, sizeof why))
    rc = xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_CONNECT, "connect: %.200s: %s", url, why);
  if (rc) return rc;
  /* A door whose UCX connection is refused (seen twice in a thousand connects, on a loaded
  ** machine, right after the knock was answered) is knocked for again, a new door each time,
  ** within the connect's timeout: a server that answers knocks is there. */
  double deadline = xfer_now() + timeout;
  for (int attempt = 1;; attempt++) {
    int again = 0;
    rc = connect_once(ctx, rt, url, host, &addr, addr_len, token, timeout, deadline, out, &again, err);
    if (!again || attempt == CONNECT_ATTEMPTS || xfer_now() >= deadline) return rc;
  }
}

const char *xfer_peer_name(const xfer_peer *p) { return p->name; }
size_t xfer_peer_device_count(const xfer_peer *p) { return p->ndevices; }
xfer_device *xfer_peer_device(xfer_peer *p, size_t i) { return i < p->ndevices ? p->devices[i] : NULL; }
uint64_t xfer_peer_canceled(const xfer_peer *p) { return __atomic_load_n(&p->canceled, __ATOMIC_RELAXED); }

int xfer_peer_is_lost(const xfer_peer *p) { return __atomic_load_n(&p->lost, __ATOMIC_ACQUIRE); }

void xfer_peer_registered(const xfer_peer *p, xfer_registered *out)
{
  xfer_ucx_registered(&p->node, out);
}

void xfer_peer_memory(const xfer_peer *p, char *here, char *there, size_t cap)
{
  snprintf(here, cap, "%s", p->direct_cuda ? "host cuda" : "host");
  snprintf(there, cap, "%s", p->server_cuda_memory ? "host cuda" : "host");
}

size_t xfer_peer_transports(xfer_peer *p, char *out, size_t cap)
{
  pthread_mutex_lock(&p->lock);
  if (cap) out[0] = '\0'; /* a lost peer has none */
  size_t lanes = p->lost ? 0 : xfer_ucx_ep_lanes(p->node.api, p->ep, out, cap);
  pthread_mutex_unlock(&p->lock);
  return lanes;
}

double xfer_peer_timeout(const xfer_peer *p)
{
  xfer_peer *mp = (xfer_peer *)p; /* the lock, not the peer, changes */
  pthread_mutex_lock(&mp->lock);
  double t = p->timeout;
  pthread_mutex_unlock(&mp->lock);
  return t;
}

xfer_code xfer_peer_set_timeout(xfer_peer *p, double seconds, xfer_error *err)
{
  if (!(seconds >= 0.001 && seconds <= 86400))
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONNECT, "timeout must be 0.001 to 86400 seconds, not %g",
                        seconds);
  pthread_mutex_lock(&p->lock); /* a request in progress keeps the one it began with */
  p->timeout = seconds;
  pthread_mutex_unlock(&p->lock);
  return XFER_E_OK;
}

void xfer_peer_close(xfer_peer *p)
{
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  requests_let_go(p);
  lose(p, "disconnected");
  /* its UCX worker and context (sockets, epoll fds, shared memory) go now, not when the last
  ** of its devices goes with the context: a program that reconnects kept ~10 fds a connection
  ** (the remote torture scenario). No request runs: each holds the lock, and a lost peer's
  ** requests end before touching UCX. */
  xfer_ucx_node_close(&p->node);
  p->closed = 1;
  pthread_mutex_unlock(&p->lock);
  peer_release(p); /* the application's reference; its devices keep theirs */
}
