-- A planner that knows sizes: measured figures (xfer.set_cost, xfer.calibrate, the self-test)
-- make the default choice by size; xfer.plan shows each path's estimate; the figures live in
-- a plan cache file that a new process reads (XFER_PLAN_CACHE).
local xfer = require "xfer"
local h = require "support.helpers"

-- A pair of devices that more than one path moves between, with those paths in the planner's
-- order (the first is the default without figures).
local function a_pair()
  for _, a in ipairs(xfer.devices()) do
    for _, b in ipairs(xfer.devices()) do
      local probe = xfer.empty({ 1 }, { dtype = "u8", device = a })
      local estimates = xfer.plan(probe, b).estimates
      if #estimates >= 2 then
        local paths = {}
        for i, e in ipairs(estimates) do paths[i] = e.path end
        return a, b, paths
      end
    end
  end
end

local function temp_file()
  local name = os.tmpname()
  os.remove(name)
  return name
end

local function read(file)
  local f = assert(io.open(file))
  local text = f:read("*a")
  f:close()
  return text
end

describe("the planner's costs", function()
  before_each(function() xfer.forget_costs() end)
  after_each(function() xfer.forget_costs() end)

  it("reads estimates off measured times (between two sizes, and past the largest at its rate)", function()
    local a, b, paths = a_pair()
    if not a then return pending("no two devices here move by more than one path") end
    -- 10 us at 1 KiB, 20 us at 1 MiB (cache), 2 ms at 8 MiB (memory)
    xfer.set_cost(a, b, paths[2], { { 1024, 1e-5 }, { 1048576, 2e-5 }, { 8388608, 2e-3 } })
    local function estimate(n)
      local t = xfer.empty({ n }, { dtype = "u8", device = a })
      local e = xfer.plan(t, b).estimates[2]
      t:free()
      assert.is_true(e.measured)
      return e.seconds
    end
    local function near(x, y) return math.abs(x - y) < 1e-12 end
    assert.is_true(near(1e-5, estimate(16)))                          -- below the smallest: its time
    assert.is_true(near(2e-5, estimate(1048576)))                     -- a measured size: its time
    assert.is_true(near(2e-5 + 0.5 * (2e-3 - 2e-5), estimate(4718592))) -- halfway between 1 and 8 MiB
    local rate = (8388608 - 1048576) / (2e-3 - 2e-5)
    assert.is_true(near(2e-3 + 8388608 / rate, estimate(16777216)))   -- past it, at the last rate
    local c = xfer.costs()[1]
    assert.are.same({ { 1024, 1e-5 }, { 1048576, 2e-5 }, { 8388608, 2e-3 } }, c.points)
    assert.is_true(math.abs(c.bandwidth - rate) < 1e-3)
    -- kept in the cache file, points and all
    local file = os.tmpname()
    xfer.save_costs(file)
    xfer.forget_costs()
    xfer.load_costs(file)
    os.remove(file)
    assert.are.same({ { 1024, 1e-5 }, { 1048576, 2e-5 }, { 8388608, 2e-3 } }, xfer.costs()[1].points)
    h.raises("invalid", xfer.set_cost, a, b, paths[2], { { 1024, 1e-5 } })
    h.raises("invalid", xfer.set_cost, a, b, paths[2], { { 2048, 1e-5 }, { 1024, 2e-5 } })
    h.raises("invalid", xfer.set_cost, a, b, paths[2], { { 1024, 1e-5 }, { 2048, "x" } })
    xfer.forget_costs()
  end)

  it("shows each path that applies in plan, with an estimate where it has a figure", function()
    local a, b, paths = a_pair()
    if not a then return pending("no two devices here move by more than one path") end
    local t = xfer.zeros({ 1024 }, { dtype = "u8", device = a })
    local plan = xfer.plan(t, b)
    assert.are.equal(paths[1], plan.path)
    for i, e in ipairs(plan.estimates) do
      assert.are.same({ path = paths[i], measured = false }, e)
    end
    xfer.set_cost(a, b, paths[2], 1e-5, 2e9)
    local e = xfer.plan(t, b).estimates[2]
    assert.are.equal(paths[2], e.path)
    assert.is_true(e.measured)
    assert.is_true(math.abs(e.seconds - (1e-5 + 1024 / 2e9)) < 1e-12)
    assert.are.same({ { from = a.name, to = b.name, path = paths[2], latency = 1e-5, bandwidth = 2e9 } },
                    (function()
                      local c = xfer.costs()[1]
                      return { { from = c.from, to = c.to, path = c.path, latency = c.latency, bandwidth = c.bandwidth } }
                    end)())
    xfer.forget_costs()
    assert.are.same({}, xfer.costs())
  end)

  it("chooses by size where the figures say another path is clearly faster", function()
    local a, b, paths = a_pair()
    if not a then return pending("no two devices here move by more than one path") end
    local first, other = paths[1], paths[2]
    -- the first path: slow to start, fast; the other: quick to start, slow
    xfer.set_cost(a, b, first, 1e-3, 1e12)
    xfer.set_cost(a, b, other, 1e-6, 1e8)
    local small = xfer.zeros({ 4096 }, { dtype = "u8", device = a })
    local large = xfer.zeros({ 1024 * 1024 }, { dtype = "u8", device = a })
    assert.are.equal(other, xfer.plan(small, b).path)
    assert.are.equal(first, xfer.plan(large, b).path)
    -- and the moves go so, bytes right
    xfer.stats_reset()
    assert.are.equal(small:tobytes(), small:to(b):tobytes())
    assert.are.equal(other, xfer.stats()[1].path)
    -- a forced via is not the planner's to change
    xfer.stats_reset()
    small:to(b, { via = first })
    assert.are.equal(first, xfer.stats()[1].path)
    -- within 5% of each other: the order stays (noise never flips a choice); 7% apart, not
    xfer.set_cost(a, b, first, 1e-5, 1e12)
    xfer.set_cost(a, b, other, 0.97e-5, 1e12)
    assert.are.equal(first, xfer.plan(small, b).path)
    xfer.set_cost(a, b, other, 0.93e-5, 1e12)
    assert.are.equal(other, xfer.plan(small, b).path)
    -- a figure for one path only: nothing to compare, the order stays
    xfer.forget_costs()
    xfer.set_cost(a, b, other, 1e-9, 1e15)
    assert.are.equal(first, xfer.plan(small, b).path)
  end)

  it("never chooses a path that is set aside, whatever its figures", function()
    -- a staged pair: a read fault fails its first step, and sets the path aside
    local a, b
    for _, x in ipairs(xfer.devices()) do
      for _, y in ipairs(xfer.devices()) do
        local probe = xfer.empty({ 1 }, { dtype = "u8", device = x })
        if not a and x ~= y and xfer.plan(probe, y).path == "staged" then a, b = x, y end
      end
    end
    if not a then return pending("no two devices here move by the staged path") end
    xfer.set_cost(a, b, "staged", 1e-9, 1e15) -- as cheap as can be
    xfer.set_cost(a, b, "host", 1, 1e6)
    local t = xfer.arange(1000, { device = a })
    assert.are.equal("staged", xfer.plan(t, b).path)
    xfer.faults.inject({ runtime = a.runtime, op = "read", count = 1 })
    h.raises("read", t.to, t, b)
    xfer.faults.clear() -- (an injected fault's set-aside is forgotten with the faults...)
    xfer.faults.inject({ runtime = a.runtime, op = "read", count = 1 })
    pcall(t.to, t, b)
    assert.are.equal("host", xfer.plan(t, b).path) -- (...so the check is made while it lasts)
    xfer.faults.clear()
    xfer.forget_failures()
  end)

  describe("the plan cache", function()
    it("writes every figure and reads back those of devices here", function()
      local a, b, paths = a_pair()
      if not a then return pending("no two devices here move by more than one path") end
      local file = temp_file()
      xfer.set_cost(a, b, paths[2], 2.5e-5, 3e9)
      xfer.save_costs(file)
      local text = read(file)
      assert.is_truthy(text:find("^# xferlua plan cache v2"))
      -- a figure of a device this machine does not have is passed over
      local f = io.open(file, "a")
      f:write("cuda:7|Imaginary GPU|-\t" .. a.name .. "|x|-\thost\t1e-05\t1e+09\t0\n")
      f:close()
      xfer.forget_costs()
      assert.are.equal(1, xfer.load_costs(file))
      local c = xfer.costs()[1]
      assert.are.same({ a.name, b.name, paths[2], 2.5e-5, 3e9 }, { c.from, c.to, c.path, c.latency, c.bandwidth })
      -- a cache of the version before measured points (six columns) is read too
      local line = text:match("\n([^\n]*)\t%-\n")
      f = io.open(file, "w")
      f:write("# xferlua plan cache v1: from\tto\tpath\tlatency_s\tbandwidth_Bps\tunix_time\n", line, "\n")
      f:close()
      xfer.forget_costs()
      assert.are.equal(1, xfer.load_costs(file))
      assert.are.equal(2.5e-5, xfer.costs()[1].latency)
      os.remove(file)
      assert.are.equal(0, xfer.load_costs(file)) -- no file yet: nothing, no error
    end)

    it("is read when a process opens the context (XFER_PLAN_CACHE; off: none)", function()
      local a, b, paths = a_pair()
      if not a then return pending("no two devices here move by more than one path") end
      local file = temp_file()
      xfer.set_cost(a, b, paths[1], 1e-3, 1e12)
      xfer.set_cost(a, b, paths[2], 1e-9, 1e15)
      xfer.save_costs(file)
      local script = ("local xfer = require 'xfer'; local t = xfer.zeros({4096}, {dtype = 'u8', device = '%s'}); " ..
                      "io.write(#xfer.costs(), ' ', xfer.plan(t, '%s').path)"):format(a.name, b.name)
      local out, code = h.run("XFER_PLAN_CACHE=" .. file .. " " .. h.xferlua() .. " -e \"" .. script .. "\"")
      assert.are.equal(0, code, out)
      assert.are.equal("2 " .. paths[2], out)
      out = h.run("XFER_PLAN_CACHE=off " .. h.xferlua() .. " -e \"" .. script .. "\"")
      assert.are.equal("0 " .. paths[1], out)
      -- a file of another kind: the process still opens (the planner goes without), and
      -- load_costs says why
      local f = io.open(file, "w")
      f:write("something else\n")
      f:close()
      out = h.run("XFER_PLAN_CACHE=" .. file .. " " .. h.xferlua() .. " -e \"" .. script .. "\"")
      assert.are.equal("0 " .. paths[1], out)
      local e = h.raises("invalid", xfer.load_costs, file)
      assert.are.equal("load_costs: " .. file .. " is no xferlua plan cache (its first line is not the " ..
                       "header this version writes): delete it", e.message)
      os.remove(file)
    end)

    it("refuses what it cannot write, and says why", function()
      xfer.set_cost("host", "host", "host", 1e-6, 1e10)
      local e = h.raises("invalid", xfer.save_costs, "/proc/no/such/dir/plan.tsv")
      assert.is_truthy(e.message:find("^save_costs: cannot write /proc/no/such/dir/plan.tsv"), e.message)
      -- scripts/test runs the specs with XFER_PLAN_CACHE=off; run otherwise, save_costs() would
      -- write the user's own plan cache, which a spec leaves alone
      if os.getenv("XFER_PLAN_CACHE") == "off" then
        e = h.raises("invalid", xfer.save_costs)
        assert.are.equal("save_costs: no plan cache to write: XFER_PLAN_CACHE is off", e.message)
      end
    end)
  end)

  describe("calibration", function()
    it("times every path between every pair, and gives the planner the figures", function()
      local devices = { xfer.device("host") }
      for _, d in ipairs(xfer.devices()) do
        if d.runtime ~= "host" then devices[#devices + 1] = d break end
      end
      local r = xfer.calibrate({ devices = devices, sizes = { 4096, 65536 }, reps = 1, save = false })
      assert.is_nil(r.saved)
      local expected = 0
      for _, a in ipairs(devices) do
        for _, b in ipairs(devices) do
          local probe = xfer.empty({ 1 }, { dtype = "u8", device = a })
          expected = expected + #xfer.plan(probe, b).estimates
        end
      end
      assert.are.equal(expected, #r.results)
      for _, e in ipairs(r.results) do
        assert.is_nil(e.code, e.message)
        assert.is_true(e.latency >= 0 and e.bandwidth > 0, e.from .. " -> " .. e.to .. " " .. e.path)
        assert.are.equal(2, #e.points)
      end
      assert.are.equal(#r.results, #xfer.costs())
      local report = xfer.calibrate_report(r)
      assert.is_truthy(report:find("calibrated " .. #r.results .. " paths in", 1, true), report)
    end)

    it("repeats a quick move more than reps times, a slow one reps times, after one untimed", function()
      -- host -> host at 4 KiB takes about a microsecond: repeated until ~10 ms or 60 runs;
      -- at 128 MiB a run takes over 2.5 ms, so `reps` runs (in three rounds: reps rounded up to
      -- a multiple of three, plus the first timed one) and the warm-up
      local small, large = 4096, 128 * 1024 * 1024
      xfer.stats_reset()
      xfer.calibrate({ devices = { "host" }, sizes = { small, large }, paths = { "same_device" }, reps = 4, save = false })
      local runs = {}
      for _, s in ipairs(xfer.stats()) do
        if s.path == "same_device" and s.from == "host" and s.to == "host" then
          runs[#runs + 1] = s
        end
      end
      assert.are.equal(1, #runs)
      local large_runs = 1 + 1 + 3 * math.ceil((4 - 1) / 3) -- warm-up, first timed, rounds
      local small_runs = (runs[1].bytes - large_runs * large) / small
      assert.are.equal(math.floor(small_runs), small_runs, "whole runs: " .. tostring(small_runs))
      assert.is_true(small_runs > 1 + 4 and small_runs <= 1 + 1 + 60, "runs at 4 KiB: " .. small_runs)
      assert.are.equal(runs[1].count, large_runs + small_runs)
    end)

    it("records a failing path as the error, with no figure", function()
      local dev
      for _, d in ipairs(xfer.devices()) do if d.runtime ~= "host" then dev = d break end end
      if not dev then return pending("no device besides host here") end
      xfer.faults.inject({ runtime = dev.runtime, op = "write", count = 100000 }) -- host -> dev
      local ok, r = pcall(xfer.calibrate, { devices = { "host", dev }, sizes = { 4096, 8192 }, reps = 1, save = false })
      xfer.faults.clear()
      assert.is_true(ok, tostring(r))
      local failed = 0
      for _, e in ipairs(r.results) do
        if e.code then
          failed = failed + 1
          assert.is_nil(e.latency)
        end
      end
      assert.is_true(failed > 0)
      assert.are.equal(#r.results - failed, #xfer.costs())
    end)

    it("is seeded by the self-test when asked (costs = true)", function()
      local r = xfer.selftest({ devices = { "host" }, sizes = { 4096, 65536 } })
      assert.is_nil(r.costs)
      assert.are.equal(0, #xfer.costs())
      r = xfer.selftest({ devices = { "host" }, sizes = { 4096, 65536 }, costs = true })
      assert.is_true(r.costs >= 2) -- host -> host: same_device and host
      assert.are.equal(r.costs, #xfer.costs())
    end)

    it("runs from the command line and writes the plan cache", function()
      local file = temp_file()
      local out, code = h.run("XFER_PLAN_CACHE=" .. file .. " " .. h.xferlua() .. " --calibrate --sizes 4K,64K")
      assert.are.equal(0, code, out)
      assert.is_truthy(out:find("saved to the plan cache", 1, true), out)
      assert.is_truthy(read(file):find("host|", 1, true))
      os.remove(file)
      out, code = h.run("XFER_PLAN_CACHE=off " .. h.xferlua() .. " --calibrate --sizes 4K,64K")
      assert.are.equal(1, code, out)
      assert.is_truthy(out:find("not saved: save_costs: no plan cache to write: XFER_PLAN_CACHE is off", 1, true), out)
      out = h.run(h.xferlua() .. " --help")
      assert.is_truthy(out:find("--calibrate", 1, true))
      assert.is_truthy(out:find("XFER_PLAN_CACHE", 1, true))
    end)
  end)

  describe("bad input", function()
    h.each_invalid({
      { "set_cost: a path that is not one", function() xfer.set_cost("host", "host", "fast", 1, 1) end,
        "set_cost: unknown path 'fast' (same_device, same_runtime, interop, direct, staged or host)" },
      { "set_cost: auto", function() xfer.set_cost("host", "host", "auto", 1, 1) end,
        "set_cost: unknown path 'auto' (same_device, same_runtime, interop, direct, staged or host)" },
      { "set_cost: a NUL in the path", function() xfer.set_cost("host", "host", "host\0x", 1, 1) end,
        "set_cost: unknown path 'host' (same_device, same_runtime, interop, direct, staged or host)" },
      { "set_cost: a negative latency", function() xfer.set_cost("host", "host", "host", -1, 1) end,
        "set_cost: latency must be >= 0 seconds and bandwidth > 0 bytes per second, both finite (not -1 and 1)" },
      { "set_cost: NaN", function() xfer.set_cost("host", "host", "host", 0 / 0, 1) end,
        "set_cost: latency must be >= 0 seconds and bandwidth > 0 bytes per second, both finite (not nan and 1)" },
      { "set_cost: an infinite bandwidth", function() xfer.set_cost("host", "host", "host", 0, math.huge) end,
        "set_cost: latency must be >= 0 seconds and bandwidth > 0 bytes per second, both finite (not 0 and inf)" },
      { "set_cost: a zero bandwidth", function() xfer.set_cost("host", "host", "host", 0, 0) end,
        "set_cost: latency must be >= 0 seconds and bandwidth > 0 bytes per second, both finite (not 0 and 0)" },
      { "set_cost: a string for a number", function() xfer.set_cost("host", "host", "host", "1", 1) end,
        "bad argument #4 to 'set_cost' (number expected, got string)" },
      { "costs: an argument", function() xfer.costs(1) end, "costs takes no arguments (got 1)" },
      { "save_costs: an empty name", function() xfer.save_costs("") end,
        "save_costs: a file name, not empty and without NUL bytes" },
      { "load_costs: a number", function() xfer.load_costs(5) end,
        "bad argument #1 to 'load_costs' (file name (string) expected, got number)" },
      { "calibrate: an unknown option", function() xfer.calibrate({ fast = true }) end,
        "calibrate: unknown option 'fast' (known: devices, sizes, paths, reps, save, progress)" },
      { "calibrate: one size", function() xfer.calibrate({ sizes = { 4096 } }) end,
        "calibrate: sizes is a list of at least two byte counts" },
      { "calibrate: reps 0", function() xfer.calibrate({ reps = 0 }) end,
        "calibrate: reps is a whole number >= 1" },
      { "calibrate: an unknown path", function() xfer.calibrate({ paths = { "fast" } }) end,
        "calibrate: unknown path 'fast' (same_device, same_runtime, interop, direct, staged, host)" },
      { "calibrate: a progress that is not a function", function() xfer.calibrate({ progress = 1 }) end,
        "calibrate: progress is a function(pairs_done, pairs_total)" },
    })
  end)
end)
