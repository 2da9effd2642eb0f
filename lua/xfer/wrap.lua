-- wrap.lua -- xfer.wrap(ptr, opts): memory a script already has (an FFI pointer or array, a
-- light userdata, an address) as a tensor, without a copy; t:ptr(): a host tensor's first
-- element as an FFI pointer. The binding runs this file with the module table.
local xfer = ...

local ffi_ok, ffi = pcall(require, "ffi")

--- xfer.wrap(ptr, {dtype, shape, strides, device, size, offset, owner}): `ptr` is an FFI
--- pointer or array (cdata), a light userdata, or an address (a number; a CUdeviceptr for
--- a CUDA device); `owner` is kept alive as long as the tensor. Vulkan memory comes as
--- {device = "vulkan:0", vk_buffer = ..., vk_memory = ...} with ptr nil.
function xfer.wrap(ptr, opts)
  if ffi_ok and type(ptr) == "cdata" then
    local cdata = ptr
    ptr = tonumber(ffi.cast("uintptr_t", ffi.cast("const void *", cdata)))
    if type(opts) == "table" then
      local copy = {}
      for k, v in pairs(opts) do copy[k] = v end
      -- an FFI array owns its memory: the tensor keeps it alive unless told another owner
      if copy.owner == nil then copy.owner = cdata end
      -- and knows its size, which the tensor must fit in (a pointer's size is the caller's word)
      if copy.size == nil and tostring(ffi.typeof(cdata)):find("%[") then
        copy.size = ffi.sizeof(cdata)
      end
      opts = copy
    end
  end
  return xfer.wrap_address(ptr, opts)
end

--- t:ptr(): a host tensor's first element as an FFI `void *` (the tensor must outlive it).
function xfer.Tensor.ptr(t)
  local address = xfer.Tensor.address(t)
  if not ffi_ok then return address end
  return ffi.cast("void *", address)
end

--- xfer.from_dlpack(ptr [, {versioned = true}]): a DLManagedTensorVersioned (or, versioned =
--- false, a DLManagedTensor) given as an FFI pointer, light userdata or address, taken in as
--- a wrapped tensor without a copy; its deleter runs once xferlua lets go.
function xfer.from_dlpack(ptr, opts)
  if ffi_ok and type(ptr) == "cdata" then ptr = tonumber(ffi.cast("uintptr_t", ffi.cast("const void *", ptr))) end
  return xfer.from_dlpack_address(ptr, opts)
end
