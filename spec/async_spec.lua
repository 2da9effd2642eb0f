-- Asynchronous transfers: t:to_async(dev), :wait(), :done(), xfer.wait_all.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("asynchronous transfers", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function() xfer.faults.clear() end)

  it("returns a handle at once and the tensor on wait", function()
    local bytes = h.random_bytes(2 * 1024 * 1024 + 1)
    local t = xfer.tensor(bytes, { dtype = "u8" })
    local job = t:to_async(host)
    assert.is_truthy(tostring(job):match("^xfer%.Transfer%((%a+)%)$"))
    local moved = job:wait()
    assert.is_true(job:done())
    assert.are.equal("xfer.Transfer(done)", tostring(job))
    assert.are.equal(bytes, moved:tobytes())
    assert.are.equal(bytes, job:wait():tobytes()) -- again: the same result
  end)

  it("synchronize waits for moves whose jobs were dropped unwaited; then their memory is back", function()
    for _, dev in ipairs(xfer.devices()) do
      local src = xfer.tensor(h.random_bytes(3 * 1024 * 1024 + 5), { dtype = "u8" })
      collectgarbage()
      collectgarbage()
      xfer.synchronize()
      local before = xfer.memory(dev).in_use
      for _ = 1, 4 do src:to_async(dev) end -- the jobs are garbage at once
      collectgarbage()
      collectgarbage() -- their __gc detaches them: the moves run on
      xfer.synchronize()
      assert.are.equal(before, xfer.memory(dev).in_use, dev.name)
      src:free()
    end
  end)

  it("runs many at once between every pair of devices, byte for byte", function()
    local jobs, expected = {}, {}
    local devs = xfer.devices()
    for round = 1, 3 do
      for _, a in ipairs(devs) do
        for _, b in ipairs(devs) do
          local bytes = h.random_bytes(300 * 1024 + round)
          local src = xfer.tensor(bytes, { dtype = "u8", device = a })
          jobs[#jobs + 1] = src:to_async(b)
          expected[#expected + 1] = { bytes = bytes, device = b }
        end
      end
    end
    local results = xfer.wait_all(jobs)
    assert.are.equal(#jobs, #results)
    for i, t in ipairs(results) do
      assert.are.equal(expected[i].device, t.device)
      assert.are.equal(expected[i].bytes, t:tobytes(), "job " .. i)
    end
  end)

  it("raises the move's error on wait, and wait_all raises the first after waiting for all", function()
    h.no_setaside() -- the same path fails again on purpose
    local t = xfer.arange(1024)
    local before = h.in_use(host)
    xfer.faults.inject({ runtime = "host", op = "copy" })
    local job = t:to_async(host)
    local e = h.raises("write", job.wait, job)
    assert.are.equal("copy", e.op)
    assert.are.equal("Failed to copy a tensor from host to host: EIO (5): Input/output error [injected fault]", e.message)
    h.raises("write", job.wait, job) -- the same error again
    -- one of three moves running at once fails (which one is up to the scheduler)
    xfer.faults.inject({ runtime = "host", op = "copy", nth = 2 })
    local jobs = { t:to_async(host), t:to_async(host), t:to_async(host) }
    h.raises("write", xfer.wait_all, jobs)
    local failed = 0
    for _, j in ipairs(jobs) do
      assert.is_true(j:done())
      local ok, moved = pcall(j.wait, j)
      if ok then
        assert.are.same(t:totable(), moved:totable())
      else
        failed = failed + 1
        assert.are.equal("write", moved.code)
      end
    end
    assert.are.equal(1, failed)
    assert.are.same(t:totable(), xfer.arange(1024):totable())
    jobs, job = nil, nil
    assert.are.equal(before, h.in_use(host))
  end)

  it("freeing the source waits for a move that uses it, even one just started", function()
    local bytes = h.random_bytes(4 * 1024 * 1024 + 3)
    for _, dev in ipairs(xfer.devices()) do
      for _ = 1, 5 do
        local t = xfer.tensor(bytes, { dtype = "u8" })
        local job = t:to_async(dev)
        t:free() -- the source is busy from to_async on: free waits, the move completes
        local moved = job:wait()
        assert.are.equal(bytes, moved:tobytes(), dev.name)
        assert.is_true(t.freed)
      end
    end
  end)

  it("refuses what is not a device or a transfer", function()
    local t = xfer.arange(4)
    h.raises("invalid", t.to_async, t, 3)
    h.raises("freed", function() local u = xfer.arange(2); u:free(); return u:to_async(host) end)
    local e = h.raises("invalid", xfer.wait_all, { t })
    assert.are.equal("wait_all: element 1 is a userdata, not an xfer.Transfer", e.message)
  end)
end)

describe("async threads", function()
  -- the moves run on a pool's few threads, made once and reused, not a thread a move (50
  -- moves started at once made 46-57 threads)
  it("50 moves started at once run on a few threads, made once and reused", function()
    local function threads()
      local f = io.open("/proc/self/status")
      if not f then return nil end
      local n = tonumber(f:read("*a"):match("Threads:%s*(%d+)"))
      f:close()
      return n
    end
    if not threads() then return pending("no /proc/self/status here") end
    local t = xfer.zeros({ 1048576 })
    for _, d in ipairs(xfer.devices()) do t:to(d):to("host") end -- the drivers' own threads made first
    local before = threads()
    local peaks = {}
    for round = 1, 2 do
      local jobs, peak = {}, 0
      for i = 1, 50 do
        jobs[i] = t:to_async(xfer.devices()[1 + i % #xfer.devices()])
        peak = math.max(peak, threads() - before)
      end
      for i = 1, 50 do assert.is_true(jobs[i]:wait():equals(t)) end
      peaks[round] = math.max(peak, threads() - before)
    end
    assert.is_true(peaks[1] <= 16, peaks[1] .. " threads for 50 moves") -- 8 jobs, a helper each at most
    assert.is_true(peaks[2] <= 16, peaks[2] .. " threads after 100 moves") -- reused, not more
  end)
end)
