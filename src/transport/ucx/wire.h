/*
** wire.h -- what a client and a server of the remote runtime say to each other: one active
** message id, a fixed header, and a payload (text or the bytes of a move). Every header a
** side receives is checked (wire_check) before anything in it is used: a malformed one drops
** that connection and nothing else.
*/
#ifndef XFER_WIRE_H
#define XFER_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WIRE_AM_ID 11
#define WIRE_MAGIC 0x58465231u /* "XFR1" */
#define WIRE_VERSION 7 /* 2: flags (WIRE_FLAG_RNDV); 3: batches (WRITE_MANY, READ_MANY, COPY_MANY);
                         ** 4: a knock at the gate (gate.h) before UCX connects;
                         ** 5: the knock names the port the client connects from;
                         ** 6: WRITE_MANY's pieces in its header, its payload their bytes
                         ** alone: the server receives them straight into its buffers; CRC;
                         ** 7: CANCEL */
/* the largest payload of one message: a move's bytes go in chunks of at most this */
#define WIRE_CHUNK ((uint64_t)64 << 20)
/* the most requests a client has on their way at once (xfer_config's remote_depth): what a
** server must take from one client without calling it greedy */
#define WIRE_DEPTH_MAX 4
/* the most devices a server lists, and the longest text a message carries */
#define WIRE_MAX_DEVICES 32
#define WIRE_MAX_TEXT 8192
#define WIRE_NAME_MAX 16 /* a node's name: "nodeB" */

typedef enum {
  WIRE_HELLO = 1,   /* client: version, payload = token */
  WIRE_WELCOME,     /* server: generation in handle, payload = name and devices (text) */
  WIRE_ALLOC,       /* client: device, length -> REPLY with the handle */
  WIRE_FREE,        /* client: handle -> REPLY */
  WIRE_WRITE,       /* client: handle, offset, length, payload = the bytes -> REPLY */
  WIRE_READ,        /* client: handle, offset, length -> DATA (payload = the bytes) or REPLY */
  WIRE_REPLY,       /* server: code (0: done), native; payload = error text when code != 0 */
  WIRE_DATA,        /* server: the bytes a READ asked for */
  WIRE_COPY,        /* client: length bytes from src_handle+src_offset to handle+offset, on the
                    ** server (within one of its devices) -> REPLY */
  /* Batches: `offset` pieces in one message, moved on the server as one batch (a submission
  ** per device it takes batches on) */
  WIRE_WRITE_MANY,  /* client: the header followed by offset x wire_piece (WIRE_HEADER_PIECES
                    ** at most); payload = their bytes packed, `length` of them -> REPLY */
  WIRE_READ_MANY,   /* client: payload = offset x wire_piece; length = their bytes -> DATA
                    ** (the bytes packed in the pieces' order) or REPLY */
  WIRE_COPY_MANY,   /* client: payload = offset x wire_copy -> REPLY */
  WIRE_CRC,         /* client: handle, offset, length -> REPLY, the CRC32C of those bytes in its
                    ** handle (summed by the server's device where it can: `verify` reads
                    ** nothing back) */
  WIRE_CANCEL,      /* client: its requests numbered up to `handle` that the server has not
                    ** begun to serve are answered REPLY canceled instead, touching no memory
                    ** (a canceled job's, or one past its deadline); no answer of its own */
  WIRE__LAST
} wire_type;

typedef struct wire_header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint64_t request;   /* the client's number for the request; a reply carries it back */
  uint64_t handle;    /* a buffer on the server (ALLOC's reply, FREE, WRITE, READ) */
  uint64_t offset;    /* bytes into the buffer */
  uint64_t length;    /* bytes to allocate or move; a payload's length */
  uint64_t src_handle; /* COPY: the buffer it copies from, and where in it */
  uint64_t src_offset;
  uint32_t device;    /* the server's device index (ALLOC) */
  int32_t code;       /* REPLY: an xfer_code, 0 for done */
  int64_t native;     /* REPLY: the server's native code */
  uint32_t flags;     /* WIRE_FLAG_* */
  uint32_t unused;    /* zero */
} wire_header;

/* A piece of a batch: bytes of a buffer (WRITE_MANY, READ_MANY), or a copy between two buffers
** of the server (COPY_MANY). The server checks each against the client's buffers. */
typedef struct wire_piece {
  uint64_t handle, offset, length;
} wire_piece;
typedef struct wire_copy {
  uint64_t dst_handle, dst_offset, src_handle, src_offset, length;
} wire_copy;
#define WIRE_MANY_MAX 65536 /* the most pieces one message carries */
/* the most pieces a WRITE_MANY's header lists: a server takes no more; a client sends as many
** as its worker sends in one header (ucp_worker_query's max_am_header: 8100 bytes, 334 pieces,
** with UCX 1.13 over tcp) */
#define WIRE_HEADER_PIECES 1024

/* A WRITE_MANY's header: the fixed header, then its pieces (unaligned: copy them out). */
static inline size_t wire_many_header_size(uint64_t pieces)
{
  return sizeof(wire_header) + (size_t)pieces * sizeof(wire_piece);
}

/* READ: send the DATA by rendezvous, whatever its size -- the client receives it into device
** memory, which UCX writes only by rendezvous (an eager message lands in host memory) */
#define WIRE_FLAG_RNDV 1u
/* WRITE: the payload is device memory (UCX moves it in place): the server may receive it
** into device memory in place too -- from host memory that is UCX's slow pipeline */
#define WIRE_FLAG_DEVICE 2u

static inline wire_header wire_make(wire_type type, uint64_t request)
{
  wire_header h;
  memset(&h, 0, sizeof h);
  h.magic = WIRE_MAGIC;
  h.version = WIRE_VERSION;
  h.type = (uint16_t)type;
  h.request = request;
  return h;
}

/* NULL when the header can be used: of this protocol, a known type, lengths within bounds
** and agreeing with the payload's; else why not. A version mismatch is told apart (*old = 1)
** so that the other side can be answered in words it reads. */
static inline const char *wire_check(const void *header, size_t header_len, size_t payload_len,
                                     wire_header *out, int *other_version)
{
  *other_version = 0;
  /* magic, version and request lead every version's header: another version is told apart
  ** (and can be answered) whatever the size of its header */
  memset(out, 0, sizeof *out);
  if (header_len) memcpy(out, header, header_len < sizeof *out ? header_len : sizeof *out);
  if (header_len < offsetof(wire_header, handle) || out->magic != WIRE_MAGIC)
    return "not an xferlua message";
  if (out->version != WIRE_VERSION) {
    *other_version = 1;
    return "another protocol version";
  }
  if (header_len < sizeof *out) return "a header of the wrong size";
  if (out->type < WIRE_HELLO || out->type >= WIRE__LAST) return "an unknown message type";
  if (out->type == WIRE_WRITE_MANY
          ? out->offset < 1 || out->offset > WIRE_HEADER_PIECES ||
                header_len != wire_many_header_size(out->offset)
          : header_len != sizeof *out)
    return "a header of the wrong size";
  if (out->flags & ~(WIRE_FLAG_RNDV | WIRE_FLAG_DEVICE)) return "unknown flags";
  switch (out->type) {
  case WIRE_HELLO:
  case WIRE_WELCOME:
  case WIRE_REPLY:
    if (payload_len > WIRE_MAX_TEXT) return "a text payload too long";
    break;
  case WIRE_WRITE:
  case WIRE_DATA:
    if (out->length > WIRE_CHUNK || payload_len != out->length) return "a payload that is not its length";
    break;
  case WIRE_READ:
    if (out->length > WIRE_CHUNK || payload_len) return "a read of the wrong length";
    break;
  case WIRE_WRITE_MANY: /* the pieces in the header (above), their bytes the payload */
    if (out->length > WIRE_CHUNK || payload_len != out->length)
      return "a batch's payload that is not its pieces";
    return NULL;
  case WIRE_READ_MANY:
  case WIRE_COPY_MANY: {
    /* the pieces: their ranges are the server's to check */
    uint64_t each = out->type == WIRE_COPY_MANY ? sizeof(wire_copy) : sizeof(wire_piece);
    if (out->offset < 1 || out->offset > WIRE_MANY_MAX) return "a batch of no pieces or too many";
    uint64_t listed = out->offset * each;
    if (payload_len != listed) return "a batch's payload that is not its pieces";
    if (out->type == WIRE_READ_MANY && out->length > WIRE_CHUNK) return "a read of the wrong length";
    return NULL;
  }
  default:
    if (payload_len) return "a payload where none belongs";
    break;
  }
  if ((out->type == WIRE_WRITE || out->type == WIRE_READ || out->type == WIRE_COPY ||
       out->type == WIRE_CRC) &&
      out->offset + out->length < out->offset)
    return "an offset that wraps";
  if (out->type == WIRE_COPY && out->src_offset + out->length < out->src_offset)
    return "an offset that wraps";
  return NULL;
}

#endif
