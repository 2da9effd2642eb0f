/*
** gate.h -- the knock: what a client says on a server's port before UCX hears a byte of it.
** UCX's connection manager asserts (and so aborts the process) on some malformed first
** bytes (UCX 1.13: 17 zero bytes on its port), so a server never lets a stranger's bytes
** reach UCX: its port is a plain TCP socket (src/server/gate_front.c) where a client knocks
** with the protocol version and the token; only then does the server open a door -- a UCX
** listener of that client alone, on a port of its own -- and answer with the door's port,
** where the client's UCX connects. Plain sockets: no UCX, no xferlua core, so that test
** programs (spec/c/) link this file alone.
**
** The knock (client -> server), integers little-endian:
**   "xferKNCK" (8 bytes), u32 protocol version, u32 token length (0..255), the token,
**   u32 the port the client's UCX will connect from (protocol 5 on; 1..65535)
** The door is shut to all but that address and that port (src/server/door_filter.h): the
** client reserves the port before it knocks (a socket bound to it, closed just before its
** UCX binds it), so another process of the client's own host cannot come in by it either.
** A knock of an earlier protocol ends at its token: its client still hears which version
** the server speaks.
** The answer (server -> client), 20 bytes:
**   "xferKNCK", u32 the server's protocol version, u32 status (gate_status), u32 the door's port
*/
#ifndef XFER_GATE_H
#define XFER_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define GATE_MAGIC "xferKNCK"
#define GATE_MAGIC_LEN 8
#define GATE_HEAD_LEN 16 /* magic, version, token length */
#define GATE_TOKEN_MAX 255
#define GATE_PORT_SINCE 5 /* the first protocol whose knock names the client's port */
#define GATE_KNOCK_MAX (GATE_HEAD_LEN + GATE_TOKEN_MAX + 4)
#define GATE_ANSWER_LEN 20

typedef enum {
  GATE_OPEN = 0,        /* the door's port follows */
  GATE_REFUSED = 1,     /* the token is not the server's */
  GATE_OTHER_VERSION = 2,
  GATE_BUSY = 3,        /* the server could not open a door now */
  GATE__LAST
} gate_status;

/* What the first `len` bytes a stranger sent make: more needed (0), not a knock (-1; the
** connection is closed, nothing answered), or a whole knock (its length), with the version,
** the token (pointing into `bytes`) and the port the client comes from (0 before protocol 5). */
int gate_parse_knock(const unsigned char *bytes, size_t len, uint32_t *version, const char **token,
                     size_t *token_len, uint16_t *from_port);
/* Packs a knock into out (GATE_KNOCK_MAX bytes); returns its length. */
size_t gate_pack_knock(unsigned char *out, uint32_t version, const char *token, size_t token_len,
                       uint16_t from_port);
void gate_pack_answer(unsigned char out[GATE_ANSWER_LEN], uint32_t version, gate_status status,
                      uint16_t port);

/* A knock's outcome on the client's side. */
typedef struct gate_reply {
  int io_errno;         /* != 0: the knock did not get through (connect, send, recv: errno;
                        ** ETIMEDOUT at the deadline; EPROTO for an answer that is not one) */
  gate_status status;
  uint32_t version;     /* the server's protocol version */
  uint16_t port;        /* the door, for GATE_OPEN */
  int reserved;         /* the socket that holds the port the knock named (-1: none) */
  struct sockaddr_storage from; /* that address and port: where the client's UCX binds */
  socklen_t from_len;
} gate_reply;

/* Knocks at addr with the version and the token, waiting until `deadline` (seconds of
** CLOCK_MONOTONIC) at most: reserves a port on the address the knock goes out from and names
** it. Always fills *reply; returns 0 when an answer came. The reservation is held until
** gate_release (call it just before binding reply->from, and on every path). */
int gate_knock(const struct sockaddr *addr, socklen_t addr_len, uint32_t version, const char *token,
               size_t token_len, double deadline, gate_reply *reply);
/* Lets the reserved port go (a reply without one, or released already: nothing). */
void gate_release(gate_reply *reply);

/* Seconds of CLOCK_MONOTONIC (the clock xfer_now reads). */
double gate_now(void);

#endif
