/*
** vulkan_load.c -- opening the Vulkan loader with dlopen, making the instance, and the
** names of VkResult codes.
*/
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_api.h"

/* -- Keeping drivers resident --------------------------------------------------------- */

/* The loader unloads its drivers when the last instance goes. Drivers keep threads and
** exit handlers that do not survive being unmapped, and their one-time allocations then
** show as leaks of an unknown module: so every library that creating the instance
** loaded is pinned for the life of the process (RTLD_NODELETE), as the OpenCL and Vulkan
** loaders themselves are. */
typedef struct module_list {
  char **names;
  size_t n, cap;
} module_list;

static int note_module(struct dl_phdr_info *info, size_t size, void *data)
{
  (void)size;
  module_list *list = data;
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  if (list->n == list->cap) {
    size_t cap = list->cap ? list->cap * 2 : 64;
    char **grown = realloc(list->names, cap * sizeof *grown);
    if (!grown) return 1;
    list->names = grown;
    list->cap = cap;
  }
  list->names[list->n] = strdup(info->dlpi_name);
  if (list->names[list->n]) list->n++;
  return 0;
}

static void free_modules(module_list *list)
{
  for (size_t i = 0; i < list->n; i++) free(list->names[i]);
  free(list->names);
  memset(list, 0, sizeof *list);
}

static void pin_new_modules(const module_list *before)
{
  module_list after = {0};
  dl_iterate_phdr(note_module, &after);
  for (size_t i = 0; i < after.n; i++) {
    int known = 0;
    for (size_t j = 0; j < before->n && !known; j++)
      known = !strcmp(after.names[i], before->names[j]);
    if (known) continue;
    void *pin = dlopen(after.names[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (pin) dlclose(pin); /* drops our reference; NODELETE keeps it mapped */
  }
  free_modules(&after);
}

/* -- Loader and instance ---------------------------------------------------------------- */

xfer_code xfer_vk_load(vk_api *api, xfer_error *err)
{
  const char *path;
  api->lib = xfer_driver_open("XFER_VULKAN_LIBRARY", "libvulkan.so.1", "the Vulkan loader",
                              &path, err);
  if (!api->lib) return XFER_E_UNAVAILABLE;
  *(void **)&api->vkGetInstanceProcAddr = dlsym(api->lib, "vkGetInstanceProcAddr");
  if (!api->vkGetInstanceProcAddr)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "%s has no vkGetInstanceProcAddr", path);
#define XFER_VK_RESOLVE_GLOBAL(name)                                                    \
  api->name = (PFN_##name)api->vkGetInstanceProcAddr(NULL, #name);
  XFER_VK_GLOBAL(XFER_VK_RESOLVE_GLOBAL)
#undef XFER_VK_RESOLVE_GLOBAL
  if (!api->vkCreateInstance)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "%s has no vkCreateInstance", path);

  /* Vulkan 1.1 has what we need (physical-device properties 2, external memory); a
  ** 1.0 loader (no vkEnumerateInstanceVersion) is too old. */
  api->instance_version = VK_API_VERSION_1_0;
  if (api->vkEnumerateInstanceVersion) api->vkEnumerateInstanceVersion(&api->instance_version);
  if (api->instance_version < VK_API_VERSION_1_1)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN,
                        "the Vulkan loader offers version 1.0; xferlua needs 1.1");
  VkApplicationInfo app = {
    .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
    .pApplicationName = "xferlua",
    .apiVersion = api->instance_version >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2
                                                              : VK_API_VERSION_1_1,
  };
  VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
  module_list before = {0};
  dl_iterate_phdr(note_module, &before);
  VkResult r = api->vkCreateInstance(&info, NULL, &api->instance);
  if (r == VK_SUCCESS) pin_new_modules(&before);
  free_modules(&before);
  if (r != VK_SUCCESS)
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "vkCreateInstance failed: %s (%d)%s",
                        xfer_vk_result_name(r), r,
                        r == VK_ERROR_INCOMPATIBLE_DRIVER ? ": no Vulkan driver (ICD) found" : "");
#define XFER_VK_RESOLVE_INSTANCE(name)                                                  \
  api->name = (PFN_##name)api->vkGetInstanceProcAddr(api->instance, #name);              \
  if (!api->name)                                                                        \
    return xfer_err_op(err, XFER_E_UNAVAILABLE, XFER_OP_OPEN, "the Vulkan loader has no %s", #name);
  XFER_VK_INSTANCE(XFER_VK_RESOLVE_INSTANCE)
#undef XFER_VK_RESOLVE_INSTANCE
  return XFER_E_OK;
}

const char *xfer_vk_result_name(VkResult r)
{
  switch (r) {
#define N(x) case x: return #x;
    N(VK_SUCCESS) N(VK_NOT_READY) N(VK_TIMEOUT) N(VK_EVENT_SET) N(VK_EVENT_RESET)
    N(VK_INCOMPLETE) N(VK_ERROR_OUT_OF_HOST_MEMORY) N(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    N(VK_ERROR_INITIALIZATION_FAILED) N(VK_ERROR_DEVICE_LOST) N(VK_ERROR_MEMORY_MAP_FAILED)
    N(VK_ERROR_LAYER_NOT_PRESENT) N(VK_ERROR_EXTENSION_NOT_PRESENT)
    N(VK_ERROR_FEATURE_NOT_PRESENT) N(VK_ERROR_INCOMPATIBLE_DRIVER) N(VK_ERROR_TOO_MANY_OBJECTS)
    N(VK_ERROR_FORMAT_NOT_SUPPORTED) N(VK_ERROR_FRAGMENTED_POOL) N(VK_ERROR_UNKNOWN)
    N(VK_ERROR_OUT_OF_POOL_MEMORY) N(VK_ERROR_INVALID_EXTERNAL_HANDLE) N(VK_ERROR_FRAGMENTATION)
    N(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef N
  default: return "VK_ERROR_UNLISTED";
  }
}
