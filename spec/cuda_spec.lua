-- The CUDA runtime: the shared matrix, plus what is CUDA's own. Pending where CUDA is
-- unavailable (CI has no GPU); run on the GPU machine.
local xfer = require "xfer"
local h = require "support.helpers"
local runtime_matrix = require "support.runtime_matrix"

runtime_matrix("cuda")

describe("cuda specifics #cuda", function()
  local info = h.runtime("cuda")

  local function devices()
    local list = {}
    for _, dev in ipairs(xfer.devices()) do
      if dev.runtime == "cuda" then list[#list + 1] = dev end
    end
    return list
  end

  local function each_device(fn) h.each_device("cuda", pending, fn) end

  before_each(function() xfer.faults.clear() end)

  it("reports UUID, compute capability, PCI bus id and free memory", function()
    each_device(function(dev)
      assert.is_truthy(dev.uuid:match("^%x+%-%x+%-%x+%-%x+%-%x+$"), dev.uuid)
      assert.is_truthy(dev.compute_capability:match("^%d+%.%d+$"), dev.compute_capability)
      assert.is_truthy(dev.pci_bus_id:match("^%x+:%x+:%x+%.%x$"), dev.pci_bus_id)
      assert.is_true(dev.free_memory > 0 and dev.free_memory <= dev.total_memory)
      assert.is_truthy(dev.platform:match("^CUDA %d+%.%d+$"), dev.platform)
    end)
  end)

  it("moves large host tensors through pinned memory and byte strings through staging", function()
    each_device(function(dev)
      local bytes = h.random_bytes(20 * 1024 * 1024 + 77)        -- staged: a Lua string
      local on = xfer.tensor(bytes, { dtype = "u8", device = dev })
      local back = on:to("host")                                 -- pinned: a host tensor
      assert.are.equal(bytes, back:tobytes())
      assert.are.equal(bytes, back:to(dev):tobytes())            -- pinned once, reused
      assert.are.equal(bytes, back:to(dev):to("host"):tobytes())
    end)
  end)

  it("stages when a host buffer cannot be pinned", function()
    h.uncached() -- host memory CUDA has not registered yet
    each_device(function(dev)
      local t = xfer.tensor(h.random_bytes(3 * 1024 * 1024), { dtype = "u8" })
      xfer.faults.inject({ runtime = "cuda", op = "register", count = 100 })
      assert.are.equal(t:tobytes(), t:to(dev):tobytes())
      local left = xfer.faults.list()
      assert.is_true(#left == 1 and left[1].count < 100, "no registration was tried")
      xfer.faults.clear()
    end)
  end)

  it("names the CUresult and the driver's words for it", function()
    each_device(function(dev)
      local t = xfer.arange(4, { device = dev })
      xfer.faults.inject({ runtime = "cuda", op = "copy", native = 2 })
      local e = h.raises("write", t.clone, t)
      assert.are.equal("CUDA_ERROR_OUT_OF_MEMORY", e.native_name)
      assert.is_true(e.retryable)
      assert.is_truthy(e.message:find("CUDA_ERROR_OUT_OF_MEMORY (2): cuMemcpyDtoDAsync: out of memory [injected fault]",
                                      1, true), e.message)
    end)
  end)

  it("peer copies between two devices take the same_runtime path", function()
    local list = devices()
    if not info.available then return pending("cuda is unavailable here: " .. info.reason) end
    if #list < 2 then return pending("one CUDA device here: peer copies need two") end
    local bytes = h.random_bytes(8 * 1024 * 1024 + 1)
    local a = xfer.tensor(bytes, { dtype = "u8", device = list[1] })
    assert.are.equal("same_runtime", xfer.plan(a, list[2]).path)
    local b = a:to(list[2])
    assert.are.equal(bytes, b:tobytes())
    assert.are.equal(bytes, b:to(list[1], { via = "same_runtime" }):tobytes())
    xfer.faults.inject({ runtime = "cuda", op = "peer" })
    local e = h.raises("write", a.to, a, list[2])
    assert.are.equal("peer", e.op)
    assert.are.equal(bytes, a:tobytes())
  end)

  it("a sticky error loses the device: every later use raises device_lost", function()
    each_device(function(dev)
      assert.are.equal("false\tdevice_lost\tCUDA_ERROR_ILLEGAL_ADDRESS\n" ..
                       "false\tdevice_lost\nfalse\tdevice_lost\nfalse\tdevice_lost\n1\n",
                       h.lose_device(dev, 700))
    end)
  end)

  describe("when CUDA cannot work", function()
    local function cuda_reason(env) return h.runtime_reason("cuda", env) end

    it("a missing driver makes the runtime unavailable, saying so", function()
      assert.are.equal("false\tcannot load the CUDA driver libcuda-missing.so.1: " ..
                       "libcuda-missing.so.1: cannot open shared object file: No such file or directory\n",
                       cuda_reason("XFER_CUDA_LIBRARY=libcuda-missing.so.1"))
    end)

    it("the toolkit's stub library is no driver", function()
      local stub
      for _, dir in ipairs({ os.getenv("CUDA_PATH") or "", "/usr/local/cuda" }) do
        local path = dir .. "/lib64/stubs/libcuda.so"
        local f = dir ~= "" and io.open(path)
        if f then f:close(); stub = stub or path end
      end
      if not stub then return pending("no CUDA Toolkit stub library here") end
      assert.are.equal("false\t" .. stub .. " is the CUDA stub library, not a driver: CUDA_ERROR_STUB_LIBRARY (34)\n",
                       cuda_reason("XFER_CUDA_LIBRARY=" .. stub))
    end)
  end)

  it("takes a batch between pinned host memory and the device, and within it, as one kernel", function()
    each_device(function(dev)
      local block, nblocks = 16384, 256 -- 4 MiB: host segments this large are pinned
      local s = {}
      for i = 0, block * nblocks - 1, 997 do s[#s + 1] = string.char(i % 251) end
      local seed = table.concat(s)
      local host_src = xfer.tensor(seed:rep(math.ceil(block * nblocks / #seed)):sub(1, block * nblocks), { dtype = "u8" })
      local on_dev = xfer.zeros({ block * nblocks }, { dtype = "u8", device = dev })
      local back = xfer.zeros({ block * nblocks }, { dtype = "u8" })
      local src_blocks, dst_blocks = {}, {}
      for i = 0, 99 do src_blocks[#src_blocks + 1] = (i * 37) % nblocks; dst_blocks[#dst_blocks + 1] = (i * 61 + 5) % nblocks end
      local up = xfer.batch({ dst = on_dev, src = host_src, src_blocks = src_blocks, dst_blocks = dst_blocks, block_bytes = block })
      up:run()
      assert.are.equal(1, up.at_once)
      local down = xfer.batch({ dst = back, src = on_dev, src_blocks = dst_blocks, dst_blocks = src_blocks, block_bytes = block })
      down:run()
      assert.are.equal(1, down.at_once)
      local hs, bs = host_src:tobytes(), back:tobytes()
      for k = 1, #src_blocks do
        local at = src_blocks[k] * block
        assert.are.equal(hs:sub(at + 1, at + block), bs:sub(at + 1, at + block), "block " .. src_blocks[k])
      end
      -- within the device, odd sizes and offsets (the kernel's byte path)
      local twin = xfer.zeros({ block * nblocks }, { dtype = "u8", device = dev })
      xfer.copy_many({ { dst = twin, src = on_dev, dst_offset = 3, src_offset = dst_blocks[1] * block + 1, nbytes = 1001 } })
      local tb, ob = twin:tobytes(), on_dev:tobytes()
      assert.are.equal(ob:sub(dst_blocks[1] * block + 2, dst_blocks[1] * block + 1002), tb:sub(4, 1004))
      -- a fault in the one launch fails the whole batch, its first element named
      xfer.faults.inject({ runtime = "cuda", op = "copy" })
      local e = h.raises("write", up.run, up)
      assert.are.equal(1, e.element)
      assert.is_true(e.injected)
      xfer.faults.clear()
      for _, t in ipairs({ host_src, on_dev, back, twin }) do t:free() end
    end)
  end)

  -- From its second run on, a prepared batch's descriptor table stays on the device: a later
  -- run must still move the bytes there are now, and must not read host memory that is no
  -- longer pinned (the kernel would fault, losing the device).
  local function blocks_hold(t, blocks, block, value)
    local bytes, want = t:tobytes(), string.char(value):rep(block)
    for k = 1, #blocks do
      local at = blocks[k] * block
      assert.are.equal(want, bytes:sub(at + 1, at + block), "block " .. blocks[k] .. " round " .. value)
    end
  end

  it("a prepared batch's later runs move the bytes there are now", function()
    each_device(function(dev)
      local block, nblocks = 16384, 256 -- 4 MiB: pinned, so the kernel takes it
      local host_src = xfer.zeros({ block * nblocks }, { dtype = "u8" })
      local on_dev = xfer.zeros({ block * nblocks }, { dtype = "u8", device = dev })
      local back = xfer.zeros({ block * nblocks }, { dtype = "u8" })
      local sb, db = {}, {}
      for i = 0, 99 do sb[#sb + 1] = (i * 37) % nblocks; db[#db + 1] = (i * 61 + 5) % nblocks end
      local up = xfer.batch({ dst = on_dev, src = host_src, src_blocks = sb, dst_blocks = db, block_bytes = block })
      local down = xfer.batch({ dst = back, src = on_dev, src_blocks = db, dst_blocks = sb, block_bytes = block })
      for round = 1, 5 do -- the first run, the one that keeps the table, and runs over it
        host_src:fill(round)
        back:zero()
        up:run()
        down:run()
        blocks_hold(back, sb, block, round)
      end
      assert.are.equal(1, up.at_once)
      for _, t in ipairs({ host_src, on_dev, back }) do t:free() end
    end)
  end)

  it("a prepared batch run after the host memory it reads was unpinned pins it again", function()
    local vk = h.runtime("vulkan")
    if not info.available then return pending("cuda is unavailable here: " .. info.reason) end
    if not vk.available then return pending("vulkan is unavailable here: " .. vk.reason) end
    local cuda, vulkan = xfer.device("cuda:0"), xfer.device("vulkan:0")
    local block, nblocks = 16384, 256
    local host_src = xfer.zeros({ block * nblocks }, { dtype = "u8" })
    local on_vk = xfer.zeros({ block * nblocks }, { dtype = "u8", device = vulkan })
    local sb, db = {}, {}
    for i = 0, 99 do sb[#sb + 1] = (i * 37) % nblocks; db[#db + 1] = (i * 61 + 5) % nblocks end
    -- on one GPU, CUDA's kernel runs it over Vulkan's memory, reading the host's pinned by CUDA
    local up = xfer.batch({ dst = on_vk, src = host_src, src_blocks = sb, dst_blocks = db, block_bytes = block })
    for round = 1, 3 do
      host_src:fill(round)
      up:run()
      blocks_hold(on_vk, db, block, round)
    end
    cuda:close() -- CUDA's registrations of host memory and its imports go with it
    xfer.device("cuda:0") -- and it is open again, pinning nothing yet
    for round = 4, 6 do
      host_src:fill(round)
      up:run()
      blocks_hold(on_vk, db, block, round)
    end
    local probe = xfer.zeros({ 16 }, { dtype = "u8", device = cuda }) -- CUDA still works
    probe:copy_from(xfer.zeros({ 16 }, { dtype = "u8" }))
    for _, t in ipairs({ host_src, on_vk, probe }) do t:free() end
  end)
end)
