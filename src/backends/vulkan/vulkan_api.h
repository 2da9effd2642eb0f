/*
** vulkan_api.h -- the Vulkan entry points xferlua uses, resolved through
** vkGetInstanceProcAddr/vkGetDeviceProcAddr from libvulkan.so.1 opened at run time, and
** the backend's runtime and per-device state.
*/
#ifndef XFER_VULKAN_API_H
#define XFER_VULKAN_API_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "../../core/backend.h"

/* Loader-level entry points, resolved with a NULL instance. */
#define XFER_VK_GLOBAL(X) X(vkCreateInstance) X(vkEnumerateInstanceVersion)

#define XFER_VK_INSTANCE(X)                                                          \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties) \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceMemoryProperties)            \
  X(vkGetPhysicalDeviceMemoryProperties2) X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)

#define XFER_VK_DEVICE(X)                                                              \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)           \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory)                  \
  X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory) X(vkCreateCommandPool)          \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer)           \
  X(vkEndCommandBuffer) X(vkCmdCopyBuffer) X(vkQueueSubmit) X(vkCreateFence)            \
  X(vkDestroyFence) X(vkWaitForFences) X(vkGetFenceStatus) X(vkResetFences) X(vkDeviceWaitIdle) \
  X(vkResetCommandBuffer) X(vkCreateShaderModule) X(vkDestroyShaderModule)                 \
  X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout)   \
  X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)              \
  X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) X(vkAllocateDescriptorSets)          \
  X(vkUpdateDescriptorSets) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets)                 \
  X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier)

/* Device entry points that exist only with their extension; NULL otherwise. */
#define XFER_VK_DEVICE_OPTIONAL(X) X(vkGetMemoryHostPointerPropertiesEXT) X(vkGetMemoryFdKHR)

typedef struct vk_api {
  void *lib;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
  VkInstance instance;
  uint32_t instance_version;
#define XFER_VK_POINTER(name) PFN_##name name;
  XFER_VK_GLOBAL(XFER_VK_POINTER)
  XFER_VK_INSTANCE(XFER_VK_POINTER)
} vk_api;

/* Two staging chunks, so the CPU fills one while the GPU copies the other. */
#define XFER_VK_STAGING_SLOTS 2

typedef struct vk_staging {
  VkBuffer buffer[XFER_VK_STAGING_SLOTS];
  VkDeviceMemory memory[XFER_VK_STAGING_SLOTS];
  void *mapped[XFER_VK_STAGING_SLOTS];
  VkCommandBuffer cmd[XFER_VK_STAGING_SLOTS];
  VkFence fence[XFER_VK_STAGING_SLOTS];
  size_t chunk;
  int ready;
} vk_staging;

/* One queued move of the staged pipeline: its command buffer and fence, made on first
** use and kept; `op` is what a failed wait reports. */
typedef struct vk_queued {
  VkCommandBuffer cmd;
  VkFence fence;
  xfer_op op;
  int pending;
} vk_queued;

/* A host buffer imported as Vulkan memory, kept until the buffer is freed. */
typedef struct vk_import {
  char *base;
  size_t size;
  VkBuffer buffer;
  VkDeviceMemory memory;
} vk_import;

/* A tensor's buffer. */
typedef struct vk_buf {
  VkBuffer buffer;
  VkDeviceSize size;            /* the buffer's bytes (0: not known, not made here) */
  VkDeviceMemory memory;
  VkDeviceSize memory_size;     /* what an importer of the memory is told */
  void *mapped;                 /* when the memory is host-visible: mapped for its lifetime */
} vk_buf;

typedef struct vk_dev {
  VkPhysicalDevice physical;
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;
  VkCommandPool pool;
  VkCommandBuffer cmd;          /* one-shot copies */
  VkFence fence;
  VkPhysicalDeviceMemoryProperties memory;
  uint32_t tensor_type;         /* memory type index for tensors */
  int tensor_mapped;            /* tensors are host-visible and coherent: map, don't stage */
  int host_import;              /* VK_EXT_external_memory_host enabled */
  VkDeviceSize import_alignment;
  int export_fd;                /* VK_KHR_external_memory_fd enabled (for interop) */
  int memory_budget;            /* VK_EXT_memory_budget enabled */
  long long injected;           /* the code an injected fault reports */
  vk_staging staging;
  vk_queued queued[XFER_QUEUE_SLOTS];
  /* sums (vulkan_crc.c): the compute pipeline, made on first use (crc_refused: it could not
  ** be), its descriptor set, and host-visible buffers for its table, pieces and sums */
  VkShaderModule crc_shader;
  VkDescriptorSetLayout crc_set_layout;
  VkPipelineLayout crc_layout;
  VkPipeline crc_pipeline;
  VkDescriptorPool crc_pool;
  VkDescriptorSet crc_set;
  vk_buf crc_table, crc_pieces, crc_sums;
  size_t crc_room;              /* pieces crc_pieces and crc_sums hold */
  int crc_refused;
  VkDeviceSize max_storage_range, storage_alignment;
  uint32_t max_shared;          /* maxComputeSharedMemorySize: the CRC shader's table columns */
  VkFence idle_fence;           /* copy->idle's empty submission, and whether it is in flight */
  int idle_submitted;
  double idle_placed;           /* xfer_now() when it was submitted */
  /* fences whose wait ended at a deadline: their work may be pending still, so each is waited
  ** for (until the next deadline) before it or its command buffer is used again */
  VkFence unsettled[8];
  int nunsettled;
#define XFER_VK_POINTER(name) PFN_##name name;
  XFER_VK_DEVICE(XFER_VK_POINTER)
  XFER_VK_DEVICE_OPTIONAL(XFER_VK_POINTER)
#undef XFER_VK_POINTER
} vk_dev;


/* vulkan_crc.c: what the sums made (pipeline, buffers), let go before the device goes */
void xfer_vk_crc_release(vk_dev *vd);

/* vulkan_load.c */
xfer_code xfer_vk_load(vk_api *api, xfer_error *err);
const char *xfer_vk_result_name(VkResult r);

/* vulkan_device.c */
xfer_code xfer_vk_open_devices(xfer_runtime *rt, xfer_error *err);
void xfer_vk_close_devices(xfer_runtime *rt);

#endif
