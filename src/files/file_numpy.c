/*
** file_numpy.c -- NumPy's files (file_numpy.h): .npy (a magic, a Python dict literal saying
** descr, fortran_order and shape, then the elements) and .npz (a zip of .npy members, stored or
** deflated; zip64 read); and the .npy header written.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef XFER_WITH_ZLIB
#include <zlib.h>
#endif

#include "file_numpy.h"

#define NPY_MAX_HEADER 1000000u

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

/* The .npy preamble after the magic: the header's length and where it starts (by version). */
static xfer_code npy_preamble(xfer_format_reading *r, const char *name, const uint8_t *rd,
                              size_t avail, long long at, size_t *hlen, size_t *hstart)
{
  unsigned major = rd[6];
  if (major == 1) { *hlen = rd[8] | (size_t)rd[9] << 8; *hstart = 10; }
  else if (major == 2 || major == 3) {
    if (avail < 12) return xfer_format_bad(r, name, at, "the file is truncated inside the .npy preamble");
    *hlen = rd[8] | (size_t)rd[9] << 8 | (size_t)rd[10] << 16 | (size_t)rd[11] << 24;
    *hstart = 12;
  } else {
    char what[60];
    snprintf(what, sizeof what, ".npy format version %u (xferlua reads 1, 2 and 3)", major);
    return xfer_format_unsupported(r, name, at, what);
  }
  return XFER_E_OK;
}

/* The shape tuple "(2, 3,)" at l's position into e->shape. */
static xfer_code npy_shape(xfer_format_reading *r, const char *name, long long at, literal *lp,
                       xfer_format_entry *e)
{
  if (!lit_char(lp, '(')) return xfer_format_bad(r, name, at, "shape is not a tuple");
  while (!lit_char(lp, ')')) {
    lit_space(lp);
    uint64_t v = 0;
    size_t digits = 0;
    while (lp->pos < lp->len && lp->s[lp->pos] >= '0' && lp->s[lp->pos] <= '9') {
      if (v > (UINT64_MAX / 2 - 9) / 10) return xfer_format_bad(r, name, at, "a dimension too large");
      v = v * 10 + (uint64_t)(lp->s[lp->pos++] - '0');
      digits++;
    }
    if (!digits) return xfer_format_bad(r, name, at, "shape holds something other than whole numbers");
    if (e->shape.ndim == XFER_MAX_DIMS)
      return xfer_format_unsupported(r, name, at, "more than 8 dimensions");
    e->shape.dims[e->shape.ndim++] = (int64_t)v;
    if (!lit_char(lp, ',') && !(lit_space(lp), lp->pos < lp->len && lp->s[lp->pos] == ')'))
      return xfer_format_bad(r, name, at, "bad shape tuple");
  }
  return XFER_E_OK;
}

/* The descr ("<f4") as an xferlua dtype: little-endian (or single-byte) plain kinds only. */
static xfer_code npy_dtype(xfer_format_reading *r, const char *name, long long at, const char *descr,
                           xfer_format_entry *e)
{
  char order = descr[0], kind = descr[1];
  char *size_end = NULL;
  long size_read = descr[0] && descr[1] ? strtol(descr + 2, &size_end, 10) : 0;
  /* the size is the rest of the descr, digits only: '<f4junk' is no f4 */
  int size = size_end && size_end != descr + 2 && !*size_end && size_read > 0 && size_read < 64
                 ? (int)size_read : -1;
  if (order == '>' && size > 1)
    return xfer_format_unsupported(r, name, at, "a big-endian array (xferlua reads little-endian ones)");
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
    return xfer_format_unsupported(r, name, at, what);
  }
  return XFER_E_OK;
}

/* The array's header at `at` (the magic's first byte), read through `rd` (`avail` bytes
** there): the entry's dtype, shape, fortran flag and the data's offset from `at`. */
static xfer_code parse_npy(xfer_format_reading *r, const char *name, const uint8_t *rd, size_t avail,
                           long long at, xfer_format_entry *e, size_t *data_from)
{
  if (avail < 10 || memcmp(rd, "\x93NUMPY", 6))
    return xfer_format_bad(r, name, at, "not an .npy array (no \\x93NUMPY magic)");
  size_t hlen = 0, hstart = 0;
  xfer_code rc = npy_preamble(r, name, rd, avail, at, &hlen, &hstart);
  if (rc) return rc;
  if (hlen > NPY_MAX_HEADER) return xfer_format_bad(r, name, at, "an .npy header of %zu bytes", hlen);
  if (hstart + hlen > avail)
    return xfer_format_bad(r, name, at, "the file is truncated inside the .npy header (%zu bytes)", hlen);
  literal l = { (const char *)rd + hstart, hlen, 0 };
  char key[32], descr[32] = "";
  int have_descr = 0, have_order = 0, have_shape = 0;
  if (!lit_char(&l, '{')) return xfer_format_bad(r, name, at + (long long)hstart, "the .npy header is not a dict");
  while (!lit_char(&l, '}')) {
    if (!lit_string(&l, key, sizeof key) || !lit_char(&l, ':'))
      return xfer_format_bad(r, name, at + (long long)(hstart + l.pos), "bad key in the .npy header");
    if (!strcmp(key, "descr")) {
      if (!lit_string(&l, descr, sizeof descr))
        return xfer_format_unsupported(r, name, at, "a structured dtype (xferlua reads plain arrays)");
      have_descr = 1;
    } else if (!strcmp(key, "fortran_order")) {
      if (lit_word(&l, "True")) e->fortran = 1;
      else if (!lit_word(&l, "False"))
        return xfer_format_bad(r, name, at + (long long)(hstart + l.pos), "fortran_order is not True/False");
      have_order = 1;
    } else if (!strcmp(key, "shape")) {
      rc = npy_shape(r, name, at, &l, e);
      if (rc) return rc;
      have_shape = 1;
    } else {
      return xfer_format_bad(r, name, at, "unknown key '%s' in the .npy header", key);
    }
    if (!lit_char(&l, ',')) {
      if (!lit_char(&l, '}')) return xfer_format_bad(r, name, at, "expected ',' or '}' in the .npy header");
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return xfer_format_bad(r, name, at, "the .npy header lacks %s", !have_descr ? "descr"
                                                        : !have_order ? "fortran_order" : "shape");
  rc = npy_dtype(r, name, at, descr, e);
  if (rc) return rc;
  int over;
  e->nbytes = xfer_format_shape_bytes(&e->shape, e->dtype, &over);
  if (over) return xfer_format_bad(r, name, at, "its shape holds more than 2^64 bytes");
  *data_from = hstart + hlen;
  return XFER_E_OK;
}

/* The first bytes of an array at `at`, enough for its header. */
static xfer_code npy_head(xfer_format_reading *r, uint64_t at, uint64_t limit, uint8_t **out, size_t *avail)
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

xfer_code xfer_npy_read(xfer_format_reading *r)
{
  uint8_t *head = NULL;
  size_t avail = 0;
  xfer_code code = npy_head(r, 0, r->size, &head, &avail);
  if (code) return code;
  xfer_format_entry *e = xfer_format_add_entry(r, "", 0);
  if (!e) {
    free(head);
    return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  }
  size_t from = 0;
  code = parse_npy(r, NULL, head, avail, 0, e, &from);
  free(head);
  if (code) return code;
  e->offset = from;
  e->stored = e->nbytes;
  if (e->offset + e->nbytes > r->size)
    return xfer_format_bad(r, NULL, (long long)r->size, "the file is truncated: the array needs %llu bytes "
               "after its header, the file has %llu", (unsigned long long)e->nbytes,
               (unsigned long long)(r->size - e->offset));
  return XFER_E_OK;
}

/* -- .npz ---------------------------------------------------------------------------------- */

static uint32_t le16(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

/* The central directory: where it is and how many entries, zip64 or not. */
static xfer_code zip_directory(xfer_format_reading *r, uint64_t *cd_at, uint64_t *cd_size, uint64_t *count)
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
    return xfer_format_bad(r, NULL, (long long)r->size, "not a zip file (.npz): no end of central directory");
  }
  *count = le16(buf + eocd + 10);
  *cd_size = le32(buf + eocd + 12);
  *cd_at = le32(buf + eocd + 16);
  int zip64 = *count == 0xFFFF || *cd_size == 0xFFFFFFFFu || *cd_at == 0xFFFFFFFFu;
  if (zip64) {
    if (eocd < 20 || le32(buf + eocd - 20) != 0x07064b50) {
      free(buf);
      return xfer_format_bad(r, NULL, (long long)tail_at + eocd, "zip64 without its locator");
    }
    uint64_t rec = le64(buf + eocd - 20 + 8);
    uint8_t z[56];
    free(buf);
    if (rec + 56 > r->size) return xfer_format_bad(r, NULL, (long long)rec, "zip64 record past the end");
    if ((code = xfer_fio_read(r->f, z, 56, rec, r->err))) return code;
    if (le32(z) != 0x06064b50) return xfer_format_bad(r, NULL, (long long)rec, "bad zip64 record");
    *count = le64(z + 32);
    *cd_size = le64(z + 40);
    *cd_at = le64(z + 48);
  } else {
    free(buf);
  }
  if (*cd_at > r->size || *cd_size > r->size - *cd_at)
    return xfer_format_bad(r, NULL, (long long)*cd_at, "the central directory lies past the end");
  return XFER_E_OK;
}

#ifdef XFER_WITH_ZLIB
/* The first bytes of a deflated member, inflated: enough for its .npy header. */
static xfer_code inflate_head(xfer_format_reading *r, const char *name, uint64_t at, uint64_t stored,
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
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) code = xfer_format_bad(r, name, (long long)at, "inflateInit2");
    else {
      int zr = inflate(&z, Z_SYNC_FLUSH);
      if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
        code = xfer_format_bad(r, name, (long long)at, "the deflated member is corrupt (%s)", z.msg ? z.msg : "?");
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

static xfer_code zip_member(xfer_format_reading *r, const uint8_t *c, uint64_t c_at, size_t *used)
{
  if (le32(c) != 0x02014b50) return xfer_format_bad(r, NULL, (long long)c_at, "bad central directory entry");
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
  if (name_len >= sizeof name) return xfer_format_bad(r, NULL, (long long)c_at, "a member's name too long");
  if (memchr(c + 46, 0, name_len)) /* a NUL would cut it: two names could become one */
    return xfer_format_bad(r, NULL, (long long)c_at, "a member's name holds a NUL byte");
  memcpy(name, c + 46, name_len);
  name[name_len] = '\0';
  if (name_len < 4 || strcmp(name + name_len - 4, ".npy"))
    return xfer_format_bad(r, name, (long long)c_at, "a member that is not an .npy array");
  name[name_len - 4] = '\0';
  if (flags & 1) return xfer_format_unsupported(r, name, (long long)c_at, "an encrypted member");
  if (method != 0 && method != 8)
    return xfer_format_unsupported(r, name, (long long)c_at, "a member compressed other than by deflate");
  uint8_t lh[30];
  if (local + 30 > r->size) return xfer_format_bad(r, name, (long long)local, "its local header lies past the end");
  xfer_code code = xfer_fio_read(r->f, lh, 30, local, r->err);
  if (code) return code;
  if (le32(lh) != 0x04034b50) return xfer_format_bad(r, name, (long long)local, "bad local header");
  uint64_t data = local + 30 + le16(lh + 26) + le16(lh + 28);
  if (data > r->size || csize > r->size - data)
    return xfer_format_bad(r, name, (long long)data, "the file is truncated: the member's %llu bytes reach "
               "past the end", (unsigned long long)csize);
  xfer_format_entry *e = xfer_format_add_entry(r, name, strlen(name));
  if (!e) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  uint8_t *head = NULL;
  size_t avail = 0, from = 0;
  if (method == 0) {
    code = npy_head(r, data, data + csize, &head, &avail);
  } else {
#ifdef XFER_WITH_ZLIB
    code = inflate_head(r, name, data, csize, &head, &avail);
#else
    return xfer_format_unsupported(r, name, (long long)data, "a deflated member (savez_compressed): this "
                       "build has no zlib");
#endif
  }
  if (!code) code = parse_npy(r, name, head, avail, (long long)data, e, &from);
  free(head);
  if (code) return code;
  if (e->nbytes + from != usize)
    return xfer_format_bad(r, name, (long long)data, "the member holds %llu bytes but its header says %llu",
               (unsigned long long)usize, (unsigned long long)e->nbytes + from);
  if (method == 0 && csize != usize) /* stored: the bytes after it (the directory) are no data */
    return xfer_format_bad(r, name, (long long)data, "a stored member of %llu bytes that says it "
               "holds %llu", (unsigned long long)csize, (unsigned long long)usize);
  e->deflated = method == 8;
  e->inflated_skip = e->deflated ? from : 0;
  e->offset = e->deflated ? data : data + from;
  e->stored = e->deflated ? csize : e->nbytes;
  return XFER_E_OK;
}

xfer_code xfer_npz_read(xfer_format_reading *r)
{
  uint64_t cd_at = 0, cd_size = 0, count = 0;
  xfer_code code = zip_directory(r, &cd_at, &cd_size, &count);
  if (code) return code;
  if (cd_size > (64u << 20)) return xfer_format_bad(r, NULL, (long long)cd_at, "a central directory of %llu bytes",
                                        (unsigned long long)cd_size);
  uint8_t *cd = malloc(cd_size + 1);
  if (!cd) return xfer_err_code(r->err, XFER_E_ALLOC, XFER_OP_READ);
  code = xfer_fio_read(r->f, cd, cd_size, cd_at, r->err);
  size_t at = 0;
  for (uint64_t i = 0; i < count && !code; i++) {
    if (at + 46 > cd_size) {
      code = xfer_format_bad(r, NULL, (long long)cd_at + (long long)at, "the central directory ends early");
      break;
    }
    size_t used = 0;
    if (46 + (size_t)le16(cd + at + 28) + le16(cd + at + 30) + le16(cd + at + 32) > cd_size - at) {
      code = xfer_format_bad(r, NULL, (long long)cd_at + (long long)at, "a central directory entry past its end");
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
        return xfer_format_bad(r, r->out->entries[j].name, (long long)r->out->entries[j].offset,
                   "two members of this name");
  return xfer_format_check_overlaps(r);
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
  xfer_text dict = { 0 };
  xfer_text_putf(&dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int d = 0; d < shape->ndim; d++)
    xfer_text_putf(&dict, "%lld,%s", (long long)shape->dims[d], shape->ndim > 1 && d + 1 < shape->ndim ? " " : "");
  xfer_text_put(&dict, "), }", 4);
  if (dict.failed) {
    free(dict.s);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  }
  /* version 1.0 has a 16-bit length; the dict, its padding and the newline must fit */
  size_t pre = xfer_pad_to(10 + dict.len + 1, align) - 10 <= 65535 ? 10 : 12;
  size_t total = xfer_pad_to(pre + dict.len + 1, align);
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
