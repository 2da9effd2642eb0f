/*
** dtype.c -- element types: names, sizes, and exact conversion between one element
** and a double (f16/bf16 rounded to nearest even straight from the double).
*/
#include <math.h>
#include <string.h>

#include "util.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[XFER_DTYPE__COUNT] = {
  [XFER_F16] = {"f16", 2},  [XFER_BF16] = {"bf16", 2}, [XFER_F32] = {"f32", 4},
  [XFER_F64] = {"f64", 8},  [XFER_I8] = {"i8", 1},     [XFER_I16] = {"i16", 2},
  [XFER_I32] = {"i32", 4},  [XFER_I64] = {"i64", 8},   [XFER_U8] = {"u8", 1},
  [XFER_U16] = {"u16", 2},  [XFER_U32] = {"u32", 4},   [XFER_U64] = {"u64", 8},
  [XFER_BOOL] = {"bool", 1},
};

const char *xfer_dtype_name(xfer_dtype dtype)
{
  return (unsigned)dtype < XFER_DTYPE__COUNT ? dtypes[dtype].name : "?";
}

/* The names users type from NumPy and PyTorch, for the same dtypes (a tensor's dtype is still
** told by its short name: "f32"). */
static const struct { const char *alias; xfer_dtype dtype; } dtype_aliases[] = {
  { "float16", XFER_F16 }, { "half", XFER_F16 }, { "bfloat16", XFER_BF16 },
  { "float32", XFER_F32 }, { "float", XFER_F32 }, { "float64", XFER_F64 },
  { "double", XFER_F64 }, { "int8", XFER_I8 }, { "int16", XFER_I16 }, { "int32", XFER_I32 },
  { "int", XFER_I32 }, { "int64", XFER_I64 }, { "long", XFER_I64 }, { "uint8", XFER_U8 },
  { "uint16", XFER_U16 }, { "uint32", XFER_U32 }, { "uint64", XFER_U64 }, { "bool_", XFER_BOOL } };

int xfer_dtype_parse(const char *name, xfer_dtype *out)
{
  for (int i = 0; i < XFER_DTYPE__COUNT; i++)
    if (!strcmp(name, dtypes[i].name)) {
      *out = (xfer_dtype)i;
      return 0;
    }
  for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++)
    if (!strcmp(name, dtype_aliases[i].alias)) {
      *out = dtype_aliases[i].dtype;
      return 0;
    }
  return -1;
}

size_t xfer_dtype_size(xfer_dtype dtype)
{
  return (unsigned)dtype < XFER_DTYPE__COUNT ? dtypes[dtype].size : 0;
}

int xfer_dtype_is_float(xfer_dtype dtype)
{
  return dtype == XFER_F16 || dtype == XFER_BF16 || dtype == XFER_F32 || dtype == XFER_F64;
}

/* -- Small floats (f16: 5 exponent bits, 10 mantissa; bf16: 8 and 7) ----------- */

/* Rounds |x| to a float of `ebits`/`mbits` with one rounding step (nearbyint is
** round-half-even in the default mode), so no double rounding through f32. */
static uint16_t small_float_encode(double x, int ebits, int mbits)
{
  const int bias = (1 << (ebits - 1)) - 1;
  const uint16_t sign = signbit(x) ? (uint16_t)(1u << (ebits + mbits)) : 0;
  const uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
  if (isnan(x)) return sign | inf | (uint16_t)(1u << (mbits - 1));
  double a = fabs(x);
  if (isinf(a)) return sign | inf;
  if (a < ldexp(1.0, 1 - bias)) /* subnormal: a multiple of 2^(1-bias-mbits) */
    return sign | (uint16_t)nearbyint(ldexp(a, mbits - (1 - bias)));
  int e;
  frexp(a, &e); /* a = f * 2^e, f in [0.5, 1): unbiased exponent e - 1 */
  double m = nearbyint(ldexp(a, mbits - (e - 1)));
  if (m == ldexp(1.0, mbits + 1)) {
    m /= 2;
    e++;
  }
  int biased = e - 1 + bias;
  if (biased >= (1 << ebits) - 1) return sign | inf;
  return sign | (uint16_t)((unsigned)biased << mbits) | (uint16_t)((unsigned)m - (1u << mbits));
}

static double small_float_decode(uint16_t bits, int ebits, int mbits)
{
  const int bias = (1 << (ebits - 1)) - 1;
  int sign = (bits >> (ebits + mbits)) & 1;
  int biased = (bits >> mbits) & ((1 << ebits) - 1);
  unsigned mant = bits & ((1u << mbits) - 1);
  double v;
  if (biased == 0)
    v = ldexp((double)mant, 1 - bias - mbits);
  else if (biased == (1 << ebits) - 1)
    v = mant ? NAN : INFINITY;
  else
    v = ldexp((double)(mant | (1u << mbits)), biased - bias - mbits);
  return sign ? -v : v;
}

/* -- Store and load ------------------------------------------------------------ */

/* What each dtype holds, for messages. */
static const char *const dtype_range[XFER_DTYPE__COUNT] = {
  [XFER_F16] = "largest finite 65504", [XFER_BF16] = "largest finite 3.39e38",
  [XFER_F32] = "largest finite 3.40e38", [XFER_F64] = "any double",
  [XFER_I8] = "-128 to 127", [XFER_I16] = "-32768 to 32767",
  [XFER_I32] = "-2147483648 to 2147483647", [XFER_I64] = "-2^63 to 2^63-1",
  [XFER_U8] = "0 to 255", [XFER_U16] = "0 to 65535", [XFER_U32] = "0 to 4294967295",
  [XFER_U64] = "0 to 2^64-1", [XFER_BOOL] = "0 or 1, false or true",
};

static xfer_code out_of_range(xfer_error *err, xfer_dtype dtype, double value)
{
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, XFER_S_CONVERT_OUT_OF_RANGE, value,
                     xfer_dtype_name(dtype), dtype_range[dtype]);
}

static xfer_code not_whole(xfer_error *err, xfer_dtype dtype, double value)
{
  return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, XFER_S_CONVERT_NOT_WHOLE, value,
                     xfer_dtype_name(dtype));
}

static xfer_code store_float(xfer_dtype dtype, double value, void *dst, xfer_error *err)
{
  uint16_t half;
  float single;
  switch (dtype) {
  case XFER_F64:
    memcpy(dst, &value, 8);
    return XFER_E_OK;
  case XFER_F32:
    single = (float)value;
    if (isinf(single) && isfinite(value)) return out_of_range(err, dtype, value);
    memcpy(dst, &single, 4);
    return XFER_E_OK;
  default:
    half = dtype == XFER_F16 ? small_float_encode(value, 5, 10) : small_float_encode(value, 8, 7);
    if (isfinite(value) && isinf(small_float_decode(half, dtype == XFER_F16 ? 5 : 8,
                                                    dtype == XFER_F16 ? 10 : 7)))
      return out_of_range(err, dtype, value);
    memcpy(dst, &half, 2);
    return XFER_E_OK;
  }
}

static xfer_code store_integer(xfer_dtype dtype, double value, void *dst, xfer_error *err)
{
  static const struct { double lo, hi_excl; } range[XFER_DTYPE__COUNT] = {
    [XFER_I8] = {-128.0, 128.0},
    [XFER_I16] = {-32768.0, 32768.0},
    [XFER_I32] = {-2147483648.0, 2147483648.0},
    [XFER_I64] = {-9223372036854775808.0, 9223372036854775808.0},
    [XFER_U8] = {0.0, 256.0},
    [XFER_U16] = {0.0, 65536.0},
    [XFER_U32] = {0.0, 4294967296.0},
    [XFER_U64] = {0.0, 18446744073709551616.0},
    [XFER_BOOL] = {0.0, 2.0},
  };
  if (isnan(value) || (isfinite(value) && value != floor(value)))
    return not_whole(err, dtype, value);
  if (value < range[dtype].lo || value >= range[dtype].hi_excl)
    return out_of_range(err, dtype, value);
  switch (dtype) {
  case XFER_I8: { int8_t v = (int8_t)value; memcpy(dst, &v, 1); break; }
  case XFER_I16: { int16_t v = (int16_t)value; memcpy(dst, &v, 2); break; }
  case XFER_I32: { int32_t v = (int32_t)value; memcpy(dst, &v, 4); break; }
  case XFER_I64: { int64_t v = (int64_t)value; memcpy(dst, &v, 8); break; }
  case XFER_U8:
  case XFER_BOOL: { uint8_t v = (uint8_t)value; memcpy(dst, &v, 1); break; }
  case XFER_U16: { uint16_t v = (uint16_t)value; memcpy(dst, &v, 2); break; }
  case XFER_U32: { uint32_t v = (uint32_t)value; memcpy(dst, &v, 4); break; }
  default: { uint64_t v = (uint64_t)value; memcpy(dst, &v, 8); break; }
  }
  return XFER_E_OK;
}

xfer_code xfer_value_store(xfer_dtype dtype, double value, void *dst, xfer_error *err)
{
  if ((unsigned)dtype >= XFER_DTYPE__COUNT)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, XFER_S_DTYPE_UNKNOWN, (int)dtype);
  return xfer_dtype_is_float(dtype) ? store_float(dtype, value, dst, err)
                                    : store_integer(dtype, value, dst, err);
}

double xfer_value_load(xfer_dtype dtype, const void *src)
{
  union {
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    uint64_t u64; int64_t i64; float f32; double f64;
  } v;
  memcpy(&v, src, xfer_dtype_size(dtype));
  switch (dtype) {
  case XFER_F16: return small_float_decode(v.u16, 5, 10);
  case XFER_BF16: return small_float_decode(v.u16, 8, 7);
  case XFER_F32: return v.f32;
  case XFER_F64: return v.f64;
  case XFER_I8: return v.i8;
  case XFER_I16: return v.i16;
  case XFER_I32: return v.i32;
  case XFER_I64: return (double)v.i64;
  case XFER_U8: return v.u8;
  case XFER_U16: return v.u16;
  case XFER_U32: return v.u32;
  case XFER_U64: return (double)v.u64;
  case XFER_BOOL: return v.u8 != 0;
  default: return NAN;
  }
}

/* Integers to integers exactly (no detour through double, which loses 64-bit values). */
static int load_integer(xfer_dtype dtype, const void *src, int64_t *as_signed, uint64_t *as_unsigned)
{
  union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
          uint64_t u64; int64_t i64; } v = {.u64 = 0};
  memcpy(&v, src, xfer_dtype_size(dtype));
  switch (dtype) { /* returns 1 for a negative value (in *as_signed) */
  case XFER_I8: *as_signed = (int64_t)(v.u8 ^ 0x80) - 0x80; break; /* the i8 value, sign kept */
  case XFER_I16: *as_signed = v.i16; break;
  case XFER_I32: *as_signed = v.i32; break;
  case XFER_I64: *as_signed = v.i64; break;
  case XFER_U8: *as_unsigned = v.u8; return 0;
  case XFER_BOOL: *as_unsigned = v.u8 != 0; return 0;
  case XFER_U16: *as_unsigned = v.u16; return 0;
  case XFER_U32: *as_unsigned = v.u32; return 0;
  default: *as_unsigned = v.u64; return 0;
  }
  if (*as_signed < 0) return 1;
  *as_unsigned = (uint64_t)*as_signed;
  return 0;
}

static xfer_code store_whole(xfer_dtype dtype, int negative, int64_t s, uint64_t u, void *dst,
                             xfer_error *err)
{
  static const uint64_t max[XFER_DTYPE__COUNT] = {
    [XFER_I8] = INT8_MAX, [XFER_I16] = INT16_MAX, [XFER_I32] = INT32_MAX, [XFER_I64] = INT64_MAX,
    [XFER_U8] = UINT8_MAX, [XFER_U16] = UINT16_MAX, [XFER_U32] = UINT32_MAX,
    [XFER_U64] = UINT64_MAX, [XFER_BOOL] = 1,
  };
  static const int64_t min[XFER_DTYPE__COUNT] = {
    [XFER_I8] = INT8_MIN, [XFER_I16] = INT16_MIN, [XFER_I32] = INT32_MIN, [XFER_I64] = INT64_MIN,
  };
  if (negative ? s < min[dtype] : u > max[dtype]) {
    if (negative)
      return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, XFER_S_CONVERT_INT_OUT_OF_RANGE,
                         (long long)s, xfer_dtype_name(dtype), dtype_range[dtype]);
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_CONVERT, XFER_S_CONVERT_UINT_OUT_OF_RANGE,
                       (unsigned long long)u, xfer_dtype_name(dtype), dtype_range[dtype]);
  }
  int64_t v = negative ? s : (int64_t)u;
  switch (dtype) {
  case XFER_I8: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
  case XFER_I16: { int16_t x = (int16_t)v; memcpy(dst, &x, 2); break; }
  case XFER_I32: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
  case XFER_I64: memcpy(dst, &v, 8); break;
  case XFER_U8: case XFER_BOOL: { uint8_t x = (uint8_t)u; memcpy(dst, &x, 1); break; }
  case XFER_U16: { uint16_t x = (uint16_t)u; memcpy(dst, &x, 2); break; }
  case XFER_U32: { uint32_t x = (uint32_t)u; memcpy(dst, &x, 4); break; }
  default: memcpy(dst, &u, 8); break;
  }
  return XFER_E_OK;
}

xfer_code xfer_convert(xfer_dtype to, void *dst, xfer_dtype from, const void *src, size_t n,
                       xfer_error *err)
{
  size_t in = xfer_dtype_size(from), out = xfer_dtype_size(to);
  int whole = !xfer_dtype_is_float(from) && !xfer_dtype_is_float(to);
  for (size_t i = 0; i < n; i++) {
    const char *p = (const char *)src + i * in;
    char *q = (char *)dst + i * out;
    xfer_code rc;
    if (whole) {
      int64_t s = 0;
      uint64_t u = 0;
      int negative = load_integer(from, p, &s, &u);
      rc = store_whole(to, negative, s, u, q, err);
    } else {
      rc = xfer_value_store(to, xfer_value_load(from, p), q, err);
    }
    if (rc) { /* which element: "element 7: value 300 is out of range for u8 (0 to 255)" */
      char why[sizeof err->message];
      memcpy(why, err->message, sizeof why);
      xfer_err_op(err, rc, XFER_OP_CONVERT, XFER_S_CONVERT_ELEMENT, xfer_dtype_name(from),
                  xfer_dtype_name(to), i + 1, why);
      return rc;
    }
  }
  return XFER_E_OK;
}
