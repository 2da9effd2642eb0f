/*
** crc32c.c -- CRC32C (Castagnoli, the polynomial iSCSI, ext4 and safetensors tools use) of host
** bytes: by the SSE4.2 instruction where the CPU has it (8 bytes per instruction), else by
** slicing-by-8 tables (8 bytes per round of table lookups), the two agreeing bit for bit. What
** `verify` compares at both ends of a move when an end is host memory, or was read to it.
*/
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

#define POLY 0x82f63b78u /* CRC32C, reflected */

static uint32_t table[8][256];

void xfer_crc32c_byte_table(uint32_t out[256])
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    out[i] = c;
  }
}

static void make_tables(void)
{
  xfer_crc32c_byte_table(table[0]);
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t sliced(uint32_t crc, const unsigned char *p, size_t n)
{
  for (; n && ((uintptr_t)p & 7); n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= crc; /* little-endian: the first byte in the low bits */
    crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
          table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
          table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
  }
  while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>

/* The instruction's latency is three cycles and it issues one a cycle: three streams over
** three neighbouring stretches of STRETCH bytes keep it busy, their registers then joined --
** the first moved past the second's bytes and the second past the third's, by `shift`. */
#define STRETCH ((size_t)4096)

/* shift[k][b]: the register (b << 8k) after STRETCH zero bytes; by linearity the register r
** after them is the xor of the four bytes' images. */
static uint32_t shift[4][256];

__attribute__((target("sse4.2"))) static uint32_t past_zeros(uint32_t r)
{
  uint64_t c = r;
  for (size_t i = 0; i < STRETCH / 8; i++) c = _mm_crc32_u64(c, 0);
  return (uint32_t)c;
}

static uint32_t shifted(uint32_t r)
{
  return shift[0][r & 0xff] ^ shift[1][(r >> 8) & 0xff] ^ shift[2][(r >> 16) & 0xff] ^
         shift[3][r >> 24];
}

static void make_shift(void)
{
  uint32_t basis[32];
  for (int i = 0; i < 32; i++) basis[i] = past_zeros(1u << i);
  for (int k = 0; k < 4; k++)
    for (uint32_t b = 0; b < 256; b++) {
      uint32_t v = 0;
      for (int i = 0; i < 8; i++)
        if (b & (1u << i)) v ^= basis[8 * k + i];
      shift[k][b] = v;
    }
}

__attribute__((target("sse4.2"))) static uint32_t by_instruction(uint32_t crc, const unsigned char *p,
                                                                size_t n)
{
  for (; n && ((uintptr_t)p & 7); n--) crc = _mm_crc32_u8(crc, *p++);
  uint64_t c = crc;
  for (; n >= 3 * STRETCH; n -= 3 * STRETCH, p += 3 * STRETCH) {
    uint64_t b = 0, d = 0;
    for (size_t i = 0; i < STRETCH; i += 8) {
      uint64_t x, y, z;
      memcpy(&x, p + i, 8);
      memcpy(&y, p + STRETCH + i, 8);
      memcpy(&z, p + 2 * STRETCH + i, 8);
      c = _mm_crc32_u64(c, x);
      b = _mm_crc32_u64(b, y);
      d = _mm_crc32_u64(d, z);
    }
    c = shifted(shifted((uint32_t)c) ^ (uint32_t)b) ^ (uint32_t)d;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  crc = (uint32_t)c;
  while (n--) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}

static int has_instruction(void)
{
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") && !xfer_env_flag("XFER_CRC_TABLES");
}
#else
static uint32_t by_instruction(uint32_t crc, const unsigned char *p, size_t n)
{
  return sliced(crc, p, n);
}
static int has_instruction(void) { return 0; }
static void make_shift(void) {}
#endif

/* decided once per process: the instruction (1), or the tables, made (2) */
static int way;
static pthread_once_t decided = PTHREAD_ONCE_INIT;

static void decide(void)
{
  way = has_instruction() ? 1 : 2;
  if (way == 1) make_shift();
  else make_tables();
}

uint32_t xfer_crc32c(uint32_t crc, const void *bytes, size_t n)
{
  pthread_once(&decided, decide);
  crc = ~crc;
  crc = way == 1 ? by_instruction(crc, bytes, n) : sliced(crc, bytes, n);
  return ~crc;
}

/* -- Joining sums ------------------------------------------------------------------------------ */

/* a * b modulo the polynomial, both reflected (bit 31 the x^0 term) */
static uint32_t multiply(uint32_t a, uint32_t b)
{
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
  }
  return p;
}

/* x^(8n) modulo the polynomial, reflected: by squaring */
static uint32_t x_to_8n(size_t n)
{
  uint32_t result = 1u << 31, square = 1u << 23; /* x^0; x^8 */
  for (; n; n >>= 1) {
    if (n & 1) result = multiply(square, result);
    square = multiply(square, square);
  }
  return result;
}

uint32_t xfer_crc32c_shift(size_t n) { return x_to_8n(n); }

uint32_t xfer_crc32c_join(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
  return multiply(x_to_8n(len_b), crc_a) ^ crc_b;
}

void xfer_crc32c_shift_table(size_t n, uint32_t out[4][256])
{
  uint32_t by = x_to_8n(n), basis[32];
  for (int i = 0; i < 32; i++) basis[i] = multiply(by, 1u << i);
  for (int k = 0; k < 4; k++) {
    out[k][0] = 0; /* each entry from one with a bit fewer: by linearity */
    for (uint32_t b = 1; b < 256; b++) {
      int low = __builtin_ctz(b);
      out[k][b] = out[k][b & (b - 1)] ^ basis[8 * k + low];
    }
  }
}

uint32_t xfer_crc32c_from_raw(uint32_t raw, size_t n)
{
  return raw ^ ~multiply(x_to_8n(n), 0xffffffffu);
}

uint32_t xfer_crc32c_of_raw_pieces(const uint32_t *raw, size_t piece, size_t n)
{
  /* a batch's ranges are mostly of one length: the inversion, a few us, made once for it */
  static __thread size_t inverted_for;
  static __thread uint32_t inversion;
  if (!n) return 0;
  if (n != inverted_for) {
    inversion = xfer_crc32c_from_raw(0, n);
    inverted_for = n;
  }
  return xfer_crc32c_of_stretches(raw, (n + piece - 1) / piece, piece, n) ^ inversion;
}

/* The stretches, largest first: table set k is stretch 256 >> 2k. */
size_t xfer_crc32c_kernel_stretch(size_t largest, size_t *shifts_at)
{
  int set = 0;
  while (set + 1 < XFER_CRC_STRETCHES && largest <= (size_t)256 * (256 >> (2 * (set + 1)))) set++;
  *shifts_at = 256 + (size_t)set * XFER_CRC_LEVELS * 1024;
  return (size_t)256 >> (2 * set);
}

void xfer_crc32c_kernel_table(uint32_t *out)
{
  xfer_crc32c_byte_table(out);
  for (int set = 0; set < XFER_CRC_STRETCHES; set++)
    for (int j = 0; j < XFER_CRC_LEVELS; j++)
      xfer_crc32c_shift_table(((size_t)256 >> (2 * set)) << j,
                              (uint32_t(*)[256])(out + 256 + ((size_t)set * XFER_CRC_LEVELS + (size_t)j) * 1024));
}

/* Past this many stretches, a table of the shift by one stretch (4 KiB, about 3 us to make)
** joins each with four lookups instead of a 32-step product (30 ns): 4096 sums of a 256 MiB
** range took 0.12 ms. */
#define TABLE_JOINS 64

uint32_t xfer_crc32c_of_stretches(const uint32_t *sums, size_t count, size_t stretch, size_t n)
{
  if (!count) return 0;
  uint32_t crc = sums[0];
  if (count > TABLE_JOINS) {
    static __thread uint32_t table[4][256];
    static __thread size_t table_for;
    if (table_for != stretch) {
      xfer_crc32c_shift_table(stretch, table);
      table_for = stretch;
    }
    for (size_t i = 1; i + 1 < count; i++)
      crc = table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
            table[3][crc >> 24] ^ sums[i];
  } else {
    uint32_t whole = count > 2 ? x_to_8n(stretch) : 0; /* (a few us: not for one) */
    for (size_t i = 1; i + 1 < count; i++) crc = multiply(whole, crc) ^ sums[i];
  }
  return count == 1 ? crc : xfer_crc32c_join(crc, sums[count - 1], n - (count - 1) * stretch);
}
