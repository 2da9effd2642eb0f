-- The OpenCL runtime: the shared matrix, plus what is OpenCL's own.
local xfer = require "xfer"
local h = require "support.helpers"
local runtime_matrix = require "support.runtime_matrix"

runtime_matrix("opencl")

describe("opencl specifics #opencl", function()
  local info = h.runtime("opencl")
  local function each_device(fn) h.each_device("opencl", pending, fn) end

  it("reports platform, vendor and the largest buffer", function()
    each_device(function(dev)
      assert.is_true(#dev.platform > 0)
      assert.is_true(#dev.vendor > 0)
      assert.is_true(dev.max_alloc >= 128 * 1024 * 1024) -- OpenCL's minimum for a full profile
    end)
  end)

  it("lists platforms in name order", function()
    each_device(function() end)
    local last = ""
    for _, dev in ipairs(xfer.devices()) do
      if dev.runtime == "opencl" then
        assert.is_true(dev.platform >= last, dev.platform .. " after " .. last)
        last = dev.platform
      end
    end
  end)

  it("PoCL shares memory with the host", function()
    local found = false
    each_device(function(dev)
      if dev.platform == "Portable Computing Language" then
        found = true
        assert.is_true(dev.unified)
      end
    end)
    if info.available and not found then pending("no PoCL device here") end
  end)

  it("maps large moves on devices that share host memory, byte for byte", function()
    each_device(function(dev)
      local bytes = h.random_bytes(1024 * 1024):rep(20) .. "tail"
      local t = xfer.tensor(bytes, { dtype = "u8" }):to(dev)
      assert.are.equal(bytes, t:tobytes())
      xfer.faults.inject({ runtime = "opencl", op = "read" })
      local e = h.raises("read", t.tobytes, t)
      if dev.unified then
        assert.is_truthy(e.message:find("clEnqueueMapBuffer failed", 1, true), e.message)
      end
      assert.are.equal(bytes, t:tobytes())
    end)
  end)

  -- A device with memory of its own (NVIDIA's) moves host buffers at DMA speed once they
  -- are pinned; a pin that fails only costs speed.
  it("pins large host buffers for devices with memory of their own, and moves without", function()
    local discrete = {}
    each_device(function(dev) if not dev.unified then discrete[#discrete + 1] = dev end end)
    if info.available and #discrete == 0 then
      return pending("every OpenCL device here shares the host's memory: nothing to pin")
    end
    h.uncached() -- host memory OpenCL has not pinned yet
    for _, dev in ipairs(discrete) do
      local t = xfer.tensor(h.random_bytes(3 * 1024 * 1024 + 5), { dtype = "u8" })
      xfer.faults.inject({ runtime = "opencl", op = "register", count = 100 })
      assert.are.equal(t:tobytes(), t:to(dev):tobytes())
      local left = xfer.faults.list()
      assert.is_true(#left == 1 and left[1].count < 100, "no pin was tried")
      xfer.faults.clear()
      local bytes = h.random_bytes(5 * 1024 * 1024 + 3)
      local pinned = xfer.tensor(bytes, { dtype = "u8" })
      local there = pinned:to(dev)
      assert.are.equal(bytes, there:tobytes())
      local back = xfer.empty({ #bytes }, { dtype = "u8" })
      assert.are.equal(bytes, back:copy_from(there):tobytes())
      assert.are.equal(bytes, back:copy_from(there):tobytes()) -- pinned once, reused
      pinned:free()
      back:free()
    end
  end)

  it("refuses a tensor larger than the largest buffer, naming both sizes", function()
    each_device(function(dev)
      local before = h.in_use(dev)
      local n = dev.max_alloc + 1
      local e = h.raises("alloc", xfer.empty, { n }, { dtype = "u8", device = dev })
      assert.are.equal("alloc", e.op)
      assert.are.equal("CL_INVALID_BUFFER_SIZE", e.native_name)
      assert.are.equal(-61, e.native)
      assert.are.equal(("Failed to allocate %d bytes on %s: CL_INVALID_BUFFER_SIZE (-61): a tensor of %d bytes " ..
                        "is larger than the largest buffer %s allows (%d bytes)"):format(
                          n, dev.name, n, dev.name, dev.max_alloc), e.message)
      assert.are.equal(before, h.in_use(dev))
    end)
  end)

  it("names the failing OpenCL call in the message", function()
    each_device(function(dev)
      local t = xfer.arange(4, { device = dev })
      xfer.faults.inject({ runtime = "opencl", op = "copy" })
      local e = h.raises("write", t.clone, t)
      assert.is_truthy(e.message:find("CL_OUT_OF_RESOURCES (-5): clEnqueueCopyBuffer failed [injected fault]", 1, true),
                       e.message)
    end)
  end)

  -- On NVIDIA's GPU, OpenCL tensors live in memory CUDA allocated (cuMemCreate, exported as
  -- a POSIX fd, imported by OpenCL): CUDA moves them in one copy, and across GPUs in one
  -- peer copy.
  it("keeps tensors in CUDA's memory where CUDA shares the GPU, and moves them there in one copy", function()
    local backed = {}
    each_device(function(dev) if dev.backing then backed[#backed + 1] = dev end end)
    if #backed == 0 then
      return pending("no OpenCL device here shares its GPU with CUDA")
    end
    for _, dev in ipairs(backed) do
      local cuda = xfer.device(dev.backing)
      assert.are.equal("cuda", cuda.runtime)
      assert.are.equal(dev.uuid, cuda.uuid)
      local bytes = h.random_bytes(3 * 1024 * 1024 + 11)
      local on_cuda = xfer.tensor(bytes, { dtype = "u8", device = cuda })
      local plan = xfer.plan(on_cuda, dev)
      assert.are.equal("interop", plan.path)
      assert.are.same({ ("%s's memory is %s's, imported into %s"):format(dev.name, cuda.name, dev.name),
                        ("copy %d bytes on %s"):format(#bytes, cuda.name) }, plan.steps)
      local there = on_cuda:to(dev)
      assert.are.equal(bytes, there:tobytes()) -- OpenCL reads what CUDA wrote
      assert.are.equal(bytes, there:to(cuda):tobytes())
      assert.are.equal(bytes, there:clone():tobytes()) -- OpenCL's own copy of an import
      assert.are.equal(bytes, xfer.tensor(bytes, { dtype = "u8", device = dev }):tobytes())
      -- every other CUDA device reaches it with one peer copy
      for _, other in ipairs(xfer.devices()) do
        if other.runtime == "cuda" and other ~= cuda then
          local p = xfer.plan(there, other)
          assert.are.equal("interop", p.path)
          assert.are.equal(("peer copy of %d bytes from %s to %s"):format(#bytes, cuda.name, other.name),
                           p.steps[#p.steps])
          assert.are.equal(bytes, there:to(other):to(dev):tobytes())
        end
      end
    end
    -- XFER_SHARED_MEMORY=0: OpenCL's own memory again
    local out = h.run("XFER_SHARED_MEMORY=0 " .. h.xferlua() .. " -e 'print(require(\"xfer\").device(\"" ..
                      backed[1].name .. "\").backing)'")
    assert.are.equal("nil\n", out)
  end)

  describe("when OpenCL cannot work", function()
    local function opencl_reason(env) return h.runtime_reason("opencl", env) end

    it("a missing ICD loader makes the runtime unavailable, saying so", function()
      local out = opencl_reason("XFER_OPENCL_LIBRARY=libOpenCL-missing.so.1")
      assert.are.equal("false\tcannot load the OpenCL ICD loader libOpenCL-missing.so.1: " ..
                       "libOpenCL-missing.so.1: cannot open shared object file: No such file or directory\n", out)
    end)

    it("a loader that is not OpenCL's makes it unavailable, naming what is missing", function()
      local out = opencl_reason("XFER_OPENCL_LIBRARY=libm.so.6")
      assert.are.equal("false\tlibm.so.6 has no clGetPlatformIDs\n", out)
    end)

    it("no platform makes it unavailable with CL_PLATFORM_NOT_FOUND_KHR", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir) == 0)
      local out = opencl_reason("OCL_ICD_VENDORS=" .. dir .. " OCL_ICD_FILENAMES=")
      os.execute("rmdir " .. dir)
      if out:match("^true") then
        return pending("this ICD loader ignores OCL_ICD_VENDORS: " .. out)
      end
      assert.are.equal("false\tno OpenCL platform: CL_PLATFORM_NOT_FOUND_KHR (-1001)\n", out)
    end)
  end)
end)
