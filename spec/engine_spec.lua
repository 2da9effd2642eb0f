-- The transfer engine: every pair of devices on every path that applies, the staged
-- pipeline, stats, trace and settings.
local xfer = require "xfer"
local h = require "support.helpers"

local paths = { "same_device", "same_runtime", "interop", "direct", "staged", "host" }

local function pairs_of_devices()
  local list, devs = {}, xfer.devices()
  for _, a in ipairs(devs) do
    for _, b in ipairs(devs) do list[#list + 1] = { a, b } end
  end
  return list
end

-- Two devices besides host, preferring a pair the planner sends through staging.
-- After empty_cache, the staged path makes its chunks again.
local function bytes_after_cache_check(a, b)
  local bytes = h.random_bytes(200 * 1024)
  return xfer.tensor(bytes, { dtype = "u8", device = a }):to(b, { via = "staged" }):tobytes() == bytes
end

local function non_host_pair()
  local devs, first = xfer.devices(), nil
  for i = 2, #devs do
    for j = 2, #devs do
      if i ~= j then
        local t = xfer.empty({ 1 }, { dtype = "u8", device = devs[i] })
        if xfer.plan(t, devs[j]).path == "staged" then return devs[i], devs[j] end
        first = first or { devs[i], devs[j] }
      end
    end
  end
  if first then return first[1], first[2] end
end

describe("transfer engine", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function()
    xfer.faults.clear()
    xfer.config({ staging_chunk = 4 * 1024 * 1024, staging_depth = 3 })
  end)

  describe("every pair of devices", function()
    for _, pair in ipairs(pairs_of_devices()) do
      local a, b = pair[1], pair[2]
      it(("%s -> %s on every path that applies, byte for byte"):format(a.name, b.name), function()
        local bytes = h.random_bytes(256 * 1024 + 13)
        local src = xfer.tensor(bytes, { dtype = "u8", device = a })
        local default = xfer.plan(src, b).path
        local ran = 0
        for _, path in ipairs(paths) do
          local ok, plan = pcall(xfer.plan, src, b, { via = path })
          if ok then
            assert.are.equal(path, plan.path)
            assert.is_true(#plan.reason > 0 and #plan.steps > 0)
            local moved = src:to(b, { via = path })
            assert.are.equal(bytes, moved:tobytes(), path)
            local dst = xfer.empty({ #bytes }, { dtype = "u8", device = b })
            assert.are.equal(bytes, dst:copy_from(src, { via = path }):tobytes(), path)
            ran = ran + 1
          else
            assert.are.equal("unsupported", plan.code, tostring(plan))
            h.raises("unsupported", src.to, src, b, { via = path })
          end
        end
        assert.is_true(ran >= 1)
        -- the default is the first path of the order that applies
        for _, path in ipairs(paths) do
          if pcall(xfer.plan, src, b, { via = path }) then
            assert.are.equal(path, default)
            break
          end
        end
      end)
    end
  end)

  describe("the staged path", function()
    local a, b = non_host_pair()

    local function needs_pair()
      if not a then pending("one device here besides host: staged moves need two") end
      return a ~= nil
    end

    it("is the default between devices that share no memory, and says so", function()
      if not needs_pair() then return end
      local t = xfer.zeros({ 1024 }, { device = a })
      local plan = xfer.plan(t, b)
      if plan.path ~= "staged" then return pending(a.name .. " and " .. b.name .. " take " .. plan.path) end
      assert.are.equal(("%s and %s share no memory: pipelined through 1 host chunk of 4096 bytes"):format(
        a.name, b.name), plan.reason)
      -- chunks are sized to the move: never more than the move needs, nor than the settings
      local big = xfer.empty({ 5 * 1024 * 1024 }, { dtype = "u8", device = a })
      assert.are.equal(("%s and %s share no memory: pipelined through 2 host chunks of 4194304 bytes"):format(
        a.name, b.name), xfer.plan(big, b).reason)
      local huge = xfer.empty({ 64 * 1024 * 1024 }, { dtype = "u8", device = a })
      assert.are.equal(("%s and %s share no memory: pipelined through 3 host chunks of 4194304 bytes"):format(
        a.name, b.name), xfer.plan(huge, b).reason)
    end)

    it("moves many chunks byte for byte both ways, with the settings it is given", function()
      if not needs_pair() then return end
      local want = h.default_config()
      want.staging_chunk = 65536
      assert.are.same(want, xfer.config({ staging_chunk = 65536, staging_depth = 3 }))
      for _, n in ipairs({ 1, 65536, 65537, 3 * 65536 + 5, 2 * 1024 * 1024 + 7 }) do
        local bytes = h.random_bytes(n)
        local t = xfer.tensor(bytes, { dtype = "u8", device = a })
        local there = t:to(b, { via = "staged" })
        assert.are.equal(bytes, there:tobytes(), n .. " bytes")
        assert.are.equal(bytes, there:to(a, { via = "staged" }):tobytes(), n .. " bytes back")
      end
      -- the chunks went back to the host pool, which keeps them (unless caching is off)
      collectgarbage()
      collectgarbage()
      local host = xfer.memory("host")
      assert.are.equal(host.reserved - host.allocated, host.cached)
      if xfer.config().cache then assert.is_true(host.cached >= 3 * 65536) end
      xfer.empty_cache() -- every segment no block uses goes back
      local after = xfer.memory("host")
      assert.is_true(after.segments < host.segments or host.cached == 0)
      assert.are.equal(after.reserved - after.allocated, after.cached)
      assert.is_true(bytes_after_cache_check(a, b))
    end)

    for _, case in ipairs({ { op = "read", code = "read", side = "src", nth = 3 },
                            { op = "write", code = "write", side = "dst", nth = 2 } }) do
      it(("a %s fault in chunk %d: raised, source intact, nothing left allocated"):format(case.op, case.nth), function()
        if not needs_pair() then return end
        xfer.config({ staging_chunk = 65536, staging_depth = 2 })
        local bytes = h.random_bytes(8 * 65536 + 3)
        local t = xfer.tensor(bytes, { dtype = "u8", device = a })
        local before_a, before_b, before_host = h.in_use(a), h.in_use(b), h.in_use(xfer.device("host"))
        local dev = case.side == "src" and a or b
        xfer.faults.inject({ runtime = dev.runtime, op = case.op, nth = case.nth })
        local e = h.raises(case.code, t.to, t, b, { via = "staged" })
        assert.are.equal(case.op, e.op)
        assert.are.equal(a.name, e.from)
        assert.are.equal(b.name, e.to)
        if case.op == "read" then
          local want = ("Failed to read a tensor off %s on the way to %s: "):format(a.name, b.name)
          assert.are.equal(want, e.message:sub(1, #want))
        end
        assert.are.equal(bytes, t:tobytes())
        assert.are.equal(before_a, h.in_use(a))
        assert.are.equal(before_b, h.in_use(b))
        assert.are.equal(before_host, h.in_use(xfer.device("host")))
        assert.are.equal(bytes, t:to(b, { via = "staged" }):tobytes())
      end)
    end
  end)

  -- Chunks of 1 MiB and more are queued where the runtime can (imported or pinned host
  -- chunks, non-blocking OpenCL moves): each side starts its next chunk before it waits
  -- for the last, and every failure, at the start of a move or in the wait for it, ends
  -- the move cleanly.
  describe("the staged pipeline with queued chunks #staged", function()
    local MiB = 1024 * 1024
    for _, pair in ipairs(pairs_of_devices()) do
      local a, b = pair[1], pair[2]
      if a.name ~= "host" and b.name ~= "host" and a.name ~= b.name then
        it(("%s -> %s in 1 MiB chunks, three at a time, byte for byte"):format(a.name, b.name), function()
          xfer.config({ staging_chunk = MiB, staging_depth = 3 })
          for _, n in ipairs({ 2 * MiB, 7 * MiB + 5 }) do
            local bytes = h.random_bytes(n)
            local t = xfer.tensor(bytes, { dtype = "u8", device = a })
            assert.are.equal(bytes, t:to(b, { via = "staged" }):tobytes(), n .. " bytes")
            local dst = xfer.empty({ n }, { dtype = "u8", device = b })
            assert.are.equal(bytes, dst:copy_from(t, { via = "staged" }):tobytes(), n .. " bytes")
          end
        end)
        for _, case in ipairs({ { op = "read", dev = a }, { op = "write", dev = b } }) do
          it(("%s -> %s: a %s fault in any of the first calls is raised, nothing lost"):format(
            a.name, b.name, case.op), function()
            xfer.config({ staging_chunk = MiB, staging_depth = 3 })
            local bytes = h.random_bytes(7 * MiB + 5)
            local t = xfer.tensor(bytes, { dtype = "u8", device = a })
            local before_a, before_b = h.in_use(a), h.in_use(b)
            local before_host = h.in_use(xfer.device("host"))
            -- every runtime makes at least one call of the op per chunk: seven chunks
            for _, nth in ipairs({ 1, 2, 3, 5, 7 }) do
              xfer.faults.clear()
              xfer.faults.inject({ runtime = case.dev.runtime, op = case.op, nth = nth })
              local e = h.raises(case.op, t.to, t, b, { via = "staged" })
              assert.are.equal(case.op, e.op, "nth " .. nth)
              assert.are.equal(a.name, e.from)
              assert.are.equal(b.name, e.to)
              assert.is_true(e.injected, "nth " .. nth)
              assert.are.equal(bytes, t:tobytes())
              assert.are.equal(before_a, h.in_use(a))
              assert.are.equal(before_b, h.in_use(b))
              assert.are.equal(before_host, h.in_use(xfer.device("host")))
            end
            xfer.faults.clear()
            assert.are.equal(bytes, t:to(b, { via = "staged" }):tobytes())
          end)
        end
      end
    end
  end)

  describe("stats and trace", function()
    it("count moves per path and pair of devices", function()
      xfer.stats_reset()
      assert.are.same({}, xfer.stats())
      local t = xfer.arange(256, { dtype = "f64" })
      t:to("host")
      t:to("host")
      t:to("host", { via = "host" })
      local stats = xfer.stats()
      table.sort(stats, function(x, y) return x.path > y.path end)
      assert.are.equal(2, #stats)
      assert.are.equal("same_device", stats[1].path)
      assert.are.equal("host", stats[1].from)
      assert.are.equal("host", stats[1].to)
      assert.are.equal(2, stats[1].count)
      assert.are.equal(4096, stats[1].bytes)
      assert.is_true(stats[1].seconds >= 0)
      assert.are.equal("host", stats[2].path)
      assert.are.equal(1, stats[2].count)
      xfer.stats_reset()
      assert.are.same({}, xfer.stats())
    end)

    it("failed moves are not counted", function()
      xfer.stats_reset()
      xfer.faults.inject({ runtime = "host", op = "copy" })
      pcall(xfer.arange(4).clone, xfer.arange(4))
      assert.are.same({}, xfer.stats())
    end)

    it("trace prints one line per move, from XFER_TRACE=1 or xfer.trace(true)", function()
      local line = "^xfer: host %-> host  same_device  +32 bytes  [%d.]+ ms  [%d.]+ GB/s\n$"
      local out = h.run("XFER_TRACE=1 " .. h.xferlua() .. [[ -e 'require("xfer").arange(8):clone()' ]])
      assert.is_truthy(out:match(line), out)
      out = h.run(h.xferlua() .. [[ -e 'local x = require("xfer"); x.trace(true); x.arange(8):clone(); x.trace(false); x.arange(8):clone()' ]])
      assert.is_truthy(out:match(line), out)
    end)
  end)

  describe("settings", function()
    it("has defaults of 4 MiB chunks, three in flight", function()
      assert.are.same(h.default_config(), xfer.config())
    end)

    it("refuses what cannot work", function()
      local cases = {
        { { staging_chunk = 100 }, "staging_chunk must be 4096 to 1073741824 bytes, not 100" },
        { { staging_depth = 1 }, "staging_depth must be 2 to 16, not 1" },
        { { staging_depth = 2.5 }, "config: 'staging_depth' must be a whole number" },
        { { chunk = 4096 }, "config: unknown option 'chunk' (known: staging_chunk, staging_depth, cache, cache_limit, setaside_after, remote_timeout, remote_chunk, remote_depth, remote_device_chunk, verify, timeout)" },
        { { cache = 0 }, "config: 'cache' must be a boolean, not number" },
        { { cache_limit = -1 }, "config: 'cache_limit' must be a whole number" },
      }
      for _, case in ipairs(cases) do
        local e = h.raises("invalid", xfer.config, case[1])
        assert.are.equal(case[2], e.message)
      end
      assert.are.same(h.default_config(), xfer.config())
    end)
  end)
end)
