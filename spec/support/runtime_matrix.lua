-- The spec matrix every runtime passes: dtypes byte-exact, sizes, copies within and
-- across devices, an injected failure at each op, freed tensors, bad indices.
-- runtime_matrix("opencl") from a spec file tagged #opencl; pending where the runtime is
-- unavailable, with its reason.
local xfer = require "xfer"
local h = require "support.helpers"

local function runtime_info(name)
  for _, r in ipairs(xfer.runtimes()) do
    if r.name == name then return r end
  end
end

local function devices_of(name)
  local list = {}
  for _, dev in ipairs(xfer.devices()) do
    if dev.runtime == name then list[#list + 1] = dev end
  end
  return list
end

local function u8(bytes) return xfer.tensor(bytes, { dtype = "u8" }) end

local function device_matrix(dev)
  local host = xfer.device("host")

  it("round-trips every dtype host -> " .. dev.name .. " -> host byte for byte", function()
    for dtype, size in pairs(h.dtypes) do
      local n = 257 + math.random(0, 64)
      local bytes = h.random_bytes(n * size)
      if dtype == "bool" then bytes = bytes:gsub(".", function(c) return string.char(c:byte() % 2) end) end
      local t = xfer.tensor(bytes, { dtype = dtype })
      local on = t:to(dev)
      assert.are.equal(dev, on.device)
      assert.are.equal(dtype, on.dtype)
      assert.are.equal(bytes, on:tobytes(), dtype)
      assert.are.equal(bytes, on:to(host):tobytes(), dtype)
      assert.is_true(on:equals(t), dtype)
      if not dtype:match("^b?f") then -- random float bytes hold NaNs, which never compare equal
        assert.are.same(t:totable(), on:totable(), dtype)
      end
    end
  end)

  it("moves 0, 1, odd and several MiB of bytes exactly", function()
    for _, n in ipairs({ 0, 1, 3, 4097, 12345, 5 * 1024 * 1024 + 3 }) do
      local bytes = h.random_bytes(n)
      local on = u8(bytes):to(dev)
      assert.are.equal(n, on.nbytes)
      assert.are.equal(bytes, on:to(host):tobytes(), n .. " bytes")
      assert.are.equal(bytes, on:clone():tobytes(), n .. " bytes, clone")
    end
  end)

  it("makes tensors there directly", function()
    local opts = { device = dev, dtype = "i32" }
    assert.are.same({ { 1, 2 }, { 3, 4 } }, xfer.tensor({ { 1, 2 }, { 3, 4 } }, opts):totable())
    assert.are.same({ 0, 0, 0 }, xfer.zeros({ 3 }, opts):totable())
    assert.are.same({ 7, 7 }, xfer.full({ 2 }, 7, opts):totable())
    assert.are.same({ 0, 1, 2 }, xfer.arange(3, opts):totable())
    assert.are.equal("\1\0\0\0", xfer.tensor("\1\0\0\0", opts):tobytes())
    assert.are.equal(dev, xfer.empty({ 5 }, opts).device)
  end)

  it("copies within " .. dev.name .. " on every path that applies", function()
    local bytes = h.random_bytes(64 * 1024 + 7)
    local a = u8(bytes):to(dev)
    assert.are.equal("same_device", xfer.plan(a, dev).path)
    for _, via in ipairs({ "auto", "same_device", "host" }) do
      assert.are.equal(bytes, a:to(dev, { via = via }):tobytes(), via)
      local b = xfer.empty({ #bytes }, { dtype = "u8", device = dev })
      assert.are.equal(bytes, b:copy_from(a, { via = via }):tobytes(), via)
    end
  end)

  it("moves to and from every other device", function()
    local bytes = h.random_bytes(100 * 1024 + 1)
    local a = u8(bytes):to(dev)
    for _, other in ipairs(xfer.devices()) do
      local there = a:to(other)
      assert.are.equal(other, there.device)
      assert.are.equal(bytes, there:tobytes(), other.name)
      assert.are.equal(bytes, there:to(dev):tobytes(), other.name .. " back")
      local dst = xfer.empty({ #bytes }, { dtype = "u8", device = other })
      assert.are.equal(bytes, dst:copy_from(a):tobytes(), "copy_from into " .. other.name)
    end
  end)

  describe("an injected failure", function()
    before_each(function() xfer.faults.clear() end)
    after_each(function() xfer.faults.clear() end)

    local runtime = dev.runtime
    local cases = {
      { op = "alloc", code = "alloc", from = "host", to = dev.name,
        run = function(src) return src:to(dev) end, source = "host" },
      { op = "write", code = "write", from = "host", to = dev.name,
        run = function(src) return src:to(dev) end, source = "host",
        prefix = "Failed to write a tensor to " .. dev.name .. " on the way from host: " },
      { op = "read", code = "read", from = dev.name, to = "host",
        run = function(src) return src:to(host) end, source = "device",
        prefix = "Failed to read a tensor off " .. dev.name .. " on the way to host: " },
      { op = "copy", code = "write", from = dev.name, to = dev.name,
        run = function(src) return src:clone() end, source = "device",
        prefix = "Failed to copy a tensor from " .. dev.name .. " to " .. dev.name .. ": " },
    }
    for _, case in ipairs(cases) do
      it("at " .. case.op .. " is catchable, right in every field, leaves the source intact and frees all", function()
        local bytes = h.random_bytes(4096 + 5)
        local src = u8(bytes)
        if case.source == "device" then src = src:to(dev) end
        local dev_before, host_before = h.in_use(dev), h.in_use(host)
        if case.op == "alloc" then h.uncached() end
        xfer.faults.inject({ runtime = runtime, op = case.op })
        local e = h.raises(case.code, case.run, src)
        assert.are.equal(case.op, e.op)
        assert.are.equal(case.from, e.from)
        assert.are.equal(case.to, e.to)
        assert.are.equal(dev.name, e.device) -- the device whose call failed
        assert.is_true(e.injected)
        assert.are.equal("number", type(e.native))
        assert.are_not.equal(0, e.native)
        assert.is_truthy(e.native_name:match("^[A-Z][A-Z0-9_]+$"), e.native_name)
        assert.is_truthy(e.message:find(e.native_name, 1, true), e.message)
        if case.prefix then
          assert.are.equal(case.prefix, e.message:sub(1, #case.prefix))
        end
        assert.are.same({}, xfer.faults.list())
        assert.are.equal(bytes, src:tobytes())
        assert.are.equal(dev_before, h.in_use(dev))
        assert.are.equal(host_before, h.in_use(host))
        -- and the fallback works
        assert.are.equal(bytes, case.run(src):tobytes())
      end)
    end
  end)

  it("frees: every later use raises freed, and the memory returns", function()
    local before = h.in_use(dev)
    local t = xfer.arange(1000, { device = dev })
    assert.are.equal(before + 4000, xfer.memory(dev).in_use)
    t:free()
    t:free()
    assert.are.equal(before, xfer.memory(dev).in_use)
    local e = h.raises("freed", t.to, t, host)
    assert.are.equal("attempt to use a freed tensor", e.message)
    h.raises("freed", t.totable, t)
    h.raises("freed", function() return xfer.zeros({ 1000 }):copy_from(t) end)
  end)
end

local function define(name)
  local info = runtime_info(name)
  local devices = devices_of(name)

  describe(name .. " runtime #" .. name, function()
    if not info.available then
      it("is pending", function() pending(name .. " is unavailable here: " .. info.reason) end)
      return
    end

    it("names its devices " .. name .. ":0, " .. name .. ":1, ...", function()
      for i, dev in ipairs(devices) do
        assert.are.equal(name .. ":" .. (i - 1), dev.name)
        assert.are.equal(i - 1, dev.index)
        assert.are.equal(name, dev.runtime)
        assert.are.equal(dev, xfer.device(dev.name))
        assert.is_true(dev.total_memory > 0)
        assert.is_true(dev.max_alloc > 0 and dev.max_alloc <= dev.total_memory)
        assert.is_true(#dev.label > 0)
      end
      assert.are.equal(devices[1], xfer.device(name))
    end)

    it("raises invalid for a device index it does not have", function()
      local bad = name .. ":" .. #devices
      local e = h.raises("invalid", xfer.device, bad)
      assert.are.equal("unknown device '" .. bad .. "'", e.message:sub(1, #bad + 17))
      h.raises("invalid", xfer.zeros, { 1 }, { device = name .. ":-1" })
    end)

    for i = 1, #devices do
      for j = 1, #devices do
        if i ~= j then
          it(("copies %s -> %s"):format(devices[i].name, devices[j].name), function()
            local bytes = h.random_bytes(300 * 1024 + 3)
            local a = u8(bytes):to(devices[i])
            assert.are.equal(bytes, a:to(devices[j]):tobytes())
          end)
        end
      end
    end

    for _, dev in ipairs(devices) do
      describe(dev.name .. " (" .. dev.label .. ")", function() device_matrix(dev) end)
    end
  end)
end

-- busted's describe/it/pending live in the spec file's environment, not in _G: the
-- matrix runs in the environment of the spec file that calls it.
return function(name)
  local env = getfenv(2)
  setfenv(device_matrix, env)
  setfenv(define, env)
  define(name)
end
