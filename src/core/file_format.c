/*
** file_format.c -- reading and writing the headers of safetensors, .npy and .npz files
** (file_format.h). Nothing here moves tensor bytes: it says where they are.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef XFER_WITH_ZLIB
#include <zlib.h>
#endif

#include "file_format.h"
#include "json.h"

/* safetensors' own limit: a header past 100 MB is refused before it is read */
#define SAFETENSORS_MAX_HEADER 100000000ull
#define NPY_MAX_HEADER 1000000u

typedef struct {
  const xfer_fio *f;
  uint64_t size;
  xfer_file_layout *out;
  xfer_error *err;
} reading;

__attribute__((format(printf, 4, 5))) static xfer_code bad(reading *r, const char *tensor,
                                                           long long offset, const char *fmt,
                                                           ...)
{
  char cause[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cause, sizeof cause, fmt, ap);
  va_end(ap);
  xfer_error *err = r->err;
  if (!err) return XFER_E_INVALID;
  if (tensor)
    xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, r->f->path, offset,
                   "%s: tensor '%s': %s", r->f->path, tensor, cause);
  else
    xfer_fio_error(err, XFER_E_INVALID, XFER_OP_READ, 0, r->f->path, offset, "%s: %s",
                   r->f->path, cause);
  if (tensor) xfer_copy_text(err->tensor, sizeof err->tensor, tensor);
  return XFER_E_INVALID;
}

static xfer_code unsupported(reading *r, const char *tensor, long long offset, const char *what)
{
  bad(r, tensor, offset, "%s", what);
  if (r->err) r->err->code = XFER_E_UNSUPPORTED;
  return XFER_E_UNSUPPORTED;
}

const char *xfer_format_name(xfer_format_kind format)
{
  static const char *const names[] = { "safetensors", "npy", "npz" };
  return format <= XFER_FORMAT_NPZ ? names[format] : "?";
}

int xfer_format_of_path(const char *path)
{
  size_t n = strlen(path);
  static const struct { const char *ext; xfer_format_kind format; } exts[] = {
    { ".safetensors", XFER_FORMAT_SAFETENSORS }, { ".npy", XFER_FORMAT_NPY },
    { ".npz", XFER_FORMAT_NPZ } };
  for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
    size_t e = strlen(exts[i].ext);
    if (n > e && !strcmp(path + n - e, exts[i].ext)) return (int)exts[i].format;
  }
  return -1;
}

void xfer_format_free(xfer_file_layout *layout)
{
  if (!layout) return;
  for (size_t i = 0; i < layout->count; i++) free(layout->entries[i].name);
  free(layout->entries);
  for (size_t i = 0; i < layout->meta_count; i++) {
    free(layout->meta_keys[i]);
    free(layout->meta_values[i]);
  }
  free(layout->meta_keys);
  free(layout->meta_values);
  memset(layout, 0, sizeof *layout);
}

static xfer_format_entry *add_entry(reading *r, const char *name, size_t len)
{
  xfer_file_layout *l = r->out;
  xfer_format_entry *grown = realloc(l->entries, (l->count + 1) * sizeof *grown);
  if (!grown) return NULL;
  l->entries = grown;
  xfer_format_entry *e = &grown[l->count];
  memset(e, 0, sizeof *e);
  e->name = malloc(len + 1);
  if (!e->name) return NULL;
  memcpy(e->name, name, len);
  e->name[len] = '\0';
  l->count++;
  return e;
}

/* The elements' bytes of a shape, 0 with *over set when they do not fit in 64 bits. */
static uint64_t shape_bytes(const xfer_shape *shape, xfer_dtype dtype, int *over)
{
  uint64_t n = xfer_dtype_size(dtype);
  *over = 0;
  for (int d = 0; d < shape->ndim; d++) {
    uint64_t dim = (uint64_t)shape->dims[d];
    if (dim && n > UINT64_MAX / dim) { *over = 1; return 0; }
    n *= dim;
  }
  return n;
}

static int by_offset(const void *a, const void *b)
{
  const xfer_format_entry *x = *(xfer_format_entry *const *)a, *y = *(xfer_format_entry *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* No two entries' bytes overlap (empty ones take no room). */
static xfer_code check_overlaps(reading *r)
{
  xfer_file_layout *l = r->out;
  if (l->count < 2) return XFER_E_OK;
  xfer_format_entry **order = malloc(l->count * sizeof *order);
  if (!order) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  for (size_t i = 0; i < l->count; i++) order[i] = &l->entries[i];
  qsort(order, l->count, sizeof *order, by_offset);
  xfer_code code = XFER_E_OK;
  const xfer_format_entry *last = NULL;
  for (size_t i = 0; i < l->count && !code; i++) {
    const xfer_format_entry *e = order[i];
    if (!e->stored) continue;
    if (last && e->offset < last->offset + last->stored)
      code = bad(r, e->name, (long long)e->offset,
                 "its bytes [%llu, %llu) overlap those of '%s' [%llu, %llu)",
                 (unsigned long long)e->offset, (unsigned long long)e->offset + e->stored,
                 last->name, (unsigned long long)last->offset,
                 (unsigned long long)last->offset + last->stored);
    last = e;
  }
  free(order);
  return code;
}

/* -- safetensors ------------------------------------------------------------------------- */

static const struct { const char *name; xfer_dtype dtype; } safetensors_dtypes[] = {
  { "F16", XFER_F16 }, { "BF16", XFER_BF16 }, { "F32", XFER_F32 }, { "F64", XFER_F64 },
  { "I8", XFER_I8 }, { "I16", XFER_I16 }, { "I32", XFER_I32 }, { "I64", XFER_I64 },
  { "U8", XFER_U8 }, { "U16", XFER_U16 }, { "U32", XFER_U32 }, { "U64", XFER_U64 },
  { "BOOL", XFER_BOOL } };

static const char *safetensors_dtype_name(xfer_dtype dtype)
{
  for (size_t i = 0; i < sizeof safetensors_dtypes / sizeof safetensors_dtypes[0]; i++)
    if (safetensors_dtypes[i].dtype == dtype) return safetensors_dtypes[i].name;
  return NULL;
}

static xfer_code safetensors_metadata(reading *r, const xfer_json *meta, long long at)
{
  if (meta->type != XFER_JSON_OBJECT)
    return bad(r, NULL, at, "__metadata__ is a %s, not an object of strings",
               xfer_json_type_name(meta->type));
  xfer_file_layout *l = r->out;
  l->meta_keys = calloc(meta->count ? meta->count : 1, sizeof *l->meta_keys);
  l->meta_values = calloc(meta->count ? meta->count : 1, sizeof *l->meta_values);
  if (!l->meta_keys || !l->meta_values) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  for (const xfer_json *m = meta->child; m; m = m->next) {
    if (m->type != XFER_JSON_STRING)
      return bad(r, NULL, at + (long long)m->at, "__metadata__ '%s' is a %s, not a string",
                 m->key, xfer_json_type_name(m->type));
    l->meta_keys[l->meta_count] = strdup(m->key);
    l->meta_values[l->meta_count] = malloc(m->len + 1);
    if (!l->meta_keys[l->meta_count] || !l->meta_values[l->meta_count]) {
      free(l->meta_keys[l->meta_count]);
      free(l->meta_values[l->meta_count]);
      return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
    }
    memcpy(l->meta_values[l->meta_count], m->text, m->len + 1);
    l->meta_count++;
  }
  return XFER_E_OK;
}

static xfer_code safetensors_entry(reading *r, const xfer_json *t, uint64_t data_start,
                                   long long header_at)
{
  const char *name = t->key;
  long long at = header_at + (long long)t->at;
  if (t->type != XFER_JSON_OBJECT)
    return bad(r, name, at, "its header entry is a %s, not an object",
               xfer_json_type_name(t->type));
  const xfer_json *dtype = xfer_json_get(t, "dtype"), *shape = xfer_json_get(t, "shape"),
                  *offsets = xfer_json_get(t, "data_offsets");
  if (!dtype || !shape || !offsets)
    return bad(r, name, at, "its header entry lacks %s", !dtype ? "dtype" : !shape ? "shape"
                                                                               : "data_offsets");
  if (dtype->type != XFER_JSON_STRING) return bad(r, name, at, "dtype is not a string");
  xfer_format_entry *e = add_entry(r, name, t->key_len);
  if (!e) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  int known = 0;
  for (size_t i = 0; i < sizeof safetensors_dtypes / sizeof safetensors_dtypes[0]; i++)
    if (!strcmp(dtype->text, safetensors_dtypes[i].name)) {
      e->dtype = safetensors_dtypes[i].dtype;
      known = 1;
    }
  if (!known) {
    char what[200];
    snprintf(what, sizeof what, "unknown dtype '%.40s' (xferlua reads F16 BF16 F32 F64 I8 I16 "
             "I32 I64 U8 U16 U32 U64 BOOL)", dtype->text);
    return unsupported(r, name, at, what);
  }
  if (shape->type != XFER_JSON_ARRAY) return bad(r, name, at, "shape is not an array");
  if (shape->count > XFER_MAX_DIMS) {
    char what[80];
    snprintf(what, sizeof what, "%zu dimensions (at most %d)", shape->count, XFER_MAX_DIMS);
    return unsupported(r, name, at, what);
  }
  for (const xfer_json *d = shape->child; d; d = d->next) {
    if (d->type != XFER_JSON_NUMBER || !d->is_whole || d->whole < 0)
      return bad(r, name, at, "shape holds something other than a whole number >= 0");
    e->shape.dims[e->shape.ndim++] = d->whole;
  }
  if (offsets->type != XFER_JSON_ARRAY || offsets->count != 2 ||
      offsets->child->type != XFER_JSON_NUMBER || !offsets->child->is_uwhole ||
      offsets->child->next->type != XFER_JSON_NUMBER || !offsets->child->next->is_uwhole)
    return bad(r, name, at, "data_offsets is not two whole numbers [begin, end]");
  uint64_t begin = offsets->child->uwhole, end = offsets->child->next->uwhole;
  uint64_t data = r->size - data_start;
  if (begin > end) return bad(r, name, at, "data_offsets [%llu, %llu] end before they begin",
                              (unsigned long long)begin, (unsigned long long)end);
  long long at_data = (long long)data_start + (long long)begin;
  if (end > data)
    return bad(r, name, at_data,
               "data_offsets [%llu, %llu] reach past the data (%llu bytes: the file ends at "
               "byte %llu)", (unsigned long long)begin, (unsigned long long)end,
               (unsigned long long)data, (unsigned long long)r->size);
  int over;
  uint64_t want = shape_bytes(&e->shape, e->dtype, &over);
  if (over || want != end - begin)
    return bad(r, name, at_data,
               "its shape and dtype make %s bytes but data_offsets hold %llu",
               over ? "more than 2^64" : "", (unsigned long long)(end - begin));
  e->offset = data_start + begin;
  e->nbytes = e->stored = want;
  return XFER_E_OK;
}

static xfer_code read_safetensors(reading *r)
{
  uint8_t head[8];
  if (r->size < 8) return bad(r, NULL, 0, "the file is truncated: %llu bytes, not even the "
                              "header's length", (unsigned long long)r->size);
  xfer_code code = xfer_fio_read(r->f, head, 8, 0, r->err);
  if (code) return code;
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | head[i];
  if (n > SAFETENSORS_MAX_HEADER)
    return bad(r, NULL, 0, "a header of %llu bytes (safetensors allows 100 MB)",
               (unsigned long long)n);
  if (n > r->size - 8)
    return bad(r, NULL, 0, "the file is truncated: the header says %llu bytes but the file has "
               "%llu after the length", (unsigned long long)n, (unsigned long long)(r->size - 8));
  char *text = malloc(n + 1);
  if (!text) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  code = xfer_fio_read(r->f, text, n, 8, r->err);
  if (code) {
    free(text);
    return code;
  }
  char why[240];
  xfer_json *root = xfer_json_parse(text, n, why, sizeof why);
  free(text);
  if (!root) return bad(r, NULL, 8, "the header is not valid JSON: %s of the header", why);
  if (root->type != XFER_JSON_OBJECT) {
    xfer_json_free(root);
    return bad(r, NULL, 8, "the header is a JSON %s, not an object",
               xfer_json_type_name(root->type));
  }
  uint64_t data_start = 8 + n;
  for (const xfer_json *m = root->child; m && !code; m = m->next)
    code = !strcmp(m->key, "__metadata__") ? safetensors_metadata(r, m, 8 + (long long)m->at)
                                           : safetensors_entry(r, m, data_start, 8);
  xfer_json_free(root);
  return code ? code : check_overlaps(r);
}

/* -- .npy ---------------------------------------------------------------------------------- */

typedef struct {
  const char *s;
  size_t len, pos;
} literal;

static void lit_space(literal *l)
{
  while (l->pos < l->len && (l->s[l->pos] == ' ' || l->s[l->pos] == '\n' || l->s[l->pos] == '\t'))
    l->pos++;
}

static int lit_char(literal *l, char c)
{
  lit_space(l);
  if (l->pos < l->len && l->s[l->pos] == c) {
    l->pos++;
    return 1;
  }
  return 0;
}

/* A quoted Python string (no escapes: NumPy's keys and descr have none) into buf. */
static int lit_string(literal *l, char *buf, size_t cap)
{
  lit_space(l);
  if (l->pos >= l->len || (l->s[l->pos] != '\'' && l->s[l->pos] != '"')) return 0;
  char q = l->s[l->pos++];
  size_t n = 0;
  while (l->pos < l->len && l->s[l->pos] != q) {
    if (l->s[l->pos] == '\\' || n + 1 >= cap) return 0;
    buf[n++] = l->s[l->pos++];
  }
  if (l->pos >= l->len) return 0;
  l->pos++;
  buf[n] = '\0';
  return 1;
}

static int lit_word(literal *l, const char *word)
{
  lit_space(l);
  size_t n = strlen(word);
  if (l->len - l->pos >= n && !memcmp(l->s + l->pos, word, n)) {
    l->pos += n;
    return 1;
  }
  return 0;
}

static const struct { char kind; int size; xfer_dtype dtype; } npy_kinds[] = {
  { 'f', 2, XFER_F16 }, { 'f', 4, XFER_F32 }, { 'f', 8, XFER_F64 }, { 'i', 1, XFER_I8 },
  { 'i', 2, XFER_I16 }, { 'i', 4, XFER_I32 }, { 'i', 8, XFER_I64 }, { 'u', 1, XFER_U8 },
  { 'u', 2, XFER_U16 }, { 'u', 4, XFER_U32 }, { 'u', 8, XFER_U64 }, { 'b', 1, XFER_BOOL } };

/* The array's header at `at` (the magic's first byte), read through `rd` (`avail` bytes
** there): the entry's dtype, shape, fortran flag and the data's offset from `at`. */
static xfer_code parse_npy(reading *r, const char *name, const uint8_t *rd, size_t avail,
                           long long at, xfer_format_entry *e, size_t *data_from)
{
  if (avail < 10 || memcmp(rd, "\x93NUMPY", 6))
    return bad(r, name, at, "not an .npy array (no \\x93NUMPY magic)");
  unsigned major = rd[6];
  size_t hlen, hstart;
  if (major == 1) { hlen = rd[8] | (size_t)rd[9] << 8; hstart = 10; }
  else if (major == 2 || major == 3) {
    if (avail < 12) return bad(r, name, at, "the file is truncated inside the .npy preamble");
    hlen = rd[8] | (size_t)rd[9] << 8 | (size_t)rd[10] << 16 | (size_t)rd[11] << 24;
    hstart = 12;
  } else {
    char what[60];
    snprintf(what, sizeof what, ".npy format version %u (xferlua reads 1, 2 and 3)", major);
    return unsupported(r, name, at, what);
  }
  if (hlen > NPY_MAX_HEADER) return bad(r, name, at, "an .npy header of %zu bytes", hlen);
  if (hstart + hlen > avail)
    return bad(r, name, at, "the file is truncated inside the .npy header (%zu bytes)", hlen);
  literal l = { (const char *)rd + hstart, hlen, 0 };
  char key[32], descr[32] = "";
  int have_descr = 0, have_order = 0, have_shape = 0;
  if (!lit_char(&l, '{')) return bad(r, name, at + (long long)hstart, "the .npy header is not a dict");
  while (!lit_char(&l, '}')) {
    if (!lit_string(&l, key, sizeof key) || !lit_char(&l, ':'))
      return bad(r, name, at + (long long)(hstart + l.pos), "bad key in the .npy header");
    if (!strcmp(key, "descr")) {
      if (!lit_string(&l, descr, sizeof descr))
        return unsupported(r, name, at, "a structured dtype (xferlua reads plain arrays)");
      have_descr = 1;
    } else if (!strcmp(key, "fortran_order")) {
      if (lit_word(&l, "True")) e->fortran = 1;
      else if (!lit_word(&l, "False"))
        return bad(r, name, at + (long long)(hstart + l.pos), "fortran_order is not True/False");
      have_order = 1;
    } else if (!strcmp(key, "shape")) {
      if (!lit_char(&l, '(')) return bad(r, name, at, "shape is not a tuple");
      while (!lit_char(&l, ')')) {
        lit_space(&l);
        uint64_t v = 0;
        size_t digits = 0;
        while (l.pos < l.len && l.s[l.pos] >= '0' && l.s[l.pos] <= '9') {
          if (v > (UINT64_MAX / 2 - 9) / 10) return bad(r, name, at, "a dimension too large");
          v = v * 10 + (uint64_t)(l.s[l.pos++] - '0');
          digits++;
        }
        if (!digits) return bad(r, name, at, "shape holds something other than whole numbers");
        if (e->shape.ndim == XFER_MAX_DIMS)
          return unsupported(r, name, at, "more than 8 dimensions");
        e->shape.dims[e->shape.ndim++] = (int64_t)v;
        if (!lit_char(&l, ',') && !(lit_space(&l), l.pos < l.len && l.s[l.pos] == ')'))
          return bad(r, name, at, "bad shape tuple");
      }
      have_shape = 1;
    } else {
      return bad(r, name, at, "unknown key '%s' in the .npy header", key);
    }
    if (!lit_char(&l, ',')) {
      if (!lit_char(&l, '}')) return bad(r, name, at, "expected ',' or '}' in the .npy header");
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return bad(r, name, at, "the .npy header lacks %s", !have_descr ? "descr"
                                                        : !have_order ? "fortran_order" : "shape");
  char order = descr[0], kind = descr[1];
  int size = atoi(descr + 2);
  if (order == '>' && size > 1)
    return unsupported(r, name, at, "a big-endian array (xferlua reads little-endian ones)");
  int known = 0;
  if ((order == '<' || order == '|' || order == '=' || order == '>') && strlen(descr) >= 3)
    for (size_t i = 0; i < sizeof npy_kinds / sizeof npy_kinds[0]; i++)
      if (npy_kinds[i].kind == kind && npy_kinds[i].size == size) {
        e->dtype = npy_kinds[i].dtype;
        known = 1;
      }
  if (!known) {
    char what[80];
    snprintf(what, sizeof what, "the NumPy dtype '%.20s' (xferlua reads f2 f4 f8 i1-i8 u1-u8 b1)",
             descr);
    return unsupported(r, name, at, what);
  }
  int over;
  e->nbytes = shape_bytes(&e->shape, e->dtype, &over);
  if (over) return bad(r, name, at, "its shape holds more than 2^64 bytes");
  *data_from = hstart + hlen;
  return XFER_E_OK;
}

/* The first bytes of an array at `at`, enough for its header. */
static xfer_code npy_head(reading *r, uint64_t at, uint64_t limit, uint8_t **out, size_t *avail)
{
  size_t want = (size_t)(limit - at < 65536 ? limit - at : 65536);
  uint8_t *buf = malloc(want ? want : 1);
  if (!buf) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  xfer_code code = xfer_fio_read(r->f, buf, want, at, r->err);
  if (code) {
    free(buf);
    return code;
  }
  /* a longer header (up to NPY_MAX_HEADER) is read whole */
  size_t hlen = want >= 12 && buf[6] >= 2 ? (buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                                             (size_t)buf[11] << 24) + 12
                                          : want >= 10 ? (buf[8] | (size_t)buf[9] << 8) + 10u : 0;
  if (hlen > want && hlen <= NPY_MAX_HEADER + 12 && at + hlen <= limit) {
    uint8_t *more = realloc(buf, hlen);
    if (!more) {
      free(buf);
      return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
    }
    buf = more;
    code = xfer_fio_read(r->f, buf, hlen, at, r->err);
    if (code) {
      free(buf);
      return code;
    }
    want = hlen;
  }
  *out = buf;
  *avail = want;
  return XFER_E_OK;
}

static xfer_code read_npy(reading *r)
{
  uint8_t *head = NULL;
  size_t avail = 0;
  xfer_code code = npy_head(r, 0, r->size, &head, &avail);
  if (code) return code;
  xfer_format_entry *e = add_entry(r, "", 0);
  size_t from = 0;
  if (!e) code = xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  else code = parse_npy(r, NULL, head, avail, 0, e, &from);
  free(head);
  if (code) return code;
  e->offset = from;
  e->stored = e->nbytes;
  if (e->offset + e->nbytes > r->size)
    return bad(r, NULL, (long long)r->size, "the file is truncated: the array needs %llu bytes "
               "after its header, the file has %llu", (unsigned long long)e->nbytes,
               (unsigned long long)(r->size - e->offset));
  return XFER_E_OK;
}

/* -- .npz ---------------------------------------------------------------------------------- */

static uint32_t le16(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

/* The central directory: where it is and how many entries, zip64 or not. */
static xfer_code zip_directory(reading *r, uint64_t *cd_at, uint64_t *cd_size, uint64_t *count)
{
  size_t tail = (size_t)(r->size < 65557 ? r->size : 65557);
  uint8_t *buf = malloc(tail);
  if (!buf) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  uint64_t tail_at = r->size - tail;
  xfer_code code = xfer_fio_read(r->f, buf, tail, tail_at, r->err);
  if (code) {
    free(buf);
    return code;
  }
  long eocd = -1;
  for (long i = (long)tail - 22; i >= 0; i--)
    if (le32(buf + i) == 0x06054b50) { eocd = i; break; }
  if (eocd < 0) {
    free(buf);
    return bad(r, NULL, (long long)r->size, "not a zip file (.npz): no end of central directory");
  }
  *count = le16(buf + eocd + 10);
  *cd_size = le32(buf + eocd + 12);
  *cd_at = le32(buf + eocd + 16);
  int zip64 = *count == 0xFFFF || *cd_size == 0xFFFFFFFFu || *cd_at == 0xFFFFFFFFu;
  if (zip64) {
    if (eocd < 20 || le32(buf + eocd - 20) != 0x07064b50) {
      free(buf);
      return bad(r, NULL, (long long)tail_at + eocd, "zip64 without its locator");
    }
    uint64_t rec = le64(buf + eocd - 20 + 8);
    uint8_t z[56];
    free(buf);
    if (rec + 56 > r->size) return bad(r, NULL, (long long)rec, "zip64 record past the end");
    if ((code = xfer_fio_read(r->f, z, 56, rec, r->err))) return code;
    if (le32(z) != 0x06064b50) return bad(r, NULL, (long long)rec, "bad zip64 record");
    *count = le64(z + 32);
    *cd_size = le64(z + 40);
    *cd_at = le64(z + 48);
  } else {
    free(buf);
  }
  if (*cd_at > r->size || *cd_size > r->size - *cd_at)
    return bad(r, NULL, (long long)*cd_at, "the central directory lies past the end");
  return XFER_E_OK;
}

#ifdef XFER_WITH_ZLIB
/* The first bytes of a deflated member, inflated: enough for its .npy header. */
static xfer_code inflate_head(reading *r, const char *name, uint64_t at, uint64_t stored,
                              uint8_t **out, size_t *avail)
{
  size_t in_len = (size_t)(stored < 1u << 20 ? stored : 1u << 20);
  size_t out_cap = NPY_MAX_HEADER + 16;
  uint8_t *in = malloc(in_len ? in_len : 1), *buf = malloc(out_cap);
  xfer_code code = !in || !buf ? xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ)
                               : xfer_fio_read(r->f, in, in_len, at, r->err);
  if (!code) {
    z_stream z;
    memset(&z, 0, sizeof z);
    z.next_in = in;
    z.avail_in = (uInt)in_len;
    z.next_out = buf;
    z.avail_out = (uInt)out_cap;
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) code = bad(r, name, (long long)at, "inflateInit2");
    else {
      int zr = inflate(&z, Z_SYNC_FLUSH);
      if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
        code = bad(r, name, (long long)at, "the deflated member is corrupt (%s)", z.msg ? z.msg : "?");
      *avail = out_cap - z.avail_out;
      inflateEnd(&z);
    }
  }
  free(in);
  if (code) free(buf);
  else *out = buf;
  return code;
}
#endif

static xfer_code zip_member(reading *r, const uint8_t *c, uint64_t c_at, size_t *used)
{
  if (le32(c) != 0x02014b50) return bad(r, NULL, (long long)c_at, "bad central directory entry");
  unsigned flags = le16(c + 8), method = le16(c + 10);
  uint64_t csize = le32(c + 20), usize = le32(c + 24);
  size_t name_len = le16(c + 28), extra_len = le16(c + 30), comment_len = le16(c + 32);
  uint64_t local = le32(c + 42);
  *used = 46 + name_len + extra_len + comment_len;
  const uint8_t *extra = c + 46 + name_len;
  for (size_t i = 0; i + 4 <= extra_len;) { /* zip64's sizes, as the entry says which */
    unsigned id = le16(extra + i), len = le16(extra + i + 2);
    if (id == 1) {
      size_t k = i + 4;
      if (usize == 0xFFFFFFFFu && k + 8 <= i + 4 + len) { usize = le64(extra + k); k += 8; }
      if (csize == 0xFFFFFFFFu && k + 8 <= i + 4 + len) { csize = le64(extra + k); k += 8; }
      if (local == 0xFFFFFFFFu && k + 8 <= i + 4 + len) local = le64(extra + k);
    }
    i += 4 + len;
  }
  char name[256];
  if (name_len >= sizeof name) return bad(r, NULL, (long long)c_at, "a member's name too long");
  memcpy(name, c + 46, name_len);
  name[name_len] = '\0';
  if (name_len < 4 || strcmp(name + name_len - 4, ".npy"))
    return bad(r, name, (long long)c_at, "a member that is not an .npy array");
  name[name_len - 4] = '\0';
  if (flags & 1) return unsupported(r, name, (long long)c_at, "an encrypted member");
  if (method != 0 && method != 8)
    return unsupported(r, name, (long long)c_at, "a member compressed other than by deflate");
  uint8_t lh[30];
  if (local + 30 > r->size) return bad(r, name, (long long)local, "its local header lies past the end");
  xfer_code code = xfer_fio_read(r->f, lh, 30, local, r->err);
  if (code) return code;
  if (le32(lh) != 0x04034b50) return bad(r, name, (long long)local, "bad local header");
  uint64_t data = local + 30 + le16(lh + 26) + le16(lh + 28);
  if (data > r->size || csize > r->size - data)
    return bad(r, name, (long long)data, "the file is truncated: the member's %llu bytes reach "
               "past the end", (unsigned long long)csize);
  xfer_format_entry *e = add_entry(r, name, strlen(name));
  if (!e) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  uint8_t *head = NULL;
  size_t avail = 0, from = 0;
  if (method == 0) {
    code = npy_head(r, data, data + csize, &head, &avail);
  } else {
#ifdef XFER_WITH_ZLIB
    code = inflate_head(r, name, data, csize, &head, &avail);
#else
    return unsupported(r, name, (long long)data, "a deflated member (savez_compressed): this "
                       "build has no zlib");
#endif
  }
  if (!code) code = parse_npy(r, name, head, avail, (long long)data, e, &from);
  free(head);
  if (code) return code;
  if (e->nbytes + from != usize)
    return bad(r, name, (long long)data, "the member holds %llu bytes but its header says %llu",
               (unsigned long long)usize, (unsigned long long)e->nbytes + from);
  e->deflated = method == 8;
  e->inflated_skip = e->deflated ? from : 0;
  e->offset = e->deflated ? data : data + from;
  e->stored = e->deflated ? csize : e->nbytes;
  return XFER_E_OK;
}

static xfer_code read_npz(reading *r)
{
  uint64_t cd_at = 0, cd_size = 0, count = 0;
  xfer_code code = zip_directory(r, &cd_at, &cd_size, &count);
  if (code) return code;
  if (cd_size > (64u << 20)) return bad(r, NULL, (long long)cd_at, "a central directory of %llu bytes",
                                        (unsigned long long)cd_size);
  uint8_t *cd = malloc(cd_size + 1);
  if (!cd) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  code = xfer_fio_read(r->f, cd, cd_size, cd_at, r->err);
  size_t at = 0;
  for (uint64_t i = 0; i < count && !code; i++) {
    if (at + 46 > cd_size) {
      code = bad(r, NULL, (long long)cd_at + (long long)at, "the central directory ends early");
      break;
    }
    size_t used = 0;
    if (46 + (size_t)le16(cd + at + 28) + le16(cd + at + 30) + le16(cd + at + 32) > cd_size - at) {
      code = bad(r, NULL, (long long)cd_at + (long long)at, "a central directory entry past its end");
      break;
    }
    code = zip_member(r, cd + at, cd_at + at, &used);
    at += used;
  }
  free(cd);
  if (code) return code;
  /* two members of one name: the archive lies about which is which */
  for (size_t i = 0; i < r->out->count; i++)
    for (size_t j = i + 1; j < r->out->count; j++)
      if (!strcmp(r->out->entries[i].name, r->out->entries[j].name))
        return bad(r, r->out->entries[j].name, (long long)r->out->entries[j].offset,
                   "two members of this name");
  return check_overlaps(r);
}

xfer_code xfer_format_read(const xfer_fio *f, uint64_t size, xfer_file_layout *out,
                           xfer_error *err)
{
  memset(out, 0, sizeof *out);
  out->size = size;
  reading r = { f, size, out, err };
  uint8_t magic[8] = { 0 };
  xfer_code code = xfer_fio_read(f, magic, size < 8 ? (size_t)size : 8, 0, err);
  if (code) return code;
  if (size >= 6 && !memcmp(magic, "\x93NUMPY", 6)) {
    out->format = XFER_FORMAT_NPY;
    code = read_npy(&r);
  } else if (size >= 4 && le32(magic) == 0x04034b50) {
    out->format = XFER_FORMAT_NPZ;
    code = read_npz(&r);
  } else if (size >= 9) {
    out->format = XFER_FORMAT_SAFETENSORS;
    /* a safetensors header's JSON starts with '{' right after its length */
    uint8_t brace;
    code = xfer_fio_read(f, &brace, 1, 8, err);
    if (!code && brace != '{')
      code = bad(&r, NULL, 0, "not a tensor file: neither safetensors (8-byte length, then a JSON "
                 "object), .npy nor .npz");
    if (!code) code = read_safetensors(&r);
  } else {
    code = bad(&r, NULL, 0, "not a tensor file (%llu bytes): neither safetensors, .npy nor .npz",
               (unsigned long long)size);
  }
  if (code) xfer_format_free(out);
  return code;
}

/* -- writing -------------------------------------------------------------------------------- */

typedef struct {
  char *s;
  size_t len, cap;
  int failed;
} text_buf;

static void put(text_buf *b, const char *s, size_t n)
{
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *grown = realloc(b->s, cap);
    if (!grown) { b->failed = 1; return; }
    b->s = grown;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void putf(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(text_buf *b, const char *fmt, ...)
{
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void put_json_string(text_buf *b, const char *s)
{
  put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { put(b, "\\", 1); put(b, s, 1); }
    else if (c < 0x20) putf(b, "\\u%04x", c);
    else put(b, s, 1);
  }
  put(b, "\"", 1);
}

static size_t pad_to(size_t n, size_t align) { return (n + align - 1) / align * align; }

xfer_code xfer_format_safetensors_header(const char *const *names, const xfer_dtype *dtypes,
                                         const xfer_shape *shapes, size_t n,
                                         const char *const *meta_keys,
                                         const char *const *meta_values, size_t nmeta,
                                         size_t align, char **out, size_t *len, xfer_error *err)
{
  text_buf b = { 0 };
  put(&b, "\0\0\0\0\0\0\0\0{", 9); /* the length is written last */
  int first = 1;
  if (nmeta) {
    put(&b, "\"__metadata__\":{", 16);
    for (size_t i = 0; i < nmeta; i++) {
      if (i) put(&b, ",", 1);
      put_json_string(&b, meta_keys[i]);
      put(&b, ":", 1);
      put_json_string(&b, meta_values[i]);
    }
    put(&b, "}", 1);
    first = 0;
  }
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    int over;
    uint64_t bytes = shape_bytes(&shapes[i], dtypes[i], &over);
    if (!first) put(&b, ",", 1);
    first = 0;
    put_json_string(&b, names[i]);
    putf(&b, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_name(dtypes[i]));
    for (int d = 0; d < shapes[i].ndim; d++)
      putf(&b, "%s%lld", d ? "," : "", (long long)shapes[i].dims[d]);
    putf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
         (unsigned long long)at + bytes);
    at += bytes;
  }
  put(&b, "}", 1);
  size_t total = pad_to(b.len, align);
  while (!b.failed && b.len < total) put(&b, " ", 1);
  if (b.failed) {
    free(b.s);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  }
  uint64_t hlen = b.len - 8;
  for (int i = 0; i < 8; i++) b.s[i] = (char)(hlen >> (8 * i));
  *out = b.s;
  *len = b.len;
  return XFER_E_OK;
}

xfer_code xfer_format_npy_header(xfer_dtype dtype, const xfer_shape *shape, size_t align,
                                 char **out, size_t *len, xfer_error *err)
{
  const char *descr = NULL;
  static const char *const descrs[XFER_DTYPE__COUNT] = {
    [XFER_F16] = "<f2", [XFER_F32] = "<f4", [XFER_F64] = "<f8", [XFER_I8] = "|i1",
    [XFER_I16] = "<i2", [XFER_I32] = "<i4", [XFER_I64] = "<i8", [XFER_U8] = "|u1",
    [XFER_U16] = "<u2", [XFER_U32] = "<u4", [XFER_U64] = "<u8", [XFER_BOOL] = "|b1" };
  if ((unsigned)dtype < XFER_DTYPE__COUNT) descr = descrs[dtype];
  if (!descr)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_WRITE,
                       "%s has no NumPy dtype: save it to .safetensors, or convert it first "
                       "(t:to(t.device, {dtype = \"f32\"}))", xfer_dtype_name(dtype));
  text_buf dict = { 0 };
  putf(&dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int d = 0; d < shape->ndim; d++)
    putf(&dict, "%lld,%s", (long long)shape->dims[d], shape->ndim > 1 && d + 1 < shape->ndim ? " " : "");
  put(&dict, "), }", 4);
  if (dict.failed) {
    free(dict.s);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  }
  /* version 1.0 has a 16-bit length; the dict, its padding and the newline must fit */
  size_t pre = pad_to(10 + dict.len + 1, align) - 10 <= 65535 ? 10 : 12;
  size_t total = pad_to(pre + dict.len + 1, align);
  char *h = malloc(total);
  if (!h) {
    free(dict.s);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  }
  size_t hlen = total - pre;
  memcpy(h, "\x93NUMPY", 6);
  h[6] = pre == 10 ? 1 : 2;
  h[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) h[8 + i] = (char)(hlen >> (8 * i));
  memcpy(h + pre, dict.s, dict.len);
  memset(h + pre + dict.len, ' ', hlen - dict.len - 1);
  h[total - 1] = '\n';
  free(dict.s);
  *out = h;
  *len = total;
  return XFER_E_OK;
}
