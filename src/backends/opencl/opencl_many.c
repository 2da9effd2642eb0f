/*
** opencl_many.c -- a batch of copies on one OpenCL device (xfer_copy_ops.many), submitted at
** once and waited for once. On a device that shares memory with the host (PoCL) each buffer
** the batch touches is mapped once and every piece is one memcpy: a blocking read or write
** per piece cost PoCL 40-100 us of command overhead. Elsewhere every piece is enqueued without
** blocking on the in-order queue (reads, writes, copies within the device), then one clFinish.
** Buffers imported from another runtime are left to the core's copies one by one.
*/
#include <stdlib.h>
#include <string.h>

#include "opencl_call.h"

/* A device that shares memory with the host maps at most this many buffers for one batch. */
#define MAPS_MAX 16

typedef struct mapping {
  cl_mem mem;
  char *at;
} mapping;

/* The host address of buffer byte `offset`: the buffer mapped whole on first use. */
static xfer_code mapped(xfer_device *dev, mapping *maps, int *nmaps, cl_mem mem, size_t offset,
                        char **out, xfer_error *err)
{
  for (int i = 0; i < *nmaps; i++)
    if (maps[i].mem == mem) {
      *out = maps[i].at + offset;
      return XFER_E_OK;
    }
  if (*nmaps == MAPS_MAX) return XFER_E_UNSUPPORTED;
  size_t size = 0;
  if (api_of(dev)->clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
    return XFER_E_UNSUPPORTED;
  void *at = NULL;
  CL_CREATE(dev, XFER_OP_MAP, err, at, clEnqueueMapBuffer, cl_of(dev)->queue, mem, CL_TRUE,
            CL_MAP_READ | CL_MAP_WRITE, 0, size, 0, NULL, NULL);
  maps[*nmaps] = (mapping){mem, at};
  (*nmaps)++;
  *out = (char *)at + offset;
  return XFER_E_OK;
}

static char *end_address(const xfer_piece_end *e, const char *in_buffer)
{
  return e->buf ? (char *)in_buffer : e->host;
}

/* Host-shared memory: every buffer mapped once, the pieces copied, everything unmapped. */
static xfer_code many_mapped(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  mapping maps[MAPS_MAX];
  int nmaps = 0;
  xfer_code rc = XFER_E_OK;
  for (size_t i = 0; i < n && !rc; i++) {
    const xfer_piece *p = &pieces[i];
    char *d = NULL, *s = NULL;
    if (p->dst.buf) rc = mapped(dev, maps, &nmaps, p->dst.buf, p->dst.offset, &d, err);
    if (!rc && p->src.buf) rc = mapped(dev, maps, &nmaps, p->src.buf, p->src.offset, &s, err);
    if (!rc) memcpy(end_address(&p->dst, d), end_address(&p->src, s), p->n);
  }
  xfer_error ignored;
  xfer_code unmapped = XFER_E_OK;
  for (int m = 0; m < nmaps; m++) { /* every mapping goes back, whatever failed */
    cl_int u = api_of(dev)->clEnqueueUnmapMemObject(cl_of(dev)->queue, maps[m].mem, maps[m].at, 0,
                                                    NULL, NULL);
    if (u != CL_SUCCESS && !unmapped)
      unmapped = xfer_cl_fail(XFER_OP_MAP, "clEnqueueUnmapMemObject", u, 0, rc ? &ignored : err);
  }
  /* waits even when injected; until the deadline at most */
  xfer_code waited = xfer_cl_wait(dev, XFER_OP_SYNC, NULL, 1, rc || unmapped ? &ignored : err);
  if (rc) return rc;
  if (unmapped) return unmapped;
  return waited;
}

/* Device memory: every piece enqueued without blocking, one clFinish at the end (also after a
** failure part way: the host memory of what was enqueued is the caller's again only then). */
static xfer_code many_enqueued(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  cl_command_queue q = cl_of(dev)->queue;
  xfer_code rc = XFER_E_OK;
  for (size_t i = 0; i < n && !rc; i++) {
    const xfer_piece *p = &pieces[i];
    if (p->dst.buf && p->src.buf) {
      CL_STEP(rc, dev, XFER_OP_COPY, err, clEnqueueCopyBuffer, q, (cl_mem)p->src.buf,
              (cl_mem)p->dst.buf, p->src.offset, p->dst.offset, p->n, 0, NULL, NULL);
    } else if (p->dst.buf) {
      xfer_cl_pin(dev, p->src.host, p->n);
      CL_STEP(rc, dev, XFER_OP_WRITE, err, clEnqueueWriteBuffer, q, (cl_mem)p->dst.buf, CL_FALSE,
              p->dst.offset, p->n, p->src.host, 0, NULL, NULL);
    } else {
      xfer_cl_pin(dev, p->dst.host, p->n);
      CL_STEP(rc, dev, XFER_OP_READ, err, clEnqueueReadBuffer, q, (cl_mem)p->src.buf, CL_FALSE,
              p->src.offset, p->n, p->dst.host, 0, NULL, NULL);
    }
  }
  xfer_error ignored; /* waits even when injected; until the deadline at most */
  xfer_code waited = xfer_cl_wait(dev, XFER_OP_SYNC, NULL, 1, rc ? &ignored : err);
  return rc ? rc : waited;
}

xfer_code xfer_cl_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  for (size_t i = 0; i < n; i++) /* imported buffers: acquired and released per copy */
    if ((pieces[i].dst.buf && xfer_cl_is_external(dev, pieces[i].dst.buf)) ||
        (pieces[i].src.buf && xfer_cl_is_external(dev, pieces[i].src.buf)))
      return XFER_E_UNSUPPORTED;
  if (!dev->unified) return many_enqueued(dev, pieces, n, err);
  xfer_code rc = many_mapped(dev, pieces, n, err);
  return rc == XFER_E_UNSUPPORTED ? many_enqueued(dev, pieces, n, err) : rc;
}
