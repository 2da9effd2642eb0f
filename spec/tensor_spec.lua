-- Tensors on the host: construction, fields, values out, copies, freeing.
local xfer = require "xfer"
local h = require "support.helpers"

describe("tensor", function()
  describe("construction", function()
    it("infers the shape of nested tables", function()
      local t = xfer.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "f32" })
      assert.are.same({ 2, 3 }, t.shape)
      assert.are.equal(2, t.ndim)
      assert.are.equal(6, #t)
      assert.are.equal(6, t.numel)
      assert.are.equal(24, t.nbytes)
      assert.are.equal("f32", t.dtype)
      assert.are.equal("host", t.device.name)
      assert.are.equal("xfer.Tensor(f32[2,3] on host)", t:summary())
    end)

    it("defaults to f32 on host", function()
      local t = xfer.tensor({ 1 })
      assert.are.equal("f32", t.dtype)
      assert.are.equal(xfer.device("host"), t.device)
    end)

    it("reshapes a flat table with opts.shape", function()
      local t = xfer.tensor({ 1, 2, 3, 4, 5, 6 }, { shape = { 3, 2 }, dtype = "i32" })
      assert.are.same({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, t:totable())
    end)

    it("makes a scalar from a number", function()
      local t = xfer.tensor(7, { dtype = "i64" })
      assert.are.same({}, t.shape)
      assert.are.equal(1, #t)
      assert.are.equal(7, t:totable())
      assert.are.same({ 7 }, t:totable({ flat = true }))
      assert.are.equal("xfer.Tensor(i64[] on host)", t:summary())
    end)

    it("takes raw bytes", function()
      local t = xfer.tensor(string.rep("\0", 16), { dtype = "i32", shape = { 4 } })
      assert.are.same({ 0, 0, 0, 0 }, t:totable())
      local u = xfer.tensor("\1\0\2\0", { dtype = "u16" }) -- shape {2} from the length
      assert.are.same({ 1, 2 }, u:totable())
    end)

    it("accepts the device as a name or an xfer.Device", function()
      assert.are.equal("host", xfer.tensor({ 1 }, { device = "host" }).device.name)
      assert.are.equal("host", xfer.tensor({ 1 }, { device = xfer.device("host") }).device.name)
    end)

    it("holds empty tensors", function()
      local t = xfer.tensor({})
      assert.are.same({ 0 }, t.shape)
      assert.are.equal(0, t.nbytes)
      assert.are.same({}, t:totable())
      assert.are.equal("", t:tobytes())
      local z = xfer.zeros({ 2, 0, 3 })
      assert.are.same({ {}, {} }, z:totable())
      assert.is_true(z:clone():equals(z))
    end)

    it("zeros, empty, full and arange", function()
      assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, xfer.zeros({ 2, 3 }, { dtype = "f64" }):totable())
      assert.are.same({ 4 }, xfer.empty({ 4 }, { dtype = "u8" }).shape)
      assert.are.same({ 2.5, 2.5 }, xfer.full({ 2 }, 2.5):totable())
      assert.are.same({ true, true }, xfer.full({ 2 }, true, { dtype = "bool" }):totable())
      assert.are.same({ 0, 1, 2, 3 }, xfer.arange(4):totable())
      assert.are.same({ 2, 4, 6 }, xfer.arange(2, 8, 2, { dtype = "i16" }):totable())
      assert.are.same({ 1, 0.5 }, xfer.arange(1, 0, -0.5):totable())
      assert.are.same({}, xfer.arange(3, 1):totable())
      assert.are.same({ 5 }, xfer.zeros(5).shape)
    end)

    it("fills a large tensor in chunks", function()
      local t = xfer.full({ 3, 1000, 200 }, -3, { dtype = "i32" }) -- 2.4 MB, three fill chunks
      local flat = t:totable({ flat = true })
      assert.are.equal(600000, #flat)
      assert.are.equal(-3, flat[1])
      assert.are.equal(-3, flat[600000])
    end)

    it("takes up to 8 dimensions", function()
      local t = xfer.zeros({ 1, 1, 1, 1, 1, 1, 1, 2 })
      assert.are.equal(8, t.ndim)
      assert.are.same({ { { { { { { { 0, 0 } } } } } } } }, t:totable())
    end)
  end)

  describe("values out", function()
    it("totable nests by shape, or is flat", function()
      local t = xfer.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "u8" })
      assert.are.same({ { 1, 2 }, { 3, 4 } }, t:totable())
      assert.are.same({ 1, 2, 3, 4 }, t:totable({ flat = true }))
      assert.are.equal(4, t:totable()[2][2])
    end)

    it("tobytes gives the raw little-endian bytes", function()
      local t = xfer.tensor({ 1, 258 }, { dtype = "i16" })
      assert.are.equal("\1\0\2\1", t:tobytes())
      assert.are.equal(24, #xfer.zeros({ 2, 3 }):tobytes())
    end)

    it("bool tensors hold booleans", function()
      local t = xfer.tensor({ true, false, 1, 0 }, { dtype = "bool" })
      assert.are.same({ true, false, true, false }, t:totable())
      assert.are.equal("\1\0\1\0", t:tobytes())
    end)
  end)

  describe("copies", function()
    it("to, copy_from, clone and equals", function()
      local host = xfer.device("host")
      local t = xfer.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
      local c = t:to(host)
      assert.is_false(rawequal(t, c)) -- a new tensor ...
      assert.is_true(t == c)           -- ... of equal values
      assert.is_true(c:equals(t))
      local d = xfer.zeros({ 2, 3 })
      assert.is_false(d:equals(t))
      assert.are.equal(d, d:copy_from(t)) -- returns the target
      assert.is_true(d:equals(t))
      local e = t:clone()
      assert.is_true(e:equals(t))
      assert.are.equal(6, t:totable()[2][3])
    end)

    it("copies are independent of their source", function()
      local t = xfer.tensor({ 1, 2 })
      local c = t:clone()
      t:copy_from(xfer.tensor({ 9, 9 }))
      assert.are.same({ 1, 2 }, c:totable())
    end)

    it("equals compares values across dtypes, and is false across shapes", function()
      local t = xfer.tensor({ 1, 2 }, { dtype = "i32" })
      assert.is_true(t:equals(xfer.tensor({ 1, 2 }, { dtype = "u32" })))
      assert.is_true(t:equals(xfer.tensor({ 1, 2 }, { dtype = "f16" })))
      assert.is_false(t:equals(xfer.tensor({ 1, 3 }, { dtype = "f64" })))
      assert.is_false(t:equals(xfer.tensor({ { 1, 2 } }, { dtype = "i32" })))
    end)

    it("copy_from into itself leaves it as it was", function()
      local t = xfer.tensor({ 1, 2 })
      t:copy_from(t)
      assert.are.same({ 1, 2 }, t:totable())
    end)

    it("copy_from needs one shape, and converts between dtypes", function()
      local e = h.raises("invalid", function()
        xfer.zeros({ 2, 3 }):copy_from(xfer.zeros({ 3, 2 }))
      end)
      assert.are.equal("copy_from needs one shape at both ends: target f32[2,3], source f32[3,2]",
                       e.message)
      assert.are.same({ 1, 2 }, xfer.zeros({ 2 }):copy_from(xfer.tensor({ 1, 2 }, { dtype = "f64" })):totable())
    end)

    it("round-trips megabytes of random bytes exactly", function()
      local bytes = h.random_bytes(3 * 1024 * 1024 + 5)
      local t = xfer.tensor(bytes, { dtype = "u8" })
      assert.are.equal(bytes, t:to(xfer.device("host")):tobytes())
      assert.are.equal(bytes, t:to("host", { via = "host" }):tobytes())
      assert.are.equal(bytes, t:clone():tobytes())
    end)
  end)

  describe("free", function()
    it("makes every later use an error with code freed", function()
      local t = xfer.tensor({ 1, 2 })
      local other = xfer.tensor({ 1, 2 })
      t:free()
      assert.is_true(t.freed)
      assert.is_false(other.freed)
      assert.are.equal("xfer.Tensor(freed)", tostring(t))
      local e = h.raises("freed", t.clone, t)
      assert.are.equal("attempt to use a freed tensor", e.message)
      local uses = {
        function() return t:to("host") end,
        function() return t:totable() end,
        function() return t:tobytes() end,
        function() return t:equals(other) end,
        function() return other:equals(t) end,
        function() return other:copy_from(t) end,
        function() return t:copy_from(other) end,
        function() return #t end,
        function() return t.dtype end,
        function() return t.shape end,
        function() return t.nbytes end,
        function() return t.device end,
        function() return xfer.plan(t, "host") end,
        function() return xfer.host_roundtrip(t, "host") end,
      }
      for i, use in ipairs(uses) do
        local ok, err = pcall(use)
        assert.is_false(ok, "use #" .. i .. " did not raise")
        assert.are.equal("freed", err.code, "use #" .. i .. ": " .. tostring(err))
      end
    end)

    it("is idempotent and returns the memory", function()
      local host = xfer.device("host")
      local before = h.in_use(host)
      local t = xfer.zeros({ 1000 })
      t:free()
      t:free()
      assert.are.equal(before, xfer.memory(host).in_use)
    end)

    it("garbage collection frees what scripts drop", function()
      local host = xfer.device("host")
      local before = h.in_use(host)
      for _ = 1, 50 do local _ = xfer.zeros({ 4096 }) end
      assert.are.equal(before, h.in_use(host))
    end)
  end)
end)
