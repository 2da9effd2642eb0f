/*
** json.c -- a strict recursive-descent JSON parser (json.h says how strict, and why).
** Nodes and unescaped strings live in one arena per document, freed at once.
*/
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* The arena: blocks of at least 64 KiB, each starting with a link to the one before. */
typedef struct arena_block {
  struct arena_block *prev;
  size_t used, cap;
  max_align_t data[];
} arena_block;

typedef struct {
  const char *text;
  size_t len, pos;
  int depth;
  arena_block *blocks;
  char *why;
  size_t cap;
  int failed;
} parser;

/* The root node is the first allocation of the first block: freeing walks from it. */
typedef struct {
  xfer_json node;
  arena_block *blocks;
} json_root;

static void *arena_take(parser *p, size_t size)
{
  size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  arena_block *b = p->blocks;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > 65536 ? size : 65536;
    arena_block *nb = malloc(sizeof *nb + cap);
    if (!nb) return NULL;
    nb->prev = b;
    nb->used = 0;
    nb->cap = cap;
    p->blocks = b = nb;
  }
  void *out = (char *)b->data + b->used;
  b->used += size;
  memset(out, 0, size);
  return out;
}

static void arena_free(arena_block *b)
{
  while (b) {
    arena_block *prev = b->prev;
    free(b);
    b = prev;
  }
}

__attribute__((format(printf, 2, 3))) static void *fail(parser *p, const char *fmt, ...)
{
  if (p->failed) return NULL;
  p->failed = 1;
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (p->why && p->cap) snprintf(p->why, p->cap, "%s at byte %zu", what, p->pos);
  return NULL;
}

static void skip_space(parser *p)
{
  while (p->pos < p->len) {
    char c = p->text[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->text[p->pos] : -1; }

static xfer_json *new_node(parser *p, xfer_json_type type)
{
  xfer_json *n = arena_take(p, sizeof *n);
  if (!n) return fail(p, "out of memory");
  n->type = type;
  n->at = p->pos;
  return n;
}

static int literal(parser *p, const char *word)
{
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->text + p->pos, word, n)) return 0;
  p->pos += n;
  return 1;
}

static int hex4(parser *p, unsigned *out)
{
  if (p->len - p->pos < 4) return 0;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->text[p->pos + (size_t)i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  p->pos += 4;
  *out = v;
  return 1;
}

static size_t put_utf8(char *dst, unsigned cp)
{
  if (cp < 0x80) { dst[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    dst[0] = (char)(0xE0 | (cp >> 12));
    dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  dst[0] = (char)(0xF0 | (cp >> 18));
  dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  dst[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 when it is not one:
** overlong forms, surrogates and code points past U+10FFFF are refused. */
static size_t utf8_length(const unsigned char *s, size_t n)
{
  unsigned c = s[0];
  size_t need;
  unsigned cp, min;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { need = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { need = 3; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { need = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if (n < need) return 0;
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return need;
}

/* A string at p->pos (the opening quote), unescaped into the arena. */
static char *parse_string(parser *p, size_t *len_out)
{
  p->pos++; /* the quote */
  size_t start = p->pos;
  /* The unescaped text is never longer than the escaped one. */
  size_t end = start;
  while (end < p->len && p->text[end] != '"') end += p->text[end] == '\\' ? 2 : 1;
  if (end >= p->len) return fail(p, "unterminated string");
  char *out = arena_take(p, end - start + 1);
  if (!out) return fail(p, "out of memory");
  size_t n = 0;
  while (p->pos < p->len) {
    unsigned char c = (unsigned char)p->text[p->pos];
    if (c == '"') {
      p->pos++;
      out[n] = '\0';
      *len_out = n;
      return out;
    }
    if (c < 0x20) return fail(p, "control character 0x%02x in a string", c);
    if (c != '\\') {
      size_t k = utf8_length((const unsigned char *)p->text + p->pos, p->len - p->pos);
      if (!k) return fail(p, "invalid UTF-8 in a string");
      memcpy(out + n, p->text + p->pos, k);
      n += k;
      p->pos += k;
      continue;
    }
    p->pos++;
    int e = peek(p);
    p->pos++;
    switch (e) {
    case '"': out[n++] = '"'; break;
    case '\\': out[n++] = '\\'; break;
    case '/': out[n++] = '/'; break;
    case 'b': out[n++] = '\b'; break;
    case 'f': out[n++] = '\f'; break;
    case 'n': out[n++] = '\n'; break;
    case 'r': out[n++] = '\r'; break;
    case 't': out[n++] = '\t'; break;
    case 'u': {
      unsigned cp;
      if (!hex4(p, &cp)) return fail(p, "bad \\u escape");
      if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone low surrogate in \\u escape");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned lo;
        if (!literal(p, "\\u") || !hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
          return fail(p, "high surrogate without its low half in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      n += put_utf8(out + n, cp); /* 6 or 12 escaped bytes give at most 4 */
      break;
    }
    default: p->pos--; return fail(p, "bad escape in a string");
    }
  }
  return fail(p, "unterminated string");
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static xfer_json *parse_number(parser *p)
{
  xfer_json *n = new_node(p, XFER_JSON_NUMBER);
  if (!n) return NULL;
  size_t start = p->pos;
  int negative = 0, whole = 1;
  if (peek(p) == '-') { negative = 1; p->pos++; }
  if (peek(p) == '0') {
    p->pos++;
    if (is_digit(peek(p))) return fail(p, "leading zero in a number");
  } else if (is_digit(peek(p))) {
    while (is_digit(peek(p))) p->pos++;
  } else {
    return fail(p, "bad number");
  }
  if (peek(p) == '.') {
    whole = 0;
    p->pos++;
    if (!is_digit(peek(p))) return fail(p, "no digits after the decimal point");
    while (is_digit(peek(p))) p->pos++;
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    whole = 0;
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-') p->pos++;
    if (!is_digit(peek(p))) return fail(p, "no digits in the exponent");
    while (is_digit(peek(p))) p->pos++;
  }
  char buf[64];
  size_t len = p->pos - start;
  if (len >= sizeof buf) {
    /* only a long literal: digits past double's precision still parse as a double */
    char *big = malloc(len + 1);
    if (!big) return fail(p, "out of memory");
    memcpy(big, p->text + start, len);
    big[len] = '\0';
    n->number = strtod(big, NULL);
    free(big);
  } else {
    memcpy(buf, p->text + start, len);
    buf[len] = '\0';
    n->number = strtod(buf, NULL);
  }
  n->negative = negative;
  if (whole) {
    /* exact integers: the digits again, checked for overflow */
    uint64_t u = 0;
    int over = 0;
    for (size_t i = start + (size_t)negative; i < p->pos; i++) {
      unsigned d = (unsigned)(p->text[i] - '0');
      if (u > (UINT64_MAX - d) / 10) { over = 1; break; }
      u = u * 10 + d;
    }
    if (!over) {
      if (!negative) { n->is_uwhole = 1; n->uwhole = u; }
      if (!negative && u <= (uint64_t)INT64_MAX) { n->is_whole = 1; n->whole = (int64_t)u; }
      if (negative && u <= (uint64_t)INT64_MAX + 1) {
        n->is_whole = 1;
        n->whole = u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u;
      }
    }
  }
  return n;
}

static xfer_json *parse_value(parser *p);

static int by_key(const void *a, const void *b)
{
  const xfer_json *x = *(const xfer_json *const *)a, *y = *(const xfer_json *const *)b;
  if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
  int c = memcmp(x->key, y->key, x->key_len);
  if (c) return c;
  return (x->at > y->at) - (x->at < y->at); /* equal keys: in the text's order */
}

/* Duplicates: a header naming a tensor twice is a header that lies. Sorted, not compared
** member by member: a header may hold 200k tensors (compared pairwise, 80k took 11 s). */
static xfer_json *unique_keys(parser *p, xfer_json *object)
{
  xfer_json **members = malloc(object->count * sizeof *members);
  if (!members) return fail(p, "out of memory for %zu keys", object->count);
  size_t n = 0;
  for (xfer_json *m = object->child; m; m = m->next) members[n++] = m;
  qsort(members, n, sizeof *members, by_key);
  for (size_t i = 1; i < n; i++)
    if (members[i]->key_len == members[i - 1]->key_len &&
        !memcmp(members[i]->key, members[i - 1]->key, members[i]->key_len)) {
      const xfer_json *dup = members[i];
      free(members);
      p->pos = dup->at; /* the second of them, as the message's place */
      return fail(p, "duplicate key \"%.60s\"", dup->key);
    }
  free(members);
  return object;
}

static xfer_json *parse_container(parser *p, int object)
{
  xfer_json *node = new_node(p, object ? XFER_JSON_OBJECT : XFER_JSON_ARRAY);
  if (!node) return NULL;
  if (++p->depth > XFER_JSON_MAX_DEPTH) return fail(p, "nested deeper than %d", XFER_JSON_MAX_DEPTH);
  p->pos++; /* [ or { */
  skip_space(p);
  xfer_json **tail = &node->child;
  char close = object ? '}' : ']';
  if (peek(p) == close) {
    p->pos++;
    p->depth--;
    return node;
  }
  for (;;) {
    char *key = NULL;
    size_t key_len = 0;
    if (object) {
      skip_space(p);
      if (peek(p) != '"') return fail(p, "expected a string key");
      key = parse_string(p, &key_len);
      if (!key) return NULL;
      skip_space(p);
      if (peek(p) != ':') return fail(p, "expected ':' after a key");
      p->pos++;
    }
    xfer_json *v = parse_value(p);
    if (!v) return NULL;
    v->key = key;
    v->key_len = key_len;
    *tail = v;
    tail = &v->next;
    node->count++;
    skip_space(p);
    int c = peek(p);
    if (c == ',') {
      p->pos++;
      skip_space(p);
      if (peek(p) == close) return fail(p, "trailing comma");
      continue;
    }
    if (c == close) {
      p->pos++;
      p->depth--;
      return object && node->count > 1 ? unique_keys(p, node) : node;
    }
    return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static xfer_json *parse_value(parser *p)
{
  skip_space(p);
  int c = peek(p);
  xfer_json *n;
  switch (c) {
  case '{': return parse_container(p, 1);
  case '[': return parse_container(p, 0);
  case '"':
    if (!(n = new_node(p, XFER_JSON_STRING))) return NULL;
    n->text = parse_string(p, &n->len);
    return n->text ? n : NULL;
  case 't':
    if (!literal(p, "true")) break;
    return new_node(p, XFER_JSON_TRUE);
  case 'f':
    if (!literal(p, "false")) break;
    return new_node(p, XFER_JSON_FALSE);
  case 'n':
    if (!literal(p, "null")) break;
    return new_node(p, XFER_JSON_NULL);
  case -1: return fail(p, "unexpected end of text");
  default:
    if (c == '-' || is_digit(c)) return parse_number(p);
  }
  return fail(p, "unexpected character '%c'", c >= 0x20 && c < 0x7f ? c : '?');
}

xfer_json *xfer_json_parse(const char *text, size_t len, char *why, size_t cap)
{
  parser p = { .text = text, .len = len, .why = why, .cap = cap };
  if (why && cap) why[0] = '\0';
  json_root *root = arena_take(&p, sizeof *root);
  if (!root) {
    if (why && cap) snprintf(why, cap, "out of memory");
    return NULL;
  }
  xfer_json *v = parse_value(&p);
  if (v) {
    skip_space(&p);
    if (p.pos != p.len) v = fail(&p, "text after the value");
  }
  if (!v) {
    arena_free(p.blocks);
    return NULL;
  }
  root->node = *v; /* the value's node copied into the root's place (children stay put) */
  root->blocks = p.blocks;
  return &root->node;
}

void xfer_json_free(xfer_json *node)
{
  if (node) arena_free(((json_root *)(void *)node)->blocks);
}

const xfer_json *xfer_json_get(const xfer_json *object, const char *key)
{
  if (!object || object->type != XFER_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (const xfer_json *m = object->child; m; m = m->next)
    if (m->key_len == n && !memcmp(m->key, key, n)) return m;
  return NULL;
}

const char *xfer_json_type_name(xfer_json_type type)
{
  static const char *const names[] = { "null", "false", "true", "number", "string", "array",
                                       "object" };
  return type <= XFER_JSON_OBJECT ? names[type] : "?";
}
