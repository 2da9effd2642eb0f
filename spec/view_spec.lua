-- Views and strided moves: every view kind on every device, moved to every device (to and
-- copy_from, into contiguous and strided targets), byte for byte against a reference that
-- Lua computes from the layout alone.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")
local SHAPE = { 4, 5, 6 }

-- The reference: a layout {shape, strides, first} over the flat values 0..n-1 of SHAPE.
local function packed(shape)
  local strides, step = {}, 1
  for i = #shape, 1, -1 do strides[i], step = step, step * shape[i] end
  return strides
end

local function layout(shape, strides, first) return { shape = shape, strides = strides, first = first } end

local function copy(t) local c = {} for i, v in ipairs(t) do c[i] = v end return c end

-- The flat indices (0-based, in the base's memory) a layout names, in row-major order.
local function indices(l)
  local out, index = {}, {}
  local function walk(d, at)
    if d > #l.shape then out[#out + 1] = at return end
    for i = 0, l.shape[d] - 1 do walk(d + 1, at + i * l.strides[d]) end
  end
  walk(1, l.first)
  return out
end

-- Each view kind: how to make it, and its layout as the reference computes it.
local base = layout(SHAPE, packed(SHAPE), 0)
local kinds = {
  { "whole", function(t) return t:view(4, 5, 6) end, base },
  { "view as 2-D", function(t) return t:view(20, 6) end, layout({ 20, 6 }, { 6, 1 }, 0) },
  { "reshape -1", function(t) return t:reshape(-1) end, layout({ 120 }, { 1 }, 0) },
  { "narrow dim 1", function(t) return t:narrow(1, 2, 2) end, layout({ 2, 5, 6 }, { 30, 6, 1 }, 30) },
  { "narrow dim 3", function(t) return t:narrow(3, 3, 3) end, layout({ 4, 5, 3 }, { 30, 6, 1 }, 2) },
  { "select dim 2", function(t) return t:select(2, 4) end, layout({ 4, 6 }, { 30, 1 }, 18) },
  { "select dim 3", function(t) return t:select(3, 6) end, layout({ 4, 5 }, { 30, 6 }, 5) },
  { "transpose 1 3", function(t) return t:transpose(1, 3) end, layout({ 6, 5, 4 }, { 1, 6, 30 }, 0) },
  { "permute 2 3 1", function(t) return t:permute(2, 3, 1) end, layout({ 5, 6, 4 }, { 6, 1, 30 }, 0) },
  { "slice with steps", function(t) return t:slice({ { 1, -1, 2 }, {}, { 2, 6, 2 } }) end,
    layout({ 2, 5, 3 }, { 60, 6, 2 }, 1) },
  { "t[{...}] picks", function(t) return t[{ 3, { 2, 4 } }] end, layout({ 3, 6 }, { 6, 1 }, 66) },
  { "t[i][j]", function(t) return t[2][3] end, layout({ 6 }, { 1 }, 42) },
  { "a view of a view", function(t) return t:transpose(1, 2):narrow(1, 2, 3):select(3, 5) end,
    layout({ 3, 4 }, { 6, 30 }, 10) },
}

local function expected_bytes(l)
  local parts = {}
  for i, at in ipairs(indices(l)) do parts[i] = at end
  return xfer.tensor(parts, { dtype = "i32" }):tobytes()
end

describe("views", function()
  for _, kind in ipairs(kinds) do
    local name, make, ref = kind[1], kind[2], kind[3]
    it(name .. ": shares memory, shape and strides as computed, moved to every device byte for byte", function()
      for _, a in ipairs(xfer.devices()) do
        local t = xfer.arange(120, { dtype = "i32", device = a }):view(SHAPE)
        local v = make(t)
        assert.are.same(ref.shape, v.shape, a.name)
        assert.are.same(ref.strides, v.strides, a.name)
        assert.are.equal(ref.first, v.offset, a.name)
        local want = expected_bytes(ref)
        assert.are.equal(want, v:tobytes(), name .. " on " .. a.name)
        for _, b in ipairs(xfer.devices()) do
          local where = name .. ": " .. a.name .. " -> " .. b.name
          local moved = v:to(b)
          assert.is_true(moved:is_contiguous(), where)
          assert.are.equal(want, moved:tobytes(), where)
          -- into a contiguous target
          local dst = xfer.zeros(ref.shape, { dtype = "i32", device = b })
          dst:copy_from(v)
          assert.are.equal(want, dst:tobytes(), where .. " (copy_from)")
          -- into the same view of a zeroed tensor on b: only the view's elements change
          local whole = xfer.zeros(SHAPE, { dtype = "i32", device = b })
          make(whole):copy_from(v)
          local model = {}
          for i = 1, 120 do model[i] = 0 end
          for _, at in ipairs(indices(ref)) do model[at + 1] = at end
          assert.are.equal(xfer.tensor(model, { dtype = "i32" }):tobytes(), whole:tobytes(),
                           where .. " (into a view)")
        end
        -- writing through the view changes the base where the reference says
        v:fill(-1)
        local model = {}
        for i = 1, 120 do model[i] = i - 1 end
        for _, at in ipairs(indices(ref)) do model[at + 1] = -1 end
        assert.are.equal(xfer.tensor(model, { dtype = "i32" }):tobytes(), t:tobytes(), name .. " fill on " .. a.name)
      end
    end)
  end

  it("is contiguous exactly when its strides are packed", function()
    local t = xfer.arange(24):view(2, 3, 4)
    assert.is_true(t:is_contiguous())
    assert.is_true(t:narrow(1, 2, 1):is_contiguous())
    assert.is_true(t:select(1, 2):is_contiguous())
    assert.is_false(t:narrow(3, 1, 2):is_contiguous())
    assert.is_false(t:transpose(2, 3):is_contiguous())
    local c = t:transpose(2, 3):contiguous()
    assert.is_true(c:is_contiguous())
    assert.are.same({ 2, 4, 3 }, c.shape)
    assert.are.equal(t:transpose(2, 3):tobytes(), c:tobytes())
    assert.are.equal(t, t:contiguous()) -- the same tensor when already packed
  end)

  it("equals and clone see a view's elements, not its memory", function()
    for _, dev in ipairs(xfer.devices()) do
      local m = xfer.arange(12, { device = dev }):view(3, 4)
      local tt = m:transpose()
      assert.is_true(tt:equals(xfer.tensor({ { 0, 4, 8 }, { 1, 5, 9 }, { 2, 6, 10 }, { 3, 7, 11 } })))
      assert.are.equal(tt:tobytes(), tt:clone():tobytes(), dev.name)
      assert.are.same({ { 0, 4, 8 }, { 1, 5, 9 }, { 2, 6, 10 }, { 3, 7, 11 } }, tt:totable(), dev.name)
    end
  end)

  it("packs a view on its own device when it goes to another device (nothing strided crosses)", function()
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        if a ~= host and b ~= host and a ~= b then
          local v = xfer.arange(120, { dtype = "i32", device = a }):view(SHAPE):transpose(1, 3)
          xfer.stats_reset()
          local moved = v:to(b)
          local stats = xfer.stats()
          assert.are.equal(v:tobytes(), moved:tobytes())
          assert.are.equal(1, #stats, a.name .. " -> " .. b.name)
          assert.are.equal(a.name, stats[1].from) -- straight from a, not through the host
          assert.are.equal(b.name, stats[1].to)
          assert.are.equal(v.nbytes, stats[1].bytes) -- the view's bytes, packed
        end
      end
    end
  end)

  it("moves views asynchronously too", function()
    for _, a in ipairs(xfer.devices()) do
      local v = xfer.arange(120, { dtype = "i32", device = a }):view(SHAPE):transpose(1, 3)
      local jobs = {}
      for _, b in ipairs(xfer.devices()) do jobs[#jobs + 1] = v:to_async(b) end
      for _, moved in ipairs(xfer.wait_all(jobs)) do assert.are.equal(v:tobytes(), moved:tobytes()) end
    end
  end)

  describe("lifetime", function()
    it("refuses to free memory that views use, and frees it with the last view", function()
      local t = xfer.zeros({ 1024 * 1024 }, { dtype = "u8" })
      local v = t:narrow(1, 10, 100)
      local e = h.raises("in_use", t.free, t)
      assert.are.equal("free: 1 view of this tensor uses its memory: free it first (or let it be " ..
                       "collected; the memory goes back with the last)", e.message)
      assert.are.equal(100, #v:totable()) -- still usable
      v:free()
      h.raises("freed", v.tobytes, v)
      t:free()
      h.raises("freed", t.tobytes, t)
    end)

    it("keeps the memory while a view is alive, after the base is collected", function()
      local before = h.in_use(host)
      local v = (function() return xfer.arange(1000, { dtype = "i32" }):narrow(1, 991, 10) end)()
      collectgarbage()
      collectgarbage()
      assert.are.same({ 990, 991, 992, 993, 994, 995, 996, 997, 998, 999 }, v:totable())
      v = nil
      assert.are.equal(before, h.in_use(host))
    end)

    it("says closed for a view of a closed device's tensor", function()
      for _, dev in ipairs(xfer.devices()) do
        if dev ~= host then
          local v = xfer.arange(10, { device = dev }):narrow(1, 2, 3)
          dev:close()
          h.raises("closed", v.tobytes, v)
          xfer.device(dev.name)
        end
      end
    end)
  end)

  describe("bad input", function()
    local t = xfer.arange(24):view(2, 3, 4)
    local cases = {
      { "view of a non-contiguous tensor", function() return t:transpose():view(24) end,
        "view: the tensor is not contiguous (its strides do not allow that shape): t:reshape(...) or t:contiguous():view(...)" },
      { "view to another size", function() return t:view(5, 5) end, "view: a shape of 25 elements for a tensor of 24" },
      { "two -1", function() return t:view(-1, -1) end, "view: only one size may be -1" },
      { "-1 that does not divide", function() return t:view(-1, 5) end, "view: 24 elements do not divide into that shape" },
      { "narrow past the end", function() return t:narrow(3, 3, 3) end,
        "narrow: the length must be a whole number in 0..2, not 3" },
      { "narrow dimension 0", function() return t:narrow(0, 1, 1) end,
        "narrow: the dimension must be a whole number in 1..3, not 0" },
      { "select out of range", function() return t:select(2, 4) end,
        "select: the index must be a whole number in 1..3 or -3..-1, not 4" },
      { "permute twice the same", function() return t:permute(1, 1, 2) end, "permute: dimension 1 given twice" },
      { "permute too few", function() return t:permute(1, 2) end, "permute: 2 dimensions given for a tensor of 3" },
      { "slice index 0", function() return t[{ 0 }] end,
        "index: the index for dimension 1 is 0 (indices start at 1; -1 is the last)" },
      { "slice backwards", function() return t:slice({ {}, { 3, 1 } }) end, "slice: entry 2 runs from 3 back to 1" },
      { "slice too many entries", function() return t:slice({ 1, 1, 1, 1 }) end,
        "slice: 4 entries for a tensor of 3 dimensions" },
      { "slice entry a string", function() return t:slice({ "x" }) end, "slice: entry 1 is a string (a number, {a, b} or {})" },
      { "t[i] out of range", function() return t[3] end, "index: the index must be a whole number in 1..2 or -2..-1, not 3" },
      { "t[1.5]", function() return t[1.5] end, "index: the index must be a whole number in 1..2 or -2..-1, not 1.5" },
    }
    h.each_invalid(cases)

    it("views of a freed tensor say freed", function()
      local u = xfer.arange(4)
      u:free()
      h.raises("freed", u.view, u, 2, 2)
      h.raises("freed", u.narrow, u, 1, 1, 1)
    end)
  end)
end)
