/*
** door_filter.c -- see door_filter.h. The filter runs on each packet the listener (and the
** connections it accepts, which inherit it) gets, the TCP header at the start of the data
** (its first 16 bits: the source port); the IP header's source address is read relative to
** the network header (SKF_NET_OFF).
*/
#include "door_filter.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define ACCEPT 0xffffffffu /* the whole packet */
#define DROP 0u

/* Whether fd is the listening socket of `family` on `port`. */
static int is_door(int fd, int family, uint16_t port)
{
  struct sockaddr_storage a;
  memset(&a, 0, sizeof a);
  socklen_t len = sizeof a;
  int listening = 0;
  socklen_t llen = sizeof listening;
  if (getsockname(fd, (struct sockaddr *)&a, &len) || a.ss_family != family) return 0;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &llen) || !listening) return 0;
  uint16_t at = family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&a)->sin6_port)
                                   : ntohs(((struct sockaddr_in *)&a)->sin_port);
  return at == port;
}

/* The descriptor of the listening socket of `family` on `port`, or -1: the descriptors the
** process has, as /proc lists them -- or, when there is no descriptor left to read the list
** with (strangers hold the rest: a server must let a client in all the same), each number up
** to the limit. */
static int listening_on(int family, uint16_t port)
{
  DIR *dir = opendir("/proc/self/fd");
  int found = -1;
  if (!dir) {
    struct rlimit lim;
    rlim_t top = getrlimit(RLIMIT_NOFILE, &lim) || lim.rlim_cur > 65536 ? 65536 : lim.rlim_cur;
    for (int fd = 0; found < 0 && (rlim_t)fd < top; fd++)
      if (is_door(fd, family, port)) found = fd;
    return found;
  }
  for (struct dirent *e; found < 0 && (e = readdir(dir));) {
    char *end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name || fd == dirfd(dir)) continue;
    if (is_door((int)fd, family, port)) found = (int)fd;
  }
  closedir(dir);
  return found;
}

int xfer_door_admit_only(int family, uint16_t port, const struct sockaddr *client)
{
  if (client->sa_family != family || (family != AF_INET && family != AF_INET6)) return EAFNOSUPPORT;
  int fd = listening_on(family, port);
  if (fd < 0) return ENOENT;
  uint32_t words[4];
  int n; /* 32-bit words of the source address, and where they are in the IP header */
  unsigned at;
  uint16_t port_be = family == AF_INET6 ? ((const struct sockaddr_in6 *)client)->sin6_port
                                        : ((const struct sockaddr_in *)client)->sin_port;
  if (family == AF_INET) {
    memcpy(words, &((const struct sockaddr_in *)client)->sin_addr, 4);
    n = 1, at = 12;
  } else if (IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)client)->sin6_addr)) {
    /* an IPv4 client of a socket of both families: its packets have IPv4 headers */
    memcpy(words, (const char *)&((const struct sockaddr_in6 *)client)->sin6_addr + 12, 4);
    n = 1, at = 12;
  } else {
    memcpy(words, &((const struct sockaddr_in6 *)client)->sin6_addr, 16);
    n = 4, at = 8;
  }
  /* each word loaded (in host order, as BPF loads them) and compared, then the port; a
  ** mismatch jumps to the drop at the end */
  struct sock_filter code[2 * (4 + 1) + 2];
  int k = 0, checks = n + (port_be != 0);
  for (int i = 0; i < checks; i++) {
    if (i < n)
      code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)SKF_NET_OFF + at + 4u * (unsigned)i);
    else
      code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0); /* the TCP source port */
    uint32_t want = i < n ? ntohl(words[i]) : ntohs(port_be);
    code[k] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, want, 0, 0);
    code[k].jf = (uint8_t)(2 * (checks - i) - 1);
    k++;
  }
  code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ACCEPT);
  code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, DROP);
  struct sock_fprog prog = {(unsigned short)k, code};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog)) return errno;
  return 0;
}
