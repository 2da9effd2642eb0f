/*
** gate_fuzz.c -- a stranger on a server's port (spec/remote_spec.lua runs it): raw bytes,
** no UCX, no token.
**   gate_fuzz HOST PORT SEED ROUNDS HOLD [TOKEN]
** ROUNDS connections, each sending what SEED chooses: random bytes of random length, UCX's
** own connection header malformed (17 zero bytes, 16 of 0xff: each aborted UCX 1.13's
** listener), the knock's magic then junk, a token length over 255, a whole knock with bytes
** after it, half a knock then a close; knocks of another version and with a wrong token, whose
** answers are checked. Then HOLD connections at once, each half a knock left hanging (more
** than the server keeps: it must turn the oldest away, and run out of nothing), and while they
** hang a whole knock with TOKEN, which must be let in (a door's port). Prints what it did;
** exits 1 when an answer is wrong or the last knock is not let in.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/transport/ucx/gate.h"
#include "../../src/transport/ucx/wire.h"

static struct sockaddr_in server;

/* A connection with `len` bytes sent; -1 when none could be made. */
static int send_bytes(const void *bytes, size_t len)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&server, sizeof server)) {
    close(fd);
    return -1;
  }
  if (len) (void)!send(fd, bytes, len, MSG_NOSIGNAL);
  return fd;
}

static void fill(unsigned char *out, size_t n)
{
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)rand();
}

int main(int argc, char **argv)
{
  if (argc < 6) {
    fprintf(stderr, "usage: gate_fuzz HOST PORT SEED ROUNDS HOLD [TOKEN]\n");
    return 2;
  }
  memset(&server, 0, sizeof server);
  server.sin_family = AF_INET;
  server.sin_port = htons((uint16_t)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &server.sin_addr) != 1) return 2;
  srand((unsigned)atoi(argv[3]));
  int rounds = atoi(argv[4]), hold = atoi(argv[5]);
  const char *token = argc > 6 ? argv[6] : "";
  static unsigned char junk[4096];
  int kinds[8] = {0}, failed = 0, unmade = 0;
  for (int r = 0; r < rounds; r++) {
    int kind = rand() % 8, fd = -1;
    kinds[kind]++;
    fill(junk, sizeof junk);
    switch (kind) {
    case 0: fd = send_bytes(junk, (size_t)(rand() % (int)sizeof junk)); break;
    case 1: { /* UCX's header, malformed: the bytes that aborted UCX 1.13 */
      unsigned char ucx[17];
      memset(ucx, rand() % 2 ? 0 : 0xff, sizeof ucx);
      fd = send_bytes(ucx, 16 + (size_t)(rand() % 2));
      break;
    }
    case 2: memcpy(junk, GATE_MAGIC, 1 + (size_t)(rand() % GATE_MAGIC_LEN)); fd = send_bytes(junk, 64); break;
    case 3: { /* a token longer than a knock may carry */
      unsigned char k[GATE_KNOCK_MAX];
      gate_pack_knock(k, WIRE_VERSION, "", 0, 1);
      k[12] = 0xff, k[13] = (unsigned char)rand();
      fd = send_bytes(k, GATE_HEAD_LEN);
      break;
    }
    case 4: { /* a whole knock, and more after it */
      unsigned char k[GATE_KNOCK_MAX + 8];
      size_t whole = gate_pack_knock(k, WIRE_VERSION, "t", 1, 1);
      fd = send_bytes(k, whole + 1 + (size_t)(rand() % 7));
      break;
    }
    case 5: { /* half a knock, then gone */
      unsigned char k[GATE_KNOCK_MAX];
      size_t whole = gate_pack_knock(k, WIRE_VERSION, "", 0, 1);
      fd = send_bytes(k, 1 + (size_t)(rand() % (int)(whole - 1)));
      break;
    }
    case 6: { /* another version: told so, nothing opened */
      gate_reply a;
      if (gate_knock((struct sockaddr *)&server, sizeof server, WIRE_VERSION + 1 + (uint32_t)(rand() % 50), "",
                     0, gate_now() + 5, &a) || a.status != GATE_OTHER_VERSION || a.version != WIRE_VERSION) {
        fprintf(stderr, "gate_fuzz: another version was answered %d (errno %d)\n", (int)a.status, a.io_errno);
        failed++;
      }
      gate_release(&a);
      break;
    }
    default: { /* a wrong token (the server has one) or none (it has none): refused or let in */
      gate_reply a;
      const char *wrong = *token ? "not the token" : "";
      if (gate_knock((struct sockaddr *)&server, sizeof server, WIRE_VERSION, wrong, strlen(wrong),
                     gate_now() + 5, &a) || a.status != (*token ? GATE_REFUSED : GATE_OPEN)) {
        fprintf(stderr, "gate_fuzz: a knock with %s was answered %d (errno %d)\n", *token ? "a wrong token" : "no token",
                (int)a.status, a.io_errno);
        failed++;
      }
      gate_release(&a);
      break;
    }
    }
    if (kind < 6 && fd < 0) unmade++;
    if (fd >= 0) close(fd);
  }
  /* HOLD hanging at once, then the real client */
  int *held = calloc((size_t)(hold > 0 ? hold : 1), sizeof *held), holding = 0;
  unsigned char k[GATE_KNOCK_MAX];
  size_t whole = gate_pack_knock(k, WIRE_VERSION, "", 0, 1);
  for (int i = 0; i < hold; i++) {
    held[i] = send_bytes(k, 1 + (size_t)(rand() % (int)(whole - 1)));
    holding += held[i] >= 0;
  }
  gate_reply a;
  int let_in = !gate_knock((struct sockaddr *)&server, sizeof server, WIRE_VERSION, token, strlen(token),
                           gate_now() + 5, &a) && a.status == GATE_OPEN && a.port;
  gate_release(&a);
  for (int i = 0; i < hold; i++)
    if (held[i] >= 0) close(held[i]);
  free(held);
  printf("gate_fuzz: %d connections: random %d, ucx header %d, magic then junk %d, long token %d, "
         "bytes after %d, half %d, other version %d, token %d; %d not made, %d answers wrong; "
         "%d hanging, then the client %s (status %d, errno %d)\n",
         rounds, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5], kinds[6], kinds[7], unmade, failed,
         holding, let_in ? "let in" : "NOT LET IN", (int)a.status, a.io_errno);
  return failed || !let_in ? 1 : 0;
}
