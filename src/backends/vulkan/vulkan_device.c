/*
** vulkan_device.c -- the Vulkan devices: every physical device with a compute or
** transfer queue becomes vulkan:N, with one logical device, queue, command pool and
** fence made once, and the extensions that host import and interop need.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_api.h"

static const char *vendor_name(uint32_t id)
{
  switch (id) {
  case 0x10de: return "NVIDIA";
  case 0x1002: return "AMD";
  case 0x8086: return "Intel";
  case 0x13b5: return "ARM";
  case 0x5143: return "Qualcomm";
  case 0x10005: return "Mesa";
  default: return "";
  }
}

/* Says in the runtime's reason that a device was left out, and why. */
static void leave_out(xfer_runtime *rt, const char *name, const char *what, VkResult r)
{
  size_t used = strlen(rt->reason);
  if (r != VK_SUCCESS)
    snprintf(rt->reason + used, sizeof rt->reason - used, "%sleft out %s: %s failed: %s (%d)",
             used ? "; " : "", name, what, xfer_vk_result_name(r), r);
  else
    snprintf(rt->reason + used, sizeof rt->reason - used, "%sleft out %s: %s", used ? "; " : "",
             name, what);
}

static int find_queue_family(vk_api *api, VkPhysicalDevice pd, uint32_t *family)
{
  uint32_t n = 0;
  api->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
  VkQueueFamilyProperties *props = calloc(n ? n : 1, sizeof *props);
  if (!props) return 0;
  api->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, props);
  int found = 0;
  /* a compute queue first (kernels will want it), else any queue that can copy. NVIDIA's
  ** transfer-only family was measured too: host moves no faster (46-49 against 48-50 GB/s),
  ** copies within the device five times slower (86 against 415 GB/s). */
  for (int want = 0; want < 2 && !found; want++)
    for (uint32_t i = 0; i < n && !found; i++) {
      VkQueueFlags f = props[i].queueFlags;
      if (want == 0 ? (f & VK_QUEUE_COMPUTE_BIT) != 0
                    : (f & (VK_QUEUE_TRANSFER_BIT | VK_QUEUE_GRAPHICS_BIT)) != 0) {
        *family = i;
        found = 1;
      }
    }
  free(props);
  return found;
}

typedef struct vk_extensions {
  int external_memory_fd, external_memory_host, memory_budget;
} vk_extensions;

static void find_extensions(vk_api *api, VkPhysicalDevice pd, vk_extensions *ext)
{
  memset(ext, 0, sizeof *ext);
  uint32_t n = 0;
  if (api->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS) return;
  VkExtensionProperties *props = calloc(n ? n : 1, sizeof *props);
  if (!props) return;
  if (api->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, props) == VK_SUCCESS)
    for (uint32_t i = 0; i < n; i++) {
      const char *name = props[i].extensionName;
      ext->external_memory_fd |= !strcmp(name, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
      ext->external_memory_host |= !strcmp(name, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
      ext->memory_budget |= !strcmp(name, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    }
  free(props);
}

/* Fills the xfer_device fields from the physical device's properties. */
static void describe(vk_api *api, VkPhysicalDevice pd, xfer_device *dev, vk_dev *vd,
                     const vk_extensions *ext)
{
  VkPhysicalDeviceProperties basic;
  api->vkGetPhysicalDeviceProperties(pd, &basic);
  VkPhysicalDeviceDriverProperties driver = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  VkPhysicalDeviceMaintenance3Properties maint3 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceIDProperties ids = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
                                      .pNext = &maint3};
  int has_driver = basic.apiVersion >= VK_API_VERSION_1_2 &&
                   api->instance_version >= VK_API_VERSION_1_2;
  if (ext->external_memory_host) {
    host.pNext = ids.pNext;
    ids.pNext = &host;
  }
  if (has_driver) {
    driver.pNext = ids.pNext;
    ids.pNext = &driver;
  }
  VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                       .pNext = &ids};
  api->vkGetPhysicalDeviceProperties2(pd, &props);

  xfer_copy_text(dev->label, sizeof dev->label, basic.deviceName);
  xfer_copy_text(dev->vendor, sizeof dev->vendor, vendor_name(basic.vendorID));
  if (has_driver) xfer_copy_text(dev->platform, sizeof dev->platform, driver.driverName);
  memcpy(dev->uuid, ids.deviceUUID, sizeof dev->uuid);
  memcpy(dev->driver_uuid, ids.driverUUID, sizeof dev->driver_uuid);
  dev->has_uuid = dev->has_driver_uuid = 1;
  dev->max_alloc = maint3.maxMemoryAllocationSize;
  dev->unified = basic.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                 basic.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  vd->import_alignment = host.minImportedHostPointerAlignment;

  dev->total_memory = 0;
  for (uint32_t h = 0; h < vd->memory.memoryHeapCount; h++)
    if (vd->memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      dev->total_memory += vd->memory.memoryHeaps[h].size;
}

/* The memory type tensors live in, among `allowed` types: on a device that shares
** memory with the host, host-visible coherent memory (tensors are then mapped, not
** staged); on a discrete GPU, device-local memory the CPU cannot see (its VRAM). */
static int choose_tensor_type(vk_dev *vd, uint32_t allowed, int unified, uint32_t *type,
                              int *mapped)
{
  const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  const VkMemoryPropertyFlags shared = local | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                       VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int best = -1, best_score = -1;
  for (uint32_t i = 0; i < vd->memory.memoryTypeCount; i++) {
    if (!(allowed & (1u << i))) continue;
    VkMemoryPropertyFlags f = vd->memory.memoryTypes[i].propertyFlags;
    int score = -1;
    if (unified && (f & shared) == shared)
      score = 3 + ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) != 0);
    else if (!unified && (f & local) && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
      score = 3;
    else if (f & local)
      score = 1;
    if (score > best_score) {
      best = (int)i;
      best_score = score;
    }
  }
  if (best < 0) return 0;
  *type = (uint32_t)best;
  VkMemoryPropertyFlags f = vd->memory.memoryTypes[best].propertyFlags;
  *mapped = unified && (f & shared) == shared;
  return 1;
}

static VkBufferUsageFlags tensor_usage(void)
{
  return VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
         VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
}

static void destroy_device(vk_dev *vd)
{
  if (vd->device) {
    xfer_vk_crc_release(vd);
    if (vd->idle_fence) vd->vkDestroyFence(vd->device, vd->idle_fence, NULL);
    if (vd->fence) vd->vkDestroyFence(vd->device, vd->fence, NULL);
    if (vd->pool) vd->vkDestroyCommandPool(vd->device, vd->pool, NULL);
    vd->vkDestroyDevice(vd->device, NULL);
  }
  free(vd);
}

/* Creates the logical device and what every transfer needs. Returns the failing call's
** name, or NULL; *r holds its result. */
static const char *create_device(vk_api *api, vk_dev *vd, const vk_extensions *ext, VkResult *r)
{
  const char *names[3];
  uint32_t n = 0;
  if (ext->external_memory_fd) names[n++] = VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
  if (ext->external_memory_host) names[n++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
  if (ext->memory_budget) names[n++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
  float priority = 1.0f;
  VkDeviceQueueCreateInfo queue = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = vd->queue_family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &priority};
  VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &queue,
                             .enabledExtensionCount = n,
                             .ppEnabledExtensionNames = names};
  if ((*r = api->vkCreateDevice(vd->physical, &info, NULL, &vd->device)) != VK_SUCCESS)
    return "vkCreateDevice";
  vd->host_import = ext->external_memory_host;
  vd->export_fd = ext->external_memory_fd;
  vd->memory_budget = ext->memory_budget;
#define XFER_VK_RESOLVE_DEVICE(name)                                                    \
  vd->name = (PFN_##name)api->vkGetDeviceProcAddr(vd->device, #name);                    \
  if (!vd->name) {                                                                       \
    *r = VK_ERROR_INITIALIZATION_FAILED;                                                 \
    return #name;                                                                        \
  }
  XFER_VK_DEVICE(XFER_VK_RESOLVE_DEVICE)
#undef XFER_VK_RESOLVE_DEVICE
  if (vd->host_import)
    vd->vkGetMemoryHostPointerPropertiesEXT = (PFN_vkGetMemoryHostPointerPropertiesEXT)
        api->vkGetDeviceProcAddr(vd->device, "vkGetMemoryHostPointerPropertiesEXT");
  if (vd->export_fd)
    vd->vkGetMemoryFdKHR = (PFN_vkGetMemoryFdKHR)api->vkGetDeviceProcAddr(vd->device,
                                                                           "vkGetMemoryFdKHR");
  vd->host_import = vd->host_import && vd->vkGetMemoryHostPointerPropertiesEXT;
  vd->export_fd = vd->export_fd && vd->vkGetMemoryFdKHR;
  vd->vkGetDeviceQueue(vd->device, vd->queue_family, 0, &vd->queue);

  VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = vd->queue_family};
  if ((*r = vd->vkCreateCommandPool(vd->device, &pool, NULL, &vd->pool)) != VK_SUCCESS)
    return "vkCreateCommandPool";
  VkCommandBufferAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = vd->pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
  if ((*r = vd->vkAllocateCommandBuffers(vd->device, &alloc, &vd->cmd)) != VK_SUCCESS)
    return "vkAllocateCommandBuffers";
  VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((*r = vd->vkCreateFence(vd->device, &fence, NULL, &vd->fence)) != VK_SUCCESS)
    return "vkCreateFence";
  /* copy->idle's marker, made here rather than at the first stall: NVIDIA's driver opens a
  ** /dev/nvidia0 fd for it, which torture --stall counted as leaked by the run that stalled
  ** first (the fence lives as long as the device) */
  if ((*r = vd->vkCreateFence(vd->device, &fence, NULL, &vd->idle_fence)) != VK_SUCCESS)
    return "vkCreateFence";

  /* which memory types can hold a tensor buffer: ask with a small one */
  VkBufferCreateInfo probe = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = 4096,
                              .usage = tensor_usage(),
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer buffer;
  if ((*r = vd->vkCreateBuffer(vd->device, &probe, NULL, &buffer)) != VK_SUCCESS)
    return "vkCreateBuffer";
  VkMemoryRequirements req;
  vd->vkGetBufferMemoryRequirements(vd->device, buffer, &req);
  vd->vkDestroyBuffer(vd->device, buffer, NULL);
  vd->tensor_type = req.memoryTypeBits; /* narrowed by the caller */
  api->vkGetPhysicalDeviceMemoryProperties(vd->physical, &vd->memory);
  return NULL;
}

static void add_device(xfer_runtime *rt, VkPhysicalDevice pd)
{
  vk_api *api = rt->impl;
  VkPhysicalDeviceProperties basic;
  api->vkGetPhysicalDeviceProperties(pd, &basic);
  vk_dev *vd = calloc(1, sizeof *vd);
  if (!vd) {
    leave_out(rt, basic.deviceName, xfer_code_what(XFER_E_ALLOC), VK_SUCCESS);
    return;
  }
  vd->physical = pd;
  vd->max_storage_range = basic.limits.maxStorageBufferRange;
  vd->storage_alignment = basic.limits.minStorageBufferOffsetAlignment;
  vd->max_shared = basic.limits.maxComputeSharedMemorySize;
  if (!find_queue_family(api, pd, &vd->queue_family)) {
    free(vd); /* no compute or transfer queue: not a device for us */
    return;
  }
  vk_extensions ext;
  find_extensions(api, pd, &ext);
  VkResult r = VK_SUCCESS;
  const char *failed = create_device(api, vd, &ext, &r);
  int unified = basic.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                basic.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  if (!failed && !choose_tensor_type(vd, vd->tensor_type, unified, &vd->tensor_type,
                                     &vd->tensor_mapped))
    failed = "finding a device-local memory type for buffers";
  /* XFER_VULKAN_NO_MAP=1: stage or import even where tensors could be mapped, so those
  ** paths can be measured and tested on a CPU device too */
  if (xfer_env_flag("XFER_VULKAN_NO_MAP")) vd->tensor_mapped = 0;
  xfer_error err;
  xfer_device *dev = failed ? NULL : xfer_runtime_add_device(rt, &err);
  if (!dev) {
    leave_out(rt, basic.deviceName, failed ? failed : xfer_code_what(XFER_E_ALLOC), r);
    destroy_device(vd);
    return;
  }
  dev->impl = vd;
  describe(api, pd, dev, vd, &ext);
  /* interop: a discrete GPU's tensors are exportable as opaque fds */
  dev->can_export = vd->export_fd && !vd->tensor_mapped;
}

xfer_code xfer_vk_open_devices(xfer_runtime *rt, xfer_error *err)
{
  vk_api *api = rt->impl;
  uint32_t n = 0;
  VkResult r = api->vkEnumeratePhysicalDevices(api->instance, &n, NULL);
  if (r != VK_SUCCESS)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN,
                        "vkEnumeratePhysicalDevices failed: %s (%d)",
                        xfer_vk_result_name(r), r);
  if (n == 0)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "no Vulkan device: the loader found no "
                        "physical device (is a driver such as mesa-vulkan-drivers installed?)");
  VkPhysicalDevice *pds = calloc(n, sizeof *pds);
  if (!pds) return xfer_err_code(err, XFER_E_ALLOC, XFER_OP_OPEN);
  r = api->vkEnumeratePhysicalDevices(api->instance, &n, pds);
  if (r == VK_SUCCESS || r == VK_INCOMPLETE)
    for (uint32_t i = 0; i < n; i++) add_device(rt, pds[i]);
  free(pds);
  return XFER_E_OK;
}

void xfer_vk_close_devices(xfer_runtime *rt)
{
  xfer_ctx *ctx = rt->ctx;
  for (size_t d = rt->first_device; d < ctx->ndevices; d++) {
    xfer_device *dev = ctx->devices[d];
    vk_dev *vd = dev->rt == rt ? dev->impl : NULL;
    if (!vd) continue;
    vd->vkDeviceWaitIdle(vd->device);
    vk_staging *st = &vd->staging;
    for (int s = 0; s < XFER_VK_STAGING_SLOTS; s++) {
      if (st->fence[s]) vd->vkDestroyFence(vd->device, st->fence[s], NULL);
      if (st->buffer[s]) vd->vkDestroyBuffer(vd->device, st->buffer[s], NULL);
      if (st->memory[s]) vd->vkFreeMemory(vd->device, st->memory[s], NULL);
    }
    for (int q = 0; q < XFER_QUEUE_SLOTS; q++)
      if (vd->queued[q].fence) vd->vkDestroyFence(vd->device, vd->queued[q].fence, NULL);
    destroy_device(vd); /* the command buffers go with their pool */
    dev->impl = NULL;
  }
}
