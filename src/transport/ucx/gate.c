/*
** gate.c -- the knock's bytes (both sides) and the client's knock: a TCP connection with a
** deadline, the knock sent, the 20-byte answer read, the connection closed. See gate.h.
*/
#include "gate.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double gate_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the magic as bytes (no terminating NUL: eight bytes on the wire) */
static const unsigned char magic[GATE_MAGIC_LEN] = {'x', 'f', 'e', 'r', 'K', 'N', 'C', 'K'};

static void put_u32(unsigned char *at, uint32_t v)
{
  for (int i = 0; i < 4; i++) at[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *at)
{
  return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
}

int gate_parse_knock(const unsigned char *bytes, size_t len, uint32_t *version, const char **token,
                     size_t *token_len, uint16_t *from_port)
{
  /* the magic is judged byte by byte as it comes: a stranger is turned away at its first
  ** wrong byte, not after a deadline */
  size_t head = len < GATE_MAGIC_LEN ? len : GATE_MAGIC_LEN;
  if (memcmp(bytes, magic, head)) return -1;
  if (len < GATE_HEAD_LEN) return 0;
  uint32_t n = get_u32(bytes + 12);
  if (n > GATE_TOKEN_MAX) return -1;
  uint32_t v = get_u32(bytes + 8);
  size_t whole = GATE_HEAD_LEN + n + (v >= GATE_PORT_SINCE ? 4 : 0);
  if (len < whole) return 0;
  if (len > whole) return -1; /* a client waits for the answer: nothing follows */
  uint32_t port = v >= GATE_PORT_SINCE ? get_u32(bytes + GATE_HEAD_LEN + n) : 0;
  if (v >= GATE_PORT_SINCE && (port == 0 || port > 65535)) return -1;
  *version = v;
  *token = (const char *)bytes + GATE_HEAD_LEN;
  *token_len = n;
  *from_port = (uint16_t)port;
  return (int)whole;
}

size_t gate_pack_knock(unsigned char *out, uint32_t version, const char *token, size_t token_len,
                       uint16_t from_port)
{
  memcpy(out, magic, GATE_MAGIC_LEN);
  put_u32(out + 8, version);
  put_u32(out + 12, (uint32_t)token_len);
  if (token_len) memcpy(out + GATE_HEAD_LEN, token, token_len);
  if (version < GATE_PORT_SINCE) return GATE_HEAD_LEN + token_len;
  put_u32(out + GATE_HEAD_LEN + token_len, from_port);
  return GATE_HEAD_LEN + token_len + 4;
}

void gate_pack_answer(unsigned char out[GATE_ANSWER_LEN], uint32_t version, gate_status status,
                      uint16_t port)
{
  memcpy(out, magic, GATE_MAGIC_LEN);
  put_u32(out + 8, version);
  put_u32(out + 12, (uint32_t)status);
  put_u32(out + 16, port);
}

/* Waits for fd to be ready for `events` until the deadline: 0, or an errno (ETIMEDOUT). */
static int wait_ready(int fd, short events, double deadline)
{
  for (;;) {
    double left = deadline - gate_now();
    if (left <= 0) return ETIMEDOUT;
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, (int)(left * 1000) + 1);
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return errno;
  }
}

static int connect_by(int fd, const struct sockaddr *addr, socklen_t addr_len, double deadline)
{
  if (connect(fd, addr, addr_len) && errno != EINPROGRESS) return errno;
  int e = wait_ready(fd, POLLOUT, deadline);
  if (e) return e;
  int so_error = 0;
  socklen_t so_len = sizeof so_error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &so_len)) return errno;
  return so_error;
}

/* Reserves a port on the address the connection fd goes out from: reply->reserved holds it
** (bound, never connected: closing it frees the port at once, no TIME_WAIT). 0, or an errno. */
static int reserve_port(int fd, gate_reply *reply, uint16_t *port)
{
  reply->from_len = sizeof reply->from;
  if (getsockname(fd, (struct sockaddr *)&reply->from, &reply->from_len)) return errno;
  int family = reply->from.ss_family;
  if (family == AF_INET6) ((struct sockaddr_in6 *)&reply->from)->sin6_port = 0;
  else if (family == AF_INET) ((struct sockaddr_in *)&reply->from)->sin_port = 0;
  else return EAFNOSUPPORT;
  reply->reserved = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (reply->reserved < 0) return errno;
  socklen_t len = reply->from_len;
  if (bind(reply->reserved, (struct sockaddr *)&reply->from, len) ||
      getsockname(reply->reserved, (struct sockaddr *)&reply->from, &len))
    return errno;
  *port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&reply->from)->sin6_port
                                   : ((struct sockaddr_in *)&reply->from)->sin_port);
  return 0;
}

static int knock_on(int fd, const unsigned char *knock, size_t knock_len, double deadline,
                    unsigned char *answer)
{
  int e;
  for (size_t sent = 0; sent < knock_len;) {
    ssize_t n = send(fd, knock + sent, knock_len - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if ((e = wait_ready(fd, POLLOUT, deadline))) return e;
    } else {
      return errno;
    }
  }
  for (size_t got = 0; got < GATE_ANSWER_LEN;) {
    ssize_t n = recv(fd, answer + got, GATE_ANSWER_LEN - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n == 0) {
      return ECONNRESET; /* closed before answering: not a gate, or it turned us away */
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if ((e = wait_ready(fd, POLLIN, deadline))) return e;
    } else {
      return errno;
    }
  }
  return 0;
}

int gate_knock(const struct sockaddr *addr, socklen_t addr_len, uint32_t version, const char *token,
               size_t token_len, double deadline, gate_reply *reply)
{
  memset(reply, 0, sizeof *reply);
  reply->reserved = -1;
  if (token_len > GATE_TOKEN_MAX) {
    reply->io_errno = EINVAL;
    return -1;
  }
  unsigned char knock[GATE_KNOCK_MAX], answer[GATE_ANSWER_LEN] = {0};
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    reply->io_errno = errno;
    return -1;
  }
  uint16_t from_port = 0;
  int e = connect_by(fd, addr, addr_len, deadline);
  if (!e) e = reserve_port(fd, reply, &from_port);
  if (!e) e = knock_on(fd, knock, gate_pack_knock(knock, version, token, token_len, from_port), deadline, answer);
  close(fd);
  if (!e && (memcmp(answer, magic, GATE_MAGIC_LEN) || get_u32(answer + 12) >= GATE__LAST ||
             get_u32(answer + 16) > 65535))
    e = EPROTO;
  if (e) {
    gate_release(reply);
    reply->io_errno = e;
    return -1;
  }
  reply->version = get_u32(answer + 8);
  reply->status = (gate_status)get_u32(answer + 12);
  reply->port = (uint16_t)get_u32(answer + 16);
  return 0;
}

void gate_release(gate_reply *reply)
{
  if (reply->reserved >= 0) close(reply->reserved);
  reply->reserved = -1;
}
