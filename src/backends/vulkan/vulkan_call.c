/*
** vulkan_call.c -- what every Vulkan move stands on, below the runtime's other files: the
** checked wrapper (VK() of vulkan_call.h), buffers bound to new memory, submitting copies and
** waiting for their fence, and host memory imported in place (VK_EXT_external_memory_host).
** It calls only vulkan_load.c (Vulkan's words).
*/
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vulkan_call.h"

/* How long a wait polls its fence before it sleeps. */
#define SPIN_SECONDS 0.002

/* -- The checked wrapper (vulkan_call.h) ------------------------------------------------- */

xfer_code xfer_vk_fail(xfer_device *dev, xfer_op op, const char *fn, VkResult r, int injected,
                       xfer_error *err)
{
  xfer_code code = xfer_op_failure(op);
  if (r == VK_ERROR_DEVICE_LOST) { /* for good: every later use raises device_lost */
    dev->lost = 1;
    code = XFER_E_DEVICE_LOST;
  }
  char what[64];
  snprintf(what, sizeof what, "%s failed", fn);
  int retryable = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY;
  return xfer_err_native(err, code, op, r, xfer_vk_result_name(r), what, retryable, injected);
}

xfer_code xfer_vk_check(xfer_device *dev, xfer_op op, const char *fn, VkResult r, xfer_error *err)
{
  return r < 0 ? xfer_vk_fail(dev, op, fn, r, 0, err) : XFER_E_OK;
}

int xfer_vk_injected(xfer_device *dev, xfer_op op)
{
  long long native;
  if (!xfer_fault_hit(dev->ctx, "vulkan", op, &native)) return 0;
  vk_of(dev)->injected = native ? native
                         : op == XFER_OP_ALLOC ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                                                : VK_ERROR_UNKNOWN;
  return 1;
}

/* -- Buffers ------------------------------------------------------------------------- */

void xfer_vk_destroy_buffer(vk_dev *vd, vk_buf *b)
{
  if (b->buffer) vd->vkDestroyBuffer(vd->device, b->buffer, NULL);
  if (b->memory) vd->vkFreeMemory(vd->device, b->memory, NULL); /* unmaps too */
  memset(b, 0, sizeof *b);
}

/* A buffer of `n` bytes bound to new memory of a type in `types`; `buffer_next` and
** `memory_next` extend the create infos (external memory). */
xfer_code xfer_vk_create_buffer(xfer_device *dev, xfer_op op, VkDeviceSize n,
                               VkBufferUsageFlags usage, uint32_t types, const void *buffer_next,
                               const void *memory_next, vk_buf *b, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  memset(b, 0, sizeof *b);
  VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .pNext = buffer_next,
                             .size = n,
                             .usage = usage,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  xfer_code rc = VK(dev, op, err, vkCreateBuffer, vd->device, &info, NULL, &b->buffer);
  if (rc) return rc;
  b->size = n;
  VkMemoryRequirements req;
  vd->vkGetBufferMemoryRequirements(vd->device, b->buffer, &req);
  uint32_t usable = req.memoryTypeBits & types;
  if (!usable) {
    xfer_vk_destroy_buffer(vd, b);
    return xfer_vk_fail(dev, op, "vkGetBufferMemoryRequirements", VK_ERROR_FORMAT_NOT_SUPPORTED, 0,
                   err);
  }
  uint32_t type = 0;
  while (!(usable & (1u << type))) type++;
  VkMemoryAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .pNext = memory_next,
                                .allocationSize = req.size,
                                .memoryTypeIndex = type};
  b->memory_size = req.size;
  rc = VK(dev, op, err, vkAllocateMemory, vd->device, &alloc, NULL, &b->memory);
  if (!rc) rc = VK(dev, op, err, vkBindBufferMemory, vd->device, b->buffer, b->memory, 0);
  if (rc) xfer_vk_destroy_buffer(vd, b);
  return rc;
}

/* -- Submission ------------------------------------------------------------------------ */

static VkResult wait_until_deadline(vk_dev *vd, VkFence fence, int stalled, double deadline);

static int unsettled_at(const vk_dev *vd, VkFence fence)
{
  for (int i = 0; i < vd->nunsettled; i++)
    if (vd->unsettled[i] == fence) return i;
  return -1;
}

xfer_code xfer_vk_fence_settle(xfer_device *dev, xfer_op op, VkFence fence, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  int at = unsettled_at(vd, fence);
  if (at < 0) return XFER_E_OK;
  double deadline = xfer_watch_deadline(), start = xfer_now();
  VkResult r = deadline ? wait_until_deadline(vd, fence, 0, deadline)
                        : vd->vkWaitForFences(vd->device, 1, &fence, VK_TRUE, UINT64_MAX);
  if (r == VK_TIMEOUT) return xfer_device_stalled(dev, op, "vkWaitForFences", xfer_now() - start, 0, err);
  vd->unsettled[at] = vd->unsettled[--vd->nunsettled];
  return xfer_vk_check(dev, op, "vkWaitForFences", r, err);
}

xfer_code xfer_vk_submit_copies(xfer_device *dev, xfer_op op, VkCommandBuffer cmd,
                                const vk_copy *copies, size_t ncopies, VkFence fence,
                                xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  xfer_code rc = xfer_vk_fence_settle(dev, op, fence, err); /* its command buffer is free then too */
  if (rc) return rc;
  rc = VK(dev, op, err, vkBeginCommandBuffer, cmd, &begin);
  if (rc) return rc;
  for (size_t c = 0; c < ncopies; c++)
    vd->vkCmdCopyBuffer(cmd, copies[c].src, copies[c].dst, copies[c].count, copies[c].regions);
  rc = VK(dev, op, err, vkEndCommandBuffer, cmd);
  if (!rc) rc = VK(dev, op, err, vkResetFences, vd->device, 1, &fence);
  VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                         .commandBufferCount = 1,
                         .pCommandBuffers = &cmd};
  if (!rc) rc = VK(dev, op, err, vkQueueSubmit, vd->queue, 1, &submit, fence);
  /* begun but not submitted: back to the initial state, or the next begin finds it still
  ** recording (the validation layer's VUID-vkBeginCommandBuffer-commandBuffer-00049) */
  if (rc) vd->vkResetCommandBuffer(cmd, 0);
  return rc;
}

/* Waits for a submitted copy. On a GPU the fence is polled for a while first:
** vkWaitForFences sleeps, and NVIDIA's wakes it late enough to starve the staged pipeline,
** which waits once per chunk (measured in the note of issue 6). An injected failure still
** waits: the host memory of the copy is the caller's again only once it has landed. */
/* Past the move's deadline (or under a stall fault, never done): VK_TIMEOUT at the deadline. */
static VkResult wait_until_deadline(vk_dev *vd, VkFence fence, int stalled, double deadline)
{
  for (;;) {
    double left = deadline - xfer_now();
    if (stalled) { /* the fence is never looked at: as if its work never ended */
      if (deadline && left <= 0) return VK_TIMEOUT;
      struct timespec nap = {0, deadline && left < 1e-3 ? (long)(left * 1e9) + 1 : 1000000};
      nanosleep(&nap, NULL);
      continue;
    }
    uint64_t ns = left > 0 ? (uint64_t)(left * 1e9) : 0;
    VkResult r = vd->vkWaitForFences(vd->device, 1, &fence, VK_TRUE, ns);
    if (r != VK_TIMEOUT || xfer_now() >= deadline) return r;
  }
}

xfer_code xfer_vk_wait_fence(xfer_device *dev, xfer_op op, VkFence fence, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  long long native = 0;
  int stalled = xfer_fault_hit(dev->ctx, "vulkan", XFER_OP_STALL, &native);
  double deadline = xfer_watch_deadline();
  if (stalled || deadline) {
    double start = xfer_now();
    VkResult r = wait_until_deadline(vd, fence, stalled, deadline);
    if (r == VK_TIMEOUT) {
      if (unsettled_at(vd, fence) < 0 && vd->nunsettled < (int)(sizeof vd->unsettled / sizeof vd->unsettled[0]))
        vd->unsettled[vd->nunsettled++] = fence;
      return xfer_device_stalled(dev, op, "vkWaitForFences", xfer_now() - start, stalled, err);
    }
    if (xfer_vk_injected(dev, op)) return xfer_vk_fail(dev, op, "vkWaitForFences", (VkResult)vd->injected, 1, err);
    return xfer_vk_check(dev, op, "vkWaitForFences", r, err);
  }
  int injected = xfer_vk_injected(dev, op);
  VkResult r = VK_NOT_READY;
  const char *fn = "vkGetFenceStatus";
  if (!dev->unified) { /* a CPU device needs the core we would spin on */
    double until = xfer_now() + SPIN_SECONDS;
    while ((r = vd->vkGetFenceStatus(vd->device, fence)) == VK_NOT_READY && xfer_now() < until)
      sched_yield();
  }
  if (r == VK_NOT_READY) {
    fn = "vkWaitForFences";
    r = vd->vkWaitForFences(vd->device, 1, &fence, VK_TRUE, UINT64_MAX);
  }
  if (injected) return xfer_vk_fail(dev, op, "vkWaitForFences", (VkResult)vd->injected, 1, err);
  return xfer_vk_check(dev, op, fn, r, err);
}

/* -- Host memory imported in place (VK_EXT_external_memory_host) ------------------------- */

/* The imported host segment holding [ptr, ptr+n), importing it on first use, or NULL.
** Only segments xferlua owns are imported; the import is kept with the segment, which
** undoes it (host_unpin) before it goes back to the system. A failed import is no error --
** the caller stages instead. */
const vk_import *xfer_vk_import_host(xfer_device *dev, const void *ptr, size_t n, size_t min)
{
  vk_dev *vd = vk_of(dev);
  VkDeviceSize align = vd->import_alignment;
  xfer_host_span span;
  if (!vd->host_import || vd->tensor_mapped || n < min || !align ||
      !xfer_host_span_of(dev->ctx, ptr, n, &span) || (uintptr_t)span.base % align)
    return NULL;
  const vk_import *known = xfer_host_pin(dev->ctx, span.base, dev);
  if (known) return known;
  /* whole pages: the last page of a mapping is mapped to its end */
  VkDeviceSize size = (span.size + align - 1) / align * align;
  const VkExternalMemoryHandleTypeFlagBits type =
      VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkMemoryHostPointerPropertiesEXT props = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  xfer_error ignored;
  if (VK(dev, XFER_OP_IMPORT, &ignored, vkGetMemoryHostPointerPropertiesEXT, vd->device, type,
         span.base, &props))
    return NULL;
  VkExternalMemoryBufferCreateInfo external = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO, .handleTypes = type};
  VkImportMemoryHostPointerInfoEXT import = {
    .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
    .handleType = type,
    .pHostPointer = span.base};
  vk_import *im = malloc(sizeof *im);
  vk_buf b;
  if (!im || xfer_vk_create_buffer(dev, XFER_OP_IMPORT, size,
                           VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           props.memoryTypeBits, &external, &import, &b, &ignored)) {
    free(im);
    return NULL;
  }
  im->base = span.base;
  im->size = span.size;
  im->buffer = b.buffer;
  im->memory = b.memory;
  if (xfer_host_pin_keep(dev->ctx, span.base, dev, im)) {
    xfer_objects(dev, 1);
    return im;
  }
  xfer_vk_destroy_buffer(vd, &b); /* another move imported it a moment ago, or no room to keep it */
  free(im);
  return NULL;
}

/* The device found idle: fences still listed as unsettled signaled before its empty
** submission (seen done now). */
static int idle_seen(vk_dev *vd)
{
  for (int i = vd->nunsettled; i-- > 0;)
    if (vd->vkGetFenceStatus(vd->device, vd->unsettled[i]) == VK_SUCCESS)
      vd->unsettled[i] = vd->unsettled[--vd->nunsettled];
  return 1;
}

/* copy->idle: an empty submission behind everything submitted so far, its fence looked at
** (submitted once, then asked again until it signals: everything submitted before it is done). */
int xfer_vk_idle(xfer_device *dev)
{
  vk_dev *vd = vk_of(dev);
  if (!vd->idle_submitted) {
    double placed = xfer_now();
    if (vd->vkResetFences(vd->device, 1, &vd->idle_fence) != VK_SUCCESS ||
        vd->vkQueueSubmit(vd->queue, 0, NULL, vd->idle_fence) != VK_SUCCESS)
      return 0;
    vd->idle_submitted = 1;
    vd->idle_placed = placed;
  }
  if (vd->vkGetFenceStatus(vd->device, vd->idle_fence) != VK_SUCCESS) return 0;
  vd->idle_submitted = 0;
  dev->idle_upto = vd->idle_placed;
  return idle_seen(vd);
}
