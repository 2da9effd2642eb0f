/*
** opencl_crc.c -- copy->crc32c on an OpenCL device: the CRC32C of a buffer's bytes summed where
** they are, so that `verify` reads nothing back. One work-item per stretch of STRETCH bytes sums
** its stretch by table (the table a constant buffer); the host joins the stretches' sums
** (xfer_crc32c_of_stretches). The program is built from source on first use, per device; a
** device whose compiler refuses it is asked no more (the core reads the bytes back instead).
*/
#include <stdlib.h>
#include <string.h>

#include "opencl_call.h"

/* Bytes one work-item sums: 4096 work-items for 256 MiB. */
#define STRETCH ((size_t)65536)

static const char source[] =
  "__kernel void crc32c_stretches(__global const uchar *buffer, ulong offset, ulong n,\n"
  "                               ulong stretch, __constant uint *table, __global uint *sums)\n"
  "{\n"
  "  __global const uchar *bytes = buffer + offset;\n"
  "  ulong i = get_global_id(0), from = i * stretch;\n"
  "  if (from >= n) return;\n"
  "  ulong to = min(from + stretch, n);\n"
  "  uint c = 0xffffffffu;\n"
  "  for (ulong k = from; k < to; k++) c = (c >> 8) ^ table[(c ^ bytes[k]) & 0xffu];\n"
  "  sums[i] = ~c;\n"
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
  uint32_t table[256];
  xfer_crc32c_byte_table(table);
  const char *text = source;
  size_t len = sizeof source - 1;
  cl_int rc = CL_SUCCESS;
  cd->crc_program = api->clCreateProgramWithSource(cd->context, 1, &text, &len, &rc);
  if (rc == CL_SUCCESS) rc = api->clBuildProgram(cd->crc_program, 1, &cd->id, "", NULL, NULL);
  if (rc == CL_SUCCESS) cd->crc_kernel = api->clCreateKernel(cd->crc_program, "crc32c_stretches", &rc);
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

/* The stretches' sums into `sums` (count of them): the kernel over n bytes of the buffer from
** `offset`. */
static xfer_code run_kernel(xfer_device *dev, cl_mem bytes, size_t offset, size_t n, cl_mem sums,
                            size_t count, xfer_error *err)
{
  cl_dev *cd = cl_of(dev);
  cl_ulong at = offset, length = n, stretch = STRETCH;
  const struct {
    size_t size;
    const void *value;
  } args[] = {{sizeof bytes, &bytes}, {sizeof at, &at}, {sizeof length, &length},
              {sizeof stretch, &stretch}, {sizeof cd->crc_table, &cd->crc_table},
              {sizeof sums, &sums}};
  for (cl_uint a = 0; a < sizeof args / sizeof args[0]; a++)
    CL_CALL(dev, XFER_OP_VERIFY, err, clSetKernelArg, cd->crc_kernel, a, args[a].size, args[a].value);
  CL_CALL(dev, XFER_OP_VERIFY, err, clEnqueueNDRangeKernel, cd->queue, cd->crc_kernel, 1, NULL,
          &count, NULL, 0, NULL, NULL);
  return XFER_E_OK;
}

/* The sum of one range: the kernel's stretches, read back and joined. */
static xfer_code range_crc32c(xfer_device *dev, const xfer_sum_piece *piece, uint32_t *crc,
                              xfer_error *err)
{
  size_t n = piece->n;
  *crc = 0;
  if (!n) return XFER_E_OK;
  cl_dev *cd = cl_of(dev);
  size_t count = (n + STRETCH - 1) / STRETCH;
  uint32_t *host = malloc(count * sizeof *host);
  if (!host) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_VERIFY);
  cl_int rc = CL_SUCCESS;
  cl_mem sums = api_of(dev)->clCreateBuffer(cd->context, CL_MEM_WRITE_ONLY, count * sizeof *host,
                                            NULL, &rc);
  xfer_code code = rc == CL_SUCCESS ? XFER_E_OK : xfer_cl_fail(XFER_OP_ALLOC, "clCreateBuffer", rc, 0, err);
  if (!code) code = run_kernel(dev, (cl_mem)piece->buf, piece->offset, n, sums, count, err);
  CL_STEP(code, dev, XFER_OP_VERIFY, err, clEnqueueReadBuffer, cd->queue, sums, CL_TRUE, 0,
          count * sizeof *host, host, 0, NULL, NULL);
  if (sums) api_of(dev)->clReleaseMemObject(sums);
  if (!code) *crc = xfer_crc32c_of_stretches(host, count, STRETCH, n);
  free(host);
  return code;
}

xfer_code xfer_cl_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err)
{
  for (size_t i = 0; i < count; i++)
    if (xfer_cl_is_external(dev, pieces[i].buf)) return XFER_E_UNSUPPORTED;
  if (!kernel_ready(dev)) return XFER_E_UNSUPPORTED;
  xfer_code rc = XFER_E_OK;
  for (size_t i = 0; i < count && !rc; i++) rc = range_crc32c(dev, &pieces[i], &crc[i], err);
  return rc;
}
