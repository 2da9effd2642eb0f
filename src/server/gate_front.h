/*
** gate_front.h -- a server's port: a plain TCP socket where clients knock (gate.h) before
** anything reaches UCX. Strangers are turned away at their first wrong byte, at a deadline,
** or, when too many knock at once, the oldest first -- and every socket they took is closed:
** nothing a stranger sends costs the server more than a slot among GATE_KNOCKING_MAX.
*/
#ifndef XFER_GATE_FRONT_H
#define XFER_GATE_FRONT_H

#include <stdint.h>
#include <sys/socket.h>

#include "../transport/ucx/gate.h"

#define GATE_KNOCKING_MAX 64   /* connections still knocking, at most (the oldest goes first) */
#define GATE_KNOCK_SECONDS 2.0 /* a knock is whole within this, or the connection is closed */

typedef struct gate_knocker {
  int fd;                     /* -1: a free slot */
  double deadline;
  size_t got;
  unsigned char bytes[GATE_KNOCK_MAX + 1]; /* one more: a byte past a whole knock is refused */
} gate_knocker;

typedef struct gate_front {
  int fd;                     /* the listening socket (-1: none) */
  gate_knocker knocking[GATE_KNOCKING_MAX];
  uint64_t knocks, turned_away; /* whole knocks answered; connections closed unanswered */
} gate_front;

/* Decides a whole knock: the status, and for GATE_OPEN the door's port. `local` is the
** address the client reached, `peer` where the client will come from to the door: its
** address, at the port its knock named (gate.h; 0 for a knock of an earlier protocol). */
typedef gate_status (*gate_decide)(void *arg, uint32_t version, const char *token, size_t token_len,
                                   const struct sockaddr *local, const struct sockaddr *peer,
                                   uint16_t *port);

/* An empty front (nothing to close): before anything else. */
void gate_front_init(gate_front *f);
/* Listens on addr (port 0: any free one). 0, or the errno of the call that failed. */
int gate_front_open(gate_front *f, const struct sockaddr *addr, socklen_t addr_len);
/* The port it listens on (0 when it cannot tell). */
uint16_t gate_front_port(const gate_front *f);
/* Accepts, reads, answers and closes what is ready, without waiting; 1 when anything was done. */
int gate_front_poll(gate_front *f, gate_decide decide, void *arg);
/* How many connections are knocking now. */
int gate_front_knocking(const gate_front *f);
void gate_front_close(gate_front *f);

#endif
