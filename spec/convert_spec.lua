-- dtype on the way: t:to(dev, {dtype = ...}), copy_from between dtypes, t:to_dtype(name):
-- converted on the host exactly as the constructors convert, range errors naming the element.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("dtype on the way", function()
  -- values and what each dtype makes of them (round to nearest even), as the constructors do
  local values = { 1.5, 2.25, -3, 65504, 1 / 3, 2049, 1e-8 }
  local cases = {
    { "f16", { 1.5, 2.25, -3, 65504, 0.333251953125, 2048, 0 } },
    { "bf16", { 1.5, 2.25, -3, 65536, 0.333984375, 2048, 1.0011717677116394e-08 } },
    { "f64", values },
  }
  for _, case in ipairs(cases) do
    local dtype, want = case[1], case[2]
    it("to f32 -> " .. dtype .. " between every pair of devices, as the constructor rounds", function()
      -- the constructor given the f32 values the source holds
      local made = xfer.tensor(xfer.tensor(values, { dtype = "f32" }):totable(), { dtype = dtype })
      for _, a in ipairs(xfer.devices()) do
        local src = xfer.tensor(values, { dtype = "f32", device = a })
        for _, b in ipairs(xfer.devices()) do
          local moved = src:to(b, { dtype = dtype })
          assert.are.equal(dtype, moved.dtype)
          assert.are.equal(b, moved.device)
          assert.are.equal(made:tobytes(), moved:tobytes(), a.name .. " -> " .. b.name)
          if dtype ~= "f64" then
            for i, v in ipairs(moved:totable()) do
              assert.is_true(math.abs(v - want[i]) <= math.abs(want[i]) * 1e-6, dtype .. " element " .. i)
            end
          end
        end
      end
    end)
  end

  it("converts integers exactly, 64-bit ones included", function()
    local big = 2 ^ 53 + 2
    local t = xfer.tensor({ big, 7 }, { dtype = "i64" })
    assert.are.equal(xfer.tensor({ big, 7 }, { dtype = "u64" }):tobytes(), t:to_dtype("u64"):tobytes())
    assert.are.same({ true, false, true }, xfer.tensor({ 1, 0, 1 }, { dtype = "i32" }):to(host, { dtype = "bool" }):totable())
    assert.are.same({ 255, 0 }, xfer.tensor({ 255, 0 }, { dtype = "i64" }):to(host, { dtype = "u8" }):totable())
    assert.are.same({ 1.5, -2 }, xfer.tensor({ 1.5, -2 }, { dtype = "f16" }):to_dtype("f32"):totable())
  end)

  it("copies between dtypes into a tensor on any device, views included", function()
    for _, dev in ipairs(xfer.devices()) do
      local dst = xfer.zeros({ 2, 3 }, { dtype = "i16", device = dev })
      dst:copy_from(xfer.arange(6, { dtype = "f64" }):view(2, 3))
      assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, dst:totable(), dev.name)
      dst:transpose():copy_from(xfer.arange(6, { dtype = "u8", device = dev }):view(3, 2))
      assert.are.same({ { 0, 2, 4 }, { 1, 3, 5 } }, dst:totable(), dev.name)
    end
  end)

  it("converts on to_async too", function()
    for _, dev in ipairs(xfer.devices()) do
      local moved = xfer.arange(5):to_async(dev, { dtype = "bf16" }):wait()
      assert.are.equal("bf16", moved.dtype)
      assert.are.same({ 0, 1, 2, 3, 4 }, moved:totable())
    end
  end)

  it("names the element that does not fit, and leaves nothing behind", function()
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        local src = xfer.tensor({ 1, 2, 300 }, { dtype = "i32", device = a })
        local before = h.in_use(b)
        local e = h.raises("invalid", src.to, src, b, { dtype = "u8" })
        assert.are.equal(("Failed to convert a tensor from %s to %s: i32 to u8: element 3: value 300 is " ..
                          "out of range for u8 (0 to 255)"):format(a.name, b.name), e.message)
        assert.are.equal("convert", e.op)
        assert.are.equal(a.name, e.from)
        assert.are.equal(b.name, e.to)
        assert.are.equal(before, h.in_use(b))
      end
    end
    local e = h.raises("invalid", xfer.zeros({ 2 }, { dtype = "u16" }).copy_from, xfer.zeros({ 2 }, { dtype = "u16" }),
                       xfer.tensor({ 1, 1e10 }, { dtype = "f32" }))
    assert.is_truthy(e.message:find("f32 to u16: element 2: value 10000000000 is out of range for u16", 1, true), e.message)
    e = h.raises("invalid", xfer.tensor({ 1e300 }, { dtype = "f64" }).to_dtype, xfer.tensor({ 1e300 }, { dtype = "f64" }), "f32")
    assert.is_truthy(e.message:find("f64 to f32: element 1: value 1.0000000000000001e+300 is out of range for f32", 1, true),
                     e.message)
  end)

  it("says a path other than the host cannot convert", function()
    local t = xfer.arange(3)
    for _, via in ipairs({ "same_device", "staged", "interop", "same_runtime" }) do
      local e = h.raises("unsupported", t.to, t, host, { dtype = "i8", via = via })
      assert.are.equal(("a dtype change is made on the host: the move passes the host, which via = " ..
                        "\"%s\" forbids (via = \"host\", or none)"):format(via), e.message)
    end
    assert.are.equal("i8", t:to(host, { dtype = "i8", via = "host" }).dtype)
  end)

  it("refuses unknown dtypes and a dtype option on copy_from", function()
    local t = xfer.arange(3)
    assert.are.equal("to: unknown dtype 'f8'", h.raises("invalid", t.to, t, host, { dtype = "f8" }).message)
    assert.are.equal("to_dtype: a dtype name with a NUL byte", h.raises("invalid", t.to_dtype, t, "f16\0x").message)
    assert.are.equal("bad argument #2 to 'to_dtype' (dtype name expected, got no value)",
                     h.raises("invalid", t.to_dtype, t).message)
    assert.are.equal("copy_from: the target's dtype is the dtype (no 'dtype' option)",
                     h.raises("invalid", t.copy_from, t, t, { dtype = "f32" }).message)
    assert.are.equal("copy_from needs one shape at both ends: target f32[3], source i32[2]",
                     h.raises("invalid", t.copy_from, t, xfer.arange(2, { dtype = "i32" })).message)
  end)
end)
