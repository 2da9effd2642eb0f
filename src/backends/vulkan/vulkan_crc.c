/*
** vulkan_crc.c -- copy->crc32c on a Vulkan device: the CRC32C of ranges of its buffers summed
** where they lie by a compute shader (shaders/crc32c.comp, SPIR-V carried in the binary), so
** that `verify` reads nothing back. As CUDA's and OpenCL's kernels: each range cut into pieces
** of 256 stretches (256 bytes; 64 or 16 for a call of small ranges), one workgroup each,
** summed right-aligned as raw registers joined by fixed shifts; the host joins a range's pieces and turns the raw register into the CRC. The byte
** table lies in shared memory once per lane of as many columns as the device's shared memory
** holds (32: a lookup per bank). A buffer is bound as a storage buffer through a window of at
** most maxStorageBufferRange bytes; the pieces of one window go in one submission. Made on
** first use; a device that cannot make the pipeline (no compute queue, a driver that refuses
** it) is asked no more, and buffers not made here (wrapped: their usage unknown) are read back.
*/
#include <stdlib.h>
#include <string.h>

#include "vulkan_call.h"

#ifdef XFER_VULKAN_SHADERS
#include "vulkan_crc_spv.h"
#endif

/* A workgroup's invocations (the shader's local size: a stretch each), and the workgroups a
** dispatch runs (each fills its table once and walks the pieces: an H100 runs about 800 at
** once). */
#define INVOCATIONS 256
#define GROUPS_MAX 1024u
/* The table the shader reads (xfer_crc32c_kernel_table). */
#define TABLE_WORDS XFER_CRC_TABLE_WORDS

/* The shader's push constants: the pieces, the stretch, where its shifts begin in the table. */
typedef struct {
  uint32_t count, stretch, shifts_at;
} crc_push;

/* The byte table's columns in shared memory (the shader's COLS): as many as fit beside the
** tree's 1 KiB, 32 at most, 8 at least (16 KiB is what every device has). */
static uint32_t columns_for(uint32_t shared_bytes)
{
  uint32_t cols = 32;
  while (cols > 8 && (256u * cols + 256u) * 4u > shared_bytes) cols /= 2;
  return cols;
}

void xfer_vk_crc_release(vk_dev *vd)
{
  if (vd->crc_pipeline) vd->vkDestroyPipeline(vd->device, vd->crc_pipeline, NULL);
  if (vd->crc_layout) vd->vkDestroyPipelineLayout(vd->device, vd->crc_layout, NULL);
  if (vd->crc_pool) vd->vkDestroyDescriptorPool(vd->device, vd->crc_pool, NULL);
  if (vd->crc_set_layout) vd->vkDestroyDescriptorSetLayout(vd->device, vd->crc_set_layout, NULL);
  if (vd->crc_shader) vd->vkDestroyShaderModule(vd->device, vd->crc_shader, NULL);
  xfer_vk_destroy_buffer(vd, &vd->crc_table);
  xfer_vk_destroy_buffer(vd, &vd->crc_pieces);
  xfer_vk_destroy_buffer(vd, &vd->crc_sums);
  vd->crc_pipeline = VK_NULL_HANDLE;
  vd->crc_layout = VK_NULL_HANDLE;
  vd->crc_pool = VK_NULL_HANDLE;
  vd->crc_set_layout = VK_NULL_HANDLE;
  vd->crc_shader = VK_NULL_HANDLE;
  vd->crc_set = VK_NULL_HANDLE;
  vd->crc_room = 0;
}

#ifdef XFER_VULKAN_SHADERS
/* The memory types that are host-visible and coherent: the table, pieces and sums. */
static uint32_t host_types(const vk_dev *vd)
{
  uint32_t types = 0;
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < vd->memory.memoryTypeCount; i++)
    if ((vd->memory.memoryTypes[i].propertyFlags & want) == want) types |= 1u << i;
  return types;
}

/* A host-visible storage buffer of n bytes, mapped. */
static xfer_code mapped_buffer(xfer_device *dev, size_t n, vk_buf *b, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  xfer_code rc = xfer_vk_create_buffer(dev, XFER_OP_VERIFY, n, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                       host_types(vd), NULL, NULL, b, err);
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkMapMemory, vd->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped);
  if (rc) xfer_vk_destroy_buffer(vd, b);
  return rc;
}

static int queue_computes(xfer_device *dev)
{
  vk_api *api = api_of(dev);
  vk_dev *vd = vk_of(dev);
  uint32_t n = 0;
  api->vkGetPhysicalDeviceQueueFamilyProperties(vd->physical, &n, NULL);
  VkQueueFamilyProperties *f = calloc(n ? n : 1, sizeof *f);
  if (!f) return 0;
  api->vkGetPhysicalDeviceQueueFamilyProperties(vd->physical, &n, f);
  int computes = vd->queue_family < n && (f[vd->queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT);
  free(f);
  return computes;
}

/* The descriptor set's layout, the pipeline and a set to bind: four storage buffers (the
** bytes, the pieces, the table, the sums) and push constants (crc_push). */
static xfer_code make_pipeline(xfer_device *dev, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  VkDevice d = vd->device;
  VkShaderModuleCreateInfo module = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                     .codeSize = sizeof crc32c_spv,
                                     .pCode = crc32c_spv};
  xfer_code rc = VK(dev, XFER_OP_VERIFY, err, vkCreateShaderModule, d, &module, NULL, &vd->crc_shader);
  VkDescriptorSetLayoutBinding bindings[4];
  for (uint32_t i = 0; i < 4; i++)
    bindings[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                                 .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 .descriptorCount = 1,
                                                 .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo set = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                         .bindingCount = 4,
                                         .pBindings = bindings};
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkCreateDescriptorSetLayout, d, &set, NULL, &vd->crc_set_layout);
  VkPushConstantRange count = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = sizeof(crc_push)};
  VkPipelineLayoutCreateInfo layout = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .setLayoutCount = 1,
                                       .pSetLayouts = &vd->crc_set_layout,
                                       .pushConstantRangeCount = 1,
                                       .pPushConstantRanges = &count};
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkCreatePipelineLayout, d, &layout, NULL, &vd->crc_layout);
  uint32_t cols = columns_for(vd->max_shared);
  VkSpecializationMapEntry cols_entry = {.constantID = 0, .offset = 0, .size = sizeof cols};
  VkSpecializationInfo special = {.mapEntryCount = 1, .pMapEntries = &cols_entry, .dataSize = sizeof cols,
                                  .pData = &cols};
  VkComputePipelineCreateInfo pipeline = {
    .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
              .module = vd->crc_shader,
              .pName = "main",
              .pSpecializationInfo = &special},
    .layout = vd->crc_layout};
  if (!rc)
    rc = VK(dev, XFER_OP_VERIFY, err, vkCreateComputePipelines, d, VK_NULL_HANDLE, 1, &pipeline, NULL,
            &vd->crc_pipeline);
  VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 4};
  VkDescriptorPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = 1,
                                     .poolSizeCount = 1,
                                     .pPoolSizes = &size};
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkCreateDescriptorPool, d, &pool, NULL, &vd->crc_pool);
  VkDescriptorSetAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                       .descriptorPool = vd->crc_pool,
                                       .descriptorSetCount = 1,
                                       .pSetLayouts = &vd->crc_set_layout};
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkAllocateDescriptorSets, d, &alloc, &vd->crc_set);
  return rc;
}

/* The pipeline and the table, made once; XFER_E_UNSUPPORTED (nothing said: the core reads the
** bytes back) where they cannot be. */
static xfer_code ready(xfer_device *dev)
{
  vk_dev *vd = vk_of(dev);
  if (vd->crc_pipeline) return XFER_E_OK;
  if (vd->crc_refused || !host_types(vd) || !queue_computes(dev)) return XFER_E_UNSUPPORTED;
  xfer_error quiet;
  xfer_code rc = make_pipeline(dev, &quiet);
  if (!rc) rc = mapped_buffer(dev, TABLE_WORDS * 4, &vd->crc_table, &quiet);
  if (rc) {
    xfer_vk_crc_release(vd);
    vd->crc_refused = 1;
    return XFER_E_UNSUPPORTED;
  }
  xfer_crc32c_kernel_table(vd->crc_table.mapped);
  return XFER_E_OK;
}

/* Room for `count` pieces and their sums, kept and grown with the device. */
static xfer_code room_for(xfer_device *dev, size_t count, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  if (vd->crc_room >= count) return XFER_E_OK;
  xfer_vk_destroy_buffer(vd, &vd->crc_pieces);
  xfer_vk_destroy_buffer(vd, &vd->crc_sums);
  vd->crc_room = 0;
  size_t room = count < 4096 ? 4096 : count * 2;
  xfer_code rc = mapped_buffer(dev, room * 8, &vd->crc_pieces, err);
  if (!rc) rc = mapped_buffer(dev, room * 4, &vd->crc_sums, err);
  if (!rc) vd->crc_room = room;
  return rc;
}

/* Binds the window [from, from+range) of `buffer` and the device's pieces, table and sums. */
static void bind(vk_dev *vd, VkBuffer buffer, VkDeviceSize from, VkDeviceSize range)
{
  VkDescriptorBufferInfo info[4] = {{buffer, from, range},
                                    {vd->crc_pieces.buffer, 0, VK_WHOLE_SIZE},
                                    {vd->crc_table.buffer, 0, VK_WHOLE_SIZE},
                                    {vd->crc_sums.buffer, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet writes[4];
  for (uint32_t i = 0; i < 4; i++)
    writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = vd->crc_set,
                                       .dstBinding = i,
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &info[i]};
  vd->vkUpdateDescriptorSets(vd->device, 4, writes, 0, NULL);
}

/* Records and runs the shader over `groups` pieces already written (the device's fence settled
** first: window_sums), waiting for it; invocations' stretches of `stretch` bytes, the tree's
** shifts at word `shifts_at` of the table. */
static xfer_code dispatch(xfer_device *dev, uint32_t groups, size_t stretch, size_t shifts_at, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  VkCommandBuffer cmd = vd->cmd;
  VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  xfer_code rc = VK(dev, XFER_OP_VERIFY, err, vkBeginCommandBuffer, cmd, &begin); /* (settled) */
  if (rc) return rc;
  /* the bytes may have been written by copies of earlier submissions */
  VkMemoryBarrier before = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                            .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                             VK_ACCESS_HOST_WRITE_BIT,
                            .dstAccessMask = VK_ACCESS_SHADER_READ_BIT};
  vd->vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                           &before, 0, NULL, 0, NULL);
  vd->vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vd->crc_pipeline);
  vd->vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vd->crc_layout, 0, 1, &vd->crc_set, 0, NULL);
  crc_push push = {groups, (uint32_t)stretch, (uint32_t)shifts_at};
  vd->vkCmdPushConstants(cmd, vd->crc_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, &push);
  vd->vkCmdDispatch(cmd, groups < GROUPS_MAX ? groups : GROUPS_MAX, 1, 1);
  VkMemoryBarrier after = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
  vd->vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after,
                           0, NULL, 0, NULL);
  rc = VK(dev, XFER_OP_VERIFY, err, vkEndCommandBuffer, cmd);
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkResetFences, vd->device, 1, &vd->fence);
  VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
  if (!rc) rc = VK(dev, XFER_OP_VERIFY, err, vkQueueSubmit, vd->queue, 1, &submit, vd->fence);
  if (rc) {
    vd->vkResetCommandBuffer(cmd, 0);
    return rc;
  }
  return xfer_vk_wait_fence(dev, XFER_OP_VERIFY, vd->fence, err);
}

static size_t pieces_in(size_t n, size_t piece) { return (n + piece - 1) / piece; }

/* The window of a buffer that starts at range `first`: the ranges from there on the same buffer
** that fit in one binding, [*lo, *hi) of the buffer; how many ranges (*end: one past them). */
static void window_of(const vk_dev *vd, const xfer_sum_piece *pieces, size_t count, size_t first,
                      VkDeviceSize *lo, VkDeviceSize *hi, size_t *end)
{
  const vk_buf *b = pieces[first].buf;
  VkDeviceSize align = vd->storage_alignment ? vd->storage_alignment : 256;
  *lo = pieces[first].offset / align * align;
  *hi = pieces[first].offset + pieces[first].n;
  size_t i = first + 1;
  for (; i < count && pieces[i].buf == b; i++) {
    VkDeviceSize at = pieces[i].offset, to = at + pieces[i].n;
    VkDeviceSize nlo = at / align * align < *lo ? at / align * align : *lo, nhi = to > *hi ? to : *hi;
    if (nhi - nlo > vd->max_storage_range) break;
    *lo = nlo;
    *hi = nhi;
  }
  *end = i;
}

/* The ranges [first, end) of one buffer through the window [lo, hi): their pieces written,
** the shader run, the sums joined into crc[]. */
static xfer_code window_sums(xfer_device *dev, const xfer_sum_piece *pieces, size_t first, size_t end,
                             VkDeviceSize lo, VkDeviceSize hi, uint32_t *crc, xfer_error *err)
{
  vk_dev *vd = vk_of(dev);
  const vk_buf *b = pieces[first].buf;
  size_t groups = 0, largest = 0, shifts_at = 0;
  for (size_t i = first; i < end; i++) largest = pieces[i].n > largest ? pieces[i].n : largest;
  size_t stretch = xfer_crc32c_kernel_stretch(largest, &shifts_at), piece = stretch * INVOCATIONS;
  for (size_t i = first; i < end; i++) groups += pieces_in(pieces[i].n, piece);
  if (!groups) return XFER_E_OK;
  /* a sum whose wait ended at a deadline may still read the pieces and the set and write the
  ** sums: waited for (until this move's deadline) before any of them is touched */
  xfer_code rc = xfer_vk_fence_settle(dev, XFER_OP_VERIFY, vd->fence, err);
  if (!rc) rc = groups > 0xffffffffu ? XFER_E_UNSUPPORTED : room_for(dev, groups, err);
  if (rc) return rc;
  uint32_t *desc = vd->crc_pieces.mapped;
  size_t k = 0;
  for (size_t i = first; i < end; i++)
    for (size_t at = 0; at < pieces[i].n; at += piece, k++) {
      desc[2 * k] = (uint32_t)(pieces[i].offset + at - lo);
      desc[2 * k + 1] = (uint32_t)(pieces[i].n - at < piece ? pieces[i].n - at : piece);
    }
  /* whole words: the last one may reach past the bytes, never past the buffer */
  VkDeviceSize range = (hi - lo + 3) / 4 * 4;
  if (lo + range > b->size || range > vd->max_storage_range) return XFER_E_UNSUPPORTED;
  bind(vd, b->buffer, lo, range);
  rc = dispatch(dev, (uint32_t)groups, stretch, shifts_at, err);
  const uint32_t *sums = vd->crc_sums.mapped;
  for (size_t i = first, g = 0; !rc && i < end; g += pieces_in(pieces[i].n, piece), i++)
    crc[i] = xfer_crc32c_of_raw_pieces(sums + g, piece, pieces[i].n);
  return rc;
}
#endif

xfer_code xfer_vk_crc32c(xfer_device *dev, const xfer_sum_piece *pieces, size_t count, uint32_t *crc,
                         xfer_error *err)
{
#ifdef XFER_VULKAN_SHADERS
  vk_dev *vd = vk_of(dev);
  for (size_t i = 0; i < count; i++) {
    const vk_buf *b = pieces[i].buf;
    /* a buffer not made here (its usage unknown), or a range no window binds */
    if (!b->size || pieces[i].n > vd->max_storage_range) return XFER_E_UNSUPPORTED;
    crc[i] = 0;
  }
  xfer_code rc = ready(dev);
  for (size_t first = 0, end = 0; !rc && first < count; first = end) {
    VkDeviceSize lo, hi;
    window_of(vd, pieces, count, first, &lo, &hi, &end);
    rc = window_sums(dev, pieces, first, end, lo, hi, crc, err);
  }
  return rc;
#else
  (void)dev, (void)pieces, (void)count, (void)crc, (void)err;
  return XFER_E_UNSUPPORTED; /* built without glslc: no shaders */
#endif
}
