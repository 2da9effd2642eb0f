/*
** test_core.c -- C unit tests of the core through its public API (xfer.h): what an
** embedding application sees, with no Lua involved.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "xfer.h"

static void test_dtypes(void)
{
  xfer_dtype d;
  CHECK(xfer_dtype_parse("bf16", &d) == 0 && d == XFER_BF16);
  CHECK(xfer_dtype_parse("f128", &d) == -1);
  CHECK(xfer_dtype_size(XFER_U64) == 8 && xfer_dtype_size(XFER_BOOL) == 1);
  CHECK_STR(xfer_dtype_name(XFER_I16), "i16");

  uint16_t h;
  xfer_error err;
  CHECK(xfer_value_store(XFER_F16, 1.0 + ldexp(1, -11), &h, &err) == XFER_E_OK && h == 0x3c00);
  CHECK(xfer_value_store(XFER_F16, 65504, &h, &err) == XFER_E_OK && h == 0x7bff);
  CHECK(xfer_value_store(XFER_F16, 65520, &h, &err) == XFER_E_INVALID);
  CHECK(err.code == XFER_E_INVALID && strstr(err.message, "out of range for f16"));
  CHECK(xfer_value_store(XFER_BF16, 1.0 + ldexp(1, -8) + ldexp(1, -30), &h, &err) == XFER_E_OK &&
        h == 0x3f81);
  h = 0x0001; /* smallest f16 subnormal */
  CHECK(xfer_value_load(XFER_F16, &h) == ldexp(1, -24));
  int8_t i8;
  CHECK(xfer_value_store(XFER_I8, -128, &i8, &err) == XFER_E_OK && i8 == -128);
  CHECK(xfer_value_store(XFER_I8, 127.5, &i8, &err) == XFER_E_INVALID);
  CHECK(xfer_value_store(XFER_U8, -1, &i8, &err) == XFER_E_INVALID);
  uint64_t u64;
  CHECK(xfer_value_store(XFER_U64, ldexp(1, 63), &u64, &err) == XFER_E_OK &&
        u64 == (uint64_t)1 << 63);
  CHECK(xfer_value_store(XFER_U64, ldexp(1, 64), &u64, &err) == XFER_E_INVALID);
}

static void test_context(xfer_ctx *ctx)
{
  CHECK(xfer_runtime_count(ctx) == 5); /* host, cuda, vulkan, opencl, remote */
  xfer_runtime_info info;
  CHECK(xfer_runtime_get(ctx, 0, &info, NULL) == XFER_E_OK);
  CHECK_STR(info.name, "host");
  CHECK(info.available && info.device_count == 1);
  xfer_error err;
  CHECK(xfer_runtime_get(ctx, 9, &info, &err) == XFER_E_INVALID);
  xfer_device *dev;
  CHECK(xfer_device_find(ctx, "host", &dev, &err) == XFER_E_OK && dev == xfer_device_at(ctx, 0));
  /* a device the host runtime does not have: unknown, the devices listed */
  CHECK(xfer_device_find(ctx, "host:3", &dev, &err) == XFER_E_INVALID && dev == NULL);
  CHECK(!strncmp(err.message, "unknown device 'host:3' (devices here: host", 43));
  /* a device of a runtime that is unavailable: why, not "unknown" */
  for (size_t r = 0; r < xfer_runtime_count(ctx); r++) {
    xfer_runtime_info ri;
    if (xfer_runtime_get(ctx, r, &ri, &err) || ri.available || !strcmp(ri.name, "remote")) continue;
    char name[48], want[160];
    snprintf(name, sizeof name, "%s:0", ri.name);
    snprintf(want, sizeof want, "no device '%s': %s is unavailable here: ", name, ri.name);
    CHECK(xfer_device_find(ctx, name, &dev, &err) == XFER_E_UNAVAILABLE && dev == NULL);
    CHECK(!strncmp(err.message, want, strlen(want)));
  }
  CHECK(xfer_device_at(ctx, 99) == NULL);
}

static void test_tensors(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  xfer_shape shape = {2, {2, 3}};
  float values[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
  xfer_tensor *t, *u;
  CHECK(xfer_tensor_from_bytes(host, XFER_F32, &shape, values, sizeof values, &t, &err) == 0);
  CHECK(xfer_tensor_numel(t) == 6 && xfer_tensor_nbytes(t) == 24);
  CHECK(((uintptr_t)xfer_tensor_host_data(t) & 4095) == 0); /* page-aligned */
  char text[32];
  xfer_shape_format(XFER_F32, xfer_tensor_shape(t), text, sizeof text);
  CHECK_STR(text, "f32[2,3]");
  CHECK(xfer_tensor_read(t, back, sizeof back, &err) == 0 && !memcmp(values, back, 24));
  CHECK(xfer_tensor_read(t, back, 4, &err) == XFER_E_INVALID);
  CHECK(xfer_transfer_to(t, host, NULL, &u, &err) == 0);
  int equal = 0;
  CHECK(xfer_tensor_equal(t, u, &equal, &err) == 0 && equal);
  float seven = 7;
  CHECK(xfer_tensor_fill(u, &seven, &err) == 0);
  CHECK(xfer_tensor_equal(t, u, &equal, &err) == 0 && !equal);
  CHECK(xfer_transfer_copy(u, t, &(xfer_transfer_opts){.via = XFER_PATH_HOST}, &err) == 0);
  CHECK(xfer_tensor_equal(t, u, &equal, &err) == 0 && equal);

  xfer_memory_info mem;
  xfer_device_memory(host, &mem);
  uint64_t in_use = mem.in_use;
  CHECK(xfer_tensor_free(u, &err) == XFER_E_OK);
  CHECK(xfer_tensor_free(u, &err) == XFER_E_OK); /* idempotent */
  xfer_device_memory(host, &mem);
  CHECK(mem.in_use == in_use - 24);
  CHECK(xfer_tensor_read(u, back, sizeof back, &err) == XFER_E_FREED);
  CHECK_STR(err.message, "attempt to use a freed tensor");
  xfer_tensor_release(u);

  xfer_shape bad = {9, {0}};
  CHECK(xfer_tensor_empty(host, XFER_F32, &bad, &u, &err) == XFER_E_INVALID && u == NULL);
  xfer_tensor_release(t);
}

static void test_plan(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_tensor *t;
  xfer_shape shape = {1, {4}};
  xfer_plan plan;
  xfer_error err;
  CHECK(xfer_tensor_empty(host, XFER_F32, &shape, &t, &err) == 0);
  CHECK(xfer_transfer_plan(t, host, NULL, &plan, &err) == 0);
  CHECK(plan.path == XFER_PATH_SAME_DEVICE && plan.nsteps == 1);
  CHECK_STR(plan.steps[0], "copy 16 bytes within host");
  xfer_transfer_opts staged = {.via = XFER_PATH_STAGED};
  CHECK(xfer_transfer_plan(t, host, &staged, &plan, &err) == XFER_E_UNSUPPORTED);
  xfer_path p;
  CHECK(xfer_path_parse("interop", &p) == 0 && p == XFER_PATH_INTEROP);
  CHECK(xfer_path_parse("auto", &p) == -1);
  xfer_tensor_release(t);
}

static void test_faults(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  xfer_fault rules[4];
  CHECK(xfer_fault_parse(ctx, "host:read:2:3,host:alloc,host:copy:1:1:-5", &err) == 0);
  CHECK(xfer_fault_list(ctx, rules, 4) == 3);
  CHECK(rules[2].native == -5 && rules[1].native == 0);
  CHECK_STR(rules[0].op, "read");
  CHECK(rules[0].nth == 2 && rules[0].count == 3 && rules[1].nth == 1 && rules[1].count == 1);
  xfer_fault_clear(ctx);
  CHECK(xfer_fault_list(ctx, rules, 4) == 0);
  const char *bad[] = {"host", "host:read:x", "host:read:1:2:3:4", "gpu:read", "host:boom",
                       "host:read:0", "host:read:1:", "host:read:1:1:x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(xfer_fault_parse(ctx, bad[i], &err) == XFER_E_INVALID);
    CHECK(xfer_fault_list(ctx, rules, 4) == 0);
  }

  /* an injected read fault during a round-trip: error fields, source intact, no leak */
  xfer_shape shape = {1, {3}};
  int32_t values[3] = {7, 8, 9}, back[3];
  xfer_tensor *t, *u = NULL;
  CHECK(xfer_tensor_from_bytes(host, XFER_I32, &shape, values, sizeof values, &t, &err) == 0);
  xfer_memory_info before, after;
  xfer_device_memory(host, &before);
  CHECK(xfer_fault_parse(ctx, "host:read", &err) == 0);
  CHECK(xfer_transfer_to(t, host, &(xfer_transfer_opts){.via = XFER_PATH_HOST}, &u, &err) == XFER_E_READ);
  CHECK(u == NULL);
  CHECK_STR(err.op, "read");
  CHECK_STR(err.from, "host");
  CHECK_STR(err.to, "host");
  CHECK_STR(err.native_name, "EIO");
  CHECK(err.native == 5 && err.injected && !err.retryable);
  CHECK_STR(err.message, "Failed to read a tensor off host on the way to host: "
                         "EIO (5): Input/output error [injected fault]");
  xfer_device_memory(host, &after);
  CHECK(after.in_use == before.in_use && after.buffers == before.buffers);
  CHECK(xfer_tensor_read(t, back, sizeof back, &err) == 0 && !memcmp(back, values, 12));
  xfer_tensor_release(t);
}

/* Views, elements and a dtype change through the C API. */
static void test_views(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  int32_t values[6] = {0, 1, 2, 3, 4, 5}, back[6];
  xfer_shape shape = {2, {2, 3}};
  xfer_tensor *t, *v, *w;
  CHECK(xfer_tensor_from_bytes(host, XFER_I32, &shape, values, sizeof values, &t, &err) == 0);
  CHECK(xfer_tensor_is_contiguous(t) && xfer_tensor_strides(t)[0] == 3);
  /* the transpose: shape 3x2, strides 1 and 3 */
  xfer_shape tshape = {2, {3, 2}};
  int64_t tstrides[2] = {1, 3};
  CHECK(xfer_tensor_view(t, &tshape, tstrides, 0, &v, &err) == 0);
  CHECK(!xfer_tensor_is_contiguous(v));
  CHECK(xfer_tensor_read(v, back, sizeof back, &err) == 0);
  CHECK(back[0] == 0 && back[1] == 3 && back[2] == 1 && back[5] == 5);
  int32_t elem = 0;
  CHECK(xfer_tensor_get(v, (int64_t[]){2, 1}, 2, &elem, &err) == 0 && elem == 5);
  elem = -1;
  CHECK(xfer_tensor_set(v, (int64_t[]){0, 1}, 2, &elem, &err) == 0);
  CHECK(xfer_tensor_get(t, (int64_t[]){1, 0}, 2, &elem, &err) == 0 && elem == -1);
  CHECK(xfer_tensor_get(t, (int64_t[]){2, 0}, 2, &elem, &err) == XFER_E_INVALID);
  /* a view past the end is refused; freeing memory a view uses is refused */
  CHECK(xfer_tensor_view(t, &tshape, tstrides, 1, &w, &err) == XFER_E_INVALID);
  CHECK(xfer_tensor_free(t, &err) == XFER_E_IN_USE);
  /* moved as a packed f64 tensor */
  xfer_tensor *moved;
  xfer_transfer_opts to_f64 = {.convert = 1, .dtype = XFER_F64};
  CHECK(xfer_transfer_to(v, host, &to_f64, &moved, &err) == 0);
  CHECK(xfer_tensor_dtype(moved) == XFER_F64 && xfer_tensor_is_contiguous(moved));
  double d[6];
  CHECK(xfer_tensor_read(moved, d, sizeof d, &err) == 0 && d[1] == -1 && d[2] == 1);
  xfer_tensor_release(moved);
  CHECK(xfer_tensor_free(v, &err) == 0 && xfer_tensor_free(t, &err) == 0);
  xfer_tensor_release(v);
  xfer_tensor_release(t);
  uint8_t small[2];
  CHECK(xfer_convert(XFER_U8, small, XFER_I32, (int32_t[]){7, 256}, 2, &err) == XFER_E_INVALID);
  CHECK_STR(err.message, "i32 to u8: element 2: value 256 is out of range for u8 (0 to 255)");
}

/* Memory the application owns, wrapped: no copy, never freed by xferlua, released once. */
static int releases;
static void count_release(void *ud) { releases += *(int *)ud; }

static void test_wrap(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  float mine[4] = {1, 2, 3, 4};
  int one = 1;
  xfer_external mem = {.kind = XFER_EXTERNAL_HOST, .ptr = mine, .size = sizeof mine};
  xfer_shape shape = {1, {4}};
  xfer_tensor *t, *moved;
  CHECK(xfer_tensor_wrap(host, &mem, XFER_F32, &shape, NULL, count_release, &one, &t, &err) == 0);
  CHECK(xfer_tensor_is_wrapped(t) && xfer_tensor_host_data(t) == (void *)mine);
  mine[2] = 30;
  CHECK(xfer_transfer_to(t, host, NULL, &moved, &err) == 0);
  float back[4];
  CHECK(xfer_tensor_read(moved, back, sizeof back, &err) == 0 && back[2] == 30);
  xfer_tensor_release(moved);
  xfer_shape too_big = {1, {5}};
  xfer_tensor *u;
  CHECK(xfer_tensor_wrap(host, &mem, XFER_F32, &too_big, NULL, NULL, NULL, &u, &err) == XFER_E_INVALID);
  xfer_external cuda_mem = mem;
  cuda_mem.kind = XFER_EXTERNAL_CUDA;
  CHECK(xfer_tensor_wrap(host, &cuda_mem, XFER_F32, &shape, NULL, NULL, NULL, &u, &err) == XFER_E_INVALID);
  CHECK_STR(err.message, "wrap: a CUdeviceptr cannot be a tensor of host (it takes host memory)");
  CHECK(releases == 0);
  CHECK(xfer_tensor_free(t, &err) == 0 && releases == 1);
  xfer_tensor_release(t);
  CHECK(releases == 1); /* once */
  CHECK(mine[0] == 1); /* still the application's */
}

/* The context outlives its opener while tensors hold it. */
static void test_lifetime(void)
{
  xfer_ctx *ctx;
  xfer_error err;
  CHECK(xfer_ctx_open(&ctx, &err) == 0);
  xfer_tensor *t;
  xfer_shape shape = {1, {1}};
  CHECK(xfer_tensor_empty(xfer_device_at(ctx, 0), XFER_U8, &shape, &t, &err) == 0);
  xfer_ctx_release(ctx);
  uint8_t one = 1, back = 0;
  CHECK(xfer_tensor_write(t, &one, 1, &err) == 0 && xfer_tensor_read(t, &back, 1, &err) == 0);
  CHECK(back == 1);
  xfer_tensor_release(t); /* frees the context too: ASan's leak check would say otherwise */
}

/* Stats, settings and an asynchronous move, through the C API. */
static void test_engine(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  xfer_config cfg;
  xfer_config_get(ctx, &cfg);
  CHECK(cfg.staging_chunk == 4u << 20 && cfg.staging_depth == 3);
  xfer_config bad = cfg;
  bad.staging_chunk = 100;
  CHECK(xfer_config_set(ctx, &bad, &err) == XFER_E_INVALID);
  xfer_stats_reset(ctx);
  xfer_shape shape = {1, {1024}};
  xfer_tensor *t, *u;
  CHECK(xfer_tensor_empty(host, XFER_U8, &shape, &t, &err) == 0);
  uint8_t one = 1;
  CHECK(xfer_tensor_fill(t, &one, &err) == 0);
  xfer_job *job;
  CHECK(xfer_transfer_start(t, host, NULL, &job, &err) == 0);
  CHECK(xfer_job_wait(job, &u, &err) == 0);
  CHECK(xfer_job_done(job));
  int equal = 0;
  CHECK(xfer_tensor_equal(t, u, &equal, &err) == 0 && equal);
  xfer_tensor_release(u);
  xfer_job_release(job);
  xfer_stat stats[4];
  CHECK(xfer_stats(ctx, stats, 4) == 1);
  CHECK(stats[0].path == XFER_PATH_SAME_DEVICE && stats[0].count == 1 && stats[0].bytes == 1024);
  xfer_tensor_release(t);
}

/* The caching allocator through the C API: blocks reused, split and joined, caching off,
** the cache given back, the collector's hook called when the driver refuses. */
static int reclaims;
static void count_reclaim(void *arg)
{
  (void)arg;
  reclaims++;
}

static void test_memory(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  xfer_memory_info before, m;
  xfer_shape small = {1, {4096}}, large = {1, {3 << 20}};
  xfer_tensor *a, *b;
  xfer_config saved, cfg, off;
  xfer_config_get(ctx, &saved);
  cfg = saved;
  cfg.cache = 1; /* whatever XFER_CACHE says */
  CHECK(xfer_config_set(ctx, &cfg, &err) == 0);
  xfer_empty_cache(ctx, NULL);
  xfer_device_memory(host, &before);
  CHECK(xfer_tensor_empty(host, XFER_U8, &small, &a, &err) == 0);
  CHECK(xfer_tensor_empty(host, XFER_U8, &small, &b, &err) == 0);
  xfer_device_memory(host, &m);
  CHECK(m.in_use == before.in_use + 8192 && m.allocated >= m.in_use);
  CHECK(m.reserved == m.allocated + (m.reserved - m.allocated));
  CHECK(m.segments <= before.segments + 1); /* two small blocks, at most one new segment */
  xfer_tensor_release(a);
  xfer_tensor_release(b);
  /* the same sizes again: from the cache, no driver call */
  xfer_device_memory(host, &before);
  CHECK(xfer_tensor_empty(host, XFER_U8, &large, &a, &err) == 0);
  xfer_tensor_release(a);
  xfer_device_memory(host, &before);
  CHECK(xfer_tensor_empty(host, XFER_U8, &large, &a, &err) == 0);
  xfer_device_memory(host, &m);
  CHECK(m.driver_allocs == before.driver_allocs && m.cache_hits == before.cache_hits + 1);
  xfer_tensor_release(a);
  /* caching off: one driver allocation and one free per tensor */
  off = cfg;
  off.cache = 0;
  CHECK(xfer_config_set(ctx, &off, &err) == 0);
  xfer_device_memory(host, &before);
  CHECK(xfer_tensor_empty(host, XFER_U8, &large, &a, &err) == 0);
  xfer_tensor_release(a);
  xfer_device_memory(host, &m);
  CHECK(m.driver_allocs == before.driver_allocs + 1 && m.driver_frees == before.driver_frees + 1);
  CHECK(xfer_config_set(ctx, &cfg, &err) == 0);
  /* a refused allocation: the reclaimer runs; nothing came back, so the refusal stands */
  xfer_empty_cache(ctx, NULL);
  xfer_set_reclaim(ctx, count_reclaim, NULL);
  xfer_fault fault = {.runtime = "host", .op = "alloc", .nth = 1, .count = 1};
  CHECK(xfer_fault_inject(ctx, &fault, &err) == 0);
  xfer_device_memory(host, &before);
  xfer_shape big = {1, {64 << 20}};
  CHECK(xfer_tensor_empty(host, XFER_U8, &big, &a, &err) == XFER_E_ALLOC && reclaims == 1);
  xfer_device_memory(host, &m);
  CHECK(m.oom_retries == before.oom_retries);
  /* with a cached segment to give back, the retry succeeds and is counted */
  CHECK(xfer_tensor_empty(host, XFER_U8, &large, &a, &err) == 0);
  xfer_tensor_release(a);
  CHECK(xfer_fault_inject(ctx, &fault, &err) == 0);
  CHECK(xfer_tensor_empty(host, XFER_U8, &big, &a, &err) == 0);
  xfer_device_memory(host, &m);
  CHECK(m.oom_retries == before.oom_retries + 1);
  xfer_tensor_release(a);
  xfer_set_reclaim(ctx, NULL, NULL);
  /* given back: nothing cached that no tensor uses */
  xfer_empty_cache(ctx, host);
  xfer_device_memory(host, &m);
  CHECK(m.reserved - m.allocated == m.cached && m.peak_reserved >= m.reserved);
  CHECK(xfer_config_set(ctx, &saved, &err) == 0);
}

/* Batches through the C API: descriptors, prepared runs, the element a failure names. */
static void test_batch(xfer_ctx *ctx)
{
  xfer_error err;
  xfer_device *host, *last = xfer_device_at(ctx, xfer_device_count(ctx) - 1);
  CHECK(!xfer_device_find(ctx, "host", &host, &err));
  unsigned char bytes[64];
  for (int i = 0; i < 64; i++) bytes[i] = (unsigned char)i;
  xfer_shape shape = {1, {64}};
  xfer_tensor *src, *dst, *gone;
  CHECK(!xfer_tensor_from_bytes(host, XFER_U8, &shape, bytes, sizeof bytes, &src, &err));
  CHECK(!xfer_tensor_empty(last, XFER_U8, &shape, &dst, &err));
  xfer_batch_item items[2] = {{dst, src, 0, 48, 16}, {dst, src, 32, 0, 8}};
  xfer_batch *b;
  CHECK(!xfer_batch_prepare(items, 2, NULL, &b, &err));
  CHECK(xfer_batch_count(b) == 2 && xfer_batch_bytes(b) == 24);
  CHECK(!xfer_batch_run(b, &err));
  CHECK(xfer_batch_done(b, 0) && xfer_batch_done(b, 1) && !xfer_batch_done(b, 2));
  unsigned char back[64];
  CHECK(!xfer_tensor_read(dst, back, sizeof back, &err));
  CHECK(!memcmp(back, bytes + 48, 16) && !memcmp(back + 32, bytes, 8));
  xfer_batch_release(b);
  /* overlapping targets: refused, the second element named */
  xfer_batch_item overlap[2] = {{dst, src, 0, 0, 16}, {dst, src, 8, 16, 16}};
  CHECK(xfer_transfer_batch(overlap, 2, NULL, &err) == XFER_E_INVALID && err.element == 2);
  /* a freed tensor in the middle: the run names it */
  CHECK(!xfer_tensor_from_bytes(host, XFER_U8, &shape, bytes, sizeof bytes, &gone, &err));
  xfer_tensor *other;
  CHECK(!xfer_tensor_empty(host, XFER_U8, &shape, &other, &err));
  xfer_batch_item three[3] = {{dst, src, 0, 0, 8}, {other, gone, 0, 0, 0}, {dst, src, 8, 8, 8}};
  CHECK(!xfer_batch_prepare(three, 3, NULL, &b, &err));
  CHECK(!xfer_tensor_free(gone, &err));
  CHECK(xfer_batch_run(b, &err) == XFER_E_FREED && err.element == 2);
  CHECK(!xfer_batch_done(b, 1));
  xfer_batch_release(b);
  CHECK(xfer_transfer_batch(NULL, 0, NULL, &err) == XFER_E_OK); /* empty: nothing to do */
  xfer_tensor_release(gone);
  xfer_tensor_release(other);
  xfer_tensor_release(src);
  xfer_tensor_release(dst);
}

/* A batch in parts: each part runs alone (its elements done, the others' flags the last run's),
** no group crosses a part, and parts that do not end in order at the last element are refused. */
static void test_batch_parts(xfer_ctx *ctx)
{
  xfer_error err;
  xfer_device *host, *last = xfer_device_at(ctx, xfer_device_count(ctx) - 1);
  CHECK(!xfer_device_find(ctx, "host", &host, &err));
  unsigned char bytes[64], back[64];
  for (int i = 0; i < 64; i++) bytes[i] = (unsigned char)(i + 1);
  xfer_shape shape = {1, {64}};
  xfer_tensor *src, *dst;
  CHECK(!xfer_tensor_from_bytes(host, XFER_U8, &shape, bytes, sizeof bytes, &src, &err));
  CHECK(!xfer_tensor_empty(last, XFER_U8, &shape, &dst, &err));
  CHECK(!xfer_tensor_write(dst, (unsigned char[64]){0}, 64, &err));
  /* part 0: elements 0-1, part 1: element 2, part 2: elements 3-4 */
  xfer_batch_item items[5] = {{dst, src, 0, 0, 8}, {dst, src, 8, 8, 8}, {dst, src, 16, 16, 8},
                              {dst, src, 24, 24, 8}, {dst, src, 32, 32, 8}};
  size_t ends[3] = {2, 3, 5};
  xfer_batch *b;
  CHECK(!xfer_batch_prepare_parts(items, 5, ends, 3, NULL, &b, &err));
  size_t groups = 0, at_once = 0;
  xfer_batch_groups(b, &groups, &at_once);
  CHECK(groups == 3); /* one group a part: the same pair of devices, split by the parts */
  CHECK(!xfer_batch_run_part(b, 1, &err));
  CHECK(!xfer_batch_done(b, 0) && xfer_batch_done(b, 2) && !xfer_batch_done(b, 3));
  CHECK(!xfer_tensor_read(dst, back, sizeof back, &err));
  CHECK(back[15] == 0 && !memcmp(back + 16, bytes + 16, 8) && back[24] == 0);
  CHECK(!xfer_batch_run_part(b, 2, &err));
  CHECK(xfer_batch_done(b, 2) && xfer_batch_done(b, 3) && xfer_batch_done(b, 4));
  CHECK(!xfer_tensor_read(dst, back, sizeof back, &err));
  CHECK(back[0] == 0 && !memcmp(back + 16, bytes + 16, 24));
  CHECK(xfer_batch_run_part(b, 3, &err) == XFER_E_INVALID); /* no part 4 */
  CHECK(!xfer_batch_run(b, &err)); /* and the whole of it */
  CHECK(!xfer_tensor_read(dst, back, sizeof back, &err));
  CHECK(!memcmp(back, bytes, 40));
  xfer_batch_release(b);
  size_t unordered[2] = {3, 2}, short_of[2] = {1, 4}, none[1] = {0};
  CHECK(xfer_batch_prepare_parts(items, 5, unordered, 2, NULL, &b, &err) == XFER_E_INVALID && !b);
  CHECK(xfer_batch_prepare_parts(items, 5, short_of, 2, NULL, &b, &err) == XFER_E_INVALID && !b);
  CHECK(xfer_batch_prepare_parts(items, 5, none, 0, NULL, &b, &err) == XFER_E_INVALID && !b);
  CHECK(!xfer_batch_prepare_parts(items, 0, none, 1, NULL, &b, &err)); /* empty: one empty part */
  CHECK(!xfer_batch_run_part(b, 0, &err));
  xfer_batch_release(b);
  xfer_tensor_release(src);
  xfer_tensor_release(dst);
}

/* A job of the caller's own: its code comes back; its tensors are busy while it runs; its arg
** is released once both ends let go; a deadline it was started with stops the moves it makes. */
typedef struct call_arg {
  xfer_tensor *src, *dst;
  int released;
} call_arg;

static xfer_code call_copy(void *arg, xfer_error *err)
{
  call_arg *a = arg;
  return xfer_transfer_copy(a->dst, a->src, NULL, err);
}

static xfer_code call_fails(void *arg, xfer_error *err)
{
  (void)arg;
  memset(err, 0, sizeof *err);
  err->code = XFER_E_UNSUPPORTED;
  snprintf(err->message, sizeof err->message, "the caller's own failure");
  return XFER_E_UNSUPPORTED;
}

static void call_release(void *arg) { ((call_arg *)arg)->released++; }

static void test_call_jobs(xfer_ctx *ctx)
{
  xfer_device *host = xfer_device_at(ctx, 0);
  xfer_error err;
  xfer_shape shape = {1, {1 << 20}};
  call_arg a = {NULL, NULL, 0};
  CHECK(xfer_tensor_empty(host, XFER_U8, &shape, &a.src, &err) == XFER_E_OK);
  CHECK(xfer_tensor_empty(host, XFER_U8, &shape, &a.dst, &err) == XFER_E_OK);
  unsigned char seven = 7;
  CHECK(xfer_tensor_fill(a.src, &seven, &err) == XFER_E_OK);
  xfer_job *job;
  xfer_tensor *uses[2] = {a.src, a.dst};
  CHECK(xfer_job_start_call(ctx, call_copy, &a, call_release, -1, uses, 2, &job, &err) == XFER_E_OK);
  CHECK(xfer_job_arg(job) == &a);
  xfer_tensor *out = (xfer_tensor *)1;
  CHECK(xfer_job_wait(job, &out, &err) == XFER_E_OK && out == NULL);
  CHECK(a.released == 0); /* the caller holds the job still */
  xfer_job_release(job);
  CHECK(a.released == 1);
  int eq = 0;
  CHECK(xfer_tensor_equal(a.src, a.dst, &eq, &err) == XFER_E_OK && eq);
  /* a deadline spent at once: the move it makes ends timeout */
  CHECK(xfer_job_start_call(ctx, call_copy, &a, NULL, 1e-9, uses, 2, &job, &err) == XFER_E_OK);
  CHECK(xfer_job_wait(job, &out, &err) == XFER_E_TIMEOUT);
  xfer_job_release(job);
  CHECK(a.released == 1); /* (none given) */
  /* its code and error are the job's */
  CHECK(xfer_job_start_call(ctx, call_fails, &a, NULL, 0, NULL, 0, &job, &err) == XFER_E_OK);
  CHECK(xfer_job_wait(job, &out, &err) == XFER_E_UNSUPPORTED && err.code == XFER_E_UNSUPPORTED);
  xfer_job_release(job);
  xfer_tensor_release(a.src);
  xfer_tensor_release(a.dst);
}

int main(void)
{
  xfer_ctx *ctx;
  xfer_error err;
  unsetenv("XFER_FAULTS");
  if (xfer_ctx_open(&ctx, &err)) {
    fprintf(stderr, "xfer_ctx_open: %s\n", err.message);
    return 1;
  }
  test_dtypes();
  test_context(ctx);
  test_tensors(ctx);
  test_plan(ctx);
  test_faults(ctx);
  test_views(ctx);
  test_wrap(ctx);
  test_lifetime();
  test_engine(ctx);
  test_memory(ctx);
  test_batch(ctx);
  test_batch_parts(ctx);
  test_call_jobs(ctx);
  xfer_ctx_release(ctx);
  return check_summary("test_core");
}
