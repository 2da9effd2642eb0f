/*
** vulkan_many.c -- a batch of copies on one Vulkan device (xfer_copy_ops.many), submitted at
** once and waited for once. Tensors in memory the CPU shares (lavapipe) are mapped for their
** lifetime: every piece is one memcpy. Elsewhere every piece is a region of one command buffer
** -- one vkCmdCopyBuffer per run of pieces between the same two buffers, host memory imported
** in place (VK_EXT_external_memory_host, kept with its segment) -- one submission, one fence.
** Host memory the driver cannot import leaves the batch to the core's copies one by one.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_call.h"

static char *mapped_address(const xfer_piece_end *e)
{
  return e->buf ? (char *)((vk_buf *)e->buf)->mapped + e->offset : e->host;
}

/* Whether every buffer the pieces touch is mapped (then the CPU copies them). */
static int all_mapped(const xfer_piece *pieces, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if ((pieces[i].dst.buf && !((vk_buf *)pieces[i].dst.buf)->mapped) ||
        (pieces[i].src.buf && !((vk_buf *)pieces[i].src.buf)->mapped))
      return 0;
  return 1;
}

static xfer_code many_mapped(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  if (xfer_vk_injected(dev, XFER_OP_COPY))
    return xfer_vk_fail(dev, XFER_OP_COPY, "vkMapMemory", (VkResult)vk_of(dev)->injected, 1, err);
  for (size_t i = 0; i < n; i++)
    memcpy(mapped_address(&pieces[i].dst), mapped_address(&pieces[i].src), pieces[i].n);
  return XFER_E_OK;
}

/* One end as a VkBuffer and an offset in it: a tensor's buffer, or host memory imported in
** place (`last`: the import found for the piece before, as a batch's host ends are mostly one
** tensor). 0: host memory the driver cannot import. */
static int buffer_end(xfer_device *dev, const xfer_piece_end *e, size_t n, const vk_import **last,
                      VkBuffer *buffer, VkDeviceSize *at)
{
  if (e->buf) {
    *buffer = ((vk_buf *)e->buf)->buffer;
    *at = e->offset;
    return 1;
  }
  const vk_import *im = *last;
  if (!im || e->host < im->base || e->host + n > im->base + im->size)
    im = xfer_vk_import_host(dev, e->host, n, 0);
  if (!im) return 0;
  *last = im;
  *buffer = im->buffer;
  *at = (VkDeviceSize)(e->host - im->base);
  return 1;
}

/* The pieces as regions of copies between pairs of buffers (a copy per run of pieces with the
** same two buffers). XFER_E_UNSUPPORTED: host memory it cannot reach. */
static xfer_code plan_copies(xfer_device *dev, const xfer_piece *pieces, size_t n,
                             VkBufferCopy *regions, vk_copy *copies, size_t *ncopies)
{
  const vk_import *last[2] = {NULL, NULL};
  size_t nc = 0, nr = 0;
  for (size_t i = 0; i < n; i++) {
    const xfer_piece *p = &pieces[i];
    VkBuffer dst, src;
    VkDeviceSize dst_at, src_at;
    if (!buffer_end(dev, &p->dst, p->n, &last[0], &dst, &dst_at) ||
        !buffer_end(dev, &p->src, p->n, &last[1], &src, &src_at))
      return XFER_E_UNSUPPORTED;
    regions[nr] = (VkBufferCopy){.srcOffset = src_at, .dstOffset = dst_at, .size = p->n};
    if (!nc || copies[nc - 1].src != src || copies[nc - 1].dst != dst)
      copies[nc++] = (vk_copy){src, dst, &regions[nr], 0};
    copies[nc - 1].count++;
    nr++;
  }
  *ncopies = nc;
  return XFER_E_OK;
}

static xfer_code many_recorded(xfer_device *dev, const xfer_piece *pieces, size_t n,
                               xfer_error *err)
{
  if (n > UINT32_MAX) return XFER_E_UNSUPPORTED;
  VkBufferCopy *regions = malloc(n * sizeof *regions);
  vk_copy *copies = malloc(n * sizeof *copies);
  size_t ncopies = 0;
  xfer_code rc = regions && copies ? plan_copies(dev, pieces, n, regions, copies, &ncopies)
                                   : xfer_err_code(err, XFER_E_ALLOC, XFER_OP_COPY);
  vk_dev *vd = vk_of(dev);
  if (!rc && ncopies) {
    rc = xfer_vk_submit_copies(dev, XFER_OP_COPY, vd->cmd, copies, ncopies, vd->fence, err);
    if (!rc) rc = xfer_vk_wait_fence(dev, XFER_OP_COPY, vd->fence, err);
  }
  free(regions);
  free(copies);
  return rc;
}

xfer_code xfer_vk_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err)
{
  if (n == 0) return XFER_E_OK;
  return all_mapped(pieces, n) ? many_mapped(dev, pieces, n, err)
                               : many_recorded(dev, pieces, n, err);
}
