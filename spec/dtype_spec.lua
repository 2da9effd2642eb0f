-- Element types: byte-exact round-trips of random data, exact conversions, range checks.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

local function bytes_of(values, dtype) return xfer.tensor(values, { dtype = dtype }):tobytes() end

-- Little-endian bytes of a 16-bit pattern
local function u16(bits) return string.char(bits % 256, math.floor(bits / 256)) end

describe("dtypes", function()
  for dtype, size in pairs(h.dtypes) do
    describe(dtype, function()
      it("round-trips random bytes exactly through every host path", function()
        local n = 1000 + math.random(0, 64)
        local bytes = h.random_bytes(n * size)
        if dtype == "bool" then bytes = bytes:gsub(".", function(c) return string.char(c:byte() % 2) end) end
        local t = xfer.tensor(bytes, { dtype = dtype, shape = { n } })
        assert.are.equal(n * size, t.nbytes)
        assert.are.equal(bytes, t:tobytes())
        assert.are.equal(bytes, t:to(host):tobytes())
        assert.are.equal(bytes, t:to(host, { via = "host" }):tobytes())
        assert.are.equal(bytes, xfer.host_roundtrip(t, host):tobytes())
        assert.are.equal(bytes, t:clone():tobytes())
        local dst = xfer.empty({ n }, { dtype = dtype })
        assert.are.equal(bytes, dst:copy_from(t):tobytes())
      end)

      it("reports its size", function()
        assert.are.equal(size, xfer.zeros({ 1 }, { dtype = dtype }).nbytes)
      end)
    end)
  end

  it("round-trips random values of each integer dtype", function()
    local ranges = {
      i8 = { -128, 127 }, i16 = { -32768, 32767 }, i32 = { -2147483648, 2147483647 },
      u8 = { 0, 255 }, u16 = { 0, 65535 }, u32 = { 0, 4294967295 },
      i64 = { -2^53, 2^53 }, u64 = { 0, 2^53 },
    }
    for dtype, r in pairs(ranges) do
      local values = { r[1], r[2] }
      for i = 3, 200 do values[i] = math.floor(r[1] + math.random() * (r[2] - r[1])) end
      assert.are.same(values, xfer.tensor(values, { dtype = dtype }):totable(), dtype)
    end
  end)

  it("holds the extremes of i64 and u64 exactly in bytes", function()
    local t = xfer.tensor({ -2^63, 2^63 - 2^10 }, { dtype = "i64" })
    assert.are.equal("\0\0\0\0\0\0\0\128" .. "\0\252\255\255\255\255\255\127", t:tobytes())
    assert.are.equal(string.rep("\255", 8), xfer.tensor("\255\255\255\255\255\255\255\255", { dtype = "u64" }):tobytes())
  end)

  it("round-trips random doubles in f64 and f32-representable values in f32", function()
    local doubles, singles = {}, {}
    for i = 1, 200 do
      doubles[i] = (math.random() - 0.5) * 10 ^ math.random(-300, 300)
      singles[i] = math.random(-2^23, 2^23) * 2 ^ math.random(-60, 60)
    end
    assert.are.same(doubles, xfer.tensor(doubles, { dtype = "f64" }):totable())
    assert.are.same(singles, xfer.tensor(singles, { dtype = "f32" }):totable())
  end)

  for _, dtype in ipairs({ "f16", "bf16" }) do
    it(dtype .. ": every non-NaN bit pattern decodes and re-encodes to itself", function()
      local parts, count = {}, 0
      for bits = 0, 65535 do
        local exp = dtype == "f16" and math.floor(bits / 1024) % 32 or math.floor(bits / 128) % 256
        local mant = dtype == "f16" and bits % 1024 or bits % 128
        local all_ones = dtype == "f16" and 31 or 255
        if not (exp == all_ones and mant ~= 0) then
          count = count + 1
          parts[count] = u16(bits)
        end
      end
      local bytes = table.concat(parts)
      local values = xfer.tensor(bytes, { dtype = dtype }):totable()
      assert.are.equal(count, #values)
      assert.are.equal(bytes, bytes_of(values, dtype))
    end)
  end

  it("f16 rounds to nearest, ties to even", function()
    assert.are.equal(u16(0x3c00), bytes_of({ 1 + 2^-11 }, "f16"))          -- tie: down to even 1.0
    assert.are.equal(u16(0x3c02), bytes_of({ 1 + 3 * 2^-11 }, "f16"))      -- tie: up to even
    assert.are.equal(u16(0x3c01), bytes_of({ 1 + 2^-11 + 2^-20 }, "f16"))  -- above the tie: up
    assert.are.equal(u16(0x0000), bytes_of({ 2^-25 }, "f16"))              -- subnormal tie: to 0
    assert.are.equal(u16(0x0002), bytes_of({ 3 * 2^-25 }, "f16"))          -- subnormal tie: to even
    assert.are.equal(u16(0x0400), bytes_of({ 2^-14 }, "f16"))              -- smallest normal
    assert.are.equal(u16(0x7bff), bytes_of({ 65519 }, "f16"))              -- rounds down to max
    assert.are.equal(u16(0xc000), bytes_of({ -2 }, "f16"))
    assert.are.equal(u16(0x7c00), bytes_of({ math.huge }, "f16"))
    assert.are.equal(u16(0x8000), bytes_of({ -0.0 }, "f16"))
    assert.are.equal(u16(0x2e66), bytes_of({ 0.1 }, "f16"))
    assert.are.same({ 0.0999755859375 }, xfer.tensor({ 0.1 }, { dtype = "f16" }):totable())
  end)

  it("bf16 rounds to nearest, ties to even, straight from the double", function()
    assert.are.equal(u16(0x3f80), bytes_of({ 1 + 2^-8 }, "bf16"))
    assert.are.equal(u16(0x3f82), bytes_of({ 1 + 3 * 2^-8 }, "bf16"))
    -- 1 + 2^-8 + 2^-30 is above the tie, though rounding to f32 first would lose that
    assert.are.equal(u16(0x3f81), bytes_of({ 1 + 2^-8 + 2^-30 }, "bf16"))
    assert.are.equal(u16(0x7f80), bytes_of({ math.huge }, "bf16"))
  end)

  it("f32 rounds to nearest even and keeps inf and nan", function()
    assert.are.same({ 1 }, xfer.tensor({ 1 + 2^-24 }, { dtype = "f32" }):totable())
    local t = xfer.tensor({ math.huge, -math.huge, 0 / 0 }, { dtype = "f32" }):totable()
    assert.are.equal(math.huge, t[1])
    assert.are.equal(-math.huge, t[2])
    assert.are_not.equal(t[3], t[3])
  end)

  describe("rejects values it cannot hold, with code invalid", function()
    local cases = {
      { "i8", 128, "value 128 is out of range for i8 (-128 to 127)" },
      { "i8", -129, "value -129 is out of range for i8 (-128 to 127)" },
      { "u8", -1, "value -1 is out of range for u8 (0 to 255)" },
      { "u16", 65536, "value 65536 is out of range for u16 (0 to 65535)" },
      { "i32", 1.5, "value 1.5 is not a whole number, which i32 needs" },
      { "u32", 0 / 0, "is not a whole number, which u32 needs" },
      { "i64", 2^63, "value 9.2233720368547758e+18 is out of range for i64 (-2^63 to 2^63-1)" },
      { "u64", 2^64, "is out of range for u64 (0 to 2^64-1)" },
      { "i16", math.huge, "value inf is out of range for i16" },
      { "bool", 2, "value 2 is out of range for bool (0 or 1, false or true)" },
      { "f16", 65520, "value 65520 is out of range for f16 (largest finite 65504)" },
      { "bf16", 1e39, "is out of range for bf16" },
      { "f32", 1e39, "is out of range for f32 (largest finite 3.40e38)" },
    }
    for _, case in ipairs(cases) do
      local dtype, value, message = case[1], case[2], case[3]
      it(dtype .. " " .. tostring(value), function()
        local e = h.raises("invalid", xfer.tensor, { 0, value }, { dtype = dtype })
        assert.are.equal("tensor: element[2]: ", e.message:sub(1, 20))
        assert.is_truthy(e.message:find(message, 1, true), e.message)
        h.raises("invalid", xfer.full, { 1 }, value, { dtype = dtype })
      end)
    end
  end)

  it("accepts the extremes it can hold", function()
    assert.are.same({ -128, 127 }, xfer.tensor({ -128, 127 }, { dtype = "i8" }):totable())
    assert.are.same({ 0, 65535 }, xfer.tensor({ 0, 65535 }, { dtype = "u16" }):totable())
    assert.are.same({ 65504 }, xfer.tensor({ 65504 }, { dtype = "f16" }):totable())
    assert.are.same({ -2^63 }, xfer.tensor({ -2^63 }, { dtype = "i64" }):totable())
  end)
end)
