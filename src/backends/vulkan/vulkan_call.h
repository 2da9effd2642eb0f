/*
** vulkan_call.h -- what the Vulkan backend's files share: the device's state, the checked
** wrapper every vk* call of a device op goes through (a failure, or an injected one, becomes an
** error record naming the call and its VkResult), buffers, submission, waiting and host
** imports (vulkan_call.c).
*/
#ifndef XFER_VULKAN_CALL_H
#define XFER_VULKAN_CALL_H

#include "vulkan_api.h"

static inline vk_api *api_of(const xfer_device *dev) { return dev->rt->impl; }
static inline vk_dev *vk_of(const xfer_device *dev) { return dev->impl; }

/* A failed call's record (a lost device stays lost). */
xfer_code xfer_vk_fail(xfer_device *dev, xfer_op op, const char *fn, VkResult r, int injected,
                       xfer_error *err);
xfer_code xfer_vk_check(xfer_device *dev, xfer_op op, const char *fn, VkResult r, xfer_error *err);
/* An injected fault fails the call before the driver sees it, with the rule's code or the usual
** one for the op (kept in the device's `injected`). */
int xfer_vk_injected(xfer_device *dev, xfer_op op);

/* VK(dev, op, err, vkFn, args...): the call's xfer_code, XFER_E_OK on success. */
#define VK(dev, op, err, fn, ...)                                                          \
  (xfer_vk_injected((dev), (op))                                                           \
       ? xfer_vk_fail((dev), (op), #fn, (VkResult)vk_of(dev)->injected, 1, (err))         \
       : xfer_vk_check((dev), (op), #fn, vk_of(dev)->fn(__VA_ARGS__), (err)))

void xfer_vk_destroy_buffer(vk_dev *vd, vk_buf *b);
/* A buffer of `n` bytes bound to new memory of a type in `types`; `buffer_next` and
** `memory_next` extend the create infos (external memory). */
xfer_code xfer_vk_create_buffer(xfer_device *dev, xfer_op op, VkDeviceSize n,
                                VkBufferUsageFlags usage, uint32_t types, const void *buffer_next,
                                const void *memory_next, vk_buf *b, xfer_error *err);

/* One vkCmdCopyBuffer: `count` regions from src to dst. */
typedef struct vk_copy {
  VkBuffer src, dst;
  const VkBufferCopy *regions;
  uint32_t count;
} vk_copy;
/* A fence (and its command buffer) whose wait ended at a deadline, waited for before reuse (until
** the move's deadline at most); nothing for any other. */
xfer_code xfer_vk_fence_settle(xfer_device *dev, xfer_op op, VkFence fence, xfer_error *err);
/* Records the copies in one command buffer and submits it behind `fence` (settled first). */
xfer_code xfer_vk_submit_copies(xfer_device *dev, xfer_op op, VkCommandBuffer cmd,
                                const vk_copy *copies, size_t ncopies, VkFence fence,
                                xfer_error *err);
/* Waits for a submitted copy (an injected failure still waits) -- until the move's deadline at
** most: XFER_E_TIMEOUT then, the device marked stalled (a stall fault: never done). */
xfer_code xfer_vk_wait_fence(xfer_device *dev, xfer_op op, VkFence fence, xfer_error *err);
/* The imported host segment holding [ptr, ptr+n) (imported on first use and kept with the
** segment), or NULL: memory xferlua does not own, a driver without the import, n < min. */
const vk_import *xfer_vk_import_host(xfer_device *dev, const void *ptr, size_t n, size_t min);

/* copy->idle: whether everything submitted so far is done, asked without waiting. */
int xfer_vk_idle(xfer_device *dev);

/* vulkan_crc.c: the CRC32C of ranges of buffers by a compute shader (xfer_copy_ops.crc32c) */
xfer_code xfer_vk_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err);

/* vulkan_many.c: a batch of copies (xfer_copy_ops.many) */
xfer_code xfer_vk_many(xfer_device *dev, const xfer_piece *pieces, size_t n, xfer_error *err);

#endif
