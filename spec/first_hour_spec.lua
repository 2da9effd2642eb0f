-- What a new user hits in the first hour (issue 27): `xfer` as a global in xferlua, the dtype
-- names typed from NumPy and PyTorch, a fallback list with a hole, a native code that does
-- not fit in XFER_FAULTS.
local xfer = require "xfer"
local h = require "support.helpers"

describe("the first hour", function()
  it("xferlua has `xfer` as a global, as its help says: -e, a script, stdin", function()
    local out, code = h.run(h.xferlua() .. " -e 'print(xfer.version, xfer == require(\"xfer\"))'")
    assert.are.equal(0, code, out)
    assert.are.equal(xfer.version .. "\ttrue\n", out)
    out, code = h.run("echo 'print(type(xfer.devices))' | " .. h.xferlua())
    assert.are.equal(0, code, out)
    assert.are.equal("function\n", out)
    -- looked up on first use: a bad XFER_FAULTS fails the script that uses it
    out, code = h.run("XFER_FAULTS=nope " .. h.xferlua() .. " -e 'print(\"before\"); print(xfer.version)'")
    assert.are.equal(1, code)
    assert.matches("before", out)
    assert.matches("bad fault rule 'nope'", out)
    -- other globals stay undefined
    out = h.run(h.xferlua() .. " -e 'print(torch, rawget(_G, \"xfer\"))'")
    assert.are.equal("nil\tnil\n", out)
  end)

  it("takes the dtype names users type from NumPy and PyTorch", function()
    for alias, dtype in pairs({ float32 = "f32", float = "f32", float64 = "f64", double = "f64",
                                float16 = "f16", half = "f16", bfloat16 = "bf16", int8 = "i8",
                                int16 = "i16", int32 = "i32", int = "i32", int64 = "i64",
                                long = "i64", uint8 = "u8", uint16 = "u16", uint32 = "u32",
                                uint64 = "u64", bool_ = "bool" }) do
      assert.are.equal(dtype, xfer.zeros({ 2 }, { dtype = alias }).dtype, alias)
    end
    local t = xfer.tensor({ 1.5, 2.5 }, { dtype = "float32" })
    assert.are.equal("f64", t:to("host", { dtype = "float64" }).dtype)
    assert.matches("unknown dtype 'float8'", h.raises("invalid", xfer.zeros, { 1 }, { dtype = "float8" }).message)
  end)

  it("refuses a fallback list with a hole, saying where", function()
    local t = xfer.zeros({ 4 })
    local e = h.raises("invalid", xfer.transfer, t, "host", { fallback = { nil, "host" } })
    assert.matches("fallback%[1%] is a nil, not a path", e.message)
    e = h.raises("invalid", xfer.transfer, t, "host", { fallback = { "host", x = 1 } })
    assert.matches("not a table with the key x", e.message)
    assert.matches("a list of paths", h.raises("invalid", xfer.transfer, t, "host", { fallback = {} }).message)
    assert.is_true(xfer.transfer(t, "host", { fallback = { "host" } }):equals(t))
  end)

  it("says why a device of an unavailable runtime is not there: the runtime's reason", function()
    local off
    for _, r in ipairs(xfer.runtimes()) do
      if not r.available and r.name ~= "remote" then off = r end
    end
    if not off then return pending("every runtime is available here") end
    local e = h.raises("unavailable", xfer.device, off.name .. ":0")
    assert.are.equal(("no device '%s:0': %s is unavailable here: %s"):format(off.name, off.name, off.reason), e.message)
    assert.matches("unavailable here", h.raises("unavailable", xfer.zeros, { 1 }, { device = off.name .. ":0" }).message)
  end)

  it("refuses in XFER_FAULTS a native code that does not fit, as faults.inject does", function()
    local out, code = h.run("XFER_FAULTS=host:alloc:1:1:99999999999 " .. h.xferlua() .. " -e 'require(\"xfer\")'")
    assert.are.equal(1, code, out)
    assert.matches("native from %-2147483648 to 2147483647", out)
    out, code = h.run("XFER_FAULTS=host:alloc:1:1:-12 " .. h.xferlua() ..
                      " -e 'print(require(\"xfer\").faults.list()[1].native)'")
    assert.are.equal(0, code, out)
    assert.are.equal("-12\n", out)
    assert.matches("'native' must be a whole number", h.raises("invalid", xfer.faults.inject,
      { runtime = "host", op = "alloc", native = 99999999999 }).message)
  end)

  it("the README names the Debian packages the scripts install, all of them", function()
    local lib = assert(io.open("scripts/lib.sh")):read("*a")
    local installed = {}
    for name in lib:match('XFER_PACKAGES="([^"]*)"'):gmatch("%S+") do installed[#installed + 1] = name end
    local readme = assert(io.open("README.md")):read("*a")
    local list = readme:match("the missing ones.-: `([^`]*)` %(`XFER_PACKAGES`")
    assert.truthy(list, "the README's package list")
    local named = {}
    for name in list:gmatch("%S+") do named[#named + 1] = name end
    assert.are.same(installed, named)
  end)
end)
