-- Progress: to/copy_from call a callback at the start, after each staged chunk and at the
-- end (done rising to total); a callback that raises stops the move, nothing left behind;
-- jobs tell theirs with job:progress().
local xfer = require "xfer"
local h = require "support.helpers"

describe("progress", function()
  local saved
  before_each(function() saved = xfer.config().staging_chunk end)
  after_each(function() xfer.config({ staging_chunk = saved }) end)

  it("is called monotonically from 0 to total on every pair, per chunk on the staged path", function()
    xfer.config({ staging_chunk = 65536 })
    local n = 300000 * 4
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        local t = xfer.zeros({ 300000 }, { device = a })
        local calls = {}
        local moved = t:to(b, { progress = function(done, total) calls[#calls + 1] = { done, total } end })
        assert.are.equal(t:tobytes(), moved:tobytes())
        local where = a.name .. " -> " .. b.name
        assert.is_true(#calls >= 2, where)
        assert.are.same({ 0, n }, calls[1], where)
        assert.are.same({ n, n }, calls[#calls], where)
        for i = 2, #calls do
          assert.is_true(calls[i][1] >= calls[i - 1][1], where)
          assert.are.equal(n, calls[i][2], where)
        end
        if xfer.plan(t, b).path == "staged" then
          assert.is_true(#calls >= math.ceil(n / 65536), where .. ": a call per chunk")
        end
        local dst = xfer.empty({ 300000 }, { device = b })
        local count = 0
        dst:copy_from(t, { progress = function() count = count + 1 end })
        assert.is_true(count >= 2, where .. " (copy_from)")
      end
    end
  end)

  -- every path, not only staged: a long move says how far it is in steps (16 MiB through the
  -- host, 256 MiB within a device, between devices of a runtime and by interop)
  it("tells a long move's steps on every path, not only the staged one", function()
    local n = 600 * 1024 * 1024
    local function steps(t, b, via)
      local calls = {}
      local moved = t:to(b, { via = via, progress = function(done, total) calls[#calls + 1] = done end })
      moved:free()
      return calls
    end
    local t = xfer.zeros({ n }, { dtype = "u8" })
    -- the host round trip between two devices: 600 MiB in 16 MiB steps (37), the start and the end
    local devs = xfer.devices()
    local a, b = devs[2], devs[#devs]
    if a and b and a ~= b then
      local there = t:to(a)
      local calls = steps(there, b, "host")
      assert.is_true(#calls >= 38, a.name .. " -> " .. b.name .. " by host: " .. #calls .. " calls")
      assert.are.equal(16 * 1024 * 1024, calls[2])
      there:free()
    end
    -- and a move of tens of MiB through the host, from and to host memory: told on its way
    -- (it said only 0 and the total with 64 MiB steps)
    local mid = xfer.zeros({ 40 * 1024 * 1024 }, { dtype = "u8" })
    for _, dev in ipairs(devs) do
      if dev.runtime ~= "host" and xfer.plan(mid, dev).path == "host" then
        local there = mid:to(dev)
        for _, calls in ipairs({ steps(mid, dev), steps(there, devs[1]) }) do
          assert.are.same({ 0, 16 * 1024 * 1024, 32 * 1024 * 1024, 40 * 1024 * 1024 }, calls, dev.name)
        end
        there:free()
      end
    end
    mid:free()
    -- interop's one copy (one GPU's runtimes: the GPU machine), in 256 MiB steps
    for _, x in ipairs(devs) do
      for _, y in ipairs(devs) do
        if x ~= y and x.runtime ~= "host" then
          local there = t:to(x)
          -- where the planner would take interop for this size (not past an importer's limit)
          if xfer.plan(there, y).path == "interop" then
            local c = steps(there, y, "interop")
            assert.is_true(#c >= 4, x.name .. " -> " .. y.name .. " by interop: " .. #c .. " calls")
          end
          there:free()
        end
      end
    end
    -- a device's own copy (the host's here): 256 MiB steps
    local calls = steps(t, "host", "same_device")
    assert.are.same({ 0, 256 * 1024 * 1024, 512 * 1024 * 1024, n }, calls)
    -- a stop between steps ends the move there
    local e = h.raises("invalid", t.to, t, "host", { via = "same_device",
                                                     progress = function(done) if done >= 256 * 1024 * 1024 then error("half") end end })
    assert.is_truthy(e.message:find("at 268435456 of 629145600 bytes", 1, true), e.message)
    t:free()
  end)

  it("stops the move when the callback raises, with its error, and nothing left behind", function()
    xfer.config({ staging_chunk = 65536 })
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        local t = xfer.zeros({ 300000 }, { device = a })
        collectgarbage()
        collectgarbage()
        local before = xfer.memory(b).in_use
        local e = h.raises("invalid", t.to, t, b, { progress = function(done) if done > 0 then error("enough") end end })
        assert.are.equal("progress", e.op)
        assert.is_truthy(e.message:match("^Stopped a move of 1200000 bytes from " .. a.name:gsub("%p", "%%%0") ..
                                         " to " .. b.name:gsub("%p", "%%%0") .. ": the move was stopped by its " ..
                                         "progress callback at %d+ of 1200000 bytes: .*enough$"), e.message)
        collectgarbage()
        collectgarbage()
        assert.are.equal(before, xfer.memory(b).in_use, a.name .. " -> " .. b.name)
      end
    end
  end)

  it("a job tells its progress", function()
    for _, dev in ipairs(xfer.devices()) do
      local t = xfer.zeros({ 1000 }, { device = dev })
      local job = t:to_async(dev)
      local done, total = job:progress()
      assert.are.equal(4000, total)
      assert.is_true(done >= 0 and done <= total)
      job:wait()
      assert.are.same({ 4000, 4000 }, { job:progress() })
    end
  end)

  h.each_invalid({
    { "a progress that is no function", function() return xfer.arange(2):to("host", { progress = 1 }) end,
      "to: option 'progress' must be a function" },
    { "a progress callback on to_async", function() return xfer.arange(2):to_async("host", { progress = print }) end,
      "to_async: a progress callback is for to and copy_from (a job tells its progress: job:progress())" },
  })
end)
