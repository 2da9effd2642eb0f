-- A planner that remembers: a path that failed for a pair is set aside, the default choice
-- takes the next one, xfer.plan says why, xfer.health lists it, forget_failures restores it.
local xfer = require "xfer"
local h = require "support.helpers"

-- a pair of devices that moves by the staged path: its first step reads off the source (op
-- "read", which the specs fail) into host chunks (op "alloc" on the host). Interop and
-- same_runtime moves are device copies ("copy", "peer"): a read fault does not touch them.
local function a_pair()
  for _, a in ipairs(xfer.devices()) do
    for _, b in ipairs(xfer.devices()) do
      if a ~= b and a.runtime ~= "host" and b.runtime ~= "host" then
        local probe = xfer.zeros({ 1 }, { device = a })
        local path = xfer.plan(probe, b).path
        if path == "staged" then return a, b, path end
      end
    end
  end
end

describe("the planner's memory", function()
  before_each(function() xfer.forget_failures() end)
  after_each(function()
    xfer.faults.clear()
    xfer.forget_failures()
    xfer.config({ setaside_after = 3 }) -- (busted keeps one `finally` per spec: h.uncached's)
  end)

  it("sets a path aside after a failure that will not go away, and takes the next one", function()
    local a, b, path = a_pair()
    if not a then return pending("no two devices here move by the staged path") end
    local t = xfer.arange(100000, { device = a })
    xfer.faults.inject({ runtime = a.runtime, op = "read", count = 1 })
    local e = h.raises("read", t.to, t, b) -- the first failure is still the script's to see
    assert.is_false(e.retryable)
    local plan = xfer.plan(t, b)
    assert.are.equal("host", plan.path)
    assert.is_truthy(plan.reason:match("^" .. path .. " set aside for " .. a.name .. " %-> " .. b.name ..
                                       " after Failed to read a tensor off " .. a.name), plan.reason)
    local health = xfer.health()
    assert.are.equal(1, #health.set_aside)
    assert.are.same({ from = a.name, to = b.name, path = path, failures = 1, injected = true },
                    { from = health.set_aside[1].from, to = health.set_aside[1].to, path = health.set_aside[1].path,
                      failures = health.set_aside[1].failures, injected = health.set_aside[1].injected })
    assert.is_true(health.decisions >= 1)
    xfer.stats_reset()
    assert.are.equal(t:tobytes(), t:to(b):tobytes())
    assert.are.equal("host", xfer.stats()[1].path) -- the next path that applies
    -- a forced via still tries it
    xfer.stats_reset()
    t:to(b, { via = path })
    assert.are.equal(path, xfer.stats()[1].path)
    -- and forget_failures restores it
    xfer.forget_failures(a, b)
    assert.are.equal(path, xfer.plan(t, b).path)
    assert.are.equal(0, #xfer.health().set_aside)
  end)

  it("sets aside after setaside_after retryable failures in a row, and never with 0", function()
    local a, b, path = a_pair()
    if not a then return pending("no two devices here move by the staged path") end
    h.uncached() -- every staging chunk a driver allocation, to fail
    local t = xfer.arange(300000, { device = a })
    -- out of memory is retryable: it takes setaside_after (3) failures in a row
    for i = 1, 3 do
      xfer.faults.inject({ runtime = "host", op = "alloc", count = 2, native = 12 }) -- the alloc and its retry
      local ok, e = pcall(t.to, t, b)
      if ok then return pending(path .. " from " .. a.name .. " allocates no host memory to fail") end
      assert.is_true(e.retryable, e.message)
      assert.are.equal(i < 3 and path or "host", xfer.plan(t, b).path, "after failure " .. i)
    end
    xfer.faults.clear()
    xfer.forget_failures()
    xfer.config({ setaside_after = 0 })
    xfer.faults.inject({ runtime = a.runtime, op = "read", count = 1 })
    pcall(t.to, t, b)
    assert.are.equal(path, xfer.plan(t, b).path) -- 0: never set aside
  end)

  it("forgets what injected faults set aside when the faults are cleared", function()
    local a, b, path = a_pair()
    if not a then return pending("no two devices here move by the staged path") end
    local t = xfer.arange(1000, { device = a })
    xfer.faults.inject({ runtime = a.runtime, op = "read", count = 1 })
    pcall(t.to, t, b)
    assert.are.equal("host", xfer.plan(t, b).path)
    xfer.faults.clear()
    assert.are.equal(path, xfer.plan(t, b).path)
  end)

  it("is seeded by the self-test", function()
    local a, b, path = a_pair()
    if not a then return pending("no two devices here move by the staged path") end
    xfer.faults.inject({ runtime = a.runtime, op = "read", count = 1000 })
    local r = xfer.selftest({ devices = { a, b }, sizes = { 4099 } })
    assert.is_false(r.ok)
    local found = false
    for _, e in ipairs(xfer.health().set_aside) do
      if e.from == a.name and e.to == b.name and e.path == path then found = true end
    end
    assert.is_true(found)
  end)

  it("lists lost devices (none here) and refuses what is not a device", function()
    assert.are.same({}, xfer.health().lost)
    h.raises("invalid", xfer.forget_failures, "gpu")
    h.raises("invalid", xfer.health, 1)
    h.raises("invalid", xfer.config, { setaside_after = -1 })
    assert.are.equal("setaside_after must be 0 (never) to 1000000, not 2000000",
                     h.raises("invalid", xfer.config, { setaside_after = 2e6 }).message)
  end)
end)
