/*
** test_crc32c.c -- the arithmetic the CRC kernels (CUDA, OpenCL, Vulkan: cuda_crc.c's design)
** rely on, done here on the host exactly as they do it: a piece of at most 64 KiB summed
** right-aligned by 256 stretches of 256 bytes as raw registers (from 0, no inversion), joined
** in a tree by the fixed shifts of xfer_crc32c_shift_table, the pieces joined by
** xfer_crc32c_of_stretches (its table past 64 of them) and the raw register turned into the CRC
** by xfer_crc32c_from_raw -- against xfer_crc32c over the same bytes, at lengths on and off
** every edge. A kernel that sums otherwise than this is wrong on the GPU too.
*/
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "service.h"

#define PIECE 65536
#define STRETCH 256
#define THREADS 256
#define LEVELS 8

static uint32_t byte_table[256], shifts[LEVELS][4][256];

/* A piece's raw register, as a thread block sums it. */
static uint32_t piece_raw(const unsigned char *at, long len)
{
  uint32_t part[THREADS];
  for (int t = 0; t < THREADS; t++) {
    long beg = (long)t * STRETCH + len - PIECE, end = beg + STRETCH;
    uint32_t r = 0;
    for (long i = beg < 0 ? 0 : beg; i < end; i++) {
      r ^= at[i];
      r = (r >> 8) ^ byte_table[r & 255];
    }
    part[t] = end > 0 ? r : 0;
  }
  for (int j = 0; j < LEVELS; j++)
    for (int t = 0; t < THREADS; t += 2 << j) {
      uint32_t r = part[t];
      part[t] = shifts[j][0][r & 255] ^ shifts[j][1][(r >> 8) & 255] ^ shifts[j][2][(r >> 16) & 255] ^
                shifts[j][3][r >> 24] ^ part[t + (1 << j)];
    }
  return part[0];
}

int main(void)
{
  xfer_crc32c_byte_table(byte_table);
  for (int j = 0; j < LEVELS; j++) xfer_crc32c_shift_table((size_t)STRETCH << j, shifts[j]);
  const size_t most = (size_t)70 * PIECE + 13;
  unsigned char *bytes = malloc(most);
  uint32_t *raw = malloc((most / PIECE + 1) * sizeof *raw);
  CHECK(bytes && raw);
  if (!bytes || !raw) return check_summary("test_crc32c");
  for (size_t i = 0; i < most; i++) bytes[i] = (unsigned char)(i * 7919 + (i >> 9));
  /* shorter than a stretch, a stretch's edges, a piece's, 64 pieces (joined by products) and
  ** 65 and more (joined by the table) */
  const size_t lengths[] = {1, 15, 16, 17, 255, 256, 257, 4097, 16384, 65535, 65536, 65537, 200001,
                            (size_t)64 * PIECE, (size_t)65 * PIECE + 1, most};
  for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
    size_t n = lengths[k], count = (n + PIECE - 1) / PIECE;
    for (size_t p = 0; p < count; p++)
      raw[p] = piece_raw(bytes + p * PIECE, (long)(n - p * PIECE < PIECE ? n - p * PIECE : PIECE));
    uint32_t joined = xfer_crc32c_from_raw(xfer_crc32c_of_stretches(raw, count, PIECE, n), n);
    CHECK(joined == xfer_crc32c(0, bytes, n));
    if (joined != xfer_crc32c(0, bytes, n)) fprintf(stderr, "  at %zu bytes\n", n);
  }
  /* the stretches' join the host pool uses (sums of 4 MiB pieces): the table past 64 too */
  uint32_t sums[70];
  for (size_t i = 0; i < 70; i++) sums[i] = xfer_crc32c(0, bytes + i * PIECE, i + 1 < 70 ? PIECE : most - 69 * PIECE);
  CHECK(xfer_crc32c_of_stretches(sums, 70, PIECE, most) == xfer_crc32c(0, bytes, most));
  CHECK(xfer_crc32c_from_raw(0, 0) == 0); /* no bytes: the CRC of nothing */
  free(bytes);
  free(raw);
  return check_summary("test_crc32c");
}
