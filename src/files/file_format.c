/*
** file_format.c -- which format a file is (its first bytes) or a path names (its extension),
** and its header read by that format's reader (file_safetensors.c, file_numpy.c). Nothing here
** moves tensor bytes: it says where they are.
*/
#include <stdio.h>
#include <string.h>

#include "file_format.h"
#include "file_numpy.h"
#include "file_safetensors.h"

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

/* the first 4 bytes as a little-endian number (a zip's local header signature) */
static uint32_t le32_of(const uint8_t *p)
{
  return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

xfer_code xfer_format_read(const xfer_fio *f, uint64_t size, xfer_file_layout *out,
                           xfer_error *err)
{
  memset(out, 0, sizeof *out);
  out->size = size;
  xfer_format_reading r = { f, size, out, err };
  uint8_t magic[8] = { 0 };
  xfer_code code = xfer_fio_read(f, magic, size < 8 ? (size_t)size : 8, 0, err);
  if (code) {
    /* the magic unread: said below, as a header's read */
  } else if (size >= 6 && !memcmp(magic, "\x93NUMPY", 6)) {
    out->format = XFER_FORMAT_NPY;
    code = xfer_npy_read(&r);
  } else if (size >= 4 && le32_of(magic) == 0x04034b50) {
    out->format = XFER_FORMAT_NPZ;
    code = xfer_npz_read(&r);
  } else if (size >= 9) {
    out->format = XFER_FORMAT_SAFETENSORS;
    /* a safetensors header's JSON starts with '{' right after its length */
    uint8_t brace;
    code = xfer_fio_read(f, &brace, 1, 8, err);
    if (!code && brace != '{')
      code = xfer_format_bad(&r, NULL, 0, "not a tensor file: neither safetensors (8-byte length, then a JSON "
                 "object), .npy nor .npz");
    if (!code) code = xfer_safetensors_read(&r);
  } else {
    code = xfer_format_bad(&r, NULL, 0, "not a tensor file (%llu bytes): neither safetensors, .npy nor .npz",
               (unsigned long long)size);
  }
  xfer_format_kind format = out->format;
  if (code) xfer_format_free(out);
  /* a read that failed on the way says which file and which part of it (the format's own
  ** refusals name the file already) */
  if (code && err && err->op_id == XFER_OP_READ && strncmp(err->message, f->path, strlen(f->path))) {
    char head[sizeof err->message], cause[sizeof err->message];
    xfer_copy_text(cause, sizeof cause, err->message);
    snprintf(head, sizeof head, "Failed to read the %s of %s: ",
             format == XFER_FORMAT_NPZ ? "directory" : "header", f->path);
    xfer_err_join(err->message, sizeof err->message, head, cause);
  }
  return code;
}

