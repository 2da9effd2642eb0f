-- Every public Lua function and method, each argument in turn replaced by each bad value of a
-- table (wrong types, nil, NaN and infinities, negative, fractional and huge numbers, empty and
-- NUL-containing strings, freed tensors, other userdata): each call either takes the value
-- (it is one the argument accepts) or raises an xfer.Error whose message names the function,
-- with the code the case calls for. No crash, no plain Lua error, nothing left allocated.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

local function freed_tensor()
  local t = xfer.arange(3)
  t:free()
  return t
end

-- The bad values, each with a name for the report.
local bad = {
  { "nil", nil }, { "true", true }, { "NaN", 0 / 0 }, { "inf", math.huge }, { "-inf", -math.huge },
  { "-1", -1 }, { "1.5", 1.5 }, { "2^62", 2 ^ 62 }, { "''", "" }, { "'x\\0y'", "x\0y" },
  { "'nope'", "nope" }, { "{}", {} }, { "{{}}", { {} } }, { "a function", print },
  { "a freed tensor", "FREED" }, { "a device", "DEVICE" }, { "a coroutine", coroutine.create(print) },
}

-- Each function: a name (what its errors say), how to call it, the good arguments, and per
-- argument the bad values it takes (accepted) -- by their names above.
local function cases()
  local t = xfer.arange(4)
  local u = xfer.arange(4)
  local job = t:to_async(host)
  local M = xfer.Tensor
  local DEV = { ["a device"] = 1 } -- a device argument takes a device
  return {
    { "tensor", xfer.tensor, { { 1, 2 }, { dtype = "f32" } },
      { [1] = { ["true"] = 1, ["NaN"] = 1, ["inf"] = 1, ["-inf"] = 1, ["-1"] = 1, ["1.5"] = 1, ["2^62"] = 1,
                ["''"] = 1, ["'x\\0y'"] = 1, ["'nope'"] = 1, ["{}"] = 1, ["{{}}"] = 1 },
        [2] = { ["nil"] = 1, ["{}"] = 1 } } },
    -- {} as a shape is a 0-d tensor (a scalar)
    { "empty", xfer.empty, { { 2 }, { dtype = "f32" } }, { [1] = { ["{}"] = 1 }, [2] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "zeros", xfer.zeros, { { 2 }, {} }, { [1] = { ["{}"] = 1 }, [2] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "full", xfer.full, { { 2 }, 7, {} },
      { [1] = { ["{}"] = 1 }, [2] = { ["NaN"] = 1, ["inf"] = 1, ["-inf"] = 1, ["-1"] = 1, ["1.5"] = 1, ["2^62"] = 1 },
        [3] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "arange", xfer.arange, { 0, 4, 1, {} },
      { [1] = { ["-1"] = 1, ["1.5"] = 1, ["2^62"] = 1, ["{}"] = 1 },
        [2] = { ["-1"] = 1, ["1.5"] = 1, ["nil"] = 1, ["{}"] = 1 },
        [3] = { ["-1"] = 1, ["1.5"] = 1, ["2^62"] = 1, ["nil"] = 1, ["{}"] = 1 }, [4] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "plan", xfer.plan, { t, host, {} }, { [2] = DEV, [3] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "device", xfer.device, { "host" }, {} },
    { "devices", xfer.devices, { "host" }, { [1] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "memory", xfer.memory, { host }, { [1] = DEV } },
    { "empty_cache", xfer.empty_cache, { host }, { [1] = { ["nil"] = 1, ["a device"] = 1 } } },
    { "config", xfer.config, { {} }, { [1] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "trace", xfer.trace, { false }, { [1] = { ["true"] = 1 } } },
    { "wait_all", xfer.wait_all, { { job } }, { [1] = { ["{}"] = 1 } } },
    { "transfer", xfer.transfer, { t, host, { log = false } }, { [2] = DEV, [3] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "host_roundtrip", xfer.host_roundtrip, { t, host }, { [2] = DEV } },
    { "inject", xfer.faults.inject, { { runtime = "host", op = "read", nth = 1000000 } }, {} },
    { "fail_at", xfer.faults.fail_at, { 0 }, { [1] = { ["2^62"] = 1 } } },
    { "to", M.to, { t, host, {} }, { [2] = DEV, [3] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "copy_from", M.copy_from, { u, t, {} }, { [3] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "equals", M.equals, { t, u }, {} },
    { "totable", M.totable, { t, {} }, { [2] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "tobytes", M.tobytes, { t }, {} },
    { "clone", M.clone, { t }, {} },
    { "to_async", M.to_async, { t, host, {} }, { [2] = DEV, [3] = { ["nil"] = 1, ["{}"] = 1 } } },
    { "free", M.free, { xfer.arange(2) }, { [1] = { ["a freed tensor"] = 1 } } },
  }
end

local function value_of(v)
  if v == "FREED" then return freed_tensor() end
  if v == "DEVICE" then return host end
  return v
end

-- Functions that take nothing refuse whatever they are given.
local no_args = {
  { "runtimes", xfer.runtimes }, { "stats", xfer.stats },
  { "stats_reset", xfer.stats_reset }, { "clock", xfer.clock }, { "synchronize", xfer.synchronize }, { "describe", xfer.describe },
  { "faults.failed", xfer.faults.failed },
  { "faults.clear", xfer.faults.clear }, { "faults.list", xfer.faults.list },
}

describe("bad input, every function against every bad value", function()
  after_each(function()
    xfer.faults.clear()
    xfer.faults.fail_at(0)
    xfer.trace(false)
  end)

  it("raises an xfer.Error naming the function, or takes a value the argument accepts", function()
    local tried, refused, wrong = 0, 0, {}
    local function expect(cond, text) if not cond then wrong[#wrong + 1] = text end end
    for _, case in ipairs(cases()) do
      local fname, fn, good, accepts = case[1], case[2], case[3], case[4]
      local nargs = #good
      for arg = 1, nargs do
        for _, b in ipairs(bad) do
          local args = {}
          for j = 1, nargs do args[j] = good[j] end
          args[arg] = value_of(b[2])
          local what = ("%s, argument #%d = %s"):format(fname, arg, b[1])
          tried = tried + 1
          local ok, e = pcall(fn, unpack(args, 1, nargs))
          if not ok then
            refused = refused + 1
            if not xfer.is_error(e) then
              expect(false, what .. ": not an xfer.Error: " .. tostring(e))
            else
              expect(e.code == "invalid" or e.code == "freed" or e.code == "unavailable",
                     what .. ": code " .. tostring(e.code))
              expect(e.message:find(fname, 1, true) or e.code == "freed",
                     what .. ": the message does not name '" .. fname .. "': " .. e.message)
            end
          else
            expect((accepts[arg] or {})[b[1]], what .. ": accepted")
          end
        end
      end
    end
    assert.are.same({}, wrong)
    assert.is_true(tried > 300 and refused > 250, ("%d tried, %d refused"):format(tried, refused))
  end)

  it("functions that take nothing refuse every argument", function()
    for _, case in ipairs(no_args) do
      for _, b in ipairs(bad) do
        if b[2] ~= nil then
          local e = h.raises("invalid", case[2], value_of(b[2]))
          assert.are.equal(case[1] .. " takes no arguments (got 1)", e.message)
        end
      end
    end
  end)

  it("shapes that overflow, and huge or negative dimensions, are refused before any allocation", function()
    -- what earlier specs left to the collector goes first: it must not go during the count
    collectgarbage()
    collectgarbage()
    local before = h.in_use(host)
    for _, shape in ipairs({ { 2 ^ 40, 2 ^ 40 }, { 2 ^ 62 }, { 2 ^ 31, 2 ^ 31, 4 }, { -1 }, { 1, 0 / 0 },
                             { math.huge }, { 2 ^ 53 + 1 } }) do
      local e = h.raises("invalid", xfer.empty, shape, { dtype = "f64" })
      assert.is_truthy(e.message:find("empty", 1, true), e.message)
    end
    assert.are.equal(before, h.in_use(host))
  end)

  it("freed tensors raise freed in every method but free and tostring", function()
    local t = freed_tensor()
    for _, m in ipairs({ "to", "copy_from", "equals", "totable", "tobytes", "clone", "to_async" }) do
      local args = m == "copy_from" and { xfer.arange(3) } or m == "equals" and { xfer.arange(3) } or { host }
      if m == "totable" or m == "tobytes" or m == "clone" then args = {} end
      local e = h.raises("freed", xfer.Tensor[m], t, unpack(args))
      assert.are.equal("attempt to use a freed tensor", e.message)
    end
    t:free()
    assert.is_truthy(tostring(t):find("freed", 1, true))
  end)

  it("mismatched copy_from pairs name both layouts", function()
    local cases2 = {
      { xfer.zeros({ 2, 3 }), xfer.zeros({ 3, 2 }), "copy_from needs one shape at both ends: target f32[2,3], source f32[3,2]" },
      { xfer.zeros({ 4 }), xfer.zeros({ 5 }, { dtype = "f64" }), "copy_from needs one shape at both ends: target f32[4], source f64[5]" },
    }
    for _, c in ipairs(cases2) do
      local e = h.raises("invalid", c[1].copy_from, c[1], c[2])
      assert.are.equal(c[3], e.message)
    end
  end)
end)
