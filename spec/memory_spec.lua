-- The caching allocator (src/core/memory.c): blocks are reused, driver calls counted, the
-- cache given back on demand, out-of-memory retried once after emptying it, and the Lua
-- collector told about memory it cannot see.
local xfer = require "xfer"
local h = require "support.helpers"

local MiB = 1024 * 1024

local function caching_pending()
  if not xfer.config().cache then
    pending("caching is off here (XFER_CACHE=0): every allocation reaches the driver")
    return true
  end
end

local function mem(dev) return xfer.memory(dev) end

describe("memory", function()
  local host = xfer.device("host")
  after_each(function() xfer.faults.clear() end)

  it("counts consistently: reserved = allocated + cached, allocated >= in_use", function()
    for _, dev in ipairs(xfer.devices()) do
      local t = xfer.full({ 1000 }, 3, { dtype = "u8", device = dev })
      local m = mem(dev)
      assert.are.equal(m.allocated + m.cached, m.reserved, dev.name)
      assert.is_true(m.allocated >= m.in_use and m.in_use >= 1000, dev.name)
      assert.is_true(m.peak_allocated >= m.allocated and m.peak_reserved >= m.reserved, dev.name)
      assert.is_true(m.buffers >= 1 and m.segments >= 1, dev.name)
      t:free()
    end
  end)

  it("a second to() of the same size makes no driver allocation and moves the right bytes", function()
    if caching_pending() then return end
    for _, dev in ipairs(xfer.devices()) do
      for _, n in ipairs({ 4096, 3 * MiB + 5 }) do
        local bytes = h.random_bytes(n)
        local src = xfer.tensor(bytes, { dtype = "u8" })
        src:to(dev):free() -- the first (cold) move pays for the memory
        src:to(dev):to(host):free()
        local before_dev, before_host = mem(dev), mem(host)
        for _ = 1, 3 do
          local there = src:to(dev)
          local back = there:to(host)
          assert.are.equal(bytes, back:tobytes(), dev.name .. " " .. n)
          there:free()
          back:free()
        end
        assert.are.equal(before_dev.driver_allocs, mem(dev).driver_allocs, dev.name .. " " .. n)
        assert.are.equal(before_host.driver_allocs, mem(host).driver_allocs, dev.name .. " " .. n)
        assert.is_true(mem(dev).cache_hits > before_dev.cache_hits, dev.name)
        src:free()
      end
    end
  end)

  it("carves small blocks from one segment and joins them again when freed", function()
    if caching_pending() then return end
    for _, dev in ipairs(xfer.devices()) do
      h.in_use(dev)
      local a = xfer.empty({ 4096 }, { dtype = "u8", device = dev })
      local segments = mem(dev).segments
      local b = xfer.empty({ 4096 }, { dtype = "u8", device = dev })
      assert.are.equal(segments, mem(dev).segments, dev.name .. ": a second small block, same segment")
      a:free()
      b:free()
      local m = mem(dev)
      assert.are.equal(m.reserved, m.allocated + m.cached)
    end
  end)

  it("with caching off (XFER_CACHE=0, config{cache=false}) makes one driver allocation per tensor", function()
    h.uncached()
    for _, dev in ipairs(xfer.devices()) do
      local before = mem(dev)
      local list = {}
      for i = 1, 5 do list[i] = xfer.empty({ 4096 }, { dtype = "u8", device = dev }) end
      assert.are.equal(before.driver_allocs + 5, mem(dev).driver_allocs, dev.name)
      for i = 1, 5 do list[i]:free() end
      assert.are.equal(before.driver_frees + 5, mem(dev).driver_frees, dev.name)
      -- nothing new is cached (segments live tensors still use keep their free parts)
      assert.is_true(mem(dev).cached <= before.cached, dev.name)
    end
  end)

  it("empty_cache brings reserved back to zero on a device no tensor uses", function()
    for _, dev in ipairs(xfer.devices()) do
      if dev ~= host then
        local t = xfer.empty({ 5 * MiB }, { dtype = "u8", device = dev })
        t:free()
        collectgarbage()
        collectgarbage()
        if mem(dev).allocated == 0 then
          xfer.empty_cache(dev)
          assert.are.equal(0, mem(dev).reserved, dev.name)
          assert.are.equal(0, mem(dev).segments, dev.name)
        end
      end
    end
    xfer.empty_cache()
    local m = mem(host) -- host keeps the segments its live tensors use, and nothing else
    assert.are.equal(m.reserved, m.allocated + m.cached)
  end)

  it("counts the driver objects it holds, and gives them all back with the cache", function()
    local function objects(runtime)
      for _, r in ipairs(xfer.runtimes()) do if r.name == runtime then return r.objects end end
    end
    for _, dev in ipairs(xfer.devices()) do
      if dev ~= host then
        -- every cache: a device's pins of host memory go with the host's segments
        collectgarbage()
        collectgarbage()
        xfer.empty_cache()
        local before, before_runtime = mem(dev).objects, objects(dev.runtime)
        local t = xfer.full({ 3 * MiB }, 1, { dtype = "u8", device = dev })
        assert.is_true(mem(dev).objects > before, dev.name)
        -- the runtime may hold more: a pin of host memory is counted on the device that made it
        -- (CUDA's first device registers host memory for all of them)
        assert.is_true(objects(dev.runtime) - before_runtime >= mem(dev).objects - before, dev.name)
        t:free()
        xfer.empty_cache()
        assert.are.equal(before, mem(dev).objects, dev.name)
        assert.are.equal(before_runtime, objects(dev.runtime), dev.name)
      end
    end
  end)

  it("keeps no more than cache_limit cached on a device", function()
    if caching_pending() then return end
    local saved = xfer.config().cache_limit
    finally(function() xfer.config({ cache_limit = saved }) end)
    for _, dev in ipairs(xfer.devices()) do
      if dev ~= host then
        -- what stays cached now lies in segments that live tensors use too: not given back
        xfer.empty_cache(dev)
        local unreleasable = mem(dev).cached
        xfer.config({ cache_limit = 1 })
        local t = xfer.empty({ 12 * MiB }, { dtype = "u8", device = dev })
        t:free()
        assert.is_true(mem(dev).cached <= math.max(1, unreleasable), dev.name)
        xfer.config({ cache_limit = 0 })
      end
    end
  end)

  it("asks for transparent huge pages for host blocks of 2 MiB and more (XFER_HUGE_PAGES=0: not)", function()
    local f = io.open("/sys/kernel/mm/transparent_hugepage/enabled")
    local thp = f and f:read("*a") or ""
    if f then f:close() end
    if not thp:find("%[madvise%]") then
      return pending("the kernel's transparent huge pages are not 'madvise' here: " .. (thp ~= "" and thp or "none"))
    end
    -- in a process of its own: the AnonHugePages of a fresh 64 MiB host tensor
    local script = [[
      local xfer = require 'xfer'
      local function huge()
        local f = io.open('/proc/self/smaps_rollup'); local text = f:read('*a'); f:close()
        return tonumber(text:match('AnonHugePages:%s+(%d+) kB')) * 1024
      end
      local before = huge()
      local t = xfer.full({ 64 * 1048576 }, 1, { dtype = 'u8' })
      print(('huge %d'):format(huge() - before), t[1])
    ]]
    local function huge_bytes(env)
      local out, code = h.run(("%s%s -e %q"):format(env, h.xferlua(), script))
      assert.are.equal(0, code, out)
      return tonumber(out:match("huge (%d+)")), out
    end
    local on, out_on = huge_bytes("")
    -- most of it: the kernel may leave a page or two small where it could not compact
    assert.is_true(on >= 48 * MiB, out_on)
    local off, out_off = huge_bytes("XFER_HUGE_PAGES=0 ")
    assert.are.equal(0, off, out_off)
  end)

  describe("out of memory", function()
    it("a refused allocation with a full cache empties it and succeeds on the retry, counted", function()
      if caching_pending() then return end
      for _, dev in ipairs(xfer.devices()) do
        xfer.empty({ 12 * MiB }, { dtype = "u8", device = dev }):free() -- a cached segment
        local before = mem(dev)
        assert.is_true(before.cached > 0, dev.name)
        xfer.faults.inject({ runtime = dev.runtime, op = "alloc" })
        local t = xfer.full({ 48 * MiB }, 9, { dtype = "u8", device = dev }) -- more than is cached
        assert.are.same({}, xfer.faults.list(), dev.name .. ": the driver was asked")
        assert.are.equal(before.oom_retries + 1, mem(dev).oom_retries, dev.name)
        assert.is_true(mem(dev).driver_frees > before.driver_frees, dev.name)
        assert.are.equal(9, t:to(host):totable({ flat = true })[48 * MiB])
        t:free()
      end
    end)

    it("a refused allocation with nothing to give back fails with alloc", function()
      for _, dev in ipairs(xfer.devices()) do
        collectgarbage()
        collectgarbage()
        xfer.empty_cache()
        local before = mem(dev)
        xfer.faults.inject({ runtime = dev.runtime, op = "alloc" })
        local e = h.raises("alloc", xfer.empty, { 48 * MiB }, { dtype = "u8", device = dev })
        assert.is_true(e.injected)
        assert.are.equal(before.oom_retries, mem(dev).oom_retries, dev.name)
        assert.are.equal(before.in_use, mem(dev).in_use, dev.name)
      end
    end)

    it("runs the collector: tensors nobody references give their memory back", function()
      for _, dev in ipairs(xfer.devices()) do
        collectgarbage()
        collectgarbage()
        xfer.empty_cache()
        local before = mem(dev)
        do xfer.empty({ 12 * MiB }, { dtype = "u8", device = dev }) end -- garbage, not freed
        xfer.faults.inject({ runtime = dev.runtime, op = "alloc" })
        local t = xfer.empty({ 48 * MiB }, { dtype = "u8", device = dev })
        assert.are.equal(before.oom_retries + 1, mem(dev).oom_retries, dev.name)
        t:free()
      end
    end)
  end)

  it("tells the collector: dropping 64 MiB tensors in a loop holds a few of them at most", function()
    collectgarbage()
    collectgarbage()
    local base = mem(host).in_use
    local peak = 0
    for _ = 1, 40 do -- 2.5 GiB made, none freed by hand
      local t = xfer.empty({ 64 * MiB }, { dtype = "u8" })
      peak = math.max(peak, mem(host).in_use - base)
      assert.is_truthy(t)
    end
    assert.is_true(peak <= 4 * 64 * MiB, ("%d MiB held at most"):format(peak / MiB))
  end)

  it("does not reuse an async move's source block before the move has finished", function()
    if caching_pending() then return end
    for _, dev in ipairs(xfer.devices()) do
      local n = 24 * MiB
      local src = xfer.full({ n }, 5, { dtype = "u8", device = dev })
      local job = src:to_async(host)
      src:free() -- waits for the move
      local hits = mem(dev).cache_hits
      local other = xfer.full({ n }, 6, { dtype = "u8", device = dev }) -- src's block, reused
      assert.is_true(mem(dev).cache_hits > hits, dev.name)
      local moved = job:wait()
      local values = moved:totable({ flat = true })
      assert.are.equal(5, values[1], dev.name)
      assert.are.equal(5, values[n], dev.name)
      other:free()
      moved:free()
    end
  end)

  it("reuses interop blocks with their imports: no new export or import", function()
    local pair
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        local probe = xfer.empty({ 1 }, { dtype = "u8", device = a })
        if not pair and a ~= b and xfer.plan(probe, b).path == "interop" then pair = { a, b } end
      end
    end
    if not pair then
      return pending("no two devices here move by interop (one GPU shared by two runtimes, or " ..
                     "two GPUs CUDA joins)")
    end
    if caching_pending() then return end
    local a, b = pair[1], pair[2]
    local bytes = h.random_bytes(3 * MiB + 7)
    local src = xfer.tensor(bytes, { dtype = "u8", device = a })
    src:to(b):free() -- exports and imports once
    for _, rt in ipairs({ a.runtime, b.runtime, "cuda", "opencl", "vulkan" }) do
      xfer.faults.inject({ runtime = rt, op = "export", count = 100 })
      xfer.faults.inject({ runtime = rt, op = "import", count = 100 })
    end
    local rules = #xfer.faults.list()
    local moved = src:to(b)
    for _, rule in ipairs(xfer.faults.list()) do
      assert.are.equal(100, rule.count, ("%s %s was called moving %s -> %s"):format(
        rule.runtime, rule.op, a.name, b.name))
    end
    assert.are.equal(rules, #xfer.faults.list())
    -- read back with the faults gone: reading to the host may import host pages (Vulkan's
    -- host-pointer import, op "import" too), which is not the move's doing
    xfer.faults.clear()
    assert.are.equal(bytes, moved:tobytes())
  end)
end)
