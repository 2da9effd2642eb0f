/*
** file_save.c -- a file as the target of a move (xfer_file_save): the header, then each
** tensor's bytes, streamed through host chunks (read off the devices as one batch a chunk)
** into a temporary file beside the path, written while the next chunk is filled; synced and
** renamed over the path only when every byte is there.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef XFER_WITH_ZLIB
#include <zlib.h>
#endif

#include "file_format.h"
#include "file_numpy.h"
#include "file_safetensors.h"
#include "file_route.h"

/* What the stream holds, in order: bytes of a header (or zip record) or a tensor's. */
typedef struct {
  const char *bytes;    /* header bytes, or NULL for a tensor */
  xfer_tensor *tensor;
  size_t index;         /* the tensor's (names[index]) */
  uint64_t at, len;     /* where in the file */
} segment;

typedef struct {
  xfer_ctx *ctx;
  const char *path;
  const char *const *names;
  xfer_tensor **packed; /* the tensors, views made contiguous */
  size_t n;
  segment *segs;
  size_t nsegs;
  char **owned;         /* header buffers to free */
  size_t nowned;
  uint64_t total;
  /* .npz: each member's CRC-32, summed while the chunks pass */
  uint32_t *crc;
  uint64_t *local_at;   /* its local header's byte */
  /* .safetensors: each tensor's CRC32C, summed while the chunks pass, and where the header
  ** holds its value ("crc32c.NAME" in __metadata__, written as zeros, patched at the end) */
  uint32_t *sums;
  uint64_t *sum_at;
} saving;

/* The __metadata__ key of a tensor's CRC32C in a safetensors file xferlua saves: a documented
** key (docs/api.md), its value the sum in 8 hex digits, readable by anyone. */
#define SUM_KEY "crc32c."

#define ZIP64_EXTRA 20 /* id, size, uncompressed and compressed sizes */
/* a member's name ends so, without a terminating zero (zip names have a length) */
static const char npy_ext[4] = { '.', 'n', 'p', 'y' };

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, size_t n)
{
#ifdef XFER_WITH_ZLIB
  while (n) { /* zlib takes an unsigned int a call */
    uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
    crc = (uint32_t)crc32(crc, p, k);
    p += k;
    n -= k;
  }
  return crc;
#else
  static uint32_t table[256];
  if (!table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
  crc = ~crc;
  while (n--) crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
#endif
}

static xfer_code frame(xfer_error *err, const saving *s, size_t index, long long offset)
{
  if (!err) return XFER_E_WRITE;
  char cause[sizeof err->message];
  xfer_copy_text(cause, sizeof cause, err->message);
  xfer_copy_text(err->file, sizeof err->file, s->path);
  const char *name = index < s->n ? s->names[index] : NULL;
  if (name) xfer_copy_text(err->tensor, sizeof err->tensor, name);
  err->offset = offset;
  xfer_copy_text(err->to, sizeof err->to, "file");
  if (index < s->n && xfer_tensor_device(s->packed[index]))
    xfer_copy_text(err->from, sizeof err->from, xfer_device_name(xfer_tensor_device(s->packed[index])));
  char head[sizeof err->message];
  if (offset < 0 && name) /* no byte of the file yet: the tensor itself (a view packed) */
    snprintf(head, sizeof head, "Failed to save tensor '%s' to %s: ", name, s->path);
  else if (offset < 0) /* no byte of it: the file as a whole (its sync to the disk) */
    snprintf(head, sizeof head, "Failed to save %s (syncing it to the disk): ", s->path);
  else
    snprintf(head, sizeof head, "Failed to save %s%s%s to %s (byte %lld): ",
             name ? "tensor '" : "the header", name ? name : "", name ? "'" : "", s->path, offset);
  xfer_err_join(err->message, sizeof err->message, head, cause);
  return err->code;
}

/* -- The temporary file ------------------------------------------------------------------- */

/* The process's umask, read without setting it (umask(2) sets it for every thread at once). */
static mode_t current_umask(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  unsigned mask = 022;
  char line[128];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Umask: %o", &mask) == 1) break;
  if (f) fclose(f);
  return (mode_t)mask;
}

/* Temporaries of earlier saves to this path whose writer is dead (killed mid-save: nothing
** else would remove them), named ".BASE.xfer-PID-XXXXXX" by save_temporary: removed. */
static void remove_stale(const char *dir, const char *base)
{
  DIR *d = opendir(dir);
  if (!d) return;
  char prefix[300];
  int plen = snprintf(prefix, sizeof prefix, ".%s.xfer-", base);
  struct dirent *ent;
  while (plen > 0 && (size_t)plen < sizeof prefix && (ent = readdir(d))) {
    if (strncmp(ent->d_name, prefix, (size_t)plen)) continue;
    char *end = NULL;
    long pid = strtol(ent->d_name + plen, &end, 10);
    if (pid <= 0 || !end || *end != '-' || strlen(end) != 7 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask) */
    char stale[4096];
    if (snprintf(stale, sizeof stale, "%s/%s", dir, ent->d_name) < (int)sizeof stale) unlink(stale);
  }
  closedir(d);
}

static int add_segment(saving *s, const char *bytes, size_t len, xfer_tensor *t, size_t index)
{
  segment *g = realloc(s->segs, (s->nsegs + 1) * sizeof *g);
  if (!g) return 0;
  s->segs = g;
  g[s->nsegs++] = (segment){ bytes, t, index, s->total, len };
  s->total += len;
  return 1;
}

static int own(saving *s, char *bytes)
{
  char **g = realloc(s->owned, (s->nowned + 1) * sizeof *g);
  if (!g) {
    free(bytes);
    return 0;
  }
  s->owned = g;
  g[s->nowned++] = bytes;
  return 1;
}

static void put16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { put16(p, v & 0xFFFF); put16(p + 2, v >> 16); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

/* The metadata a save writes: the caller's, then each tensor's CRC32C as zeros (patched once
** the data has passed); NULL keys when out of memory. The caller frees keys, values and
** keys[nmeta..]. */
static const char **metadata_with_sums(const saving *s, const char *const *meta_keys,
                                       const char *const *meta_values, size_t nmeta,
                                       const char ***values)
{
  size_t all = nmeta + s->n;
  const char **keys = calloc(all ? all : 1, sizeof *keys);
  *values = calloc(all ? all : 1, sizeof **values);
  for (size_t i = 0; keys && *values && i < all; i++) {
    if (i < nmeta) {
      keys[i] = meta_keys[i];
      (*values)[i] = meta_values[i];
      continue;
    }
    const char *name = s->names[i - nmeta];
    size_t room = sizeof SUM_KEY + strlen(name);
    char *key = malloc(room);
    if (!key) break;
    snprintf(key, room, SUM_KEY "%s", name);
    keys[i] = key;
    (*values)[i] = "00000000";
  }
  if (keys && *values && (!all || keys[all - 1])) return keys;
  for (size_t i = nmeta; keys && i < all; i++) free((char *)keys[i]);
  free(keys);
  free(*values);
  *values = NULL;
  return NULL;
}

static xfer_code layout_safetensors_with(saving *s, const char *const *meta_keys,
                                         const char *const *meta_values, size_t nmeta,
                                         xfer_error *err)
{
  xfer_dtype *dtypes = malloc((s->n ? s->n : 1) * sizeof *dtypes);
  xfer_shape *shapes = malloc((s->n ? s->n : 1) * sizeof *shapes);
  if (!dtypes || !shapes) {
    free(dtypes);
    free(shapes);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  }
  xfer_code code = XFER_E_OK;
  for (size_t i = 0; i < s->n; i++) {
    dtypes[i] = xfer_tensor_dtype(s->packed[i]);
    shapes[i] = *xfer_tensor_shape(s->packed[i]);
  }
  char *header = NULL;
  size_t len = 0;
  size_t *value_at = malloc((nmeta ? nmeta : 1) * sizeof *value_at);
  if (!value_at) code = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  if (!code)
    code = xfer_format_safetensors_header(s->names, dtypes, shapes, s->n, meta_keys, meta_values,
                                          nmeta, XFER_FIO_ALIGN, value_at, &header, &len, err);
  for (size_t i = 0; !code && i < s->n; i++) /* the sums are the last metadata */
    s->sum_at[i] = value_at[nmeta - s->n + i];
  free(value_at);
  free(dtypes);
  free(shapes);
  if (code) return code;
  if (!own(s, header) || !add_segment(s, header, len, NULL, s->n))
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  for (size_t i = 0; i < s->n; i++)
    if (!add_segment(s, NULL, xfer_tensor_nbytes(s->packed[i]), s->packed[i], i))
      return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  return XFER_E_OK;
}

static xfer_code layout_safetensors(saving *s, const char *const *meta_keys,
                                    const char *const *meta_values, size_t nmeta, xfer_error *err)
{
  for (size_t i = 0; i < nmeta; i++)
    if (!strncmp(meta_keys[i], SUM_KEY, sizeof SUM_KEY - 1))
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE, "%s: metadata key '%s': the keys "
                         SUM_KEY "* are xferlua's (each tensor's CRC32C)", s->path, meta_keys[i]);
  s->sums = calloc(s->n ? s->n : 1, sizeof *s->sums);
  s->sum_at = calloc(s->n ? s->n : 1, sizeof *s->sum_at);
  const char **values = NULL;
  const char **keys = s->sums && s->sum_at
                          ? metadata_with_sums(s, meta_keys, meta_values, nmeta, &values) : NULL;
  if (!keys) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  xfer_code code = layout_safetensors_with(s, keys, values, nmeta + s->n, err);
  for (size_t i = nmeta; i < nmeta + s->n; i++) free((char *)keys[i]);
  free(keys);
  free(values);
  return code;
}

static xfer_code layout_npy(saving *s, xfer_error *err)
{
  char *header = NULL;
  size_t len = 0;
  xfer_code code = xfer_format_npy_header(xfer_tensor_dtype(s->packed[0]),
                                          xfer_tensor_shape(s->packed[0]), XFER_FIO_ALIGN,
                                          &header, &len, err);
  if (code) return frame(err, s, 0, 0);
  if (!own(s, header) || !add_segment(s, header, len, NULL, 1) ||
      !add_segment(s, NULL, xfer_tensor_nbytes(s->packed[0]), s->packed[0], 0))
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  return XFER_E_OK;
}

/* .npz: each member stored (no compression), zip64 sizes throughout so that any size fits;
** the CRCs are filled in once the bytes have passed (write_trailer, patch_crcs). */
static xfer_code layout_npz(saving *s, xfer_error *err)
{
  s->crc = calloc(s->n ? s->n : 1, sizeof *s->crc);
  s->local_at = calloc(s->n ? s->n : 1, sizeof *s->local_at);
  if (!s->crc || !s->local_at) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  for (size_t i = 0; i < s->n; i++) {
    char *npy = NULL;
    size_t npy_len = 0;
    xfer_code code = xfer_format_npy_header(xfer_tensor_dtype(s->packed[i]),
                                            xfer_tensor_shape(s->packed[i]), 64, &npy, &npy_len,
                                            err);
    if (code) return frame(err, s, i, (long long)s->total);
    size_t name_len = strlen(s->names[i]) + 4;
    size_t lh_len = 30 + name_len + ZIP64_EXTRA;
    unsigned char *lh = calloc(1, lh_len + npy_len);
    if (!lh || !own(s, (char *)lh)) {
      free(npy);
      return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
    }
    uint64_t size = npy_len + xfer_tensor_nbytes(s->packed[i]);
    put32(lh, 0x04034b50);
    put16(lh + 4, 45); /* version needed: zip64 */
    put32(lh + 18, 0xFFFFFFFFu);
    put32(lh + 22, 0xFFFFFFFFu);
    put16(lh + 26, (unsigned)name_len);
    put16(lh + 28, ZIP64_EXTRA);
    memcpy(lh + 30, s->names[i], name_len - 4);
    memcpy(lh + 30 + name_len - 4, npy_ext, sizeof npy_ext);
    unsigned char *x = lh + 30 + name_len;
    put16(x, 1);
    put16(x + 2, 16);
    put64(x + 4, size);
    put64(x + 12, size);
    memcpy(lh + lh_len, npy, npy_len);
    /* the CRC covers the member's bytes: the .npy header, then the tensor's */
    s->crc[i] = crc32_of(0, (const unsigned char *)npy, npy_len);
    free(npy);
    s->local_at[i] = s->total;
    if (!add_segment(s, (char *)lh, lh_len + npy_len, NULL, i) ||
        !add_segment(s, NULL, xfer_tensor_nbytes(s->packed[i]), s->packed[i], i))
      return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  }
  return XFER_E_OK;
}

/* The central directory and its ends, once every member's CRC is known. */
static xfer_code npz_trailer(saving *s, char **out, size_t *len, xfer_error *err)
{
  size_t cap = 22 + 56 + 20;
  for (size_t i = 0; i < s->n; i++) cap += 46 + strlen(s->names[i]) + 4 + 28;
  unsigned char *t = calloc(1, cap), *p = t;
  if (!t) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  uint64_t cd_at = s->total;
  for (size_t i = 0; i < s->n; i++) {
    size_t name_len = strlen(s->names[i]) + 4;
    uint64_t size = s->segs[2 * i].len - (30 + name_len + ZIP64_EXTRA) + s->segs[2 * i + 1].len;
    put32(p, 0x02014b50);
    put16(p + 4, 45);
    put16(p + 6, 45);
    put32(p + 16, s->crc[i]);
    put32(p + 20, 0xFFFFFFFFu);
    put32(p + 24, 0xFFFFFFFFu);
    put16(p + 28, (unsigned)name_len);
    put16(p + 30, 28);
    put32(p + 42, 0xFFFFFFFFu);
    memcpy(p + 46, s->names[i], name_len - 4);
    memcpy(p + 46 + name_len - 4, npy_ext, sizeof npy_ext);
    unsigned char *x = p + 46 + name_len;
    put16(x, 1);
    put16(x + 2, 24);
    put64(x + 4, size);
    put64(x + 12, size);
    put64(x + 20, s->local_at[i]);
    p += 46 + name_len + 28;
  }
  uint64_t cd_size = (uint64_t)(p - t), z64_at = cd_at + cd_size;
  put32(p, 0x06064b50); /* zip64 end of central directory */
  put64(p + 4, 44);
  put16(p + 12, 45);
  put16(p + 14, 45);
  put64(p + 24, s->n);
  put64(p + 32, s->n);
  put64(p + 40, cd_size);
  put64(p + 48, cd_at);
  p += 56;
  put32(p, 0x07064b50); /* its locator */
  put64(p + 8, z64_at);
  put32(p + 16, 1);
  p += 20;
  put32(p, 0x06054b50);
  put16(p + 8, 0xFFFF);
  put16(p + 10, 0xFFFF);
  put32(p + 12, 0xFFFFFFFFu);
  put32(p + 16, 0xFFFFFFFFu);
  p += 22;
  *out = (char *)t;
  *len = (size_t)(p - t);
  return XFER_E_OK;
}

/* Copies [at, at + len) of the stream into the chunk at `dst`: header bytes by memcpy,
** host tensors by memcpy, device tensors as one batch. */
static xfer_code fill(saving *s, xfer_tensor *chunk, uint64_t at, size_t len, xfer_error *err)
{
  char *dst = xfer_tensor_host_data(chunk);
  xfer_batch_item items[64];
  size_t index[64];
  uint64_t where[64];
  size_t m = 0;
  xfer_code code = XFER_E_OK;
  for (size_t g = 0; g <= s->nsegs && !code; g++) {
    if (m && (g == s->nsegs || m == 64)) {
      code = xfer_transfer_batch(items, m, NULL, err);
      if (code) {
        size_t e = err && err->element > 0 && (size_t)err->element <= m ? (size_t)err->element - 1 : 0;
        return frame(err, s, index[e], (long long)where[e]);
      }
      m = 0;
    }
    if (g == s->nsegs) break;
    const segment *sg = &s->segs[g];
    if (sg->at + sg->len <= at || sg->at >= at + len || !sg->len) continue;
    uint64_t from = sg->at > at ? sg->at : at;
    uint64_t to = sg->at + sg->len < at + len ? sg->at + sg->len : at + len;
    char *into = dst + (from - at);
    size_t n = (size_t)(to - from), off = (size_t)(from - sg->at);
    if (sg->bytes) {
      memcpy(into, sg->bytes + off, n);
      continue;
    }
    const char *host = xfer_tensor_host_data(sg->tensor);
    if (host) {
      memcpy(into, host + off, n);
      continue;
    }
    items[m] = (xfer_batch_item){ .dst = chunk, .src = sg->tensor, .dst_offset = (size_t)(from - at),
                                  .src_offset = off, .nbytes = n };
    index[m] = sg->index;
    where[m++] = from;
  }
  /* .npz: the members' CRCs, .safetensors: the tensors' CRC32Cs, over what this chunk holds of
  ** them (chunks are filled in the file's order) */
  for (size_t g = 0; (s->crc || s->sums) && g < s->nsegs; g++) {
    const segment *sg = &s->segs[g];
    if (sg->bytes || sg->at + sg->len <= at || sg->at >= at + len) continue;
    uint64_t from = sg->at > at ? sg->at : at;
    uint64_t to = sg->at + sg->len < at + len ? sg->at + sg->len : at + len;
    const unsigned char *bytes = (const unsigned char *)dst + (from - at);
    if (s->crc) s->crc[sg->index] = crc32_of(s->crc[sg->index], bytes, (size_t)(to - from));
    else s->sums[sg->index] = xfer_crc32c(s->sums[sg->index], bytes, (size_t)(to - from));
  }
  return code;
}

/* The tensor a failure in [at, at + len) of the file is charged to: the first whose bytes lie
** there (s->n, "the header", when only header bytes do). */
static size_t segment_of(const saving *s, uint64_t at, uint64_t len)
{
  for (size_t g = 0; g < s->nsegs; g++) {
    const segment *sg = &s->segs[g];
    if (sg->bytes || !sg->len || sg->at + sg->len <= at || sg->at >= at + len) continue;
    return sg->index;
  }
  return s->n;
}

/* How long a stopped save waits for its writes in flight to end, each within a step, before
** it leaves them to a helper thread (a write into the page cache may wait out the kernel's
** dirty-page throttling, a write to a disk its latency). */
#define SETTLE_SECONDS 0.002

static xfer_code stream(saving *s, const xfer_fio *io, xfer_file_route *route,
                        const xfer_file_opts *opts, xfer_error *err)
{
  xfer_device *host;
  xfer_code code = xfer_device_find(s->ctx, "host", &host, err);
  if (code) return code;
  uint64_t chunk = route->chunk, total = s->total;
  size_t nchunks = (size_t)((total + chunk - 1) / chunk);
  int slots = route->depth < 2 ? 2 : route->depth;
  if ((size_t)slots > nchunks) slots = nchunks < 2 ? 2 : (int)nchunks;
  xfer_tensor **bufs = calloc((size_t)slots, sizeof *bufs);
  if (!bufs) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  xfer_shape cs = { 1, { (int64_t)chunk } };
  for (int k = 0; k < slots && !code; k++) code = xfer_tensor_empty(host, XFER_U8, &cs, &bufs[k], err);
  xfer_fio_queue *q = NULL;
  if (!code)
    code = xfer_fio_queue_open(io, xfer_fio_engine_of(route->engine), slots,
                               route->threads ? route->threads : 2,
                               XFER_FIO_STALL_MS, &q, err);
  if (code == XFER_E_UNAVAILABLE && route->engine == XFER_FILE_ENGINE_URING) {
    xfer_file_route_next(route, XFER_FILE_REFUSED_URING, err ? err->message : "");
    code = xfer_fio_queue_open(io, xfer_fio_engine_of(route->engine), slots, route->threads,
                               XFER_FIO_STALL_MS, &q, err);
  }
  size_t k = 0;
  for (; k < nchunks && !code; k++) {
    int slot = (int)(k % (size_t)slots);
    uint64_t at = k * chunk;
    /* watched: the wait for the slot ends at the deadline or the cancel, not with its write */
    if (k >= (size_t)slots && !xfer_fio_await(q, slot) && (code = xfer_watch_check(at, total, err))) {
      frame(err, s, segment_of(s, at, chunk), (long long)at);
      break;
    }
    if (k >= (size_t)slots && xfer_fio_wait(q, slot, err) != XFER_E_OK) {
      code = frame(err, s, segment_of(s, err ? (uint64_t)err->offset : at, chunk), err ? err->offset : 0);
      break;
    }
    size_t len = (size_t)(total - at < chunk ? total - at : chunk);
    if ((code = xfer_watch_check(at, total, err))) { /* past the deadline, or canceled */
      frame(err, s, segment_of(s, at, chunk), (long long)at);
      break;
    }
    if ((code = fill(s, bufs[slot], at, len, err))) break;
    size_t wlen = len;
    if (io->direct && len % XFER_FIO_ALIGN) { /* the tail, padded; cut off by ftruncate */
      wlen = (size_t)((len + XFER_FIO_ALIGN - 1) / XFER_FIO_ALIGN * XFER_FIO_ALIGN);
      memset((char *)xfer_tensor_host_data(bufs[slot]) + len, 0, wlen - len);
    }
    xfer_fio_submit(q, slot, 1, xfer_tensor_host_data(bufs[slot]), wlen, wlen, at);
    if (opts && opts->progress && opts->progress(opts->progress_ud, at + len, total)) {
      xfer_err_op(err, XFER_E_INVALID, XFER_OP_PROGRESS, "the progress callback stopped the save");
      code = frame(err, s, segment_of(s, at, chunk), (long long)at);
    }
  }
  /* the writes in flight, waited for in order, their failures counted -- watched, until the
  ** deadline or the cancel (a write that never ends is the stall fault's, or a stuck disk's) */
  size_t j = k >= (size_t)slots ? k - (size_t)slots : 0;
  for (; q && !code && j < k; j++) {
    int slot = (int)(j % (size_t)slots);
    uint64_t at = (uint64_t)j * chunk;
    if (!xfer_fio_await(q, slot) && (code = xfer_watch_check(at, total, err))) {
      frame(err, s, segment_of(s, at, chunk), (long long)at);
      break;
    }
    if (xfer_fio_wait(q, slot, err) != XFER_E_OK) {
      long long failed_at = err ? err->offset : 0;
      code = frame(err, s, segment_of(s, (uint64_t)failed_at, chunk), failed_at);
    }
  }
  /* stopped or failed: those not started are dropped, the rest land before their buffers go --
  ** under a watch, those a slow or stuck device still runs after SETTLE_SECONDS on a helper
  ** thread that holds the buffers (the file is discarded: their failures do not count); with
  ** none, here (as a load: nothing allocated once it returns) */
  if (code) xfer_fio_drop(q);
  if (code && q && xfer_watch_watched() && !xfer_fio_settle(q, SETTLE_SECONDS)) {
    xfer_fio_queue_close_holding(q, s->ctx, bufs, (size_t)slots);
    q = NULL;
  }
  for (; q && j < k; j++) {
    xfer_error ignored;
    xfer_fio_wait(q, (int)(j % (size_t)slots), &ignored);
  }
  xfer_fio_queue_close(q);
  for (int b = 0; b < slots; b++) xfer_tensor_release(bufs[b]);
  free(bufs);
  return code;
}

/* Writes the member CRCs into their local headers (the stream wrote zeros there). */
static xfer_code patch_crcs(saving *s, const xfer_fio *plain, xfer_error *err)
{
  for (size_t i = 0; i < s->n; i++) {
    unsigned char c[4];
    put32(c, s->crc[i]);
    xfer_code code = xfer_fio_write(plain, c, 4, s->local_at[i] + 14, err);
    if (code) return frame(err, s, i, (long long)s->local_at[i] + 14);
  }
  return XFER_E_OK;
}

/* Writes the tensors' CRC32Cs into the header (the stream wrote zeros there), through the
** file opened without O_DIRECT, once every write of the stream has landed. */
static xfer_code patch_sums(saving *s, const xfer_fio *plain, xfer_error *err)
{
  for (size_t i = 0; i < s->n; i++) {
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)s->sums[i]);
    xfer_code code = xfer_fio_write(plain, hex, 8, s->sum_at[i], err);
    if (code) return frame(err, s, s->n, (long long)s->sum_at[i]);
  }
  return XFER_E_OK;
}

static xfer_code check_input(xfer_ctx *ctx, const char *path, int format,
                             const char *const *names, xfer_tensor *const *tensors, size_t n,
                             xfer_error *err)
{
  (void)ctx;
  if (format == XFER_FORMAT_NPY && n != 1)
    return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_WRITE, 0, path, -1,
                          "%s: an .npy file holds one array, not %zu (save several to .npz or "
                          ".safetensors)", path, n);
  for (size_t i = 0; i < n; i++) {
    if (!names[i] || (!names[i][0] && format != XFER_FORMAT_NPY))
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_WRITE, 0, path, -1,
                            "%s: tensor %zu has no name", path, i + 1);
    if (format == XFER_FORMAT_SAFETENSORS && !strcmp(names[i], "__metadata__"))
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_WRITE, 0, path, -1,
                            "%s: '__metadata__' is safetensors' own key, not a tensor's name", path);
    if (format == XFER_FORMAT_NPZ && strlen(names[i]) > 250)
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_WRITE, 0, path, -1,
                            "%s: the name of tensor %zu is longer than 250 bytes", path, i + 1);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(names[i], names[j]))
        return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_WRITE, 0, path, -1,
                              "%s: two tensors named '%s'", path, names[i]);
    xfer_code code = xfer_tensor_check(tensors[i], "save", err);
    if (code) {
      xfer_copy_text(err->file, sizeof err->file, path);
      xfer_copy_text(err->tensor, sizeof err->tensor, names[i]);
      err->offset = -1;
      return code;
    }
  }
  return XFER_E_OK;
}

/* The format a save writes: the one named, else the path's extension's, else safetensors. */
static xfer_code format_of(const char *path, const char *format_name, int *format, xfer_error *err)
{
  *format = xfer_format_of_path(path);
  if (format_name) {
    *format = -1;
    for (int f = XFER_FORMAT_SAFETENSORS; f <= XFER_FORMAT_NPZ; f++)
      if (!strcmp(format_name, xfer_format_name((xfer_format_kind)f))) *format = f;
    if (*format < 0)
      return xfer_fio_error(err, XFER_E_INVALID, XFER_OP_WRITE, 0, path, -1,
                            "unknown format '%s' (safetensors, npy or npz)", format_name);
  }
  if (*format < 0) *format = XFER_FORMAT_SAFETENSORS;
  return XFER_E_OK;
}

/* Views are saved as their elements: packed on their own device first (s->packed[i] holds a
** reference to each tensor saved, packed or itself). */
static xfer_code pack_views(saving *s, xfer_tensor *const *tensors, xfer_error *err)
{
  xfer_code code = XFER_E_OK;
  for (size_t i = 0; i < s->n && !code; i++) {
    if (xfer_tensor_is_contiguous(tensors[i])) s->packed[i] = xfer_tensor_retain(tensors[i]);
    else if ((code = xfer_transfer_to(tensors[i], xfer_tensor_device(tensors[i]), NULL,
                                      &s->packed[i], err)))
      code = frame(err, s, i, -1);
  }
  return code;
}

/* The temporary beside the path (the rename stays within one file system), created: its name
** in *tmp (the caller frees it), its descriptor in *fd, with the mode a new file gets here. */
static xfer_code create_temporary(const char *path, const char *dir, const char *base, char **tmp,
                                  int *fd, xfer_error *err)
{
  size_t cap = strlen(path) + 48;
  *tmp = malloc(cap);
  if (!*tmp) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  snprintf(*tmp, cap, "%s/.%s.xfer-%ld-XXXXXX", dir, base, (long)getpid());
  remove_stale(dir, base);
  if ((*fd = mkostemp(*tmp, O_CLOEXEC)) < 0) {
    int e = errno;
    free(*tmp);
    *tmp = NULL;
    return xfer_fio_error(err, XFER_E_WRITE, XFER_OP_OPEN, e, path, -1,
                          "cannot create a file in %s: %s", dir, strerror(e));
  }
  /* mkostemp makes it 0600 */
  (void)fchmod(*fd, 0666 & ~current_umask());
  return XFER_E_OK;
}

/* O_DIRECT writes where the route chose them and the file system takes them (else the page
** cache, the route's reason saying why); never for .npz, whose CRCs are patched in afterwards
** through the page cache. *dfd: the direct descriptor, or -1. */
static void open_direct(const char *tmp, int format, xfer_file_route *route, xfer_fio *io, int *dfd)
{
  *dfd = -1;
  if (!route->direct) return;
  if (format == XFER_FORMAT_NPZ) {
    xfer_file_route_next(route, XFER_FILE_REFUSED_DIRECT, "an .npz's CRCs are patched in "
                         "afterwards, through it");
    return;
  }
  char why[160];
  *dfd = xfer_file_open_direct(tmp, 1, why, sizeof why);
  if (*dfd >= 0) {
    io->fd = *dfd;
    io->direct = 1;
    return;
  }
  xfer_file_route_next(route, XFER_FILE_REFUSED_DIRECT, why);
}

/* An .npz's end: its central directory after the members, then the members' CRCs patched in. */
static xfer_code finish_npz(saving *s, xfer_fio *plain, xfer_error *err)
{
  char *trailer = NULL;
  size_t tlen = 0;
  xfer_code code = npz_trailer(s, &trailer, &tlen, err);
  if (!code) {
    code = xfer_fio_write(plain, trailer, tlen, s->total, err);
    if (code) code = frame(err, s, s->n, (long long)s->total);
    free(trailer);
  }
  return code ? code : patch_crcs(s, plain, err);
}

/* The written temporary made the file: renamed over the path, the rename made durable when
** the save syncs. */
static xfer_code rename_into_place(const char *tmp, const char *path, const char *dir, int sync,
                                   xfer_error *err)
{
  if (rename(tmp, path) != 0) {
    int e = errno;
    return xfer_fio_error(err, XFER_E_WRITE, XFER_OP_WRITE, e, path, -1, "rename %s over %s: %s",
                          tmp, path, strerror(e));
  }
  if (sync) {
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd >= 0) {
      fsync(dirfd);
      close(dirfd);
    }
  }
  return XFER_E_OK;
}

static void saving_free(saving *s)
{
  for (size_t i = 0; i < s->n; i++) xfer_tensor_release(s->packed[i]);
  free(s->packed);
  for (size_t i = 0; i < s->nowned; i++) free(s->owned[i]);
  free(s->owned);
  free(s->segs);
  free(s->crc);
  free(s->local_at);
  free(s->sums);
  free(s->sum_at);
}

/* save{verify}: each tensor's CRC32C where it lies (its device sums its own memory) against the
** CRC32C of its bytes read back from the file written -- end to end, the move to the host, the
** chunk, the write and the file system -- before the file is put in place. */
static xfer_code verify_written(const saving *s, const xfer_fio *plain, uint64_t chunk, xfer_error *err)
{
  size_t cap = (size_t)(chunk ? chunk : 16u << 20);
  char *buf = malloc(cap);
  if (!buf) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  xfer_code code = XFER_E_OK;
  for (size_t g = 0; g < s->nsegs && !code; g++) {
    const segment *sg = &s->segs[g];
    if (sg->bytes) continue;
    uint32_t source = 0, written = 0;
    if ((code = xfer_tensor_crc32c(sg->tensor, &source, err))) {
      code = frame(err, s, sg->index, -1);
      break;
    }
    for (uint64_t at = 0; at < sg->len && !code; at += cap) {
      size_t len = (size_t)(sg->len - at < cap ? sg->len - at : cap);
      uint64_t where = sg->at + at;
      if ((code = xfer_fio_read(plain, buf, len, where, err))) frame(err, s, sg->index, (long long)where);
      else written = xfer_crc32c(written, buf, len);
    }
    if (!code && written != source) {
      xfer_err_op(err, XFER_E_CORRUPT, XFER_OP_VERIFY, "written changed: CRC32C %08x on %s, %08x "
                  "read back from the file (not put in place)", (unsigned)source,
                  xfer_device_name(xfer_tensor_device(sg->tensor)), (unsigned)written);
      frame(err, s, sg->index, (long long)sg->at);
      code = XFER_E_CORRUPT;
    }
  }
  free(buf);
  return code;
}

/* A helper thread's end of a discarded temporary file: its descriptors closed (fds[0], fds[1];
** -1: none), the last close freeing its blocks. */
static void *close_discarded(void *arg)
{
  int *fds = arg;
  if (fds[1] >= 0) close(fds[1]);
  if (fds[0] >= 0) close(fds[0]);
  free(fds);
  return NULL;
}

/* A save that failed or was stopped: its temporary file goes. Its name first -- at once, the
** file still open -- then its descriptors are closed on a helper thread: the last close frees
** the blocks, 191 ms for a 1 GiB file on ext4 here, and a cancel waited for it (a canceled 1
** GiB save: cancel p50 95 ms, p99 261 on the H200). Nothing of it was the target's, and a
** process that ends first has the kernel free them. */
static void discard_temporary(const char *tmp, int fd, int dfd)
{
  unlink(tmp);
  int *fds = malloc(2 * sizeof *fds);
  if (fds) {
    fds[0] = fd;
    fds[1] = dfd;
    if (!xfer_run_detached(close_discarded, fds)) return;
    free(fds);
  }
  if (dfd >= 0) close(dfd);
  if (fd >= 0) close(fd);
}

static xfer_code save(xfer_ctx *ctx, const char *path, const char *format_name,
                      const char *const *names, xfer_tensor *const *tensors, size_t n,
                      const char *const *meta_keys, const char *const *meta_values, size_t nmeta,
                      const xfer_file_opts *opts, xfer_error *err);

xfer_code xfer_file_save(xfer_ctx *ctx, const char *path, const char *format_name,
                         const char *const *names, xfer_tensor *const *tensors, size_t n,
                         const char *const *meta_keys, const char *const *meta_values,
                         size_t nmeta, const xfer_file_opts *opts, xfer_error *err)
{
  /* the deadline its options ask for (or xfer.config's), from now, over its chunks and the
  ** moves that bring device tensors' bytes to them */
  xfer_config config;
  xfer_config_get(ctx, &config);
  xfer_watch outer = xfer_watch_for(opts ? opts->timeout : 0, config.timeout);
  xfer_code code = save(ctx, path, format_name, names, tensors, n, meta_keys, meta_values, nmeta, opts, err);
  xfer_watch_restore(outer);
  return code;
}

static xfer_code save(xfer_ctx *ctx, const char *path, const char *format_name,
                      const char *const *names, xfer_tensor *const *tensors, size_t n,
                      const char *const *meta_keys, const char *const *meta_values, size_t nmeta,
                      const xfer_file_opts *opts, xfer_error *err)
{
  if (!path || !*path) return xfer_err_op(err, XFER_E_INVALID, XFER_OP_SAVE, "no file name");
  int format;
  xfer_code code = format_of(path, format_name, &format, err);
  if (!code) code = check_input(ctx, path, format, names, tensors, n, err);
  if (code) return code;
  saving s = { .ctx = ctx, .path = path, .names = names, .n = n };
  s.packed = calloc(n ? n : 1, sizeof *s.packed);
  if (!s.packed) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  code = pack_views(&s, tensors, err);
  if (!code)
    code = format == XFER_FORMAT_SAFETENSORS ? layout_safetensors(&s, meta_keys, meta_values, nmeta, err)
           : format == XFER_FORMAT_NPY       ? layout_npy(&s, err)
                                             : layout_npz(&s, err);
  char *dir_copy = strdup(path), *base_copy = strdup(path);
  char *tmp = NULL;
  int fd = -1, dfd = -1;
  if (!code && (!dir_copy || !base_copy)) code = xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRITE);
  const char *dir = dir_copy ? dirname(dir_copy) : ".";
  if (!code) code = create_temporary(path, dir, basename(base_copy), &tmp, &fd, err);
  xfer_file_route route;
  memset(&route, 0, sizeof route);
  int devices = 0;
  for (size_t i = 0; i < n; i++) devices |= xfer_tensor_host_data(s.packed[i]) == NULL;
  if (!code) code = xfer_file_route_make(path, fd, 0, s.total, 1, devices, opts, &route, err);
  xfer_fio plain = { ctx, fd, 0, path }, io = plain;
  if (!code) open_direct(tmp, format, &route, &io, &dfd);
  if (!code) code = stream(&s, &io, &route, opts, err);
  if (!code && s.crc) code = finish_npz(&s, &plain, err);
  if (!code && s.sums) code = patch_sums(&s, &plain, err);
  if (!code && io.direct && ftruncate(fd, (off_t)s.total) != 0) {
    int e = errno;
    code = xfer_fio_error(err, XFER_E_WRITE, XFER_OP_WRITE, e, path, (long long)s.total,
                          "ftruncate: %s", strerror(e));
  }
  int sync = !opts || opts->sync >= 0;
  /* past the deadline (or canceled) once every write landed: not synced, not put in place --
  ** an fdatasync cannot be cut short, and would make the end later still */
  if (!code && (code = xfer_watch_check(s.total, s.total, err))) frame(err, &s, n, -1);
  if (!code && sync && (code = xfer_fio_sync(&plain, err))) code = frame(err, &s, n, -1);
  if (!code && opts && opts->verify) code = verify_written(&s, &plain, route.chunk, err);
  if (code && tmp) { /* (not opened: fd -1, and nothing to discard but the name, if any) */
    discard_temporary(tmp, fd, dfd);
    fd = dfd = -1;
  }
  if (dfd >= 0) close(dfd);
  if (fd >= 0) close(fd);
  if (!code && (code = rename_into_place(tmp, path, dir, sync, err))) unlink(tmp);
  xfer_file_route_taken(&route);
  free(tmp);
  free(dir_copy);
  free(base_copy);
  saving_free(&s);
  return code;
}
