-- The interop path: runtimes on one physical GPU move tensors with device copies only.
-- Pending where no two runtimes share a GPU (CI); run on the GPU machine.
local xfer = require "xfer"
local h = require "support.helpers"

local function interop_pairs()
  local list = {}
  for _, a in ipairs(xfer.devices()) do
    for _, b in ipairs(xfer.devices()) do
      local t = xfer.empty({ 4 }, { dtype = "u8", device = a })
      if pcall(xfer.plan, t, b, { via = "interop" }) then list[#list + 1] = { a, b } end
      t:free()
    end
  end
  return list
end

local function open_fds()
  local p = io.popen("ls /proc/" .. (os.getenv("XFER_PID") or "self") .. "/fd 2>/dev/null | wc -l")
  local n = tonumber(p:read("*a"))
  p:close()
  return n
end

local pairs_here = interop_pairs()

describe("interop #cuda #vulkan #opencl", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function() xfer.faults.clear() end)

  if #pairs_here == 0 then
    it("is pending", function()
      pending("no two runtimes share a GPU here, and no two GPUs are joined by CUDA with Vulkan's memory exported to it")
    end)
    return
  end

  for _, pair in ipairs(pairs_here) do
    local a, b = pair[1], pair[2]
    describe(a.name .. " -> " .. b.name, function()
      it("is the default path, and moves byte for byte", function()
        for _, n in ipairs({ 1, 4096 + 3, 3 * 1024 * 1024 + 1, 64 * 1024 * 1024 }) do
          local bytes = h.random_bytes(math.min(n, 1024 * 1024))
          bytes = bytes:rep(math.ceil(n / #bytes)):sub(1, n)
          local src = xfer.tensor(bytes, { dtype = "u8", device = a })
          local plan = xfer.plan(src, b)
          assert.are.equal("interop", plan.path)
          if a.uuid ~= b.uuid then -- two GPUs: one peer copy between imported views
            assert.is_truthy(plan.reason:find("are two GPUs that cuda joins", 1, true), plan.reason)
            assert.is_truthy(plan.steps[#plan.steps]:find("^peer copy of"), plan.steps[#plan.steps])
          end
          local moved = src:to(b)
          assert.are.equal(bytes, moved:tobytes(), n .. " bytes")
          local again = xfer.empty({ n }, { dtype = "u8", device = b })
          assert.are.equal(bytes, again:copy_from(src):tobytes(), n .. " bytes, copy_from")
          assert.are.equal(bytes, moved:to(a, { via = "interop" }):tobytes(), n .. " bytes back")
        end
      end)

      it("a batch of blocks moves byte for byte, the importer running it at once over the import", function()
        local made = h.scattered_batch(a, b, 16384, 128, 60)
        local batch, src, dst, seed = made.batch, made.src, made.dst, made.seed
        batch:run()
        assert.is_nil(made.check(dst:tobytes()))
        -- CUDA and Vulkan on one GPU: Vulkan exports, CUDA imports and runs its kernel over both
        local one_gpu = a.uuid == b.uuid
        local pair = a.runtime .. "," .. b.runtime
        if one_gpu and (pair == "cuda,vulkan" or pair == "vulkan,cuda") then
          assert.are.equal(1, batch.at_once, a.name .. " -> " .. b.name)
          xfer.faults.inject({ runtime = "cuda", op = "copy" })
          local ok, e = pcall(batch.run, batch)
          xfer.faults.clear()
          assert.is_false(ok)
          assert.is_true(xfer.is_error(e), tostring(e))
          assert.is_true(e.injected)
          assert.are.equal(1, e.element)
          assert.are.equal(a.name, e.from)
          assert.are.equal(b.name, e.to)
          batch:run()
        end
        assert.are.equal(seed, src:tobytes(), "the source is untouched")
        batch:release()
        src:free()
        dst:free()
      end)

      for _, phase in ipairs({ { rt = a.runtime, op = "export" }, { rt = b.runtime, op = "export" },
                               { rt = a.runtime, op = "import" }, { rt = b.runtime, op = "import" },
                               { rt = "cuda", op = "import" }, { rt = "cuda", op = "map" },
                               { rt = a.runtime, op = "copy" }, { rt = b.runtime, op = "copy" },
                               { rt = "cuda", op = "copy" }, { rt = "cuda", op = "alloc" },
                               { rt = "cuda", op = "peer" }, { rt = "opencl", op = "sync" } }) do
        it(("a %s fault in %s: raised with its phase, source intact, nothing leaked"):format(phase.op, phase.rt), function()
          local bytes = h.random_bytes(1024 * 1024 + 5)
          -- nothing cached: every phase (export, import, alloc) is on the way
          h.uncached()
          local fds = open_fds()
          local before_a, before_b = h.in_use(a), h.in_use(b)
          do
            local src = xfer.tensor(bytes, { dtype = "u8", device = a })
            xfer.faults.inject({ runtime = phase.rt, op = phase.op })
            local ok, e = pcall(src.to, src, b, { via = "interop" })
            local hit = #xfer.faults.list() == 0
            xfer.faults.clear()
            if hit then
              assert.is_false(ok, "the fault was hit but the move succeeded")
              assert.is_true(xfer.is_error(e), tostring(e))
              assert.are.equal(phase.op, e.op, e.message)
              assert.are.equal(a.name, e.from)
              assert.are.equal(b.name, e.to)
              assert.is_true(e.injected)
            else
              assert.is_true(ok, tostring(e)) -- that phase is not on this pair's way
              e:free() -- (a dead local may keep it from the collector: seen under compute-sanitizer)
            end
            assert.are.equal(bytes, src:tobytes())
            local back = src:to(b)
            assert.are.equal(bytes, back:tobytes())
            back:free()
            src:free()
          end
          collectgarbage()
          collectgarbage()
          assert.are.equal(before_a, h.in_use(a))
          assert.are.equal(before_b, h.in_use(b))
          xfer.empty_cache() -- cached segments keep their imports (and fds) until they go back
          assert.are.equal(fds, open_fds(), "file descriptors leaked")
        end)
      end
    end)
  end
end)

-- A device whose driver imports only buffers up to a size (max_import: NVIDIA's OpenCL, which
-- crashes importing 512 MiB): larger tensors there are the driver's own and move by staging;
-- smaller ones still share memory, also after a large one's memory went back to the cache.
describe("interop beyond a driver's largest import #opencl", function()
  local limited
  for _, dev in ipairs(xfer.devices()) do
    if dev.max_import and not limited then limited = dev end
  end
  if not limited then
    it("is pending", function() pending("no device here limits its imports (NVIDIA's OpenCL does)") end)
    return
  end
  it("moves a larger tensor by staging, and smaller ones by interop after it", function()
    local other
    for _, p in ipairs(pairs_here) do
      if p[2] == limited and p[1].runtime ~= limited.runtime then other = p[1] end
    end
    if not other then return pending("no device shares memory with " .. limited.name) end
    local n = limited.max_import + 2 * 1024 * 1024 -- a segment just past the limit
    -- every device to and from it, both call styles (the bench crashed here before)
    local pattern = xfer.arange(n / 4, { dtype = "u32" })
    for _, dev in ipairs(xfer.devices()) do
      if dev ~= limited then
        local src = pattern:to(dev)
        local there = src:to(limited)
        assert.is_true(there:equals(pattern), dev.name .. " -> " .. limited.name)
        local into = xfer.zeros({ n / 4 }, { dtype = "u32", device = dev })
        into:copy_from(there)
        assert.is_true(into:equals(pattern), limited.name .. " -> " .. dev.name)
        src:free(); there:free(); into:free()
      end
    end
    pattern:free()
    local big = xfer.full({ n }, 7, { dtype = "u8", device = other })
    assert.are.equal("staged", xfer.plan(big, limited).path)
    local e = h.raises("unsupported", xfer.plan, big, limited, { via = "interop" })
    assert.is_truthy(e.message:find("would import a buffer of more than", 1, true), e.message)
    local there = big:to(limited)
    assert.is_true(there:equals(big))
    there:free()
    big:free() -- its memory stays cached on both devices
    local small = xfer.arange(256 * 1024, { dtype = "u32", device = other }) -- 1 MiB
    assert.are.equal("interop", xfer.plan(small, limited).path)
    local moved = small:to(limited) -- a block of backing memory, not of the cached large buffer
    assert.are.equal(small:tobytes(), moved:tobytes())
    local back = xfer.zeros({ 256 * 1024 }, { dtype = "u32", device = other })
    back:copy_from(moved)
    assert.is_true(back:equals(small))
    xfer.empty_cache()
  end)
end)
