/*
** json.h -- a strict JSON parser (RFC 8259) for the headers of the files xferlua reads
** (safetensors). Layer 1 of docs/architecture.md: it calls nothing of the core.
**
** Strict on purpose: a header is input from outside, so nothing is guessed. No trailing
** commas, no comments, no leading zeros, no control characters or invalid UTF-8 in strings,
** escapes checked (surrogates paired), nesting at most XFER_JSON_MAX_DEPTH deep, duplicate
** keys in one object refused, nothing but white space after the value.
*/
#ifndef XFER_JSON_H
#define XFER_JSON_H

#include <stddef.h>
#include <stdint.h>

#define XFER_JSON_MAX_DEPTH 64

typedef enum {
  XFER_JSON_NULL, XFER_JSON_FALSE, XFER_JSON_TRUE, XFER_JSON_NUMBER, XFER_JSON_STRING,
  XFER_JSON_ARRAY, XFER_JSON_OBJECT
} xfer_json_type;

typedef struct xfer_json xfer_json;
struct xfer_json {
  xfer_json_type type;
  /* strings (and an object member's key): unescaped UTF-8, NUL-terminated, `len` bytes
  ** (a string may hold "\u0000": len tells) */
  char *text;
  size_t len;
  char *key;           /* the member's key when this node is an object's member, else NULL */
  size_t key_len;
  double number;
  int is_whole;        /* a number written without fraction or exponent that fits `whole` */
  int64_t whole;       /* ... its exact value (offsets past 2^53 stay exact) */
  int negative;        /* ... written with a minus sign ("-0" too) */
  uint64_t uwhole;     /* non-negative whole numbers up to 2^64 - 1 (safetensors offsets) */
  int is_uwhole;
  xfer_json *child;    /* arrays and objects: the first element or member */
  xfer_json *next;     /* the next sibling */
  size_t count;        /* arrays and objects: how many elements or members */
  size_t at;           /* byte offset of the value in the text (for messages) */
};

/* Parses `len` bytes of `text`. On success returns the root (free with xfer_json_free); on
** failure NULL, with `why` (cap bytes) saying what and at which byte. */
xfer_json *xfer_json_parse(const char *text, size_t len, char *why, size_t cap);
void xfer_json_free(xfer_json *root);
/* The member of an object named `key`, or NULL. */
const xfer_json *xfer_json_get(const xfer_json *object, const char *key);
const char *xfer_json_type_name(xfer_json_type type);

#endif
