-- Values as NumPy and PyTorch users check and make them: print(t), sum/min/max, allclose,
-- equals and == across dtypes, ones, rand/randn (seeded), *_like, negative indices, and
-- t[i][j] = v -- on the host and on every device here.
local xfer = require "xfer"
local h = require "support.helpers"

describe("values", function()
  describe("print(t)", function()
    it("shows the summary and the values, the middle of a long dimension left out", function()
      assert.are.equal("xfer.Tensor(f32[2,2] on host)\n[[1., 2.],\n [3., 4.]]",
                       tostring(xfer.tensor({ { 1, 2 }, { 3, 4 } })))
      local long = tostring(xfer.arange(100))
      assert.are.equal("xfer.Tensor(f32[100] on host)\n[ 0.,  1.,  2., ..., 97., 98., 99.]", long)
      local t = xfer.arange(3)
      t:free()
      assert.are.equal("xfer.Tensor(freed)", tostring(t))
    end)

    it("reads a device tensor's shown values off the device", function()
      for _, dev in ipairs(xfer.devices()) do
        local t = xfer.tensor({ 1.5, -2, 3 }):to(dev)
        assert.are.equal(("xfer.Tensor(f32[3] on %s)\n[1.5, -2.,  3.]"):format(dev.name), tostring(t))
        assert.are.equal(("xfer.Tensor(f32[3] on %s)"):format(dev.name), t:summary())
      end
    end)
  end)

  describe("sum, min, max", function()
    it("reduce every dtype, on every device, to a number", function()
      for _, dev in ipairs(xfer.devices()) do
        for _, dtype in ipairs({ "u8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64" }) do
          local t = xfer.tensor({ { 3, 1 }, { 4, 2 } }, { dtype = dtype }):to(dev)
          assert.are.equal(10, t:sum(), dtype .. " on " .. dev.name)
          assert.are.equal(1, t:min(), dtype .. " on " .. dev.name)
          assert.are.equal(4, t:max(), dtype .. " on " .. dev.name)
        end
      end
      assert.are.equal(2, xfer.tensor({ true, false, true }, { dtype = "bool" }):sum())
    end)

    it("take views as their elements, an empty sum is 0, and NaN wins min and max", function()
      local m = xfer.arange(12):view(3, 4)
      assert.are.equal(1 + 5 + 9, m:select(2, 2):sum())
      assert.are.equal(0, xfer.zeros({ 0 }):sum())
      h.raises("invalid", function() return xfer.zeros({ 0 }):min() end)
      local n = xfer.tensor({ 1, 0 / 0, 3 }, { dtype = "f64" })
      assert.is_true(n:max() ~= n:max())
      assert.is_true(n:min() ~= n:min())
      assert.are.equal(-3, xfer.tensor({ 1, -3, 2 }):min())
    end)
  end)

  describe("equals, ==, allclose", function()
    it("compare values across dtypes and devices", function()
      local a = xfer.tensor({ 1, 2, 3 }, { dtype = "f32" })
      assert.is_true(a:equals(xfer.tensor({ 1, 2, 3 }, { dtype = "i64" })))
      assert.is_true(a == xfer.tensor({ 1, 2, 3 }, { dtype = "f16" }))
      assert.is_false(a == xfer.tensor({ 1, 2, 4 }))
      assert.is_false(a == xfer.tensor({ { 1, 2, 3 } }))
      for _, dev in ipairs(xfer.devices()) do
        assert.is_true(a == a:to(dev, { dtype = "f64" }), dev.name)
      end
      local keys = { [a] = 1 } -- as a table key a tensor is itself
      assert.is_nil(keys[a:clone()])
    end)

    it("allclose takes rtol and atol as numpy.allclose does", function()
      local a = xfer.tensor({ 1, 100, 0 }, { dtype = "f64" })
      assert.is_true(a:allclose(xfer.tensor({ 1 + 1e-6, 100.0005, 1e-9 }, { dtype = "f64" })))
      assert.is_false(a:allclose(xfer.tensor({ 1.01, 100, 0 }, { dtype = "f64" })))
      assert.is_true(a:allclose(xfer.tensor({ 1.01, 100, 0 }, { dtype = "f64" }), { rtol = 0.02 }))
      assert.is_true(a:allclose(xfer.tensor({ 1, 100, 0.5 }, { dtype = "f64" }), { atol = 0.5 }))
      local nan = xfer.tensor({ 0 / 0, 1 }, { dtype = "f64" })
      assert.is_false(nan:allclose(nan))
      assert.is_true(nan:allclose(nan, { equal_nan = true }))
      -- f32 and bf16 of one value, within bf16's precision
      local x = xfer.tensor({ 0.1, 0.2, 0.3 })
      assert.is_true(x:allclose(x:to("host", { dtype = "bf16" }), { rtol = 1e-2 }))
    end)

    h.each_invalid({
      { "allclose of two shapes", function() return xfer.zeros({ 2 }):allclose(xfer.zeros({ 3 })) end,
        "allclose: shapes [2] and [3] differ" },
      { "allclose: an unknown option", function() return xfer.zeros({ 2 }):allclose(xfer.zeros({ 2 }), { tol = 1 }) end,
        "allclose: unknown option 'tol' (known: atol, equal_nan, rtol)" },
      { "allclose: a negative rtol", function() return xfer.zeros({ 2 }):allclose(xfer.zeros({ 2 }), { rtol = -1 }) end,
        "allclose: rtol and atol must be numbers >= 0" },
      { "allclose with a number", function() return xfer.zeros({ 2 }):allclose(3) end,
        "bad argument #2 to 'allclose' (xfer.Tensor expected, got number)" },
    })
  end)

  describe("makers", function()
    it("ones and the *_like makers keep shape, dtype and device unless told", function()
      assert.are.same({ { 1, 1 }, { 1, 1 } }, xfer.ones({ 2, 2 }):totable())
      for _, dev in ipairs(xfer.devices()) do
        local t = xfer.arange(6, { dtype = "i32" }):view(2, 3):to(dev)
        local z = xfer.zeros_like(t)
        assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, z:totable())
        assert.are.equal("i32", z.dtype)
        assert.are.equal(dev.name, z.device.name)
        assert.are.same({ 1, 1, 1 }, xfer.ones_like(t)[2]:totable())
        local f = xfer.full_like(t, 7, { dtype = "f64", device = "host" })
        assert.are.equal("f64", f.dtype)
        assert.are.equal(42, f:sum())
        assert.are.same({ 2, 3 }, xfer.empty_like(t).shape)
        assert.are.same({ 2, 3 }, xfer.rand_like(t, { dtype = "f32", seed = 1 }).shape)
      end
    end)

    it("rand and randn are seeded: one seed, one stream of values, in range", function()
      local a = xfer.rand({ 1000 }, { seed = 42 })
      assert.is_true(a == xfer.rand({ 1000 }, { seed = 42 }))
      assert.is_false(a == xfer.rand({ 1000 }, { seed = 43 }))
      assert.is_true(a:min() > 0 and a:max() < 1)
      assert.is_true(math.abs(a:sum() / 1000 - 0.5) < 0.05)
      local n = xfer.randn({ 20000 }, { seed = 7, dtype = "f64" })
      local mean = n:sum() / 20000
      assert.is_true(math.abs(mean) < 0.05, "mean " .. mean)
      local sq = n:to("host")
      local s2 = 0
      for _, v in ipairs(sq:totable()) do s2 = s2 + v * v end
      assert.is_true(math.abs(s2 / 20000 - 1) < 0.05, "variance " .. s2 / 20000)
      for _, dev in ipairs(xfer.devices()) do
        local r = xfer.randn({ 4, 4 }, { seed = 1, device = dev, dtype = "bf16" })
        assert.are.equal(dev.name, r.device.name)
        assert.is_true(r:to("host") == xfer.randn({ 4, 4 }, { seed = 1, dtype = "bf16" }))
      end
    end)

    h.each_invalid({
      { "rand of an integer dtype", function() return xfer.rand({ 2 }, { dtype = "i32" }) end,
        "rand: a floating dtype (f16, bf16, f32, f64), not 'i32'" },
      { "randn: a seed of 1.5", function() return xfer.randn({ 2 }, { seed = 1.5 }) end,
        "randn: option 'seed' must be a whole number" },
      { "zeros_like of a number", function() return xfer.zeros_like(3) end,
        "bad argument #1 to 'zeros_like' (xfer.Tensor expected, got number)" },
      { "ones_like: a seed", function() return xfer.ones_like(xfer.zeros({ 2 }), { seed = 1 }) end,
        "ones_like: unknown option 'seed' (known: device, dtype)" },
    })
  end)

  describe("indices", function()
    it("count from the end when negative, as Python's", function()
      local m = xfer.arange(12):view(3, 4)
      assert.are.equal(11, m[-1][-1])
      assert.are.equal(8, m[-1][1])
      assert.are.equal(10, m:get(-1, -2))
      assert.are.same({ 3, 7, 11 }, m:select(2, -1):totable())
      assert.are.same({ { 8, 9, 10, 11 } }, m:narrow(1, -1, 1):totable())
      m:set(-1, -1, 99)
      assert.are.equal(99, m:get(3, 4))
    end)

    it("t[i] = v and t[i][j] = v write in place, on every device", function()
      for _, dev in ipairs(xfer.devices()) do
        local m = xfer.zeros({ 2, 3 }, { device = dev })
        m[1][2] = 5
        m[-1] = 7                              -- a row filled
        m[1][-1] = -1
        assert.are.same({ { 0, 5, -1 }, { 7, 7, 7 } }, m:totable(), dev.name)
        m[2] = xfer.tensor({ 1, 2, 3 })        -- a row copied in
        assert.are.same({ 1, 2, 3 }, m[2]:totable(), dev.name)
      end
    end)

    local m = xfer.zeros({ 2, 3 })
    h.each_invalid({
      { "t[i] = v past the end", function() m[3] = 1 end,
        "newindex: the index must be a whole number in 1..2 or -2..-1, not 3" },
      { "t[i] = a string", function() m[1] = "x" end,
        "newindex: t[i] = v takes a number, a boolean or an xfer.Tensor of entry i's shape, not a string" },
      { "t[i] = a tensor of another shape", function() m[1] = xfer.zeros({ 2 }) end,
        "copy_from needs one shape at both ends: target f32[3], source f32[2]" },
      { "t.field = v", function() m.shape = 1 end,
        "xfer.Tensor fields are read-only: cannot set 'shape' (methods of your own go in xfer.Tensor)" },
      { "t[-3]", function() return m[-3] end, "index: the index must be a whole number in 1..2 or -2..-1, not -3" },
    })
  end)
end)
