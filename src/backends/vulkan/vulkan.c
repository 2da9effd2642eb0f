/*
** vulkan.c -- the Vulkan runtime's transfers: tensors in storage buffers; host memory
** in and out by mapping (devices that share memory with the host), by importing host
** buffers once and keeping the import (VK_EXT_external_memory_host), or through a
** reusable pipelined staging pool; copies on one device with vkCmdCopyBuffer. Every
** call is checked; a lost device stays lost.
*/
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_call.h"

/* Staging chunk size, and the smallest move worth importing host pages for. */
#define STAGING_CHUNK (8u << 20)
#define IMPORT_MIN (1u << 20)

static VkBufferUsageFlags tensor_usage(void)
{
  return VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
         VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
}

static xfer_code vulkan_alloc(xfer_device *dev, size_t nbytes, void **out, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  if (dev->max_alloc && nbytes > dev->max_alloc) {
    char why[200];
    snprintf(why, sizeof why, "a tensor of %zu bytes is larger than the largest allocation %s "
             "allows (%llu bytes)", nbytes, dev->name, (unsigned long long)dev->max_alloc);
    return xfer_err_native(err, XFER_E_ALLOC, XFER_OP_ALLOC, VK_ERROR_OUT_OF_DEVICE_MEMORY,
                           "VK_ERROR_OUT_OF_DEVICE_MEMORY", why, 0, 0);
  }
  vk_buf *b = malloc(sizeof *b);
  if (!b) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_ALLOC);
  /* on a GPU that can export, every tensor can: interop then needs no second copy */
  VkExternalMemoryBufferCreateInfo external = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT};
  VkExportMemoryAllocateInfo exported = {
    .sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT};
  int exportable = dev->can_export;
  xfer_code rc = xfer_vk_create_buffer(dev, XFER_OP_ALLOC, nbytes, tensor_usage(), 1u << vd->tensor_type,
                               exportable ? &external : NULL, exportable ? &exported : NULL, b,
                               err);
  if (!rc && vd->tensor_mapped)
    rc = VK(dev, XFER_OP_ALLOC, err, vkMapMemory, vd->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped);
  if (rc) {
    xfer_vk_destroy_buffer(vd, b);
    free(b);
    return rc;
  }
  *out = b;
  xfer_objects(dev, 1);
  return XFER_E_OK;
}

static void vulkan_free(xfer_device *dev, void *buf, size_t nbytes)
{
  (void)nbytes;
  xfer_objects(dev, -1);
  xfer_vk_destroy_buffer(vk_of(dev), buf);
  free(buf);
}

/* -- Submission ------------------------------------------------------------------------ */

/* Records the copy of `count` regions from src to dst and submits it behind `fence`. */
static xfer_code record_regions(xfer_device *dev, xfer_op op, VkCommandBuffer cmd, VkBuffer src,
                                VkBuffer dst, const VkBufferCopy *regions, uint32_t count,
                                VkFence fence, xfer_error *err)
{
  vk_copy copy = {src, dst, regions, count};
  return xfer_vk_submit_copies(dev, op, cmd, &copy, 1, fence, err);
}

static xfer_code record_copy(xfer_device *dev, xfer_op op, VkCommandBuffer cmd, VkBuffer src,
                             VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset,
                             VkDeviceSize n, VkFence fence, xfer_error *err)
{
  VkBufferCopy region = {.srcOffset = src_offset, .dstOffset = dst_offset, .size = n};
  return record_regions(dev, op, cmd, src, dst, &region, 1, fence, err);
}

/* One copy on the device's queue, waited for. */
static xfer_code copy_now(xfer_device *dev, xfer_op op, VkBuffer src, VkDeviceSize src_offset,
                          VkBuffer dst, VkDeviceSize dst_offset, VkDeviceSize n, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  xfer_code rc = record_copy(dev, op, vd->cmd, src, src_offset, dst, dst_offset, n, vd->fence, err);
  return rc ? rc : xfer_vk_wait_fence(dev, op, vd->fence, err);
}

/* -- The staging pool ------------------------------------------------------------------- */

/* Made on first use and kept: the command buffers and fences of two chunks, and -- on a
** driver that cannot import host pages, or when the host pool's chunks could not be
** imported -- two host-visible chunks of the device's own (`with_buffers`). */
static xfer_code staging_ready(xfer_device *dev, xfer_op op, int with_buffers, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  vk_staging *st = &vd->staging;
  if (st->ready && (st->buffer[0] || !with_buffers)) return XFER_E_OK;
  const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t types = 0, cached = 0;
  for (uint32_t i = 0; i < vd->memory.memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = vd->memory.memoryTypes[i].propertyFlags;
    if ((f & want) != want) continue;
    types |= 1u << i;
    if (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) cached |= 1u << i; /* fast CPU reads */
  }
  st->chunk = dev->max_alloc && dev->max_alloc < STAGING_CHUNK ? dev->max_alloc : STAGING_CHUNK;
  VkCommandBufferAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = vd->pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = XFER_VK_STAGING_SLOTS};
  xfer_code rc = st->cmd[0] ? XFER_E_OK
                            : VK(dev, op, err, vkAllocateCommandBuffers, vd->device, &alloc, st->cmd);
  for (int s = 0; !rc && s < XFER_VK_STAGING_SLOTS; s++) {
    VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    vk_buf b;
    if (!st->fence[s]) rc = VK(dev, op, err, vkCreateFence, vd->device, &fence, NULL, &st->fence[s]);
    if (!rc && with_buffers && !st->buffer[s])
      rc = xfer_vk_create_buffer(dev, op, st->chunk,
                         VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                         cached ? cached : types, NULL, NULL, &b, err);
    if (!rc && with_buffers && !st->buffer[s]) {
      st->buffer[s] = b.buffer;
      st->memory[s] = b.memory;
      rc = VK(dev, op, err, vkMapMemory, vd->device, b.memory, 0, VK_WHOLE_SIZE, 0, &st->mapped[s]);
    }
  }
  /* a pool that could not be made whole is kept for close() to free; the next use
  ** tries again from where it is */
  st->ready = !rc;
  if (rc) {
    for (int s = 0; s < XFER_VK_STAGING_SLOTS; s++) {
      if (st->fence[s]) vd->vkDestroyFence(vd->device, st->fence[s], NULL);
      if (st->buffer[s]) vd->vkDestroyBuffer(vd->device, st->buffer[s], NULL);
      if (st->memory[s]) vd->vkFreeMemory(vd->device, st->memory[s], NULL);
      st->fence[s] = NULL;
      st->buffer[s] = NULL;
      st->memory[s] = NULL;
      st->mapped[s] = NULL;
    }
  }
  return rc;
}

/* Waits for whatever is in flight; keeps the first error. */
static xfer_code drain(xfer_device *dev, xfer_op op, const int *in_flight, xfer_code rc,
                       xfer_error *err)
{
  vk_staging *st = &vk_of(dev)->staging;
  for (int s = 0; s < XFER_VK_STAGING_SLOTS; s++) {
    if (!in_flight[s]) continue;
    xfer_error ignored;
    xfer_code w = xfer_vk_wait_fence(dev, op, st->fence[s], rc ? &ignored : err);
    if (!rc) rc = w;
  }
  return rc;
}

/* -- Host memory imported in place (VK_EXT_external_memory_host) ------------------------- */

/* Moves below IMPORT_MIN are staged: a small copy through a chunk costs less than looking
** the segment up (and importing it, the first time). */
static const vk_import *imported(xfer_device *dev, const void *ptr, size_t n)
{
  return xfer_vk_import_host(dev, ptr, n, IMPORT_MIN);
}

static void vulkan_host_unpin(xfer_device *dev, void *base, size_t size, void *pin)
{
  (void)base;
  (void)size;
  vk_dev *vd = vk_of(dev);
  vk_import *im = pin;
  xfer_objects(dev, -1);
  vd->vkDestroyBuffer(vd->device, im->buffer, NULL); /* no move uses it: the segment is going */
  vd->vkFreeMemory(vd->device, im->memory, NULL);
  free(im);
}

/* A move's staging chunks: blocks of the host pool, imported in place (the import kept
** with their segment), or -- on a driver that cannot import host pages -- the device's own
** host-visible pair. Given back when every copy on them has been waited for. */
typedef struct stage {
  VkBuffer buffer[XFER_VK_STAGING_SLOTS];
  VkDeviceSize at[XFER_VK_STAGING_SLOTS];  /* where the chunk starts in `buffer` */
  char *ptr[XFER_VK_STAGING_SLOTS];        /* ... and in the CPU's view */
  xfer_block *block[XFER_VK_STAGING_SLOTS];
  size_t chunk;
} stage;

/* Past a deadline the device's copies may still use the chunks: freed while it is stalled,
** its quarantine holds them until it is done (memory.c). */
static void stage_give(stage *sg)
{
  for (int s = 0; s < XFER_VK_STAGING_SLOTS; s++) xfer_mem_free(sg->block[s]);
  memset(sg, 0, sizeof *sg);
}

static xfer_code stage_take(xfer_device *dev, xfer_op op, size_t n, stage *sg, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  vk_staging *st = &vd->staging;
  memset(sg, 0, sizeof *sg);
  xfer_code rc = staging_ready(dev, op, !vd->host_import, err);
  if (rc) return rc;
  if (vd->host_import) {
    xfer_device *host = xfer_host_of(dev->ctx);
    sg->chunk = n < st->chunk ? n : st->chunk;
    int s = 0;
    for (; s < XFER_VK_STAGING_SLOTS; s++) {
      xfer_error ignored;
      if (xfer_mem_alloc(host, sg->chunk, &sg->block[s], &ignored)) break;
      sg->ptr[s] = (char *)sg->block[s]->buf + sg->block[s]->offset; /* host blocks are addresses */
      const vk_import *im = xfer_vk_import_host(dev, sg->ptr[s], sg->chunk, 0);
      if (!im) break;
      sg->buffer[s] = im->buffer;
      sg->at[s] = (VkDeviceSize)(sg->ptr[s] - im->base);
    }
    if (s == XFER_VK_STAGING_SLOTS) return XFER_E_OK;
    stage_give(sg); /* not importable after all: the device's own chunks */
    if ((rc = staging_ready(dev, op, 1, err))) return rc;
  }
  sg->chunk = st->chunk;
  for (int s = 0; s < XFER_VK_STAGING_SLOTS; s++) {
    sg->buffer[s] = st->buffer[s];
    sg->ptr[s] = st->mapped[s];
  }
  return XFER_E_OK;
}

/* host -> buffer: the CPU fills chunk k+1 while the GPU copies chunk k. */
static xfer_code staged_write(xfer_device *dev, vk_buf *dst, size_t offset, const char *src,
                              size_t n, xfer_error *err)
{
  stage sg;
  xfer_code rc = stage_take(dev, XFER_OP_WRITE, n, &sg, err);
  if (rc) return rc;
  vk_staging *st = &vk_of(dev)->staging;
  int in_flight[XFER_VK_STAGING_SLOTS] = {0};
  for (size_t off = 0, k = 0; off < n && !rc; k++) {
    int s = (int)(k % XFER_VK_STAGING_SLOTS);
    size_t len = n - off < sg.chunk ? n - off : sg.chunk;
    if (in_flight[s]) {
      in_flight[s] = 0;
      if ((rc = xfer_vk_wait_fence(dev, XFER_OP_WRITE, st->fence[s], err))) break;
    }
    memcpy(sg.ptr[s], src + off, len);
    rc = record_copy(dev, XFER_OP_WRITE, st->cmd[s], sg.buffer[s], sg.at[s], dst->buffer, offset + off,
                     len, st->fence[s], err);
    in_flight[s] = !rc;
    off += len;
  }
  rc = drain(dev, XFER_OP_WRITE, in_flight, rc, err);
  stage_give(&sg);
  return rc;
}

/* buffer -> host: the GPU copies chunk k+1 while the CPU empties chunk k. */
static xfer_code staged_read(xfer_device *dev, vk_buf *src, size_t offset, char *dst, size_t n,
                             xfer_error *err)
{
  stage sg;
  xfer_code rc = stage_take(dev, XFER_OP_READ, n, &sg, err);
  if (rc) return rc;
  vk_staging *st = &vk_of(dev)->staging;
  size_t chunks = (n + sg.chunk - 1) / sg.chunk;
  int in_flight[XFER_VK_STAGING_SLOTS] = {0};
  for (size_t k = 0; k < chunks && k < XFER_VK_STAGING_SLOTS && !rc; k++) {
    size_t off = k * sg.chunk, len = n - off < sg.chunk ? n - off : sg.chunk;
    rc = record_copy(dev, XFER_OP_READ, st->cmd[k], src->buffer, offset + off, sg.buffer[k], sg.at[k],
                     len, st->fence[k], err);
    in_flight[k] = !rc;
  }
  for (size_t k = 0; k < chunks && !rc; k++) {
    int s = (int)(k % XFER_VK_STAGING_SLOTS);
    size_t off = k * sg.chunk, len = n - off < sg.chunk ? n - off : sg.chunk;
    in_flight[s] = 0;
    if ((rc = xfer_vk_wait_fence(dev, XFER_OP_READ, st->fence[s], err))) break;
    memcpy(dst + off, sg.ptr[s], len);
    size_t next = k + XFER_VK_STAGING_SLOTS;
    if (next < chunks) {
      size_t noff = next * sg.chunk, nlen = n - noff < sg.chunk ? n - noff : sg.chunk;
      rc = record_copy(dev, XFER_OP_READ, st->cmd[s], src->buffer, offset + noff, sg.buffer[s], sg.at[s],
                       nlen, st->fence[s], err);
      in_flight[s] = !rc;
    }
  }
  rc = drain(dev, XFER_OP_READ, in_flight, rc, err);
  stage_give(&sg);
  return rc;
}

/* -- Vtable ops -------------------------------------------------------------------------- */

static xfer_code vulkan_write(xfer_device *dev, void *buf, size_t offset, const void *src,
                              size_t n, xfer_error *err)
{
  vk_buf *dst = buf;
  if (dst->mapped) { /* memory the CPU shares: one memcpy */
    if (xfer_vk_injected(dev, XFER_OP_WRITE))
      return xfer_vk_fail(dev, XFER_OP_WRITE, "vkMapMemory", (VkResult)vk_of(dev)->injected, 1, err);
    memcpy((char *)dst->mapped + offset, src, n);
    return XFER_E_OK;
  }
  const vk_import *im = imported(dev, src, n);
  if (im) /* one DMA straight out of the host buffer */
    return copy_now(dev, XFER_OP_WRITE, im->buffer, (VkDeviceSize)((const char *)src - im->base),
                    dst->buffer, offset, n, err);
  return staged_write(dev, dst, offset, src, n, err);
}

static xfer_code vulkan_read(xfer_device *dev, void *buf, size_t offset, void *dst, size_t n,
                             xfer_error *err)
{
  vk_buf *src = buf;
  if (src->mapped) {
    if (xfer_vk_injected(dev, XFER_OP_READ))
      return xfer_vk_fail(dev, XFER_OP_READ, "vkMapMemory", (VkResult)vk_of(dev)->injected, 1, err);
    memcpy(dst, (const char *)src->mapped + offset, n);
    return XFER_E_OK;
  }
  const vk_import *im = imported(dev, dst, n);
  if (im)
    return copy_now(dev, XFER_OP_READ, src->buffer, offset, im->buffer,
                    (VkDeviceSize)((char *)dst - im->base), n, err);
  return staged_read(dev, src, offset, dst, n, err);
}

/* -- A view's rows ------------------------------------------------------------------------ */

/* Regions for `rows` rows: on the tensor's side `pitch` apart from `offset`, on the host
** buffer's side packed from `host_at`. */
static void fill_regions(VkBufferCopy *r, size_t rows, size_t offset, size_t pitch, size_t run,
                         VkDeviceSize host_at, int to_device)
{
  for (size_t i = 0; i < rows; i++) {
    VkDeviceSize tensor_at = offset + i * pitch, packed_at = host_at + i * run;
    r[i] = (VkBufferCopy){.srcOffset = to_device ? packed_at : tensor_at,
                          .dstOffset = to_device ? tensor_at : packed_at,
                          .size = run};
  }
}

/* One vkCmdCopyBuffer with a region a row: straight to or from the host memory where the
** driver imports it, else through a staging chunk a group of rows at a time. */
static xfer_code rows_move(xfer_device *dev, void *buf, size_t offset, size_t pitch, size_t run,
                           size_t rows, void *host_rows, int to_device, xfer_error *err)
{
  char *host = host_rows;
  xfer_op op = to_device ? XFER_OP_WRITE : XFER_OP_READ;
  vk_dev *vd = vk_of(dev);
  vk_buf *tensor = buf;
  size_t n = run * rows;
  if (tensor->mapped) { /* memory the CPU shares: a memcpy a row */
    if (xfer_vk_injected(dev, op))
      return xfer_vk_fail(dev, op, "vkMapMemory", (VkResult)vd->injected, 1, err);
    for (size_t i = 0; i < rows; i++) {
      char *at = (char *)tensor->mapped + offset + i * pitch;
      if (to_device) memcpy(at, host + i * run, run);
      else memcpy(host + i * run, at, run);
    }
    return XFER_E_OK;
  }
  const vk_import *im = imported(dev, host, n);
  stage sg;
  memset(&sg, 0, sizeof sg);
  xfer_code rc = XFER_E_OK;
  if (!im && (rc = stage_take(dev, op, n, &sg, err))) return rc;
  size_t group = im ? rows : sg.chunk / run; /* rows a submission moves */
  if (group == 0 || rows == 0) { /* a row longer than a staging chunk: a plain move a row */
    if (!im) stage_give(&sg);
    for (size_t i = 0; i < rows && !rc; i++)
      rc = to_device ? vulkan_write(dev, buf, offset + i * pitch, host + i * run, run, err)
                     : vulkan_read(dev, buf, offset + i * pitch, host + i * run, run, err);
    return rc;
  }
  VkBufferCopy *regions = malloc(group * sizeof *regions);
  if (!regions) {
    if (!im) stage_give(&sg);
    return xfer_err_code(err, XFER_E_ALLOC, op);
  }
  for (size_t first = 0; first < rows && !rc; first += group) {
    size_t count = rows - first < group ? rows - first : group;
    char *packed = host + first * run;
    VkBuffer other = im ? im->buffer : sg.buffer[0];
    VkDeviceSize other_at = im ? (VkDeviceSize)(packed - im->base) : sg.at[0];
    fill_regions(regions, count, offset + first * pitch, pitch, run, other_at, to_device);
    if (!im && to_device) memcpy(sg.ptr[0], packed, count * run);
    VkBuffer src = to_device ? other : tensor->buffer, dst = to_device ? tensor->buffer : other;
    rc = record_regions(dev, op, vd->cmd, src, dst, regions, (uint32_t)count, vd->fence, err);
    if (!rc) rc = xfer_vk_wait_fence(dev, op, vd->fence, err);
    if (!rc && !im && !to_device) memcpy(packed, sg.ptr[0], count * run);
  }
  free(regions);
  if (!im) stage_give(&sg);
  return rc;
}

/* A view's rows within the device: one vkCmdCopyBuffer with a region a row. */
static xfer_code vulkan_copy_rows(xfer_device *dev, void *dst, size_t dst_offset, size_t dst_pitch,
                                  void *src, size_t src_offset, size_t src_pitch, size_t run,
                                  size_t rows, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  VkBufferCopy *regions = malloc((rows ? rows : 1) * sizeof *regions);
  if (!regions) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_COPY);
  for (size_t i = 0; i < rows; i++)
    regions[i] = (VkBufferCopy){.srcOffset = src_offset + i * src_pitch,
                                .dstOffset = dst_offset + i * dst_pitch, .size = run};
  xfer_code rc = record_regions(dev, XFER_OP_COPY, vd->cmd, ((vk_buf *)src)->buffer,
                                ((vk_buf *)dst)->buffer, regions, (uint32_t)rows, vd->fence, err);
  if (!rc) rc = xfer_vk_wait_fence(dev, XFER_OP_COPY, vd->fence, err);
  free(regions);
  return rc;
}



/* -- Queued moves (the staged pipeline) -------------------------------------------------- */

static xfer_code queued_ready(xfer_device *dev, vk_queued *q, xfer_op op, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  if (!q->cmd) {
    VkCommandBufferAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                         .commandPool = vd->pool,
                                         .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                         .commandBufferCount = 1};
    xfer_code rc = VK(dev, op, err, vkAllocateCommandBuffers, vd->device, &alloc, &q->cmd);
    if (rc) return rc;
  }
  if (!q->fence) {
    VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    return VK(dev, op, err, vkCreateFence, vd->device, &fence, NULL, &q->fence);
  }
  return XFER_E_OK;
}

/* A copy between a tensor and an imported host buffer, submitted and not waited for;
** anything else is done in full now. */
static xfer_code queue_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                            int to_device, int slot, int *queued, xfer_error *err)
{
  vk_buf *tensor = buf;
  *queued = 0;
  xfer_op op = to_device ? XFER_OP_WRITE : XFER_OP_READ;
  const vk_import *im = tensor->mapped ? NULL : imported(dev, host, n);
  if (!im)
    return to_device ? vulkan_write(dev, tensor, offset, host, n, err)
                     : vulkan_read(dev, tensor, offset, host, n, err);
  vk_queued *q = &vk_of(dev)->queued[slot];
  xfer_code rc = queued_ready(dev, q, op, err);
  if (rc) return rc;
  VkDeviceSize at = (VkDeviceSize)((char *)host - im->base);
  rc = to_device ? record_copy(dev, op, q->cmd, im->buffer, at, tensor->buffer, offset, n,
                               q->fence, err)
                 : record_copy(dev, op, q->cmd, tensor->buffer, offset, im->buffer, at, n,
                               q->fence, err);
  q->pending = *queued = !rc;
  q->op = op;
  return rc;
}



static xfer_code vulkan_finish(xfer_device *dev, int slot, xfer_error *err)
{
  vk_queued *q = &vk_of(dev)->queued[slot];
  if (!q->pending) return XFER_E_OK;
  q->pending = 0;
  return xfer_vk_wait_fence(dev, q->op, q->fence, err);
}

static xfer_code vulkan_copy(xfer_device *dev, void *dst, size_t dst_offset, void *src,
                             size_t src_offset, size_t n, xfer_error *err)
{
  return copy_now(dev, XFER_OP_COPY, ((vk_buf *)src)->buffer, src_offset, ((vk_buf *)dst)->buffer,
                  dst_offset, n, err);
}

static xfer_code vulkan_memory(xfer_device *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                               xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  if (!vd->memory_budget)
    return xfer_err_op(err, XFER_E_UNSUPPORTED, XFER_OP_MEMORY, "%s cannot tell its free memory",
                        dev->name);
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 props = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &budget};
  api_of(dev)->vkGetPhysicalDeviceMemoryProperties2(vd->physical, &props);
  *free_bytes = 0;
  *total_bytes = dev->total_memory;
  for (uint32_t h = 0; h < props.memoryProperties.memoryHeapCount; h++)
    if (props.memoryProperties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT &&
        budget.heapBudget[h] > budget.heapUsage[h])
      *free_bytes += budget.heapBudget[h] - budget.heapUsage[h];
  return XFER_E_OK;
}

/* -- Open and close ------------------------------------------------------------------------ */

static void vulkan_close(xfer_runtime *rt)
{
  vk_api *api = rt->impl;
  if (!api) return;
  xfer_vk_close_devices(rt);
  if (api->instance && api->vkDestroyInstance) api->vkDestroyInstance(api->instance, NULL);
  /* the loader stays loaded: drivers keep threads and exit handlers in it */
  free(api);
  rt->impl = NULL;
}

static xfer_code vulkan_open(xfer_runtime *rt, xfer_error *err)
{
  vk_api *api = calloc(1, sizeof *api);
  if (!api) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  rt->impl = api;
  xfer_code rc = xfer_vk_load(api, err);
  if (!rc) rc = xfer_vk_open_devices(rt, err);
  if (rc) vulkan_close(rt);
  return rc;
}

static xfer_code vulkan_export_fd(xfer_device *dev, void *buf, int *fd, uint64_t *memory_size,
                                  xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  vk_buf *b = buf;
  VkMemoryGetFdInfoKHR info = {.sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR,
                               .memory = b->memory,
                               .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT};
  *fd = -1;
  *memory_size = b->memory_size;
  return VK(dev, XFER_OP_EXPORT, err, vkGetMemoryFdKHR, vd->device, &info, fd);
}

/* A VkBuffer and its VkDeviceMemory the application owns: our handle around them, never
** mapped by us (moves take the staging or host-import paths), destroyed with the handle
** only -- the buffer and memory stay the application's. The buffer needs
** TRANSFER_SRC and TRANSFER_DST usage. */
static xfer_code vulkan_wrap(xfer_device *dev, const xfer_external *mem, void **buf,
                             xfer_error *err)
{
  (void)dev;
  if (!mem->vk_buffer || !mem->vk_memory)
    return xfer_err_op(err, XFER_E_INVALID, XFER_OP_WRAP,
                       "wrap: a VkBuffer and its VkDeviceMemory are needed");
  vk_buf *b = calloc(1, sizeof *b);
  if (!b) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_WRAP);
  b->buffer = (VkBuffer)(uintptr_t)mem->vk_buffer;
  b->memory = (VkDeviceMemory)(uintptr_t)mem->vk_memory;
  *buf = b;
  return XFER_E_OK;
}

static void vulkan_unwrap(xfer_device *dev, void *buf)
{
  (void)dev;
  free(buf);
}

static xfer_code vulkan_host_move(xfer_device *dev, void *buf, size_t offset, void *host, size_t n,
                                  int to_device, xfer_error *err)
{
  return to_device ? vulkan_write(dev, buf, offset, host, n, err)
                   : vulkan_read(dev, buf, offset, host, n, err);
}

static const xfer_runtime_ops vulkan_runtime = {
  .open = vulkan_open,
  .close = vulkan_close,
};
static const xfer_memory_ops vulkan_memory_ops = {
  .alloc = vulkan_alloc,
  .free = vulkan_free,
  .wrap = vulkan_wrap,
  .unwrap = vulkan_unwrap,
  .host_unpin = vulkan_host_unpin,
  .info = vulkan_memory,
};
static const xfer_copy_ops vulkan_copies = {
  .host = vulkan_host_move,
  .host_rows = rows_move,
  .start = queue_move,
  .finish = vulkan_finish,
  .within = vulkan_copy,
  .within_rows = vulkan_copy_rows,
  .many = xfer_vk_many,
  .crc32c = xfer_vk_crc32c,
  .idle = xfer_vk_idle,
};
static const xfer_share_ops vulkan_share = {
  .export_fd = vulkan_export_fd,
};
const xfer_backend xfer_backend_vulkan = {
  .version = XFER_BACKEND_VERSION,
  .name = "vulkan",
  .alias = NULL,
  .external_kind = XFER_EXTERNAL_VULKAN,
  .dlpack_device_type = -1,
  .runtime = &vulkan_runtime,
  .memory = &vulkan_memory_ops,
  .copy = &vulkan_copies,
  .share = &vulkan_share,
};
