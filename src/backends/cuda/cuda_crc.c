/*
** cuda_crc.c -- copy->crc32c on a CUDA device: the CRC32C of ranges of its memory summed where
** they lie, every range of a batch in one kernel, so that `verify` reads nothing back. Each
** range is cut into pieces of 256 stretches, each a thread block's in turn (the grid as many
** blocks as the device runs at once, walking the pieces). A piece is summed right-aligned:
** thread t sums bytes [st - pad, st - pad + s) of it, s the stretch (256 bytes; 64 or 16 for
** a call of small ranges: xfer_crc32c_kernel_stretch), pad = 256s - its length, as a raw
** register (from 0, no inversion), which zero bytes in front leave as it is -- so every
** stretch but the padding is s bytes and the block's tree joins them by fixed shifts (a
** shift by s * 2^j bytes: four lookups in a table the host made). The host joins a range's
** pieces and turns the raw register into the CRC. The byte table lies in shared memory once
** per lane (32 KiB): each lane reads its own bank, so no two lookups of a warp collide.
** PTX written here, compiled by the driver on first use, as cuda_many.c's kernel. It runs on a
** stream of its own, reading its descriptors and writing its sums in a slot of mapped pinned host
** memory, and is waited for by its event -- until the move's deadline, as every wait (the sums
** copied back to pageable memory, as the kernel's first versions did, blocked in the driver
** until the kernel was done, deadline or not). A slot is taken again only once its event is.
**
** The first kernel (one byte table for the block, a thread's stretch 1 KiB, the tree joined
** by products computed bit by bit) summed 608 GB/s on the H200; its tree cost as much as
** the bytes, and its lookups collided in shared memory's banks.
*/
#include <stdint.h>
#include <stdlib.h>

#include "cuda_host.h"

/* A thread block: 256 threads, a stretch each (the tree's XFER_CRC_LEVELS: 2^8 = THREADS). */
#define THREADS 256
/* Blocks a multiprocessor runs at once: 33 KiB of shared memory each, and the registers the
** kernel asks for (.minnctapersm, in the PTX) -- two sets of 64 bytes of a thread's stretch. */
#define BLOCKS_PER_SM 5
/* a number macro's digits, for the PTX text */
#define PTX_DIGITS(n) #n
#define PTX_NUMBER(n) PTX_DIGITS(n)
/* The table the kernel reads (xfer_crc32c_kernel_table). */
#define TABLE_WORDS XFER_CRC_TABLE_WORDS

/* xfer_crc_pieces(desc, table, sums, count, stretch, shifts): piece p's descriptor (address,
** length) at desc + 16p, its raw register to sums + 4p, for p < count; a thread's stretch of
** `stretch` bytes, the tree's shifts for it at `shifts` (in the table). */
#define STEP                                                                                      \
  "  and.b32 %r18, %r13, 255;\n"                                                                 \
  "  shl.b32 %r18, %r18, 7;\n"                                                                   \
  "  add.u32 %r18, %r4, %r18;\n"                                                                 \
  "  ld.shared.u32 %r19, [%r18];\n"                                                              \
  "  shr.u32 %r13, %r13, 8;\n"                                                                   \
  "  xor.b32 %r13, %r13, %r19;\n"
#define WORD(reg) "  xor.b32 %r13, %r13, " reg ";\n" STEP STEP STEP STEP
/* 64 bytes at `at` into four sets of four registers (`pred`: "@%p4 " or "") */
#define LOAD64(a, b, c, d, at, pred)                                                              \
  "  " pred "ld.global.nc.v4.u32 {" a "}, [" at "];\n"                                           \
  "  " pred "ld.global.nc.v4.u32 {" b "}, [" at "+16];\n"                                        \
  "  " pred "ld.global.nc.v4.u32 {" c "}, [" at "+32];\n"                                        \
  "  " pred "ld.global.nc.v4.u32 {" d "}, [" at "+48];\n"
/* One turn of the 64-byte loop: the next 64 bytes, when whole, into the registers n0..n3 name
** (%p4 says whether they were), the 64 in c0..c15 summed, %rd14 on past them */
#define TURN64(n0, n1, n2, n3, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15) \
  "  add.u64 %rd20, %rd14, 64;\n"                                                                 \
  "  add.u64 %rd22, %rd20, 64;\n"                                                                 \
  "  setp.le.u64 %p4, %rd22, %rd15;\n"                                                            \
  LOAD64(n0, n1, n2, n3, "%rd20", "@%p4 ")                                                       \
  WORD(c0) WORD(c1) WORD(c2) WORD(c3) WORD(c4) WORD(c5) WORD(c6) WORD(c7) WORD(c8) WORD(c9)     \
  WORD(c10) WORD(c11) WORD(c12) WORD(c13) WORD(c14) WORD(c15)                                    \
  "  mov.u64 %rd14, %rd20;\n"
#define SHIFT_BYTE(k, take, out)                                                                  \
  take                                                                                          \
  "  mul.wide.u32 %rd18, %r23, 4;\n"                                                             \
  "  add.u64 %rd18, %rd17, %rd18;\n"                                                             \
  "  ld.global.nc.u32 " out ", [%rd18+" k "];\n"
static const char kernel_ptx[] =
  ".version 7.0\n"
  ".target sm_52\n"
  ".address_size 64\n"
  ".visible .entry xfer_crc_pieces(.param .u64 p_desc, .param .u64 p_table, .param .u64 p_sums,\n"
  "                                .param .u32 p_count, .param .u32 p_stretch, .param .u64 p_shifts)\n"
  /* registers for BLOCKS_PER_SM blocks of THREADS at once (48 on sm_90, no spill) */
  ".maxntid 256, 1, 1\n"
  ".minnctapersm " PTX_NUMBER(BLOCKS_PER_SM) "\n"
  "{\n"
  "  .reg .pred %p<8>;\n"
  "  .reg .b32 %r<80>;\n"
  "  .reg .b64 %rd<28>;\n"
  "  .shared .align 16 .b32 tab[8192];\n"
  "  .shared .align 4 .b32 part[256];\n"
  "  ld.param.u64 %rd1, [p_desc];\n"
  "  ld.param.u64 %rd2, [p_table];\n"
  "  ld.param.u64 %rd3, [p_sums];\n"
  "  ld.param.u32 %r40, [p_count];\n"
  "  ld.param.u32 %r73, [p_stretch];\n"
  "  ld.param.u64 %rd25, [p_shifts];\n"
  "  cvt.u64.u32 %rd24, %r73;\n"
  "  shl.b64 %rd23, %rd24, 8;\n" /* a piece's bytes */
  "  mov.u32 %r1, %tid.x;\n"
  "  and.b32 %r2, %r1, 31;\n"
  "  mov.u32 %r3, tab;\n"
  "  shl.b32 %r4, %r2, 2;\n"
  "  add.u32 %r4, %r3, %r4;\n" /* this lane's column: byte b's entry at + 128b */
  /* the byte table, entry t (this thread's) into each lane's column, a lane a store so that
  ** a warp's stores fall in 32 banks */
  "  mul.wide.u32 %rd4, %r1, 4;\n"
  "  add.u64 %rd5, %rd2, %rd4;\n"
  "  ld.global.nc.u32 %r5, [%rd5];\n"
  "  shl.b32 %r6, %r1, 7;\n"
  "  add.u32 %r6, %r3, %r6;\n"
  "  mov.u32 %r7, 0;\n"
  "FILL:\n"
  "  add.u32 %r8, %r7, %r1;\n"
  "  and.b32 %r8, %r8, 31;\n"
  "  shl.b32 %r8, %r8, 2;\n"
  "  add.u32 %r8, %r6, %r8;\n"
  "  st.shared.u32 [%r8], %r5;\n"
  "  add.u32 %r7, %r7, 1;\n"
  "  setp.lt.u32 %p1, %r7, 32;\n"
  "  @%p1 bra FILL;\n"
  "  mov.u32 %r9, part;\n"
  "  shl.b32 %r10, %r1, 2;\n"
  "  add.u32 %r10, %r9, %r10;\n"
  "  mov.u32 %r11, %ctaid.x;\n"
  "  mov.u32 %r12, %nctaid.x;\n"
  "  bar.sync 0;\n"
  "PIECE:\n"
  "  setp.ge.u32 %p1, %r11, %r40;\n"
  "  @%p1 bra DONE;\n"
  "  mul.wide.u32 %rd6, %r11, 16;\n"
  "  add.u64 %rd7, %rd1, %rd6;\n"
  "  ld.global.nc.u64 %rd8, [%rd7];\n"
  "  ld.global.nc.u64 %rd9, [%rd7+8];\n"
  /* this thread's stretch [beg, beg + stretch) of the piece, right-aligned: beg may be < 0 */
  "  mul.wide.u32 %rd10, %r1, %r73;\n"
  "  add.s64 %rd10, %rd10, %rd9;\n"
  "  sub.s64 %rd10, %rd10, %rd23;\n"
  "  add.s64 %rd11, %rd10, %rd24;\n"
  "  mov.u32 %r13, 0;\n"
  "  setp.le.s64 %p2, %rd11, 0;\n"
  "  @%p2 bra SUMMED;\n"
  "  max.s64 %rd12, %rd10, 0;\n"
  "  sub.s64 %rd13, %rd11, %rd12;\n"
  "  add.u64 %rd14, %rd8, %rd12;\n"
  "  add.u64 %rd15, %rd14, %rd13;\n"
  "  or.b64 %rd16, %rd14, %rd13;\n"
  "  and.b64 %rd16, %rd16, 15;\n"
  "  setp.ne.u64 %p3, %rd16, 0;\n"
  "  @%p3 bra BYTES;\n"
  /* 64 bytes at a time while 64 are left, the next 64 loaded before these are summed (two
  ** sets of 16 registers in turn): each of a thread's loads takes whole 32-byte sectors, so no
  ** sector is fetched twice (a warp's 32 threads read 32 stretches 256 bytes apart: with one
  ** 16-byte load at a time, half a sector waited in L1 for the next load, and L1 is too small
  ** for 1536 threads' lines) and twice the bytes are in flight */
  "  sub.u64 %rd21, %rd15, %rd14;\n"
  "  setp.lt.u64 %p7, %rd21, 64;\n"
  "  @%p7 bra QSTART;\n"
  LOAD64("%r41, %r42, %r43, %r44", "%r45, %r46, %r47, %r48", "%r49, %r50, %r51, %r52",
         "%r53, %r54, %r55, %r56", "%rd14", "")
  "SIXTY:\n"
  TURN64("%r57, %r58, %r59, %r60", "%r61, %r62, %r63, %r64", "%r65, %r66, %r67, %r68",
         "%r69, %r70, %r71, %r72", "%r41", "%r42", "%r43", "%r44", "%r45", "%r46", "%r47",
         "%r48", "%r49", "%r50", "%r51", "%r52", "%r53", "%r54", "%r55", "%r56")
  "  @!%p4 bra QSTART;\n"
  TURN64("%r41, %r42, %r43, %r44", "%r45, %r46, %r47, %r48", "%r49, %r50, %r51, %r52",
         "%r53, %r54, %r55, %r56", "%r57", "%r58", "%r59", "%r60", "%r61", "%r62", "%r63",
         "%r64", "%r65", "%r66", "%r67", "%r68", "%r69", "%r70", "%r71", "%r72")
  "  @%p4 bra SIXTY;\n"
  /* then 16 bytes at a time (a stretch cut short by the piece's padding), the next 16 loaded
  ** before these are summed */
  "QSTART:\n"
  "  setp.ge.u64 %p4, %rd14, %rd15;\n"
  "  @%p4 bra SUMMED;\n"
  "  ld.global.nc.v4.u32 {%r14, %r15, %r16, %r17}, [%rd14];\n"
  "QUADS:\n"
  "  add.u64 %rd20, %rd14, 16;\n"
  "  setp.lt.u64 %p4, %rd20, %rd15;\n"
  "  @%p4 ld.global.nc.v4.u32 {%r31, %r32, %r33, %r34}, [%rd20];\n"
  WORD("%r14") WORD("%r15") WORD("%r16") WORD("%r17")
  "  mov.u64 %rd14, %rd20;\n"
  "  @!%p4 bra SUMMED;\n"
  "  add.u64 %rd20, %rd14, 16;\n"
  "  setp.lt.u64 %p4, %rd20, %rd15;\n"
  "  @%p4 ld.global.nc.v4.u32 {%r14, %r15, %r16, %r17}, [%rd20];\n"
  WORD("%r31") WORD("%r32") WORD("%r33") WORD("%r34")
  "  mov.u64 %rd14, %rd20;\n"
  "  @%p4 bra QUADS;\n"
  "  bra SUMMED;\n"
  "BYTES:\n"
  "  setp.ge.u64 %p4, %rd14, %rd15;\n"
  "  @%p4 bra SUMMED;\n"
  "  ld.global.nc.u8 %r14, [%rd14];\n"
  "  xor.b32 %r13, %r13, %r14;\n"
  STEP
  "  add.u64 %rd14, %rd14, 1;\n"
  "  bra BYTES;\n"
  "SUMMED:\n"
  "  st.shared.u32 [%r10], %r13;\n"
  "  bar.sync 0;\n"
  /* the tree: at stride s = 2^j, thread t (a multiple of 2s) shifts part[t] past the
  ** stretch * s bytes of part[t + s] and joins it */
  "  mov.u32 %r20, 1;\n"
  "  mov.u64 %rd17, %rd25;\n"
  "LEVEL:\n"
  "  setp.ge.u32 %p5, %r20, 256;\n"
  "  @%p5 bra WRITE;\n"
  "  shl.b32 %r21, %r20, 1;\n"
  "  sub.u32 %r21, %r21, 1;\n"
  "  and.b32 %r21, %r1, %r21;\n"
  "  setp.ne.u32 %p6, %r21, 0;\n"
  "  @%p6 bra NEXT;\n"
  "  ld.shared.u32 %r22, [%r10];\n"
  SHIFT_BYTE("0", "  and.b32 %r23, %r22, 255;\n", "%r24")
  SHIFT_BYTE("1024", "  bfe.u32 %r23, %r22, 8, 8;\n", "%r25")
  SHIFT_BYTE("2048", "  bfe.u32 %r23, %r22, 16, 8;\n", "%r26")
  SHIFT_BYTE("3072", "  shr.u32 %r23, %r22, 24;\n", "%r27")
  "  xor.b32 %r24, %r24, %r25;\n"
  "  xor.b32 %r24, %r24, %r26;\n"
  "  xor.b32 %r24, %r24, %r27;\n"
  "  shl.b32 %r28, %r20, 2;\n"
  "  add.u32 %r28, %r10, %r28;\n"
  "  ld.shared.u32 %r29, [%r28];\n"
  "  xor.b32 %r24, %r24, %r29;\n"
  "  st.shared.u32 [%r10], %r24;\n"
  "NEXT:\n"
  "  bar.sync 0;\n"
  "  add.u64 %rd17, %rd17, 4096;\n"
  "  shl.b32 %r20, %r20, 1;\n"
  "  bra LEVEL;\n"
  "WRITE:\n"
  "  setp.ne.u32 %p6, %r1, 0;\n"
  "  @%p6 bra AFTER;\n"
  "  ld.shared.u32 %r30, [%r9];\n"
  "  mul.wide.u32 %rd19, %r11, 4;\n"
  "  add.u64 %rd19, %rd3, %rd19;\n"
  "  st.global.u32 [%rd19], %r30;\n"
  "AFTER:\n"
  "  bar.sync 0;\n" /* part[0] read before the next piece's stretches overwrite it */
  "  add.u32 %r11, %r11, %r12;\n"
  "  bra PIECE;\n"
  "DONE:\n"
  "  ret;\n"
  "}\n";
#undef STEP
#undef WORD
#undef LOAD64
#undef TURN64
#undef PTX_NUMBER
#undef PTX_DIGITS
#undef SHIFT_BYTE

/* The kernel and its table, made on first use; the grid it runs in. */
static xfer_code kernel_ready(xfer_device *dev, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  if (cd->crc_fn) return XFER_E_OK;
  uint32_t *table = malloc(TABLE_WORDS * sizeof *table);
  if (!table) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  xfer_crc32c_kernel_table(table);
  int sms = 0;
  xfer_code rc = CU(dev, XFER_OP_VERIFY, err, cuDeviceGetAttribute, &sms,
                    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cd->device);
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuModuleLoadData, &cd->crc_module, kernel_ptx);
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuModuleGetFunction, &cd->crc_fn, cd->crc_module,
                   "xfer_crc_pieces");
  if (!rc) rc = CU(dev, XFER_OP_ALLOC, err, cuMemAlloc, &cd->crc_table, TABLE_WORDS * sizeof *table);
  if (!rc)
    rc = CU(dev, XFER_OP_VERIFY, err, cuMemcpyHtoDAsync, cd->crc_table, table,
            TABLE_WORDS * sizeof *table, cd->sum_stream);
  /* the table read (on the sums' stream: not behind a move's copies queued on the other) */
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuStreamSynchronize, cd->sum_stream);
  /* every slot's event made now, not at its first use: that may come in the middle of a run
  ** the torture checks for what it left open (a sum past its deadline keeps its slot) */
  for (int i = 0; !rc && i < XFER_CU_SUM_SLOTS; i++)
    rc = CU(dev, XFER_OP_VERIFY, err, cuEventCreate, &cd->sum_slots[i].done, CU_EVENT_DISABLE_TIMING);
  free(table);
  if (rc) {
    xfer_cu_crc_release(cu_api_of(dev), cd);
    return rc;
  }
  cd->crc_grid = (unsigned)(sms > 0 ? sms : 1) * BLOCKS_PER_SM;
  return XFER_E_OK;
}

void xfer_cu_crc_release(cu_api *api, cu_dev *cd)
{
  for (int i = 0; i < XFER_CU_SUM_SLOTS; i++) {
    struct cu_sum_slot *s = &cd->sum_slots[i];
    if (s->host) api->cuMemFreeHost(s->host);
    if (s->done) api->cuEventDestroy(s->done);
    *s = (struct cu_sum_slot){0};
  }
  if (cd->crc_table) api->cuMemFree(cd->crc_table);
  if (cd->crc_module) api->cuModuleUnload(cd->crc_module);
  cd->crc_table = 0;
  cd->crc_module = NULL;
  cd->crc_fn = NULL;
}

static size_t pieces_in(size_t n, size_t piece) { return (n + piece - 1) / piece; }

/* Whether a slot may be taken: not taken, and its last kernel done -- a kernel whose wait
** ended at a deadline may still read the slot's descriptors and write its sums. */
static int slot_free(xfer_device *dev, const struct cu_sum_slot *s)
{
  if (s->taken) return 0;
  return cu_api_of(dev)->cuEventQuery(s->done) == CUDA_SUCCESS;
}

/* A free slot of `bytes` at least (grown: twice that, 64 KiB at least); XFER_E_UNSUPPORTED,
** nothing said, when every slot is in use. */
static xfer_code slot_take(xfer_device *dev, size_t bytes, int *slot, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  int pick = -1;
  for (int i = 0; i < XFER_CU_SUM_SLOTS; i++) {
    if (!slot_free(dev, &cd->sum_slots[i])) continue;
    if (pick < 0 || cd->sum_slots[i].bytes >= bytes) pick = i;
    if (cd->sum_slots[i].bytes >= bytes) break;
  }
  if (pick < 0) return XFER_E_UNSUPPORTED;
  struct cu_sum_slot *s = &cd->sum_slots[pick];
  xfer_code rc = XFER_E_OK;
  if (s->bytes < bytes) {
    if (s->host) cu_api_of(dev)->cuMemFreeHost(s->host);
    s->host = NULL;
    s->mapped = 0;
    s->bytes = 0;
    size_t grown = bytes < 65536 ? 65536 : bytes * 2;
    rc = CU(dev, XFER_OP_ALLOC, err, cuMemHostAlloc, &s->host, grown, CU_MEMHOSTALLOC_DEVICEMAP);
    if (!rc) rc = CU(dev, XFER_OP_ALLOC, err, cuMemHostGetDevicePointer, &s->mapped, s->host, 0);
    if (!rc) s->bytes = grown;
  }
  if (rc) return rc;
  s->taken = 1;
  *slot = pick;
  return XFER_E_OK;
}

/* The kernel over the slot's `blocks` descriptors (threads' stretches of `stretch` bytes, the
** tree's shifts at word `shifts_at` of the table), behind it the slot's event. A launch that
** failed left nothing running (the slot is free again); a kernel launched whose event could not
** be recorded keeps its slot taken for good (nothing would say when it is done). */
static xfer_code launch(xfer_device *dev, int slot, size_t blocks, size_t stretch, size_t shifts_at,
                        xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  struct cu_sum_slot *s = &cd->sum_slots[slot];
  CUdeviceptr desc = s->mapped, sums = s->mapped + blocks * 16, shifts = cd->crc_table + shifts_at * 4;
  unsigned pieces = (unsigned)blocks, grid = pieces < cd->crc_grid ? pieces : cd->crc_grid;
  unsigned stretch_bytes = (unsigned)stretch;
  void *args[] = {&desc, &cd->crc_table, &sums, &pieces, &stretch_bytes, &shifts};
  xfer_code rc = CU(dev, XFER_OP_VERIFY, err, cuLaunchKernel, cd->crc_fn, grid, 1, 1, THREADS, 1, 1, 0,
                    cd->sum_stream, args, NULL);
  if (rc) {
    s->taken = 0;
    return rc;
  }
  return CU(dev, XFER_OP_VERIFY, err, cuEventRecord, s->done, cd->sum_stream);
}

/* The stretch and piece of a call's kernel, and its thread blocks (0: nothing to sum). */
static size_t blocks_of(const xfer_sum_piece *pieces, size_t count, size_t *stretch, size_t *piece,
                        size_t *shifts_at)
{
  size_t blocks = 0, largest = 0;
  for (size_t i = 0; i < count; i++) largest = pieces[i].n > largest ? pieces[i].n : largest;
  *stretch = xfer_crc32c_kernel_stretch(largest, shifts_at);
  *piece = *stretch * THREADS;
  for (size_t i = 0; i < count; i++) blocks += pieces_in(pieces[i].n, *piece);
  return blocks;
}

xfer_code xfer_cu_crc32c_begin(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, int *ticket,
                               xfer_error *err)
{
  size_t stretch, piece, shifts_at = 0;
  size_t blocks = blocks_of(pieces, count, &stretch, &piece, &shifts_at);
  *ticket = -1; /* nothing to sum: end writes zeros */
  if (!blocks) return XFER_E_OK;
  if (blocks > 0x7fffffffu) return XFER_E_UNSUPPORTED;
  int slot = -1;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_VERIFY, err);
  if (!rc) rc = kernel_ready(dev, err);
  if (!rc) rc = slot_take(dev, blocks * 20, &slot, err);
  if (rc) return rc;
  struct cu_sum_slot *s = &cu_of(dev)->sum_slots[slot];
  uint64_t *desc = s->host;
  size_t k = 0;
  for (size_t i = 0; i < count; i++)
    for (size_t at = 0; at < pieces[i].n; at += piece, k++) {
      desc[2 * k] = (uint64_t)(xfer_cu_ptr(pieces[i].buf) + pieces[i].offset + at);
      desc[2 * k + 1] = pieces[i].n - at < piece ? pieces[i].n - at : piece;
    }
  rc = launch(dev, slot, blocks, stretch, shifts_at, err);
  if (rc) return rc; /* (its slot free again, or kept for good) */
  s->blocks = blocks;
  *ticket = slot;
  return XFER_E_OK;
}

xfer_code xfer_cu_crc32c_end(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, int ticket,
                             uint32_t *crc, int wanted, xfer_error *err)
{
  for (size_t i = 0; i < count; i++) crc[i] = 0;
  if (ticket < 0 || ticket >= XFER_CU_SUM_SLOTS) return XFER_E_OK;
  struct cu_sum_slot *s = &cu_of(dev)->sum_slots[ticket];
  xfer_code rc = XFER_E_OK;
  if (wanted) {
    size_t stretch, piece, shifts_at = 0, blocks = s->blocks;
    blocks_of(pieces, count, &stretch, &piece, &shifts_at);
    rc = xfer_cu_enter(dev, XFER_OP_VERIFY, err);
    if (!rc) rc = xfer_cu_wait(dev, XFER_OP_VERIFY, NULL, s->done, err);
    const uint32_t *sums = (const uint32_t *)((const char *)s->host + blocks * 16);
    for (size_t i = 0, first = 0; !rc && i < count; first += pieces_in(pieces[i].n, piece), i++)
      crc[i] = xfer_crc32c_of_raw_pieces(sums + first, piece, pieces[i].n);
  }
  s->taken = 0; /* taken again once its event says its kernel is done */
  return rc;
}

xfer_code xfer_cu_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err)
{
  int ticket = -1;
  xfer_code rc = xfer_cu_crc32c_begin(dev, pieces, count, &ticket, err);
  if (rc) return rc;
  return xfer_cu_crc32c_end(dev, pieces, count, ticket, crc, 1, err);
}
