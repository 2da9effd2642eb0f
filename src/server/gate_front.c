/*
** gate_front.c -- a server's port: accepts, reads knocks (gate.h) with a deadline, answers
** whole ones with what the server decides, and closes every connection it took -- a knock
** answered, a wrong byte, a deadline passed, or room made for a newer one.
*/
#include "gate_front.h"

#include "../transport/ucx/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#define ACCEPTS_PER_POLL 64 /* then the knocks already in are read: a flood cannot starve them */

void gate_front_init(gate_front *f)
{
  memset(f, 0, sizeof *f);
  f->fd = -1;
  for (int i = 0; i < GATE_KNOCKING_MAX; i++) f->knocking[i].fd = -1;
}

int gate_front_open(gate_front *f, const struct sockaddr *addr, socklen_t addr_len)
{
  f->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (f->fd < 0) return errno;
  int one = 1;
  /* a restarted server takes its port back while the last one's connections linger */
  if (setsockopt(f->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(f->fd, addr, addr_len) ||
      listen(f->fd, 128)) {
    int e = errno;
    close(f->fd);
    f->fd = -1;
    return e;
  }
  return 0;
}

uint16_t gate_front_port(const gate_front *f)
{
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  if (f->fd < 0 || getsockname(f->fd, (struct sockaddr *)&a, &len)) return 0;
  if (a.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
  return 0;
}

static void let_go(gate_front *f, gate_knocker *k, int answered)
{
  close(k->fd);
  k->fd = -1;
  k->got = 0;
  if (answered) f->knocks++;
  else f->turned_away++;
}

/* The knock that came first (NULL: none). */
static gate_knocker *oldest(gate_front *f)
{
  gate_knocker *first = NULL;
  for (int i = 0; i < GATE_KNOCKING_MAX; i++) {
    gate_knocker *k = &f->knocking[i];
    if (k->fd >= 0 && (!first || k->deadline < first->deadline)) first = k;
  }
  return first;
}

/* A free slot; the oldest knock is turned away when there is none. */
static gate_knocker *slot(gate_front *f)
{
  for (int i = 0; i < GATE_KNOCKING_MAX; i++)
    if (f->knocking[i].fd < 0) return &f->knocking[i];
  gate_knocker *first = oldest(f);
  let_go(f, first, 0);
  return first;
}

static int accept_some(gate_front *f)
{
  int did = 0;
  for (int i = 0; i < ACCEPTS_PER_POLL; i++) {
    int fd = accept4(f->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      gate_knocker *first = errno == EMFILE || errno == ENFILE ? oldest(f) : NULL;
      if (first) {
        /* out of descriptors before out of slots: the oldest knock makes room (the
        ** connection waits in the backlog meanwhile, and is taken on the next try) */
        let_go(f, first, 0);
        did = 1;
        continue;
      }
      break; /* EAGAIN: none waiting; others: tried again at the next poll */
    }
    gate_knocker *k = slot(f);
    k->fd = fd;
    k->got = 0;
    k->deadline = gate_now() + GATE_KNOCK_SECONDS;
    did = 1;
  }
  return did;
}

static void answer(gate_front *f, gate_knocker *k, gate_decide decide, void *arg)
{
  uint32_t version;
  const char *token;
  size_t token_len;
  uint16_t from_port;
  gate_parse_knock(k->bytes, k->got, &version, &token, &token_len, &from_port);
  struct sockaddr_storage local, peer;
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  memset(&local, 0, sizeof local);
  memset(&peer, 0, sizeof peer);
  uint16_t port = 0;
  gate_status status = GATE_BUSY;
  if (!getsockname(k->fd, (struct sockaddr *)&local, &local_len) &&
      !getpeername(k->fd, (struct sockaddr *)&peer, &peer_len)) {
    /* who will come to the door: the knocker's address, at the port its knock named */
    if (peer.ss_family == AF_INET6) ((struct sockaddr_in6 *)&peer)->sin6_port = htons(from_port);
    else ((struct sockaddr_in *)&peer)->sin_port = htons(from_port);
    status = decide(arg, version, token, token_len, (struct sockaddr *)&local, (struct sockaddr *)&peer, &port);
  }
  unsigned char out[GATE_ANSWER_LEN];
  gate_pack_answer(out, WIRE_VERSION, status, status == GATE_OPEN ? port : 0);
  /* 20 bytes into a fresh socket's empty buffer: one send; a client that cannot take them
  ** learns nothing, and its door closes at its deadline */
  (void)!send(k->fd, out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT);
  let_go(f, k, 1);
}

/* Reads what has come of one knock: 1 when anything was done. */
static int read_knock(gate_front *f, gate_knocker *k, gate_decide decide, void *arg)
{
  ssize_t n = recv(k->fd, k->bytes + k->got, sizeof k->bytes - k->got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    if (gate_now() < k->deadline) return 0;
    let_go(f, k, 0); /* too slow: a knock takes one round trip */
    return 1;
  }
  if (n <= 0) { /* closed, or reset */
    let_go(f, k, 0);
    return 1;
  }
  k->got += (size_t)n;
  uint32_t version;
  const char *token;
  size_t token_len;
  uint16_t from_port;
  int whole = gate_parse_knock(k->bytes, k->got, &version, &token, &token_len, &from_port);
  if (whole < 0) let_go(f, k, 0);
  else if (whole > 0) answer(f, k, decide, arg);
  return 1;
}

int gate_front_poll(gate_front *f, gate_decide decide, void *arg)
{
  if (f->fd < 0) return 0;
  int did = accept_some(f);
  for (int i = 0; i < GATE_KNOCKING_MAX; i++)
    if (f->knocking[i].fd >= 0) did |= read_knock(f, &f->knocking[i], decide, arg);
  return did;
}

int gate_front_knocking(const gate_front *f)
{
  int n = 0;
  for (int i = 0; i < GATE_KNOCKING_MAX; i++) n += f->knocking[i].fd >= 0;
  return n;
}

void gate_front_close(gate_front *f)
{
  for (int i = 0; i < GATE_KNOCKING_MAX; i++)
    if (f->knocking[i].fd >= 0) {
      close(f->knocking[i].fd);
      f->knocking[i].fd = -1;
    }
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}
