-- Fault injection at each host op: the failure is catchable, its fields are right, the
-- source is intact and nothing stays allocated.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("fault injection (host)", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function() xfer.faults.clear() end)

  it("a read fault fails the host round-trip with the whole story", function()
    local t = xfer.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    local before = h.in_use(host)
    xfer.faults.inject({ runtime = "host", op = "read", nth = 1 })
    local e = h.raises("read", t.to, t, host, { via = "host" })
    assert.are.equal("read", e.op)
    assert.are.equal("host", e.from)
    assert.are.equal("host", e.to)
    assert.are.equal(5, e.native)
    assert.are.equal("EIO", e.native_name)
    assert.is_true(e.injected)
    assert.is_false(e.retryable)
    assert.are.equal("Failed to read a tensor off host on the way to host: EIO (5): Input/output error [injected fault]",
                     e.message)
    assert.are.equal(e.message, tostring(e))
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
    assert.are.equal(before, h.in_use(host))
  end)

  it("a script recovers: pcall, inspect the code, fall back", function()
    local t = xfer.arange(8)
    xfer.faults.inject({ runtime = "host", op = "copy" })
    local ok, moved = pcall(t.to, t, host)
    assert.is_false(ok)
    assert.are.equal("write", moved.code)
    assert.are.equal("copy", moved.op)
    moved = xfer.host_roundtrip(t, host)
    assert.is_true(moved:equals(t))
  end)

  local ops = {
    { op = "alloc", code = "alloc", native = "ENOMEM", retryable = true,
      run = function(t) return t:to(host) end,
      message = "Failed to allocate 32 bytes on host for a tensor from host: ENOMEM (12): Cannot allocate memory [injected fault]" },
    { op = "copy", code = "write", native = "EIO", retryable = false,
      run = function(t) return t:clone() end,
      message = "Failed to copy a tensor from host to host: EIO (5): Input/output error [injected fault]" },
    { op = "read", code = "read", native = "EIO", retryable = false,
      run = function(t) return xfer.host_roundtrip(t, host) end,
      message = "Failed to read a tensor off host on the way to host: EIO (5): Input/output error [injected fault]" },
    { op = "write", code = "write", native = "EIO", retryable = false,
      run = function(t) return xfer.tensor(t:tobytes(), { dtype = "f32" }) end,
      message = "Failed to write a tensor to host on the way from host: EIO (5): Input/output error [injected fault]" },
  }
  for _, case in ipairs(ops) do
    it("host " .. case.op .. ": catchable, fields right, source intact, nothing leaked", function()
      local t = xfer.arange(8)
      local bytes = t:tobytes()
      local before = h.in_use(host)
      if case.op == "alloc" then h.uncached() end
      xfer.faults.inject({ runtime = "host", op = case.op })
      local e = h.raises(case.code, case.run, t)
      assert.are.equal(case.op, e.op)
      assert.are.equal(case.native, e.native_name)
      assert.are.equal(case.retryable, e.retryable)
      assert.are.equal(case.message, e.message)
      assert.are.equal(bytes, t:tobytes())
      assert.are.equal(before, h.in_use(host))
      assert.are.same({}, xfer.faults.list())
      -- the fault was used up: the same call now works
      assert.are.equal(bytes, case.run(t):tobytes())
    end)
  end

  it("zeros fails on a write fault and leaves nothing allocated", function()
    local before = h.in_use(host)
    xfer.faults.inject({ runtime = "host", op = "write" })
    local e = h.raises("write", xfer.zeros, { 16 })
    assert.are.equal("host", e.from)
    assert.are.equal("host", e.to)
    assert.are.equal("write", e.op)
    assert.are.equal(before, h.in_use(host))
  end)

  it("a fresh allocation failure names only the device", function()
    h.uncached()
    xfer.faults.inject({ runtime = "host", op = "alloc" })
    local e = h.raises("alloc", xfer.empty, { 2 })
    assert.are.equal("Failed to allocate 8 bytes on host: ENOMEM (12): Cannot allocate memory [injected fault]",
                     e.message)
    assert.are.equal("", e.from)
    assert.are.equal("host", e.to)
  end)

  it("a move's own allocation that fails names the device it was made on, not the target", function()
    local a, b
    for _, x in ipairs(xfer.devices()) do
      for _, y in ipairs(xfer.devices()) do
        if not a and x ~= y and x ~= host and y ~= host and xfer.plan(xfer.empty({ 1 }, { device = x }), y,
                                                                     { via = "staged" }) then
          a, b = x, y
        end
      end
    end
    if not a then return pending("fewer than two devices besides host here") end
    local t = xfer.full({ 4096 }, 5, { dtype = "u8", device = a })
    h.uncached() -- host staging memory from the driver, which the fault fails
    for _, via in ipairs({ "host", "staged" }) do
      local before = xfer.memory(host)
      xfer.faults.inject({ runtime = "host", op = "alloc" })
      local e = h.raises("alloc", t.to, t, b, { via = via })
      assert.are.equal("alloc", e.op, via)
      assert.are.equal(a.name, e.from, via)
      assert.are.equal(b.name, e.to, via)
      assert.are.equal("host", e.device, via)
      assert.are.equal(("Failed to allocate memory on host for a move of 4096 bytes from %s to %s: " ..
                        "ENOMEM (12): Cannot allocate memory [injected fault]"):format(a.name, b.name), e.message)
      local after = xfer.memory(host) -- nothing counted that was never allocated
      assert.are.equal(before.in_use, after.in_use, via)
      assert.are.equal(before.buffers, after.buffers, via)
    end
    assert.are.same(t:totable({ flat = true }), xfer.full({ 4096 }, 5, { dtype = "u8" }):totable({ flat = true }))
  end)

  it("fail_at fails exactly the k-th fallible call, counting every call, and says which", function()
    local t = xfer.arange(1024)
    xfer.faults.fail_at(0) -- counting only
    t:clone():to(host)
    local calls = xfer.faults.calls()
    assert.is_true(calls >= 2)
    assert.is_nil(xfer.faults.failed())
    for k = 1, calls do
      collectgarbage() -- nothing for a refused allocation to reclaim: it must fail
      collectgarbage()
      xfer.faults.fail_at(k)
      local ok, e = pcall(function() return t:clone():to(host) end)
      local failed = xfer.faults.failed()
      assert.is_false(ok, "call " .. k)
      assert.are.equal(k, failed.call)
      assert.are.equal("host", failed.runtime)
      assert.are.equal(failed.op, e.op)
      assert.are.equal("host", e.device)
      assert.is_true(e.injected)
    end
    xfer.faults.fail_at(0)
    assert.are.equal(1024, #t:clone():to(host))
    local out = h.run("XFER_FAIL_AT=1 " .. h.xferlua() ..
                      [[ -e 'local x = require "xfer"; print(pcall(x.zeros, { 2 }))']])
    assert.is_truthy(out:find("^false\tFailed to allocate 8 bytes on host"), out)
    local _, code = h.run("XFER_FAIL_AT=-1 " .. h.xferlua() .. [[ -e 'require "xfer"']])
    assert.are.equal(1, code)
    h.raises("invalid", xfer.faults.fail_at, -1)
    h.raises("invalid", xfer.faults.fail_at, 1.5)
  end)

  it("fail_at cancels a move at its k-th step, and stalls its k-th wait under a deadline", function()
    local t = xfer.arange(1024)
    xfer.faults.fail_at(0, "step") -- counting only
    t:clone():to(host)
    local steps = xfer.faults.calls("step")
    assert.is_true(steps >= 2)
    for k = 1, steps do
      xfer.faults.fail_at(k, "step")
      local ok, e = pcall(function() return t:clone():to(host) end)
      assert.is_false(ok, "step " .. k)
      assert.are.equal("canceled", e.code, tostring(e))
      assert.are.equal("cancel", e.op)
      assert.are.same({ op = "cancel", call = k, runtime = "" }, xfer.faults.failed())
    end
    xfer.faults.fail_at(0, "step")
    assert.are.equal(1024, #t:clone():to(host))
    -- a wait is counted only under a deadline (with none, a stalled wait would never end)
    local waiting
    for _, d in ipairs(xfer.devices()) do
      if d.runtime == "opencl" then waiting = d end
    end
    if waiting then
      xfer.faults.fail_at(0, "wait")
      t:to(waiting, { timeout = 10 })
      assert.is_true(xfer.faults.calls("wait") >= 1)
      xfer.faults.fail_at(1, "wait")
      local e = h.raises("timeout", t.to, t, waiting, { timeout = 0.05 })
      assert.is_truthy(tostring(e):find("had not done its work by the move's deadline", 1, true), tostring(e))
      assert.are.same({ op = "stall", call = 1, runtime = "opencl" }, xfer.faults.failed())
      xfer.faults.fail_at(0, "wait")
      assert.is_true(t:to(waiting):equals(t))
    end
    h.raises("invalid", xfer.faults.fail_at, 1, "sometimes")
    h.raises("invalid", xfer.faults.calls, "sometimes")
  end)

  it("nth skips matching calls and count fails several", function()
    h.no_setaside() -- the same path fails again on purpose
    local t = xfer.arange(4)
    xfer.faults.inject({ runtime = "host", op = "copy", nth = 2, count = 2 })
    assert.are.same({ { runtime = "host", op = "copy", nth = 2, count = 2 } }, xfer.faults.list())
    assert.is_true(t:clone():equals(t))      -- 1st copy passes
    h.raises("write", t.clone, t)            -- 2nd fails
    h.raises("write", t.clone, t)            -- 3rd fails
    assert.is_true(t:clone():equals(t))      -- used up
    assert.are.same({}, xfer.faults.list())
  end)

  it("faults of another runtime or op leave host calls alone", function()
    xfer.faults.inject({ runtime = "opencl", op = "read" })
    xfer.faults.inject({ runtime = "host", op = "write" })
    local t = xfer.arange(4)
    assert.is_true(t:to(host, { via = "host" }):equals(t))
    assert.are.equal(2, #xfer.faults.list())
  end)

  it("fails with the driver code a rule names", function()
    local t = xfer.arange(4)
    xfer.faults.inject({ runtime = "host", op = "copy", native = 14 })
    assert.are.same({ { runtime = "host", op = "copy", nth = 1, count = 1, native = 14 } }, xfer.faults.list())
    local e = h.raises("write", t.clone, t)
    assert.are.equal(14, e.native)
    assert.are.equal("EFAULT", e.native_name)
    assert.are.equal("Failed to copy a tensor from host to host: EFAULT (14): Bad address [injected fault]", e.message)
  end)

  it("one call fails once even when two rules match it", function()
    h.no_setaside() -- the same path fails again on purpose
    local t = xfer.arange(4)
    xfer.faults.inject({ runtime = "host", op = "copy" })
    xfer.faults.inject({ runtime = "host", op = "copy" })
    h.raises("write", t.clone, t)
    assert.are.equal(1, #xfer.faults.list())
    h.raises("write", t.clone, t)
    assert.is_true(t:clone():equals(t))
  end)

  it("clear drops every rule", function()
    xfer.faults.inject({ runtime = "host", op = "read" })
    xfer.faults.clear()
    local t = xfer.arange(4)
    assert.is_true(xfer.host_roundtrip(t, host):equals(t))
  end)

  it("lists the ops a fault may name", function()
    assert.are.same({ "alloc", "read", "write", "copy", "peer", "import", "export", "register", "map", "sync",
                      "send", "recv", "verify", "stall", "corrupt" },
                    xfer.faults.ops)
  end)

  describe("XFER_FAULTS", function()
    it("injects from the environment", function()
      local out, code = h.run("XFER_FAULTS=host:read:1 " .. h.xferlua() .. [[ -e '
        local xfer = require "xfer"
        local t = xfer.arange(3)
        local ok, e = pcall(xfer.host_roundtrip, t, "host")
        print(ok, e.code, e.op, e.message)
        print(xfer.host_roundtrip(t, "host"):equals(t))']])
      assert.are.equal(0, code, out)
      assert.are.equal("false\tread\tread\tFailed to read a tensor off host on the way to host: " ..
                       "EIO (5): Input/output error [injected fault]\ntrue\n", out)
    end)

    it("takes several rules with nth and count", function()
      local out, code = h.run("XFER_FAULTS=host:copy:2:3,host:alloc,host:read:1:1:-4 " .. h.xferlua() ..
        [[ -e 'for _, f in ipairs(require("xfer").faults.list()) do print(f.runtime, f.op, f.nth, f.count, f.native) end']])
      assert.are.equal(0, code, out)
      assert.are.equal("host\tcopy\t2\t3\tnil\nhost\talloc\t1\t1\tnil\nhost\tread\t1\t1\t-4\n", out)
    end)

    it("rejects a malformed rule when xfer is required", function()
      for _, rule in ipairs({ "host", "host:read:0", "host:read:4294967297", "host:read:2147483648",
                              "host:read:1:-1", "host:read:x", "host:read:1:1:99999999999999999999",
                              "host:alloc:1:1:99999999999" }) do
        local out, code = h.run("XFER_FAULTS=" .. rule .. " " .. h.xferlua() .. [[ -e 'require "xfer"']])
        assert.are.equal(1, code, rule)
        assert.is_truthy(out:find("xferlua: XFER_FAULTS: bad fault rule '" .. rule .. "' (expected " ..
          "runtime:op[:nth[:count[:native]]], nth and count from 1 to 2147483647, native from " ..
          "-2147483648 to 2147483647, such as host:read:1)", 1, true), out)
      end
      local out = h.run("XFER_FAULTS=host:read:2147483647 " .. h.xferlua() ..
                        [[ -e 'print(require("xfer").faults.list()[1].nth)']])
      assert.are.equal("2147483647\n", out)
    end)
  end)

  describe("switches in the environment", function()
    it("take 0 or 1 and refuse anything else", function()
      for _, name in ipairs({ "XFER_TRACE", "XFER_CACHE", "XFER_SHARED_MEMORY", "XFER_VULKAN_NO_MAP" }) do
        for _, value in ipairs({ "yes", "2", "on" }) do
          local out, code = h.run(name .. "=" .. value .. " " .. h.xferlua() .. [[ -e 'require "xfer"']])
          assert.are.equal(1, code, name .. "=" .. value)
          assert.is_truthy(out:find(("xferlua: %s must be 0 or 1, not '%s'"):format(name, value), 1, true), out)
        end
        local _, code = h.run(name .. "=0 " .. h.xferlua() .. [[ -e 'require "xfer"']])
        assert.are.equal(0, code, name .. "=0")
      end
    end)
  end)
end)
