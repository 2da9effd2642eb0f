/*
** opencl_crc.c -- copy->crc32c on an OpenCL device: the CRC32C of ranges of its buffers summed
** where they lie, so that `verify` reads nothing back. As CUDA's kernel (cuda_crc.c): each
** range cut into pieces of at most PIECE bytes, one work-group of 256 each, whose work-items
** sum a stretch of the piece each by the byte table (in local memory) and join their sums in a
** tree (a shift past n bytes: a product by x^(8n), composed from x^(8 * 2^j), which the host
** gives); the host joins a range's pieces. One enqueue per buffer a call names (a buffer is
** the kernel's argument: OpenCL has no addresses across buffers). The program is built from
** source on first use, per device; a device whose compiler refuses it is asked no more (the
** core reads the bytes back instead).
*/
#include <stdlib.h>
#include <string.h>

#include "opencl_call.h"

/* Bytes one work-group sums at most. */
#define PIECE ((size_t)1 << 20)
#define GROUP 256
/* The table the kernel reads: the byte table, then x^(8 * 2^j) for j = 0..31. */
#define TABLE_WORDS (256 + 32)

static const char source[] =
  "uint crc_mult(uint a, uint b)\n"
  "{\n"
  "  uint p = 0;\n"
  "  for (int i = 0; i < 32; i++) {\n"
  "    p ^= b & (uint)(-(int)(a >> 31));\n"
  "    a <<= 1;\n"
  "    b = (b >> 1) ^ (0x82F63B78u & (uint)(-(int)(b & 1u)));\n"
  "  }\n"
  "  return p;\n"
  "}\n"
  "__kernel __attribute__((reqd_work_group_size(256, 1, 1)))\n"
  "void crc32c_pieces(__global const uchar *bytes, __global const ulong *desc,\n"
  "                   __constant uint *table, __global uint *sums)\n"
  "{\n"
  "  __local uint tab[256], pw[32], part[256];\n"
  "  uint t = get_local_id(0);\n"
  "  size_t g = get_group_id(0);\n"
  "  tab[t] = table[t];\n"
  "  if (t < 32) pw[t] = table[256 + t];\n"
  "  barrier(CLK_LOCAL_MEM_FENCE);\n"
  "  ulong at = desc[2 * g], len = desc[2 * g + 1];\n"
  "  ulong sub = (((len + 255) >> 8) + 15) & ~(ulong)15, from = t * sub;\n"
  "  uint c = 0;\n"
  "  if (from < len) {\n"
  "    ulong span = min(len - from, sub), k = 0;\n"
  "    __global const uchar *p = bytes + at + from;\n"
  "    c = 0xffffffffu;\n"
  "    if ((at & 3) == 0) {\n"
  "      __global const uint *w = (__global const uint *)p;\n"
  "      for (; k + 4 <= span; k += 4) {\n"
  "        c ^= w[k >> 2];\n"
  "        c = (c >> 8) ^ tab[c & 255];\n"
  "        c = (c >> 8) ^ tab[c & 255];\n"
  "        c = (c >> 8) ^ tab[c & 255];\n"
  "        c = (c >> 8) ^ tab[c & 255];\n"
  "      }\n"
  "    }\n"
  "    for (; k < span; k++) c = (c >> 8) ^ tab[(c ^ p[k]) & 255];\n"
  "    c = ~c;\n"
  "  }\n"
  "  part[t] = c;\n"
  "  barrier(CLK_LOCAL_MEM_FENCE);\n"
  "  for (uint s = 1; s < 256; s <<= 1) {\n"
  "    ulong after = (ulong)(t + s) * sub;\n"
  "    if ((t & (2 * s - 1)) == 0 && after < len) {\n"
  "      ulong n = min(len - after, (ulong)s * sub);\n"
  "      uint x = 0x80000000u;\n"
  "      for (uint j = 0; n; j++, n >>= 1)\n"
  "        if (n & 1) x = crc_mult(x, pw[j]);\n"
  "      part[t] = crc_mult(x, part[t]) ^ part[t + s];\n"
  "    }\n"
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"
  "  }\n"
  "  if (t == 0) sums[g] = part[0];\n"
  "}\n";

void xfer_cl_crc_release(cl_api *api, cl_dev *cd)
{
  if (cd->crc_kernel) api->clReleaseKernel(cd->crc_kernel);
  if (cd->crc_program) api->clReleaseProgram(cd->crc_program);
  if (cd->crc_table) api->clReleaseMemObject(cd->crc_table);
  cd->crc_kernel = NULL;
  cd->crc_program = NULL;
  cd->crc_table = NULL;
}

/* The kernel and its table, made once; 0 where the device's compiler refuses them. */
static int kernel_ready(xfer_device *dev)
{
  cl_dev *cd = cl_of(dev);
  cl_api *api = api_of(dev);
  if (cd->crc_kernel) return 1;
  if (cd->crc_refused) return 0;
  uint32_t table[TABLE_WORDS];
  xfer_crc32c_byte_table(table);
  for (int j = 0; j < 32; j++) table[256 + j] = xfer_crc32c_shift((size_t)1 << j);
  const char *text = source;
  size_t len = sizeof source - 1;
  cl_int rc = CL_SUCCESS;
  cd->crc_program = api->clCreateProgramWithSource(cd->context, 1, &text, &len, &rc);
  if (rc == CL_SUCCESS) rc = api->clBuildProgram(cd->crc_program, 1, &cd->id, "", NULL, NULL);
  if (rc == CL_SUCCESS) cd->crc_kernel = api->clCreateKernel(cd->crc_program, "crc32c_pieces", &rc);
  if (rc == CL_SUCCESS)
    cd->crc_table = api->clCreateBuffer(cd->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                        sizeof table, table, &rc);
  if (rc != CL_SUCCESS) {
    xfer_cl_crc_release(api, cd);
    cd->crc_refused = 1;
    return 0;
  }
  return 1;
}

static size_t pieces_in(size_t n) { return (n + PIECE - 1) / PIECE; }

/* The kernel over `blocks` descriptors of one buffer (offset, length: two words each), their
** sums read into `sums`. */
static xfer_code run_kernel(xfer_device *dev, cl_mem bytes, const cl_ulong *desc, size_t blocks,
                            uint32_t *sums, xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  cl_mem d_desc = NULL, d_sums = NULL;
  CL_CREATE(dev, XFER_OP_ALLOC, err, d_desc, clCreateBuffer, cd->context,
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, blocks * 2 * sizeof *desc, (void *)desc);
  cl_int made = CL_SUCCESS;
  d_sums = api_of(dev)->clCreateBuffer(cd->context, CL_MEM_WRITE_ONLY, blocks * sizeof *sums, NULL, &made);
  xfer_code code = made == CL_SUCCESS ? XFER_E_OK : xfer_cl_fail(XFER_OP_ALLOC, "clCreateBuffer", made, 0, err);
  const struct {
    size_t size;
    const void *value;
  } args[] = {{sizeof bytes, &bytes}, {sizeof d_desc, &d_desc}, {sizeof cd->crc_table, &cd->crc_table},
              {sizeof d_sums, &d_sums}};
  for (cl_uint a = 0; a < sizeof args / sizeof args[0]; a++)
    CL_STEP(code, dev, XFER_OP_VERIFY, err, clSetKernelArg, cd->crc_kernel, a, args[a].size, args[a].value);
  size_t global = blocks * GROUP, local = GROUP;
  CL_STEP(code, dev, XFER_OP_VERIFY, err, clEnqueueNDRangeKernel, cd->queue, cd->crc_kernel, 1, NULL,
          &global, &local, 0, NULL, NULL);
  CL_STEP(code, dev, XFER_OP_VERIFY, err, clEnqueueReadBuffer, cd->queue, d_sums, CL_TRUE, 0,
          blocks * sizeof *sums, sums, 0, NULL, NULL);
  if (d_sums) api_of(dev)->clReleaseMemObject(d_sums);
  api_of(dev)->clReleaseMemObject(d_desc);
  return code;
}

/* The ranges on the buffer of pieces[first] (from `first` on) summed by one enqueue, marked in
** `done`. */
static xfer_code buffer_sums(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, size_t first,
                             unsigned char *done, uint32_t *crc, xfer_error *err)
{
  void *buf = pieces[first].buf;
  size_t blocks = 0;
  for (size_t i = first; i < count; i++)
    if (pieces[i].buf == buf) blocks += pieces_in(pieces[i].n);
  cl_ulong *desc = malloc((blocks ? blocks : 1) * 2 * sizeof *desc);
  uint32_t *sums = malloc((blocks ? blocks : 1) * sizeof *sums);
  if (!desc || !sums) {
    free(desc);
    free(sums);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  }
  xfer_code rc = XFER_E_OK;
  size_t k = 0;
  for (size_t i = first; i < count; i++)
    for (size_t at = 0; pieces[i].buf == buf && at < pieces[i].n; at += PIECE, k++) {
      desc[2 * k] = pieces[i].offset + at;
      desc[2 * k + 1] = pieces[i].n - at < PIECE ? pieces[i].n - at : PIECE;
    }
  if (!rc && blocks) rc = run_kernel(dev, (cl_mem)buf, desc, blocks, sums, err);
  for (size_t i = first, b = 0; !rc && i < count; i++) {
    if (pieces[i].buf != buf) continue;
    done[i] = 1;
    crc[i] = pieces[i].n ? xfer_crc32c_of_stretches(sums + b, pieces_in(pieces[i].n), PIECE, pieces[i].n) : 0;
    b += pieces_in(pieces[i].n);
  }
  free(desc);
  free(sums);
  return rc;
}

xfer_code xfer_cl_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err)
{
  if (!kernel_ready(dev) || count > 0xffffffffu) return XFER_E_UNSUPPORTED;
  /* buffers imported from another runtime (CUDA's memory OpenCL shares) are OpenCL's for the
  ** kernels between an acquire and a release */
  cl_mem *mems = malloc(count * sizeof *mems), *ext = malloc(count * sizeof *ext);
  unsigned char *done = calloc(count, 1);
  if (!mems || !ext || !done) {
    free(mems), free(ext), free(done);
    return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  }
  for (size_t i = 0; i < count; i++) mems[i] = (cl_mem)pieces[i].buf;
  cl_uint n_ext = xfer_cl_externals_of(cl_of(dev), mems, (cl_uint)count, ext);
  xfer_code rc = xfer_cl_externals_acquire(dev, ext, n_ext, err);
  if (!rc) {
    for (size_t i = 0; i < count && !rc; i++)
      if (!done[i]) rc = buffer_sums(dev, pieces, count, i, done, crc, err);
    rc = xfer_cl_externals_release(dev, ext, n_ext, 0, rc, err);
  }
  free(mems), free(ext), free(done);
  return rc;
}
