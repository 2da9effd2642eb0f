/*
** cuda_many.c -- a batch of copies between pinned host memory and a CUDA device, or within
** the device, as one kernel: each thread block copies one piece, reading and writing through
** unified addresses (pinned host memory is the device's to address over PCIe). Measured on an
** H200, 4096 pieces of 16 KiB scattered in 1 GiB: 51 GB/s host->device and 52 back with the
** kernel, where one cuMemcpyAsync per piece made 5-6 GB/s and cuMemcpyBatchAsync 5 and 20
** (the link carries 55). The kernel is PTX written here and compiled by the driver on first
** use: nothing to build with nvcc, and one binary runs on every GPU the driver knows.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"

/* A piece a thread block copies: larger copies are cut into pieces of this many bytes so that
** every block has about the same work. */
#define PIECE_MAX ((size_t)256 << 10)
#define THREADS 512

/* One descriptor per thread block: destination, source, bytes (unified addresses). Pieces
** whose addresses and length are multiples of 16 are copied 16 bytes a thread at a time,
** others a byte at a time. */
static const char kernel_ptx[] =
  ".version 7.0\n"
  ".target sm_52\n"
  ".address_size 64\n"
  ".visible .entry xfer_copy_pieces(.param .u64 p_desc)\n"
  "{\n"
  "  .reg .pred %p<3>;\n"
  "  .reg .b32 %r<4>;\n"
  "  .reg .b64 %rd<12>;\n"
  "  .reg .b32 %v<4>;\n"
  "  .reg .b16 %h;\n"
  "  ld.param.u64 %rd1, [p_desc];\n"
  "  mov.u32 %r1, %ctaid.x;\n"
  "  mul.wide.u32 %rd2, %r1, 24;\n"
  "  add.u64 %rd3, %rd1, %rd2;\n"
  "  ld.global.u64 %rd4, [%rd3];\n"
  "  ld.global.u64 %rd5, [%rd3+8];\n"
  "  ld.global.u64 %rd6, [%rd3+16];\n"
  "  mov.u32 %r2, %tid.x;\n"
  "  mov.u32 %r3, %ntid.x;\n"
  "  or.b64 %rd7, %rd4, %rd5;\n"
  "  or.b64 %rd7, %rd7, %rd6;\n"
  "  and.b64 %rd7, %rd7, 15;\n"
  "  setp.ne.u64 %p1, %rd7, 0;\n"
  "  @%p1 bra BYTES;\n"
  "  mul.wide.u32 %rd8, %r2, 16;\n"
  "  mul.wide.u32 %rd9, %r3, 16;\n"
  "VEC:\n"
  "  setp.ge.u64 %p2, %rd8, %rd6;\n"
  "  @%p2 bra DONE;\n"
  "  add.u64 %rd10, %rd5, %rd8;\n"
  "  ld.global.nc.v4.u32 {%v0,%v1,%v2,%v3}, [%rd10];\n"
  "  add.u64 %rd11, %rd4, %rd8;\n"
  "  st.global.v4.u32 [%rd11], {%v0,%v1,%v2,%v3};\n"
  "  add.u64 %rd8, %rd8, %rd9;\n"
  "  bra VEC;\n"
  "BYTES:\n"
  "  cvt.u64.u32 %rd8, %r2;\n"
  "  cvt.u64.u32 %rd9, %r3;\n"
  "BYTE:\n"
  "  setp.ge.u64 %p2, %rd8, %rd6;\n"
  "  @%p2 bra DONE;\n"
  "  add.u64 %rd10, %rd5, %rd8;\n"
  "  ld.global.nc.u8 %h, [%rd10];\n"
  "  add.u64 %rd11, %rd4, %rd8;\n"
  "  st.global.u8 [%rd11], %h;\n"
  "  add.u64 %rd8, %rd8, %rd9;\n"
  "  bra BYTE;\n"
  "DONE:\n"
  "  ret;\n"
  "}\n";

/* The kernel, loaded into the device's context on first use. */
static xfer_code kernel_of(xfer_device *dev, CUfunction *fn, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  if (!cd->many_fn) {
    xfer_code rc = CU(dev, XFER_OP_COPY, err, cuModuleLoadData, &cd->many_module, kernel_ptx);
    if (!rc) rc = CU(dev, XFER_OP_COPY, err, cuModuleGetFunction, &cd->many_fn, cd->many_module,
                     "xfer_copy_pieces");
    if (rc) {
      if (cd->many_module) cu_api_of(dev)->cuModuleUnload(cd->many_module);
      cd->many_module = NULL;
      cd->many_fn = NULL;
      return rc;
    }
  }
  *fn = cd->many_fn;
  return XFER_E_OK;
}

/* Device memory for `bytes` of descriptors, kept and grown with the device. */
static xfer_code descriptors_room(xfer_device *dev, size_t bytes, xfer_error *err)
{
  return xfer_cu_room(dev, &cu_of(dev)->many_desc, &cu_of(dev)->many_room, bytes, err);
}

/* The list of kept tables is touched by runs (one at a time: the device is held) and by a
** batch that goes (any thread): a spin of a few instructions, never around a driver call. */
static void kept_lock(cu_dev *cd)
{
  while (__atomic_exchange_n(&cd->kept_lock, 1, __ATOMIC_ACQUIRE)) continue;
}

static void kept_unlock(cu_dev *cd) { __atomic_store_n(&cd->kept_lock, 0, __ATOMIC_RELEASE); }

void xfer_cu_many_release(cu_api *api, cu_dev *cd)
{
  if (cd->many_desc) api->cuMemFree(cd->many_desc);
  if (cd->many_module) api->cuModuleUnload(cd->many_module);
  for (int i = 0; i < XFER_CU_KEPT; i++)
    if (cd->kept[i].table) api->cuMemFree(cd->kept[i].table);
  memset(cd->kept, 0, sizeof cd->kept);
  cd->many_desc = 0;
  cd->many_room = 0;
  cd->many_module = NULL;
  cd->many_fn = NULL;
}

/* The unified address of one end: device memory, or host memory that is pinned now (0 when
** it cannot be: the batch is not for the kernel). `last` remembers the span found pinned;
** *ours is cleared where the pinning is someone else's (it may go without our knowing). */
static uint64_t address_of(xfer_device *dev, const xfer_piece_end *end, size_t n,
                           const char **last_lo, const char **last_hi, int *ours)
{
  if (end->buf) return (uint64_t)(xfer_cu_ptr(end->buf) + end->offset);
  if (end->host >= *last_lo && end->host + n <= *last_hi) return (uint64_t)(uintptr_t)end->host;
  xfer_host_span span;
  int pinned = xfer_cu_pinned_span(dev, end->host, n, &span);
  if (!pinned) return 0;
  if (pinned != 2) *ours = 0;
  *last_lo = span.base;
  *last_hi = (const char *)span.base + span.size;
  return (uint64_t)(uintptr_t)end->host;
}

static size_t descriptors_of(const xfer_piece *pieces, size_t n)
{
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += (pieces[i].n + PIECE_MAX - 1) / PIECE_MAX;
  return count;
}

/* The kernel's descriptors of the pieces, in host memory (the caller frees them): three
** words each, a piece cut into PIECE_MAX bytes. XFER_E_UNSUPPORTED: host memory the device
** cannot reach. *ours: every host end is pinned by us (a table of them may be kept). */
static xfer_code describe(xfer_device *dev, const xfer_piece *pieces, size_t n, size_t count,
                          uint64_t **out, int *ours, xfer_error *err)
{
  uint64_t *desc = malloc(count * 3 * sizeof *desc);
  if (!desc) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_COPY);
  const char *lo[2] = {NULL, NULL}, *hi[2] = {NULL, NULL};
  size_t k = 0;
  *ours = 1;
  for (size_t i = 0; i < n; i++) {
    const xfer_piece *p = &pieces[i];
    uint64_t dst = address_of(dev, &p->dst, p->n, &lo[0], &hi[0], ours);
    uint64_t src = address_of(dev, &p->src, p->n, &lo[1], &hi[1], ours);
    if (!dst || !src) { /* host memory it cannot reach */
      free(desc);
      return XFER_E_UNSUPPORTED;
    }
    for (size_t off = 0; off < p->n; off += PIECE_MAX, k++) {
      desc[3 * k] = dst + off;
      desc[3 * k + 1] = src + off;
      desc[3 * k + 2] = p->n - off < PIECE_MAX ? p->n - off : PIECE_MAX;
    }
  }
  *out = desc;
  return XFER_E_OK;
}

/* The kernel over `count` descriptors in `table` (uploaded first from `upload` unless NULL:
** there already), done when it returns. */
static xfer_code launch(xfer_device *dev, CUdeviceptr table, const uint64_t *upload, size_t count,
                        xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  CUfunction fn = NULL;
  xfer_code rc = kernel_of(dev, &fn, err);
  if (!rc && upload)
    rc = CU(dev, XFER_OP_COPY, err, cuMemcpyHtoDAsync, table, upload, count * 24, cd->stream);
  void *args[] = {&table};
  if (!rc)
    rc = CU(dev, XFER_OP_COPY, err, cuLaunchKernel, fn, (unsigned)count, 1, 1, THREADS, 1, 1, 0,
            cd->stream, args, NULL);
  /* the descriptors' copy reads `upload` until the stream is through */
  xfer_error ignored;
  xfer_code s = xfer_cu_wait(dev, XFER_OP_COPY, cd->stream, NULL, rc ? &ignored : err);
  if (s && s != XFER_E_TIMEOUT) cu_api_of(dev)->cuStreamSynchronize(cd->stream);
  return rc ? rc : s;
}

xfer_code xfer_cu_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  size_t count = descriptors_of(pieces, n);
  if (count == 0) return XFER_E_OK;
  if (count > 0x7fffffffu) return XFER_E_UNSUPPORTED;
  uint64_t *desc = NULL;
  int ours;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_COPY, err);
  if (!rc) rc = describe(dev, pieces, n, count, &desc, &ours, err);
  if (!rc) rc = descriptors_room(dev, count * 24, err);
  if (!rc) rc = launch(dev, cu_of(dev)->many_desc, desc, count, err);
  free(desc);
  return rc;
}

/* The kept table named `keep`, made for `count` descriptors when none is (the least recently
** run one given up for it when all are taken); NULL: no device memory for it. */
static struct cu_kept *kept_slot(xfer_device *dev, uint64_t keep, size_t count, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  struct cu_kept *slot = NULL;
  kept_lock(cd);
  for (int i = 0; i < XFER_CU_KEPT; i++) {
    struct cu_kept *e = &cd->kept[i];
    if (e->keep == keep) {
      slot = e;
      break;
    }
    if (!slot || (slot->keep && (!e->keep || e->used < slot->used))) slot = e; /* free, or LRU */
  }
  CUdeviceptr old = slot->keep == keep && slot->count == count ? 0 : slot->table;
  if (old) slot->table = 0;
  slot->keep = keep;
  slot->count = count;
  slot->made = 0; /* below */
  kept_unlock(cd);
  if (old) cu_api_of(dev)->cuMemFree(old); /* no run uses it: runs hold the device */
  if (!slot->table && CU(dev, XFER_OP_ALLOC, err, cuMemAlloc, &slot->table, count * 24)) {
    slot->keep = 0;
    return NULL;
  }
  return slot;
}

xfer_code xfer_cu_many_again(xfer_device *dev, const xfer_piece *pieces, size_t n, uint64_t keep,
                             xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  uint64_t pins = xfer_mem_mappings_undone(); /* before looking: one undone later is seen next */
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_COPY, err);
  if (rc) return rc;
  kept_lock(cd);
  struct cu_kept *hit = NULL;
  for (int i = 0; i < XFER_CU_KEPT && !hit; i++)
    if (cd->kept[i].keep == keep && cd->kept[i].made && cd->kept[i].pins == pins) hit = &cd->kept[i];
  if (hit) hit->used = ++cd->kept_clock;
  kept_unlock(cd);
  if (hit) return launch(dev, hit->table, NULL, hit->count, err); /* the table is current */
  size_t count = descriptors_of(pieces, n);
  if (count == 0) return XFER_E_OK;
  if (count > 0x7fffffffu) return XFER_E_UNSUPPORTED;
  uint64_t *desc = NULL;
  int ours;
  rc = describe(dev, pieces, n, count, &desc, &ours, err);
  struct cu_kept *slot = !rc && ours ? kept_slot(dev, keep, count, err) : NULL;
  if (!rc && !slot) { /* not ours to keep (or no room): as a batch made once */
    rc = descriptors_room(dev, count * 24, err);
    if (!rc) rc = launch(dev, cd->many_desc, desc, count, err);
  } else if (!rc) {
    rc = launch(dev, slot->table, desc, count, err);
    kept_lock(cd);
    slot->made = !rc;
    slot->pins = pins;
    slot->used = ++cd->kept_clock;
    kept_unlock(cd);
  }
  free(desc);
  return rc;
}

void xfer_cu_many_forget(xfer_device *dev, uint64_t keep)
{
  cu_dev *cd = cu_of(dev);
  if (!cd) return;
  CUdeviceptr table = 0;
  kept_lock(cd);
  for (int i = 0; i < XFER_CU_KEPT; i++)
    if (cd->kept[i].keep == keep) {
      table = cd->kept[i].table;
      memset(&cd->kept[i], 0, sizeof cd->kept[i]);
    }
  kept_unlock(cd);
  xfer_error ignored;
  if (table && !xfer_cu_enter(dev, XFER_OP_FREE, &ignored)) cu_api_of(dev)->cuMemFree(table);
}
