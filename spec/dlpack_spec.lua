-- DLPack 1.x: tensors lent to other frameworks and taken from them, no copy; checked in Lua
-- (xferlua on both sides) and against NumPy (spec/dlpack/numpy_check.py, via ctypes).
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("dlpack", function()
  for _, versioned in ipairs({ true, false }) do
    local kind = versioned and "DLManagedTensorVersioned" or "DLManagedTensor"
    it("lends a host tensor as " .. kind .. " and takes it back without a copy", function()
      local t = xfer.arange(12, { dtype = "i16" }):view(3, 4)
      local u = xfer.from_dlpack(t:to_dlpack({ versioned = versioned }), { versioned = versioned })
      assert.is_true(u:is_wrapped())
      assert.are.same(t.shape, u.shape)
      assert.are.equal(t:tobytes(), u:tobytes())
      assert.are.equal(t:address(), u:address()) -- the same memory
      u:set(3, 4, -5)
      assert.are.equal(-5, t:get(3, 4))
      -- views keep their strides across
      local v = xfer.from_dlpack(t:transpose():to_dlpack({ versioned = versioned }), { versioned = versioned })
      assert.are.same({ 1, 4 }, v.strides)
      assert.are.same(t:transpose():totable(), v:totable())
    end)
  end

  it("keeps a lent tensor alive until the consumer's deleter runs", function()
    local managed = (function() return xfer.arange(1000, { dtype = "f64" }):to_dlpack() end)()
    collectgarbage()
    collectgarbage() -- the script's tensor is gone; the lent one is not
    local u = xfer.from_dlpack(managed)
    assert.are.equal(999, u:get(1000))
    local before = h.in_use(host)
    u = nil
    collectgarbage()
    collectgarbage() -- the deleter ran: the memory is back
    assert.is_true(h.in_use(host) < before)
  end)

  it("lends every dtype with its DLPack code, and takes them back", function()
    for _, dtype in ipairs({ "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool" }) do
      local t = xfer.zeros({ 3 }, { dtype = dtype })
      local u = xfer.from_dlpack(t:to_dlpack())
      assert.are.equal(dtype, u.dtype)
    end
  end)

  it("refuses what it cannot lend or take, saying why", function()
    for _, dev in ipairs(xfer.devices()) do
      if dev.runtime ~= "host" and dev.runtime ~= "cuda" then
        local t = xfer.zeros({ 2 }, { device = dev })
        assert.are.equal(("dlpack: %s tensors are not lent through DLPack (host and CUDA are; move it there first)")
                         :format(dev.name), h.raises("unsupported", t.to_dlpack, t).message)
      end
    end
    local t = xfer.arange(2)
    assert.are.equal("to_dlpack: unknown option 'copy' (known: versioned)",
                     h.raises("invalid", t.to_dlpack, t, { copy = true }).message)
    assert.are.equal("bad argument #1 to 'from_dlpack' (DLPack tensor (light userdata, address or FFI pointer) expected, got string)",
                     h.raises("invalid", xfer.from_dlpack, "x").message)
    local freed = xfer.arange(2)
    freed:free()
    h.raises("freed", freed.to_dlpack, freed)
  end)

  it("works with NumPy both ways: numpy.from_dlpack and NumPy's __dlpack__ (python3-numpy)", function()
    local python = "/usr/bin/python3"
    local _, has_numpy = h.run(python .. " -c 'import numpy'")
    if has_numpy ~= 0 then return pending("Debian's python3-numpy is not installed here") end
    if h.sanitized() then return pending("a sanitizer build: Python cannot load its libraries (the release run checks this)") end
    local lib = (h.xferlua():match("^(.*)/[^/]+$")) .. "/libxfer.so"
    local out, code = h.run(("%s spec/dlpack/numpy_check.py '%s'"):format(python, lib))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("dlpack numpy: all checks passed", 1, true), out)
    assert.are.equal(5, select(2, out:gsub("\nok: ", "\n")) + (out:match("^ok: ") and 1 or 0), out)
  end)
end)
