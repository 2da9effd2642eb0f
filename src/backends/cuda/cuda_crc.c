/*
** cuda_crc.c -- copy->crc32c on a CUDA device: the CRC32C of ranges of its memory summed where
** they lie, every range of a batch in one kernel, so that `verify` reads nothing back. Each
** range is cut into pieces of at most PIECE bytes, one thread block each; the block's threads
** sum a stretch of the piece each (by the byte table, in shared memory) and join their sums in
** a tree (the shift of a sum past the bytes after it is a product by x^(8n), composed from
** x^(8 * 2^j), which the host gives); the host joins a range's pieces. PTX written here,
** compiled by the driver on first use, as cuda_many.c's kernel.
*/
#include <stdint.h>
#include <stdlib.h>

#include "cuda_host.h"

/* Bytes one thread block sums at most: 1 KiB per thread, 1024 blocks for 256 MiB (8 a
** multiprocessor on an H100/H200: 1 MiB pieces, 4 KiB a thread, left three quarters of each
** idle and made a 4 MiB sum four blocks' serial walk of 4 KiB, 0.2 ms). The host joins the
** pieces' sums: a multiply each, ~30 ns. */
#define PIECE ((size_t)256 << 10)
#define THREADS 256
/* The table the kernel reads: the byte table, then x^(8 * 2^j) for j = 0..31. */
#define TABLE_WORDS (256 + 32)

/* crc_mult: a * b modulo the CRC32C polynomial, both reflected (bit 31 the x^0 term).
** xfer_crc_pieces: per thread block, the descriptor (address, length) at p_desc + 16 * block;
** its sum (as xfer_crc32c gives it) to p_sums + 4 * block. */
static const char kernel_ptx[] =
  ".version 7.0\n"
  ".target sm_52\n"
  ".address_size 64\n"
  ".func (.reg .b32 p) crc_mult(.reg .b32 a_in, .reg .b32 b_in)\n"
  "{\n"
  "  .reg .pred %q;\n"
  "  .reg .b32 a, b, %m, %l, %i;\n"
  "  mov.u32 a, a_in;\n"
  "  mov.u32 b, b_in;\n"
  "  mov.u32 p, 0;\n"
  "  mov.u32 %i, 32;\n"
  "MULT:\n"
  "  shr.s32 %m, a, 31;\n"
  "  and.b32 %m, %m, b;\n"
  "  xor.b32 p, p, %m;\n"
  "  shl.b32 a, a, 1;\n"
  "  and.b32 %l, b, 1;\n"
  "  neg.s32 %l, %l;\n"
  "  and.b32 %l, %l, 0x82F63B78;\n"
  "  shr.u32 b, b, 1;\n"
  "  xor.b32 b, b, %l;\n"
  "  sub.u32 %i, %i, 1;\n"
  "  setp.ne.u32 %q, %i, 0;\n"
  "  @%q bra MULT;\n"
  "  ret;\n"
  "}\n"
  ".visible .entry xfer_crc_pieces(.param .u64 p_desc, .param .u64 p_table, .param .u64 p_sums)\n"
  "{\n"
  "  .reg .pred %p<10>;\n"
  "  .reg .b32 %r<40>;\n"
  "  .reg .b64 %rd<24>;\n"
  "  .shared .align 4 .b32 tab[256];\n"
  "  .shared .align 4 .b32 pw[32];\n"
  "  .shared .align 4 .b32 part[256];\n"
  "  ld.param.u64 %rd1, [p_desc];\n"
  "  ld.param.u64 %rd2, [p_table];\n"
  "  ld.param.u64 %rd3, [p_sums];\n"
  "  mov.u32 %r1, %tid.x;\n"
  "  mov.u32 %r2, %ctaid.x;\n"
  /* the tables into shared memory: tab[t], and pw[t] for t < 32 */
  "  shl.b32 %r5, %r1, 2;\n"
  "  mul.wide.u32 %rd4, %r1, 4;\n"
  "  add.u64 %rd5, %rd2, %rd4;\n"
  "  ld.global.nc.u32 %r3, [%rd5];\n"
  "  mov.u32 %r4, tab;\n"
  "  add.u32 %r6, %r4, %r5;\n"
  "  st.shared.u32 [%r6], %r3;\n"
  "  mov.u32 %r8, pw;\n"
  "  setp.ge.u32 %p1, %r1, 32;\n"
  "  @%p1 bra LOADED;\n"
  "  ld.global.nc.u32 %r7, [%rd5+1024];\n"
  "  add.u32 %r9, %r8, %r5;\n"
  "  st.shared.u32 [%r9], %r7;\n"
  "LOADED:\n"
  "  bar.sync 0;\n"
  /* the piece: address %rd8, length %rd9; a thread's stretch %rd10 bytes (16-aligned) */
  "  mul.wide.u32 %rd6, %r2, 16;\n"
  "  add.u64 %rd7, %rd1, %rd6;\n"
  "  ld.global.nc.u64 %rd8, [%rd7];\n"
  "  ld.global.nc.u64 %rd9, [%rd7+8];\n"
  "  add.u64 %rd10, %rd9, 255;\n"
  "  shr.u64 %rd10, %rd10, 8;\n"
  "  add.u64 %rd10, %rd10, 15;\n"
  "  and.b64 %rd10, %rd10, -16;\n"
  "  cvt.u64.u32 %rd11, %r1;\n"
  "  mul.lo.u64 %rd12, %rd11, %rd10;\n"
  "  mov.u32 %r10, 0;\n"
  "  setp.ge.u64 %p2, %rd12, %rd9;\n"
  "  @%p2 bra SUMMED;\n"
  "  sub.u64 %rd13, %rd9, %rd12;\n"
  "  min.u64 %rd13, %rd13, %rd10;\n"
  "  add.u64 %rd14, %rd8, %rd12;\n"
  "  add.u64 %rd15, %rd14, %rd13;\n"
  "  mov.u32 %r10, -1;\n"
  "  and.b64 %rd16, %rd14, 3;\n"
  "  setp.ne.u64 %p3, %rd16, 0;\n"
  "  @%p3 bra BYTES;\n"
  "  and.b64 %rd17, %rd13, -4;\n"
  "  add.u64 %rd17, %rd14, %rd17;\n"
  "WORDS:\n"
  "  setp.ge.u64 %p4, %rd14, %rd17;\n"
  "  @%p4 bra BYTES;\n"
  "  ld.global.nc.u32 %r11, [%rd14];\n"
  "  xor.b32 %r10, %r10, %r11;\n"
#define BYTE_STEP                                                                                 \
  "  and.b32 %r12, %r10, 255;\n"                                                                  \
  "  shl.b32 %r12, %r12, 2;\n"                                                                    \
  "  add.u32 %r12, %r4, %r12;\n"                                                                  \
  "  ld.shared.u32 %r13, [%r12];\n"                                                               \
  "  shr.u32 %r10, %r10, 8;\n"                                                                    \
  "  xor.b32 %r10, %r10, %r13;\n"
  BYTE_STEP BYTE_STEP BYTE_STEP BYTE_STEP
  "  add.u64 %rd14, %rd14, 4;\n"
  "  bra WORDS;\n"
  "BYTES:\n"
  "  setp.ge.u64 %p5, %rd14, %rd15;\n"
  "  @%p5 bra FINAL;\n"
  "  ld.global.nc.u8 %r11, [%rd14];\n"
  "  xor.b32 %r10, %r10, %r11;\n"
  BYTE_STEP
  "  add.u64 %rd14, %rd14, 1;\n"
  "  bra BYTES;\n"
  "FINAL:\n"
  "  not.b32 %r10, %r10;\n"
  "SUMMED:\n"
  "  mov.u32 %r14, part;\n"
  "  add.u32 %r15, %r14, %r5;\n"
  "  st.shared.u32 [%r15], %r10;\n"
  "  bar.sync 0;\n"
  /* the tree: at stride s, thread t (a multiple of 2s) joins part[t + s] after part[t] */
  "  mov.u32 %r16, 1;\n"
  "LEVEL:\n"
  "  setp.ge.u32 %p6, %r16, 256;\n"
  "  @%p6 bra WRITE;\n"
  "  shl.b32 %r17, %r16, 1;\n"
  "  sub.u32 %r18, %r17, 1;\n"
  "  and.b32 %r19, %r1, %r18;\n"
  "  setp.ne.u32 %p7, %r19, 0;\n"
  "  @%p7 bra NEXT;\n"
  "  add.u32 %r20, %r1, %r16;\n"
  "  cvt.u64.u32 %rd18, %r20;\n"
  "  mul.lo.u64 %rd18, %rd18, %rd10;\n"
  "  setp.ge.u64 %p8, %rd18, %rd9;\n"
  "  @%p8 bra NEXT;\n"
  "  sub.u64 %rd19, %rd9, %rd18;\n"
  "  cvt.u64.u32 %rd20, %r16;\n"
  "  mul.lo.u64 %rd20, %rd20, %rd10;\n"
  "  min.u64 %rd19, %rd19, %rd20;\n"
  /* x^(8 * len) into %r21, len the joined-on bytes (%rd19) */
  "  mov.u32 %r21, 0x80000000;\n"
  "  mov.u32 %r22, %r8;\n"
  "XPOW:\n"
  "  setp.eq.u64 %p9, %rd19, 0;\n"
  "  @%p9 bra JOIN;\n"
  "  and.b64 %rd21, %rd19, 1;\n"
  "  setp.eq.u64 %p9, %rd21, 0;\n"
  "  @%p9 bra XSKIP;\n"
  "  ld.shared.u32 %r23, [%r22];\n"
  "  call (%r21), crc_mult, (%r21, %r23);\n"
  "XSKIP:\n"
  "  shr.u64 %rd19, %rd19, 1;\n"
  "  add.u32 %r22, %r22, 4;\n"
  "  bra XPOW;\n"
  "JOIN:\n"
  "  ld.shared.u32 %r24, [%r15];\n"
  "  call (%r24), crc_mult, (%r21, %r24);\n"
  "  shl.b32 %r25, %r20, 2;\n"
  "  add.u32 %r25, %r14, %r25;\n"
  "  ld.shared.u32 %r26, [%r25];\n"
  "  xor.b32 %r24, %r24, %r26;\n"
  "  st.shared.u32 [%r15], %r24;\n"
  "NEXT:\n"
  "  bar.sync 0;\n"
  "  shl.b32 %r16, %r16, 1;\n"
  "  bra LEVEL;\n"
  "WRITE:\n"
  "  setp.ne.u32 %p6, %r1, 0;\n"
  "  @%p6 bra DONE;\n"
  "  ld.shared.u32 %r27, [%r14];\n"
  "  mul.wide.u32 %rd22, %r2, 4;\n"
  "  add.u64 %rd23, %rd3, %rd22;\n"
  "  st.global.u32 [%rd23], %r27;\n"
  "DONE:\n"
  "  ret;\n"
  "}\n";
#undef BYTE_STEP

/* The kernel and its table, made on first use. */
static xfer_code kernel_ready(xfer_device *dev, xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  if (cd->crc_fn) return XFER_E_OK;
  uint32_t table[TABLE_WORDS];
  xfer_crc32c_byte_table(table);
  for (int j = 0; j < 32; j++) table[256 + j] = xfer_crc32c_shift((size_t)1 << j);
  xfer_code rc = CU(dev, XFER_OP_VERIFY, err, cuModuleLoadData, &cd->crc_module, kernel_ptx);
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuModuleGetFunction, &cd->crc_fn, cd->crc_module,
                   "xfer_crc_pieces");
  if (!rc) rc = CU(dev, XFER_OP_ALLOC, err, cuMemAlloc, &cd->crc_table, sizeof table);
  if (!rc)
    rc = CU(dev, XFER_OP_VERIFY, err, cuMemcpyHtoDAsync, cd->crc_table, table, sizeof table, cd->stream);
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuStreamSynchronize, cd->stream); /* table read */
  if (rc) {
    xfer_cu_crc_release(cu_api_of(dev), cd);
    return rc;
  }
  return XFER_E_OK;
}

void xfer_cu_crc_release(cu_api *api, cu_dev *cd)
{
  if (cd->crc_room) api->cuMemFree(cd->crc_room);
  if (cd->crc_table) api->cuMemFree(cd->crc_table);
  if (cd->crc_module) api->cuModuleUnload(cd->crc_module);
  cd->crc_room = cd->crc_table = 0;
  cd->crc_room_bytes = 0;
  cd->crc_module = NULL;
  cd->crc_fn = NULL;
}

/* Device memory for `bytes` of descriptors and sums, kept and grown with the device. */
static xfer_code room_for(xfer_device *dev, size_t bytes, xfer_error *err)
{
  return xfer_cu_room(dev, &cu_of(dev)->crc_room, &cu_of(dev)->crc_room_bytes, bytes, err);
}

static size_t pieces_in(size_t n) { return (n + PIECE - 1) / PIECE; }

/* The kernel over `count` descriptors (two words each, in `desc`), their sums into `sums`. */
static xfer_code launch(xfer_device *dev, const uint64_t *desc, size_t count, uint32_t *sums,
                        xfer_error *err)
{
  cu_dev *cd = cu_of(dev);
  size_t desc_bytes = count * 16;
  xfer_code rc = room_for(dev, desc_bytes + count * 4, err);
  CUdeviceptr d_desc = cd->crc_room, d_sums = cd->crc_room + desc_bytes;
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuMemcpyHtoDAsync, d_desc, desc, desc_bytes, cd->stream);
  void *args[] = {&d_desc, &cd->crc_table, &d_sums};
  if (!rc)
    rc = CU(dev, XFER_OP_VERIFY, err, cuLaunchKernel, cd->crc_fn, (unsigned)count, 1, 1, THREADS, 1,
            1, 0, cd->stream, args, NULL);
  if (!rc) rc = CU(dev, XFER_OP_VERIFY, err, cuMemcpyDtoHAsync, sums, d_sums, count * 4, cd->stream);
  /* the copies read `desc` and write `sums` until the stream is through */
  xfer_error ignored;
  xfer_code s = xfer_cu_wait(dev, XFER_OP_VERIFY, cd->stream, NULL, rc ? &ignored : err);
  if (s && s != XFER_E_TIMEOUT) cu_api_of(dev)->cuStreamSynchronize(cd->stream);
  return rc ? rc : s;
}

xfer_code xfer_cu_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err)
{
  size_t blocks = 0;
  for (size_t i = 0; i < count; i++) blocks += pieces_in(pieces[i].n);
  for (size_t i = 0; i < count; i++) crc[i] = 0;
  if (!blocks) return XFER_E_OK;
  if (blocks > 0x7fffffffu) return XFER_E_UNSUPPORTED;
  xfer_code rc = xfer_cu_enter(dev, XFER_OP_VERIFY, err);
  if (!rc) rc = kernel_ready(dev, err);
  if (rc) return rc;
  uint64_t *desc = malloc(blocks * 16);
  uint32_t *sums = malloc(blocks * 4);
  if (!desc || !sums) {
    free(desc);
    free(sums);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  }
  size_t k = 0;
  for (size_t i = 0; i < count; i++)
    for (size_t at = 0; at < pieces[i].n; at += PIECE, k++) {
      desc[2 * k] = (uint64_t)(xfer_cu_ptr(pieces[i].buf) + pieces[i].offset + at);
      desc[2 * k + 1] = pieces[i].n - at < PIECE ? pieces[i].n - at : PIECE;
    }
  rc = launch(dev, desc, blocks, sums, err);
  for (size_t i = 0, first = 0; !rc && i < count; first += pieces_in(pieces[i].n), i++)
    crc[i] = xfer_crc32c_of_stretches(sums + first, pieces_in(pieces[i].n), PIECE, pieces[i].n);
  free(desc);
  free(sums);
  return rc;
}
