/*
** ucx_api.c -- UCX's UCP through dlopen: loading it once, a context and worker, waiting on a
** request with a deadline (UCX alone waits on a stopped peer for minutes: xferlua owns its
** deadlines), URLs and socket addresses.
*/
#include <arpa/inet.h>
#include <dlfcn.h>
#include <glob.h>
#include <unistd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ucx_api.h"
#include "wire.h"

static ucx_api loaded;
static int load_state; /* 0: not tried, 1: loaded, -1: failed */
static char load_why[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define SYM(lib, name)                                                                   \
  do {                                                                                   \
    *(void **)&loaded.name = dlsym(lib, #name);                                          \
    if (!loaded.name) {                                                                  \
      snprintf(load_why, sizeof load_why, "the UCX library lacks %s", #name);            \
      return;                                                                            \
    }                                                                                    \
  } while (0)

static void load(void)
{
  load_state = -1;
  const char *path;
  xfer_error err;
  /* UCX's own SIGSEGV handler (UCX_HANDLE_ERRORS=bt, read when libucs loads) prints a
  ** backtrace with malloc: a fault inside malloc then deadlocks on malloc's lock, and the
  ** process hangs instead of dying (seen once in CI: heap corruption found by free() inside
  ** ucp_worker_destroy, an hour's hang). Without it a crash is a crash; a user's setting stays. */
  setenv("UCX_HANDLE_ERRORS", "none", 0);
  /* UCX 1.13's TCP transport connects its endpoints with a blocking connect() inside
  ** ucp_worker_progress (UCX_TCP_CONN_NB=n by default): a connect that does not complete held
  ** the progressing thread past every deadline (wire_fuzz stuck in connect() to the server's
  ** own TCP address: 3 runs of 261 here; 0 of 1800 with this). Non-blocking, a connect
  ** that never completes is one more request the deadline ends. A user's setting stays. */
  setenv("UCX_TCP_CONN_NB", "y", 0);
#if defined(__SANITIZE_ADDRESS__)
  /* An AddressSanitizer build: UCX's memory-event hooks (UCM patches mmap and, where UCX has
  ** CUDA, CUDA's allocation calls, so that its registration cache hears of memory let go) jump
  ** to a wild address under ASan -- every server and client on the GPU machine died so, at
  ** xfer.connect or at serving (H100, 2026-12-06 and -07). With the events off UCX keeps no
  ** cache they would invalidate, and both ran (a connect, host and CUDA moves both ways). Only
  ** sanitized builds; a user's setting stays. */
  setenv("UCX_MEM_EVENTS", "no", 0);
#endif
  void *lib = xfer_driver_open("XFER_UCX_LIBRARY", "libucp.so.0", "the UCX library", &path, &err);
  if (!lib) {
    snprintf(load_why, sizeof load_why, "%s", err.message);
    return;
  }
  /* ucs_status_string is libucs's, which libucp pulls in */
  loaded.lib = lib;
  SYM(lib, ucp_config_read);
  SYM(lib, ucp_config_release);
  SYM(lib, ucp_config_modify);
  SYM(lib, ucp_init_version);
  SYM(lib, ucp_cleanup);
  SYM(lib, ucp_worker_create);
  SYM(lib, ucp_worker_destroy);
  SYM(lib, ucp_worker_progress);
  SYM(lib, ucp_worker_set_am_recv_handler);
  SYM(lib, ucp_listener_create);
  SYM(lib, ucp_listener_destroy);
  SYM(lib, ucp_listener_query);
  SYM(lib, ucp_listener_reject);
  *(void **)&loaded.ucp_conn_request_query = dlsym(lib, "ucp_conn_request_query");
  SYM(lib, ucp_ep_create);
  SYM(lib, ucp_ep_close_nbx);
  SYM(lib, ucp_am_send_nbx);
  SYM(lib, ucp_am_recv_data_nbx);
  SYM(lib, ucp_request_check_status);
  SYM(lib, ucp_request_cancel);
  SYM(lib, ucp_request_free);
  SYM(lib, ucs_status_string);
  SYM(lib, ucp_mem_map);
  SYM(lib, ucp_mem_unmap);
  SYM(lib, ucp_ep_print_info);
  SYM(lib, ucp_worker_get_efd);
  SYM(lib, ucp_worker_arm);
  SYM(lib, ucp_context_query);
  SYM(lib, ucp_worker_query);
  *(void **)&loaded.ucp_get_version = dlsym(lib, "ucp_get_version");
  load_state = 1; /* kept loaded: UCX keeps threads and handlers of its own */
}

/* Whether `name` is a readable file in `dir`. */
static int found_in(const char *dir, size_t len, const char *name, char *out, size_t cap)
{
  if (!len) return 0;
  snprintf(out, cap, "%.*s/%s", (int)len, dir, name);
  return access(out, R_OK) == 0;
}

/* Each directory of a ':'-separated list; 1 when `name` is in one of them. */
static int found_in_list(const char *list, const char *name, char *out, size_t cap)
{
  for (const char *at = list; at && *at;) {
    const char *end = strchr(at, ':');
    size_t len = end ? (size_t)(end - at) : strlen(at);
    if (found_in(at, len, name, out, cap)) return 1;
    at = end ? end + 1 : NULL;
  }
  return 0;
}

int xfer_ucx_find(char *path, size_t cap, char *why, size_t why_cap)
{
  const char *set = getenv("XFER_UCX_LIBRARY");
  const char *name = set && *set ? set : "libucp.so.0";
  if (strchr(name, '/')) {
    snprintf(path, cap, "%s", name);
    if (access(name, R_OK) == 0) return 1;
    snprintf(why, why_cap, "cannot load the UCX library %s: no such file", name);
    return 0;
  }
  if (found_in_list(getenv("LD_LIBRARY_PATH"), name, path, cap)) return 1;
  /* the dynamic linker's directories: ld.so.conf's, then the defaults */
  glob_t conf;
  int hit = 0;
  if (glob("/etc/ld.so.conf.d/*.conf", 0, NULL, &conf) == 0) {
    for (size_t i = 0; i < conf.gl_pathc && !hit; i++) {
      FILE *f = fopen(conf.gl_pathv[i], "r");
      char line[512];
      while (f && !hit && fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n")] = '\0';
        if (line[0] == '/') hit = found_in(line, strlen(line), name, path, cap);
      }
      if (f) fclose(f);
    }
    globfree(&conf);
  }
  if (hit) return 1;
  if (found_in_list("/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64:/lib:/usr/lib:"
                    "/usr/local/lib", name, path, cap))
    return 1;
  snprintf(why, why_cap, "cannot find the UCX library %s (install libucx0, or set XFER_UCX_LIBRARY)", name);
  return 0;
}

const ucx_api *xfer_ucx(char *why, size_t cap)
{
  pthread_once(&load_once, load);
  if (load_state == 1) return &loaded;
  if (why && cap) snprintf(why, cap, "%s", load_why);
  return NULL;
}

xfer_code xfer_ucx_fail(const ucx_api *api, xfer_code code, xfer_op op, ucs_status_t status,
                        const char *what, xfer_error *err)
{
  const char *name = api ? api->ucs_status_string(status) : "?";
  xfer_err_native(err, code, op, (long long)status, name, what, 0, 0);
  if (err) snprintf(err->message, sizeof err->message, "%s: %s (UCX status %d)", what, name,
                    (int)status);
  return code;
}

/* Whether UCX_TLS (unset: all of them) lets UCX use a memory-mapping transport (sysv, posix):
** setting theirs where none is loaded makes UCX warn of an invalid configuration. */
static int tls_may_map_memory(const char *tls)
{
  if (!tls || !*tls) return 1;
  int excluding = tls[0] == '^';
  int all_of_them = 0, sysv = 0, posix = 0; /* named in the list */
  char list[256];
  snprintf(list, sizeof list, "%s", tls + excluding);
  char *save = NULL;
  for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
    if (*name == '\\') name++; /* "\\sysv": that transport, not an alias */
    all_of_them |= !strcmp(name, "all") || !strcmp(name, "sm") || !strcmp(name, "shm") ||
                   !strcmp(name, "mm");
    sysv |= !strcmp(name, "sysv");
    posix |= !strcmp(name, "posix");
  }
  /* "^sysv" leaves posix; "sm,tcp" takes both */
  return excluding ? !(all_of_them || (sysv && posix)) : all_of_them || sysv || posix;
}

/* Endpoints are made with peer error handling (a lost peer must surface as an error, not a
** hang), and UCX 1.13 leaves out every shared memory transport of such an endpoint unless
** they are told to handle errors too (their keepalive checks that the peer process lives):
** without this, UCX_TLS=shm,tcp quietly ran over tcp. What the environment says is kept. */
static ucs_status_t allow_shared_memory(const ucx_api *api, ucp_config_t *config)
{
  if (getenv("UCX_MM_ERROR_HANDLING") || getenv("UCX_SYSV_ERROR_HANDLING") ||
      getenv("UCX_POSIX_ERROR_HANDLING") || !tls_may_map_memory(getenv("UCX_TLS")))
    return UCS_OK;
  /* a transport's setting: UCX keeps it and applies it to the sysv and posix transports */
  return api->ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
}

xfer_code xfer_ucx_node_open(ucx_node *node, xfer_ctx *ctx, ucp_am_recv_callback_t on_message,
                             void *arg, xfer_op op, xfer_error *err)
{
  memset(node, 0, sizeof *node);
  node->efd = -1;
  node->ctx = ctx;
  char why[512];
  node->api = xfer_ucx(why, sizeof why);
  if (!node->api) return xfer_err_op(err, XFER_E_UNAVAILABLE, op, "%s", why);
  const ucx_api *api = node->api;
  ucp_config_t *config = NULL;
  ucs_status_t s = api->ucp_config_read(NULL, NULL, &config);
  if (s != UCS_OK) return xfer_ucx_fail(api, XFER_E_UNAVAILABLE, op, s, "reading UCX's configuration", err);
  s = allow_shared_memory(api, config);
  if (s != UCS_OK) {
    api->ucp_config_release(config);
    return xfer_ucx_fail(api, XFER_E_UNAVAILABLE, op, s, "configuring UCX's shared memory", err);
  }
  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  /* wakeup: an idle server or client waits on the worker's event fd instead of polling (an
  ** idle server took 15% of a core, polling and sleeping 20 us at a time) */
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  /* XFER_UCX_REGISTER=0: no ucp_mem_map (ucx_reg.c); UCX registers what it needs itself */
  node->registers = xfer_env_flag("XFER_UCX_REGISTER");
  /* the worker is its owner's alone, but a host segment may go back to the system on any
  ** thread, and its registration is undone there (ucp_mem_unmap): the context takes a lock */
  params.mt_workers_shared = node->registers;
  s = api->ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &node->context);
  api->ucp_config_release(config);
  if (s != UCS_OK) return xfer_ucx_fail(api, XFER_E_UNAVAILABLE, op, s, "starting UCX", err);
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* its owner's lock serialises every call */
  s = api->ucp_worker_create(node->context, &wp, &node->worker);
  if (s != UCS_OK) {
    api->ucp_cleanup(node->context);
    node->context = NULL;
    return xfer_ucx_fail(api, XFER_E_UNAVAILABLE, op, s, "making a UCX worker", err);
  }
  if (api->ucp_worker_get_efd(node->worker, &node->efd) != UCS_OK) node->efd = -1;
  /* Debian's UCX moves host memory only; a CUDA-enabled build says so here */
  ucp_context_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  node->cuda_memory = xfer_env_flag("XFER_UCX_CUDA") &&
                      api->ucp_context_query(node->context, &attr) == UCS_OK &&
                      (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
  ucp_am_handler_param_t hp;
  memset(&hp, 0, sizeof hp);
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = WIRE_AM_ID;
  hp.cb = on_message;
  hp.arg = arg;
  s = api->ucp_worker_set_am_recv_handler(node->worker, &hp);
  if (s != UCS_OK) {
    xfer_ucx_node_close(node);
    return xfer_ucx_fail(api, XFER_E_UNAVAILABLE, op, s, "active messages", err);
  }
  return XFER_E_OK;
}

size_t xfer_ucx_header_pieces(ucx_node *node)
{
  if (node->header_pieces) return node->header_pieces;
  ucp_worker_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  size_t room = node->api->ucp_worker_query(node->worker, &attr) == UCS_OK ? attr.max_am_header : 0;
  size_t pieces = room > sizeof(wire_header) ? (room - sizeof(wire_header)) / sizeof(wire_piece) : 1;
  node->header_pieces = pieces < 1 ? 1 : pieces > WIRE_HEADER_PIECES ? WIRE_HEADER_PIECES : pieces;
  return node->header_pieces;
}

void xfer_ucx_node_close(ucx_node *node)
{
  if (!node->api) return;
  xfer_ucx_unmap_all(node); /* before the context they were made with goes */
  if (node->worker) node->api->ucp_worker_destroy(node->worker);
  if (node->context) node->api->ucp_cleanup(node->context);
  node->worker = NULL;
  node->context = NULL;
}

/* nothing to progress: give the core to others for a moment (a peer on the same machine,
** over shared memory, needs it to answer) */
static void idle(void)
{
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* How long a worker polls (sleeping 20 us between polls) before it waits for an event
** instead: a process woken from poll() answered ~1 ms late here (a VM's idle vCPU), against
** 0.1-0.2 ms polling, so a worker that was busy a moment ago keeps polling, and one idle for
** longer (a server between clients, a client awaiting a long job) costs nothing. */
#define QUIET_BEFORE_WAIT 0.2

void xfer_ucx_idle(ucx_node *node, ucx_idler *idler, unsigned progressed, double until)
{
  /* A rendezvous needs both sides to answer each other's control messages at once: a sleep
  ** after every idle poll (a nanosleep is 50-60 us here) halved the bandwidth. So poll
  ** without sleeping for a while after the last thing done, then sleep between polls, and
  ** once it has been quiet for longer, wait for an event. Never past `until`. */
  if (progressed) {
    idler->since = 0;
    return;
  }
  double now = xfer_now();
  if (idler->since == 0) idler->since = now;
  double quiet = now - idler->since;
  if (quiet <= 0.0005 || now >= until) return;
  if (quiet <= QUIET_BEFORE_WAIT || node->efd < 0) {
    idle();
    return;
  }
  /* armed: nothing is pending, and the fd wakes at the next event (UCS_ERR_BUSY: something
  ** came meanwhile, progress again at once) */
  if (node->api->ucp_worker_arm(node->worker) != UCS_OK) return;
  double left_ms = (until - now) * 1e3;
  struct pollfd pfd = {node->efd, POLLIN, 0};
  (void)poll(&pfd, 1, left_ms < 10 ? (int)left_ms + 1 : 10);
}

void xfer_ucx_abandon(ucx_node *node, void *request, double until)
{
  const ucx_api *api = node->api;
  api->ucp_request_cancel(node->worker, request);
  /* a cancelled request ends at once, as a rule; one that does not (an endpoint's close to
  ** a stopped peer, a send UCX cannot cancel) is let go of at `until`: freed, it ends when
  ** UCX is done with it (a failure waiting on it would come late) */
  while (api->ucp_request_check_status(request) == UCS_INPROGRESS && xfer_now() < until)
    if (!api->ucp_worker_progress(node->worker)) idle();
  api->ucp_request_free(request);
}

xfer_code xfer_ucx_wait(ucx_node *node, ucs_status_ptr_t request, double deadline,
                        xfer_code code_on_error, xfer_op op, const char *what,
                        xfer_error *err)
{
  const ucx_api *api = node->api;
  if (request == NULL) return XFER_E_OK;
  if (UCS_PTR_IS_ERR(request))
    return xfer_ucx_fail(api, code_on_error, op, UCS_PTR_STATUS(request), what, err);
  ucs_status_t s;
  ucx_idler idler = {0};
  while ((s = api->ucp_request_check_status(request)) == UCS_INPROGRESS) {
    unsigned progressed = api->ucp_worker_progress(node->worker);
    xfer_ucx_idle(node, &idler, progressed, deadline);
    if (!progressed) {
      if (xfer_now() > deadline) {
        xfer_ucx_abandon(node, request, xfer_now() + 0.25);
        return xfer_err_op(err, XFER_E_TIMEOUT, op, "%s: no answer before the deadline", what);
      }
    }
  }
  api->ucp_request_free(request);
  return s == UCS_OK ? XFER_E_OK : xfer_ucx_fail(api, code_on_error, op, s, what, err);
}

xfer_code xfer_ucx_parse_url(const char *url, xfer_op op, char *host, size_t host_cap,
                             uint16_t *port, xfer_error *err)
{
  static const char scheme[] = "ucx://";
  if (strncmp(url, scheme, sizeof scheme - 1))
    return xfer_err_op(err, XFER_E_INVALID, op, "%s: '%.100s' is no ucx://host:port address", xfer_op_name(op),
                        url);
  const char *rest = url + sizeof scheme - 1;
  const char *colon = strrchr(rest, ':');
  if (!colon || colon == rest || (size_t)(colon - rest) >= host_cap)
    return xfer_err_op(err, XFER_E_INVALID, op, "%s: '%.100s' names no host and port "
                        "(ucx://host:port)", xfer_op_name(op), url);
  char *end = NULL;
  long p = strtol(colon + 1, &end, 10);
  long lowest = op == XFER_OP_LISTEN ? 0 : 1; /* a listener's port 0: any free one */
  if (!colon[1] || *end || p < lowest || p > 65535)
    return xfer_err_op(err, XFER_E_INVALID, op, "%s: '%.100s': the port must be %ld to 65535", xfer_op_name(op),
                        url, lowest);
  /* an IPv6 address in brackets, as URLs write it (and as a listener prints its own): the
  ** brackets are the URL's, not the address's */
  const char *from = rest, *to = colon;
  if (rest[0] == '[') {
    if (colon[-1] != ']' || colon - rest < 3)
      return xfer_err_op(err, XFER_E_INVALID, op, "%s: '%.100s': an IPv6 address in brackets is "
                          "[address]:port", xfer_op_name(op), url);
    from = rest + 1;
    to = colon - 1;
  }
  memcpy(host, from, (size_t)(to - from));
  host[to - from] = '\0';
  *port = (uint16_t)p;
  return XFER_E_OK;
}

int xfer_ucx_takes_ipv6(const ucx_api *api, char *why, size_t cap)
{
  unsigned major = 0, minor = 0, release = 0;
  if (api->ucp_get_version) api->ucp_get_version(&major, &minor, &release);
  if (major > 1 || (major == 1 && minor >= 14)) return 1;
  snprintf(why, cap, "UCX %u.%u cannot connect over IPv6 (on an IPv6 connection its server's "
           "ucp_ep_create overruns a heap buffer and the client is rejected): use an IPv4 address",
           major, minor);
  return 0;
}

xfer_code xfer_ucx_sockaddr(const char *host, uint16_t port, xfer_op op,
                            struct sockaddr_storage *out, socklen_t *len, xfer_code code_on_error,
                            xfer_error *err)
{
  struct addrinfo hints, *found = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  char service[8];
  snprintf(service, sizeof service, "%u", (unsigned)port);
  int rc = getaddrinfo(host, service, &hints, &found);
  if (rc || !found)
    return xfer_err_op(err, code_on_error, op, "%s: cannot resolve '%.100s': %s", xfer_op_name(op), host,
                        rc ? gai_strerror(rc) : "no address");
  memcpy(out, found->ai_addr, found->ai_addrlen);
  *len = found->ai_addrlen;
  freeaddrinfo(found);
  return XFER_E_OK;
}

/* One line of ucp_ep_print_info, "#   lane[1]:  2:sysv/memory.0 md[1]  -> md[1]/sysv/sysdev[255]
** am am_bw#0 keepalive" (UCX 1.13; 1.22 puts "seg 4294967295" before the uses), as
** "sysv/memory: am am_bw keepalive"; 0 for any other line (the connection manager's lane has
** no "->"). */
static int lane_line(const char *line, char *out, size_t cap)
{
  const char *at = strstr(line, "lane[");
  const char *arrow = at ? strstr(at, "->") : NULL;
  const char *colon_at = at ? strchr(at, ':') : NULL;
  if (!arrow || !colon_at || colon_at > arrow) return 0;
  char words[512];
  snprintf(words, sizeof words, "%s", colon_at + 1);
  char *save = NULL;
  char *tl = strtok_r(words, " \t\n", &save); /* "2:sysv/memory.0" */
  if (!tl) return 0;
  char *colon = strchr(tl, ':');
  if (colon) tl = colon + 1;
  char *slash = strchr(tl, '/');
  char *dot = slash ? strrchr(slash, '.') : NULL;
  if (dot) *dot = '\0'; /* the path index */
  size_t n = (size_t)snprintf(out, cap, "%s:", tl);
  int past_arrow = 0, past_remote = 0, skip = 0;
  for (char *w = strtok_r(NULL, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
    if (!past_arrow) {
      past_arrow = !strcmp(w, "->");
      continue;
    }
    if (!past_remote) { /* the remote end's address */
      past_remote = 1;
      continue;
    }
    if (skip) { /* the number after "seg" */
      skip = 0;
      continue;
    }
    if (!strcmp(w, "seg")) { /* UCX 1.22 prints the lane's segment size: not a use */
      skip = 1;
      continue;
    }
    char *hash = strchr(w, '#'); /* "am_bw#0": the lane's rank among those of its use */
    if (hash) *hash = '\0';
    if (n < cap) n += (size_t)snprintf(out + n, cap - n, " %s", w);
  }
  return 1;
}

int xfer_ucx_ep_moves_cuda(const ucx_node *node, ucp_ep_h ep)
{
  if (!node->cuda_memory || !ep) return 0;
  if (xfer_env_flag("XFER_UCX_CUDA") == 1) return 1;
  char lanes[2048];
  xfer_ucx_ep_lanes(node->api, ep, lanes, sizeof lanes);
  return strstr(lanes, "cuda_ipc/") != NULL;
}

size_t xfer_ucx_ep_lanes(const ucx_api *api, ucp_ep_h ep, char *out, size_t cap)
{
  if (cap) out[0] = '\0';
  if (!ep) return 0;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return 0;
  api->ucp_ep_print_info(ep, f);
  fclose(f);
  size_t lanes = 0, used = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char one[256];
    if (!lane_line(line, one, sizeof one)) continue;
    lanes++;
    if (used < cap) used += (size_t)snprintf(out + used, cap - used, "%s\n", one);
  }
  free(text);
  return lanes;
}
