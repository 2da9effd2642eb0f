-- xfer.transfer: the fallback policy written in Lua, and xfer.error for policies of one's own.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("xfer.transfer", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function() xfer.faults.clear() end)

  it("moves on the first path when it works, with no failed attempts", function()
    local t = xfer.arange(16)
    local moved, attempts = xfer.transfer(t, host, { log = false })
    assert.is_true(moved:equals(t))
    assert.are.same({}, attempts)
  end)

  it("falls back to the next path and reports the failed attempt", function()
    local t = xfer.arange(16)
    local logged = {}
    xfer.faults.inject({ runtime = "host", op = "copy" })
    local moved, attempts = xfer.transfer(t, host, {
      fallback = { "same_device", "host" },
      log = function(a) logged[#logged + 1] = a end,
    })
    assert.is_true(moved:equals(t))
    assert.are.equal(1, #attempts)
    assert.are.same(attempts, logged)
    local a = attempts[1]
    assert.are.equal("same_device", a.path)
    assert.are.equal(1, a.try)
    assert.are.equal("write", a.code)
    assert.are.equal("copy", a.op)
    assert.are.equal("host", a.from)
    assert.are.equal("host", a.to)
    assert.is_false(a.retryable)
    assert.is_truthy(a.message:find("EIO", 1, true))
  end)

  it("retries a retryable failure on the same path", function()
    local t = xfer.arange(16)
    h.uncached() -- the allocation reaches the driver, which the fault fails
    xfer.faults.inject({ runtime = "host", op = "alloc" }) -- ENOMEM: retryable
    local moved, attempts = xfer.transfer(t, host, { fallback = { "same_device" }, retries = 2, log = false })
    assert.is_true(moved:equals(t))
    assert.are.equal(1, #attempts)
    assert.is_true(attempts[1].retryable)
  end)

  it("skips paths that do not apply", function()
    local t = xfer.arange(4)
    local moved, attempts = xfer.transfer(t, host, { fallback = { "interop", "staged", "host" }, log = false })
    assert.is_true(moved:equals(t))
    assert.are.same({}, attempts)
  end)

  it("raises the last error when every path fails, leaving the source intact", function()
    local t = xfer.arange(4)
    local before = h.in_use(host)
    xfer.faults.inject({ runtime = "host", op = "copy" })
    xfer.faults.inject({ runtime = "host", op = "read" })
    local e = h.raises("read", xfer.transfer, t, host, { fallback = { "same_device", "host" }, log = false })
    assert.are.equal("Failed to read a tensor off host on the way to host: EIO (5): Input/output error [injected fault]",
                     e.message)
    assert.are.same({ 0, 1, 2, 3 }, t:totable())
    assert.are.equal(before, h.in_use(host))
  end)

  it("raises unsupported when no path applies", function()
    local e = h.raises("unsupported", xfer.transfer, xfer.arange(4), host, { fallback = { "interop" }, log = false })
    assert.are.equal("transfer: none of the paths interop applies to host -> host", e.message)
  end)

  it("refuses unknown options and an empty fallback list", function()
    local e = h.raises("invalid", xfer.transfer, xfer.arange(4), host, { retry = 1 })
    assert.are.equal("transfer: unknown option 'retry' (known: fallback, retries, log)", e.message)
    h.raises("invalid", xfer.transfer, xfer.arange(4), host, { fallback = {} })
  end)
end)

describe("xfer.error", function()
  it("makes an error object like the C side's", function()
    local e = xfer.error({ code = "read", op = "mine", from = "a", to = "b", message = "it broke",
                           retryable = true, native = 7, native_name = "E7" })
    assert.is_true(xfer.is_error(e))
    assert.are.equal("it broke", tostring(e))
    assert.are.equal("read", e.code)
    assert.are.equal(7, e.native)
    assert.is_true(e.retryable)
    assert.is_false(e.injected)
    local ok, raised = pcall(error, e)
    assert.is_false(ok)
    assert.are.equal(e, raised)
  end)

  it("refuses an unknown code", function()
    local e = h.raises("invalid", xfer.error, { code = "oops", message = "x" })
    assert.are.equal("error: unknown code 'oops' (see xfer.codes)", e.message)
  end)
end)
