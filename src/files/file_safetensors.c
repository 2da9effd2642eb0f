/*
** file_safetensors.c -- safetensors (file_safetensors.h): an 8-byte little-endian length, a JSON
** header (json.c, strict) naming each tensor's dtype, shape and data_offsets, then the data.
** Read: every entry checked against the file; written: the tensors one after another, the
** header padded with spaces so that the data starts on an O_DIRECT block.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_safetensors.h"
#include "json.h"

/* safetensors' own limit: a header past 100 MB is refused before it is read */
#define SAFETENSORS_MAX_HEADER 100000000ull

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

static xfer_code safetensors_metadata(xfer_format_reading *r, const xfer_json *meta, long long at)
{
  if (meta->type != XFER_JSON_OBJECT)
    return xfer_format_bad(r, NULL, at, "__metadata__ is a %s, not an object of strings",
               xfer_json_type_name(meta->type));
  xfer_file_layout *l = r->out;
  l->meta_keys = calloc(meta->count ? meta->count : 1, sizeof *l->meta_keys);
  l->meta_values = calloc(meta->count ? meta->count : 1, sizeof *l->meta_values);
  if (!l->meta_keys || !l->meta_values) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  for (const xfer_json *m = meta->child; m; m = m->next) {
    if (m->type != XFER_JSON_STRING)
      return xfer_format_bad(r, NULL, at + (long long)m->at, "__metadata__ '%s' is a %s, not a string",
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

static xfer_code safetensors_entry(xfer_format_reading *r, const xfer_json *t, uint64_t data_start,
                                   long long header_at)
{
  const char *name = t->key;
  long long at = header_at + (long long)t->at;
  if (t->type != XFER_JSON_OBJECT)
    return xfer_format_bad(r, name, at, "its header entry is a %s, not an object",
               xfer_json_type_name(t->type));
  const xfer_json *dtype = xfer_json_get(t, "dtype"), *shape = xfer_json_get(t, "shape"),
                  *offsets = xfer_json_get(t, "data_offsets");
  if (!dtype || !shape || !offsets)
    return xfer_format_bad(r, name, at, "its header entry lacks %s", !dtype ? "dtype" : !shape ? "shape"
                                                                               : "data_offsets");
  if (dtype->type != XFER_JSON_STRING) return xfer_format_bad(r, name, at, "dtype is not a string");
  /* a NUL would cut the name (two names could become one, a tensor be lost) or the dtype */
  if (memchr(name, 0, t->key_len))
    return xfer_format_bad(r, NULL, at, "a tensor name holds a NUL byte (\\u0000)");
  if (memchr(dtype->text, 0, dtype->len))
    return xfer_format_bad(r, name, at, "its dtype holds a NUL byte (\\u0000)");
  xfer_format_entry *e = xfer_format_add_entry(r, name, t->key_len);
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
    return xfer_format_unsupported(r, name, at, what);
  }
  if (shape->type != XFER_JSON_ARRAY) return xfer_format_bad(r, name, at, "shape is not an array");
  if (shape->count > XFER_MAX_DIMS) {
    char what[80];
    snprintf(what, sizeof what, "%zu dimensions (at most %d)", shape->count, XFER_MAX_DIMS);
    return xfer_format_unsupported(r, name, at, what);
  }
  for (const xfer_json *d = shape->child; d; d = d->next) {
    if (d->type != XFER_JSON_NUMBER || !d->is_whole || d->whole < 0)
      return xfer_format_bad(r, name, at, "shape holds something other than a whole number >= 0");
    e->shape.dims[e->shape.ndim++] = d->whole;
  }
  if (offsets->type != XFER_JSON_ARRAY || offsets->count != 2 ||
      offsets->child->type != XFER_JSON_NUMBER || !offsets->child->is_uwhole ||
      offsets->child->next->type != XFER_JSON_NUMBER || !offsets->child->next->is_uwhole)
    return xfer_format_bad(r, name, at, "data_offsets is not two whole numbers [begin, end]");
  uint64_t begin = offsets->child->uwhole, end = offsets->child->next->uwhole;
  uint64_t data = r->size - data_start;
  if (begin > end) return xfer_format_bad(r, name, at, "data_offsets [%llu, %llu] end before they begin",
                              (unsigned long long)begin, (unsigned long long)end);
  long long at_data = (long long)data_start + (long long)begin;
  if (end > data)
    return xfer_format_bad(r, name, at_data,
               "data_offsets [%llu, %llu] reach past the data (%llu bytes: the file ends at "
               "byte %llu)", (unsigned long long)begin, (unsigned long long)end,
               (unsigned long long)data, (unsigned long long)r->size);
  int over;
  uint64_t want = xfer_format_shape_bytes(&e->shape, e->dtype, &over);
  if (over)
    return xfer_format_bad(r, name, at_data, "its shape and dtype make more than 2^64 bytes but "
                           "data_offsets hold %llu", (unsigned long long)(end - begin));
  if (want != end - begin)
    return xfer_format_bad(r, name, at_data, "its shape and dtype make %llu bytes but data_offsets "
                           "hold %llu", (unsigned long long)want, (unsigned long long)(end - begin));
  e->offset = data_start + begin;
  e->nbytes = e->stored = want;
  return XFER_E_OK;
}

xfer_code xfer_safetensors_read(xfer_format_reading *r)
{
  uint8_t head[8];
  if (r->size < 8) return xfer_format_bad(r, NULL, 0, "the file is truncated: %llu bytes, not even the "
                              "header's length", (unsigned long long)r->size);
  xfer_code code = xfer_fio_read(r->f, head, 8, 0, r->err);
  if (code) return code;
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | head[i];
  if (n > SAFETENSORS_MAX_HEADER)
    return xfer_format_bad(r, NULL, 0, "a header of %llu bytes (safetensors allows 100 MB)",
               (unsigned long long)n);
  if (n > r->size - 8)
    return xfer_format_bad(r, NULL, 0, "the file is truncated: the header says %llu bytes but the file has "
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
  if (!root) return xfer_format_bad(r, NULL, 8, "the header is not valid JSON: %s of the header", why);
  if (root->type != XFER_JSON_OBJECT) {
    xfer_json_free(root);
    return xfer_format_bad(r, NULL, 8, "the header is a JSON %s, not an object",
               xfer_json_type_name(root->type));
  }
  uint64_t data_start = 8 + n;
  for (const xfer_json *m = root->child; m && !code; m = m->next)
    code = !strcmp(m->key, "__metadata__") ? safetensors_metadata(r, m, 8 + (long long)m->at)
                                           : safetensors_entry(r, m, data_start, 8);
  xfer_json_free(root);
  return code ? code : xfer_format_check_overlaps(r);
}

xfer_code xfer_format_safetensors_header(const char *const *names, const xfer_dtype *dtypes,
                                         const xfer_shape *shapes, size_t n,
                                         const char *const *meta_keys,
                                         const char *const *meta_values, size_t nmeta,
                                         size_t align, size_t *value_at, char **out, size_t *len,
                                         xfer_error *err)
{
  xfer_text b = { 0 };
  xfer_text_put(&b, "\0\0\0\0\0\0\0\0{", 9); /* the length is written last */
  int first = 1;
  if (nmeta) {
    xfer_text_put(&b, "\"__metadata__\":{", 16);
    for (size_t i = 0; i < nmeta; i++) {
      if (i) xfer_text_put(&b, ",", 1);
      xfer_text_put_json_string(&b, meta_keys[i]);
      xfer_text_put(&b, ":", 1);
      if (value_at) value_at[i] = b.len + 1; /* the value's first character, after its quote */
      xfer_text_put_json_string(&b, meta_values[i]);
    }
    xfer_text_put(&b, "}", 1);
    first = 0;
  }
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    int over;
    uint64_t bytes = xfer_format_shape_bytes(&shapes[i], dtypes[i], &over);
    if (!first) xfer_text_put(&b, ",", 1);
    first = 0;
    xfer_text_put_json_string(&b, names[i]);
    xfer_text_putf(&b, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_name(dtypes[i]));
    for (int d = 0; d < shapes[i].ndim; d++)
      xfer_text_putf(&b, "%s%lld", d ? "," : "", (long long)shapes[i].dims[d]);
    xfer_text_putf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
         (unsigned long long)at + bytes);
    at += bytes;
  }
  xfer_text_put(&b, "}", 1);
  size_t total = xfer_pad_to(b.len, align);
  while (!b.failed && b.len < total) xfer_text_put(&b, " ", 1);
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

