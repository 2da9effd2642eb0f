/*
** opencl_crc.c -- copy->crc32c on an OpenCL device: the CRC32C of ranges of its buffers summed
** where they lie, so that `verify` reads nothing back. As CUDA's kernel (cuda_crc.c): each
** range cut into pieces of 256 stretches, the work-groups (as many as the device runs at once)
** walking them; a piece summed right-aligned, work-item t summing bytes [st - pad, st - pad +
** s) as a raw register (s the stretch: 256 bytes, 64 or 16 for a call of small ranges),
** which leading zeros leave as it is, so that the tree joins stretches by fixed shifts (four
** lookups in a table the host made); the byte table
** in local memory once per lane of 32, so that a warp's lookups fall in separate banks. The
** host joins a range's pieces and turns the raw register into the CRC. One enqueue per
** buffer a call names (a buffer is the kernel's argument: OpenCL has no addresses across
** buffers). The program is built from source on first use, per device; a device whose
** compiler refuses it, or with too little local memory, is asked no more (the core reads the
** bytes back instead).
*/
#include <stdlib.h>
#include <string.h>

#include "opencl_call.h"

/* A work-group: 256 work-items, a stretch each (the tree's XFER_CRC_LEVELS: 2^8 = GROUP). */
#define GROUP 256
/* Work-groups a compute unit runs at once (33 KiB of local memory each, on a GPU). */
#define GROUPS_PER_UNIT 6
/* The table the kernel reads (xfer_crc32c_kernel_table). */
#define TABLE_WORDS XFER_CRC_TABLE_WORDS
/* The local memory the kernel takes: the byte table once per lane, and the tree. */
#define LOCAL_BYTES ((cl_ulong)(8192 + 256) * 4)

static const char source[] =
  "#define STEP c = (c >> 8) ^ col[(c & 255) << 5]\n"
  "#define WORD(w) c ^= (w); STEP; STEP; STEP; STEP\n"
  "#define QUAD(v) WORD(v.x); WORD(v.y); WORD(v.z); WORD(v.w)\n"
  "__kernel __attribute__((reqd_work_group_size(256, 1, 1)))\n"
  "void crc32c_pieces(__global const uchar *bytes, __global const ulong *desc,\n"
  "                   __global const uint *table, __global uint *sums, uint count, uint stretch,\n"
  "                   uint shifts_at)\n"
  "{\n"
  "  __local uint tab[8192], part[256];\n"
  "  uint t = get_local_id(0);\n"
  "  uint v = table[t];\n"
  "  for (uint l = 0; l < 32; l++) tab[t * 32 + ((l + t) & 31)] = v;\n"
  "  barrier(CLK_LOCAL_MEM_FENCE);\n"
  "  __local const uint *col = tab + (t & 31);\n"
  "  for (uint g = get_group_id(0); g < count; g += get_num_groups(0)) {\n"
  "    ulong at = desc[2 * g], len = desc[2 * g + 1];\n"
  "    long beg = (long)t * stretch + (long)len - 256 * (long)stretch, end = beg + stretch;\n"
  "    uint c = 0;\n"
  "    if (end > 0) {\n"
  "      ulong from = beg < 0 ? 0 : (ulong)beg, span = (ulong)end - from, k = 0;\n"
  "      __global const uchar *p = bytes + at + from;\n"
  "      if (((at + from) & 15) == 0 && (span & 15) == 0) {\n"
  "        __global const uint4 *q = (__global const uint4 *)p;\n"
  /* 64 bytes at a time while 64 are left, the next 64 asked for before these are summed:
  ** whole sectors a load, twice the bytes in flight (cuda_crc.c says why) */
  "        uint4 a0 = 0, a1 = 0, a2 = 0, a3 = 0;\n"
  "        if (span >= 64) { a0 = q[0]; a1 = q[1]; a2 = q[2]; a3 = q[3]; }\n"
  "        for (; k + 64 <= span; k += 64) {\n"
  "          uint4 b0 = 0, b1 = 0, b2 = 0, b3 = 0;\n"
  "          if (k + 128 <= span) {\n"
  "            ulong n = (k >> 4) + 4;\n"
  "            b0 = q[n]; b1 = q[n + 1]; b2 = q[n + 2]; b3 = q[n + 3];\n"
  "          }\n"
  "          QUAD(a0); QUAD(a1); QUAD(a2); QUAD(a3);\n"
  "          a0 = b0; a1 = b1; a2 = b2; a3 = b3;\n"
  "        }\n"
  "        for (; k < span; k += 16) { uint4 w = q[k >> 4]; QUAD(w); }\n"
  "      }\n"
  "      for (; k < span; k++) { c ^= p[k]; STEP; }\n"
  "    }\n"
  "    part[t] = c;\n"
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"
  "    __global const uint *sh = table + shifts_at;\n"
  "    for (uint s = 1; s < 256; s <<= 1, sh += 1024) {\n"
  "      if ((t & (2 * s - 1)) == 0) {\n"
  "        uint r = part[t];\n"
  "        part[t] = sh[r & 255] ^ sh[256 + ((r >> 8) & 255)] ^ sh[512 + ((r >> 16) & 255)] ^\n"
  "                  sh[768 + (r >> 24)] ^ part[t + s];\n"
  "      }\n"
  "      barrier(CLK_LOCAL_MEM_FENCE);\n"
  "    }\n"
  "    if (t == 0) sums[g] = part[0];\n"
  "    barrier(CLK_LOCAL_MEM_FENCE);\n"
  "  }\n"
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
  cl_ulong local_bytes = 0;
  cl_uint units = 0;
  cl_int rc = api->clGetDeviceInfo(cd->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_bytes, &local_bytes, NULL);
  if (rc == CL_SUCCESS)
    rc = api->clGetDeviceInfo(cd->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  uint32_t *table = rc == CL_SUCCESS && local_bytes >= LOCAL_BYTES ? malloc(TABLE_WORDS * sizeof *table) : NULL;
  if (!table) {
    cd->crc_refused = 1;
    return 0;
  }
  cd->crc_groups = (size_t)(units ? units : 1) * GROUPS_PER_UNIT;
  xfer_crc32c_kernel_table(table);
  const char *text = source;
  size_t len = sizeof source - 1;
  cd->crc_program = api->clCreateProgramWithSource(cd->context, 1, &text, &len, &rc);
  if (rc == CL_SUCCESS) rc = api->clBuildProgram(cd->crc_program, 1, &cd->id, "", NULL, NULL);
  if (rc == CL_SUCCESS) cd->crc_kernel = api->clCreateKernel(cd->crc_program, "crc32c_pieces", &rc);
  if (rc == CL_SUCCESS)
    cd->crc_table = api->clCreateBuffer(cd->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                        TABLE_WORDS * sizeof *table, table, &rc);
  free(table);
  if (rc != CL_SUCCESS) {
    xfer_cl_crc_release(api, cd);
    cd->crc_refused = 1;
    return 0;
  }
  return 1;
}

static size_t pieces_in(size_t n, size_t piece) { return (n + piece - 1) / piece; }

/* The kernel over `blocks` descriptors of one buffer (offset, length: two words each), their
** sums read into `sums`; work-items' stretches of `stretch` bytes, the tree's shifts at word
** `shifts_at` of the table. */
static xfer_code run_kernel(xfer_device *dev, cl_mem bytes, const cl_ulong *desc, size_t blocks,
                            size_t stretch, size_t shifts_at, uint32_t *sums, xfer_error *err)
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
              {sizeof d_sums, &d_sums}, {sizeof(cl_uint), &(cl_uint){(cl_uint)blocks}},
              {sizeof(cl_uint), &(cl_uint){(cl_uint)stretch}}, {sizeof(cl_uint), &(cl_uint){(cl_uint)shifts_at}}};
  for (cl_uint a = 0; a < sizeof args / sizeof args[0]; a++)
    CL_STEP(code, dev, XFER_OP_VERIFY, err, clSetKernelArg, cd->crc_kernel, a, args[a].size, args[a].value);
  size_t groups = blocks < cd->crc_groups ? blocks : cd->crc_groups;
  size_t global = groups * GROUP, local = GROUP;
  cl_event ran = NULL;
  CL_STEP(code, dev, XFER_OP_VERIFY, err, clEnqueueNDRangeKernel, cd->queue, cd->crc_kernel, 1, NULL,
          &global, &local, 0, NULL, &ran);
  /* the kernel waited for until the move's deadline, as every wait; the sums read only once it
  ** is done (a blocking read of them waited in the driver for the kernel, deadline or not, and
  ** one not blocking would write `sums` after a timeout) */
  if (!code) code = xfer_cl_wait(dev, XFER_OP_VERIFY, ran, 0, err);
  if (ran) api_of(dev)->clReleaseEvent(ran);
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
  size_t blocks = 0, largest = 0, shifts_at = 0;
  for (size_t i = first; i < count; i++)
    if (pieces[i].buf == buf && pieces[i].n > largest) largest = pieces[i].n;
  size_t stretch = xfer_crc32c_kernel_stretch(largest, &shifts_at), piece = stretch * GROUP;
  for (size_t i = first; i < count; i++)
    if (pieces[i].buf == buf) blocks += pieces_in(pieces[i].n, piece);
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
    for (size_t at = 0; pieces[i].buf == buf && at < pieces[i].n; at += piece, k++) {
      desc[2 * k] = pieces[i].offset + at;
      desc[2 * k + 1] = pieces[i].n - at < piece ? pieces[i].n - at : piece;
    }
  if (!rc && blocks) rc = run_kernel(dev, (cl_mem)buf, desc, blocks, stretch, shifts_at, sums, err);
  for (size_t i = first, b = 0; !rc && i < count; i++) {
    if (pieces[i].buf != buf) continue;
    done[i] = 1;
    crc[i] = xfer_crc32c_of_raw_pieces(sums + b, piece, pieces[i].n);
    b += pieces_in(pieces[i].n, piece);
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
