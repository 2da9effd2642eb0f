-- Elements and in-place writes (get, set, item, fill, zero, write), printing, strict
-- construction, device filters, and errors in string idioms.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("elements", function()
  it("get, set and item read and write one element on every device", function()
    for _, dev in ipairs(xfer.devices()) do
      local t = xfer.arange(12, { dtype = "i32", device = dev }):view(3, 4)
      assert.are.equal(6, t:get(2, 3), dev.name)
      assert.are.equal(t, t:set(2, 3, -7))
      assert.are.equal(-7, t:get(2, 3), dev.name)
      assert.are.equal(-7, t[2][3], dev.name)
      assert.are.same({ 0, 1, 2, 3, 4, 5, -7, 7, 8, 9, 10, 11 }, t:totable({ flat = true }), dev.name)
      assert.are.equal(11, t:get(3, 4))
      assert.are.equal(2.5, xfer.tensor({ 2.5 }, { device = dev }):item())
      assert.are.equal(true, xfer.tensor({ true }, { dtype = "bool", device = dev }):item())
      -- through a view: the view's index, the base's element
      local col = t:select(2, 2)
      col:set(3, 99)
      assert.are.equal(99, t:get(3, 2), dev.name)
    end
  end)

  it("reads one element of a big tensor with one small read, not a copy", function()
    local t = xfer.zeros({ 16 * 1024 * 1024 }, { dtype = "f32" }) -- 64 MiB
    t:set(12345678, 4.5)
    xfer.stats_reset()
    local lua_before = collectgarbage("count")
    assert.are.equal(4.5, t:get(12345678))
    assert.are.equal(4.5, t[12345678])
    assert.is_true(collectgarbage("count") - lua_before < 64) -- KiB: no table of the tensor
    assert.are.same({}, xfer.stats()) -- no move was made
  end)

  it("fill, zero and write change the tensor in place on every device", function()
    for _, dev in ipairs(xfer.devices()) do
      local t = xfer.empty({ 2, 3 }, { dtype = "i16", device = dev })
      assert.are.equal(t, t:fill(7))
      assert.are.same({ { 7, 7, 7 }, { 7, 7, 7 } }, t:totable(), dev.name)
      t:zero()
      assert.are.same({ 0, 0, 0, 0, 0, 0 }, t:totable({ flat = true }), dev.name)
      t:write({ 1, 2 }, 3)
      assert.are.same({ 0, 0, 0, 1, 2, 0 }, t:totable({ flat = true }), dev.name)
      t:write({ { 1, 2, 3 }, { 4, 5, 6 } })
      assert.are.same({ 1, 2, 3, 4, 5, 6 }, t:totable({ flat = true }), dev.name)
      t:write(xfer.tensor({ 9, 8 }, { dtype = "i16" }):tobytes(), 4)
      assert.are.same({ 1, 2, 3, 4, 9, 8 }, t:totable({ flat = true }), dev.name)
      -- a strided view written whole scatters into its base
      t:transpose():write({ 10, 20, 30, 40, 50, 60 })
      assert.are.same({ { 10, 30, 50 }, { 20, 40, 60 } }, t:totable(), dev.name)
    end
  end)

  describe("bad input", function()
    local t = xfer.arange(6, { dtype = "u8" }):view(2, 3)
    local cases = {
      { "get with too few indices", function() return t:get(1) end, "get: 1 indices for a tensor of 2 dimensions" },
      { "get out of range", function() return t:get(3, 1) end, "get: index 1 must be a whole number in 1..2 or -2..-1, not 3" },
      { "get with a string", function() return t:get(1, "x") end, "get: index 2 must be a whole number, not string" },
      { "set out of the dtype's range", function() return t:set(1, 1, 300) end,
        "set: element: value 300 is out of range for u8 (0 to 255)" },
      { "set with no value", function() return t:set() end, "set: indices and a value expected" },
      { "item of many", function() return t:item() end, "item: the tensor has 6 elements, not 1 (t:get(i, ...) reads one of them)" },
      { "fill with a string", function() return t:fill("x") end, "fill: element is a string, expected a number or boolean" },
      { "fill with nothing", function() return t:fill() end, "fill: one value expected" },
      { "write past the end", function() return t:write({ 1, 2 }, 5) end,
        "write: 2 elements from offset 5 run past the 6 of the tensor" },
      { "write too many", function() return t:write({ 1, 2, 3, 4, 5, 6, 7 }) end, "write: 7 values for a tensor of 6" },
      { "write odd bytes", function() return xfer.arange(2, { dtype = "i32" }):write("abc") end,
        "write: 3 bytes are not whole i32 elements (4 bytes each)" },
      { "write part of a strided view", function() return t:transpose():write({ 1 }, 1) end,
        "write: part of a non-contiguous tensor: write all of it, or a view of the part (t:narrow, t:slice)" },
      { "write a number", function() return t:write(5) end, "bad argument #2 to 'write' (string or table expected, got number)" },
    }
    h.each_invalid(cases)

    it("a freed tensor says freed", function()
      local u = xfer.arange(4)
      u:free()
      for _, call in ipairs({ function() return u:get(1) end, function() return u:set(1, 1) end,
                              function() return u:fill(1) end, function() return u:write({ 1 }) end,
                              function() return u[1] end }) do
        h.raises("freed", call)
      end
      assert.are.equal("xfer.Tensor(freed)", u:format())
    end)
  end)
end)

describe("printing", function()
  it("shows values numpy-style under the header", function()
    assert.are.equal("xfer.Tensor(f32[2,3] on host)\n[[0., 1., 2.],\n [3., 4., 5.]]",
                     xfer.arange(6):view(2, 3):format())
    assert.are.equal("xfer.Tensor(i32[3] on host)\n[-1,  0, 12]",
                     xfer.tensor({ -1, 0, 12 }, { dtype = "i32" }):format())
    assert.are.equal("xfer.Tensor(f32[] on host)\n2.5", xfer.tensor(2.5, { shape = {} }):format())
    assert.are.equal("xfer.Tensor(bool[2] on host)\n[ true, false]",
                     xfer.tensor({ true, false }, { dtype = "bool" }):format())
    -- print(t) and tostring(t) show the values too; t:summary() is the one line
    assert.are.equal("xfer.Tensor(f32[2,3] on host)\n[[0., 1., 2.],\n [3., 4., 5.]]", tostring(xfer.arange(6):view(2, 3)))
    assert.are.equal("xfer.Tensor(f32[2,3] on host)", xfer.arange(6):view(2, 3):summary())
  end)

  it("summarises beyond max, reading only the shown elements from the device", function()
    for _, dev in ipairs(xfer.devices()) do
      local t = xfer.arange(100, { dtype = "i32", device = dev }):view(10, 10)
      local text = t:format({ max = 4 })
      assert.are.equal(("xfer.Tensor(i32[10,10] on %s)\n"):format(dev.name) ..
                       "[[ 0,  1, ...,  8,  9],\n [10, 11, ..., 18, 19],\n ...,\n" ..
                       " [80, 81, ..., 88, 89],\n [90, 91, ..., 98, 99]]", text)
    end
    local big = xfer.zeros({ 4096, 4096 }) -- 64 MiB: printed from 36 small reads
    xfer.stats_reset()
    assert.is_truthy(big:format():find("...", 1, true))
    assert.are.same({}, xfer.stats())
  end)

  it("refuses unknown options", function()
    local e = h.raises("invalid", xfer.arange(3).format, xfer.arange(3), { width = 3 })
    assert.are.equal("format: unknown option 'width' (known: max)", e.message)
    h.raises("invalid", xfer.arange(3).format, xfer.arange(3), { max = 1 })
  end)
end)

describe("strict construction", function()
  local cases = {
    { "a hole", { [1] = 1, [3] = 3 } },
    { "a named field", { 1, 2, x = 3 } },
    { "a fractional key", { 1, 2, [2.5] = 1 } },
    { "a hole in a row", { { 1, 2 }, { [1] = 3, [3] = 4 } } },
  }
  for _, case in ipairs(cases) do
    it("refuses " .. case[1] .. ", naming the key", function()
      local e = h.raises("invalid", xfer.tensor, case[2])
      assert.is_truthy(e.message:find("has the key", 1, true) or e.message:find("has 1 entries", 1, true) or
                       e.message:find("ragged", 1, true), e.message)
    end)
  end

  it("names the key exactly", function()
    assert.are.equal("tensor: the table has the key 'x': a tensor's table holds the elements 1..2 and " ..
                     "nothing else (a hole, or a named field?)", h.raises("invalid", xfer.tensor, { 1, 2, x = 3 }).message)
    assert.are.equal("tensor: the table[2] has the key 'y': a tensor's table holds the elements 1..2 " ..
                     "and nothing else (a hole, or a named field?)",
                     h.raises("invalid", xfer.tensor, { { 1, 2 }, { 3, 4, y = 1 } }).message)
  end)
end)

describe("devices", function()
  it("filters by runtime, by table, and knows cpu as the host", function()
    local all = xfer.devices()
    for _, rt in ipairs(xfer.runtimes()) do
      local want = {}
      for _, dev in ipairs(all) do if dev.runtime == rt.name then want[#want + 1] = dev end end
      assert.are.same(want, xfer.devices(rt.name))
      assert.are.same(want, xfer.devices({ runtime = rt.name }))
    end
    local unified = {}
    for _, dev in ipairs(all) do if dev.unified then unified[#unified + 1] = dev end end
    assert.are.same(unified, xfer.devices({ unified = true }))
    assert.are.same({ host }, xfer.devices("cpu"))
    assert.are.equal(host, xfer.device("cpu"))
    assert.are.same(all, xfer.devices({}))
  end)

  it("refuses unknown filters", function()
    assert.are.equal("devices: unknown runtime 'gpu' (runtimes: host (or cpu), cuda, vulkan, opencl, remote)",
                     h.raises("invalid", xfer.devices, "gpu").message)
    assert.are.equal("devices: unknown option 'kind' (known: runtime, unified)",
                     h.raises("invalid", xfer.devices, { kind = "gpu" }).message)
    assert.are.equal("devices: filter 'unified' must be a boolean, not a string",
                     h.raises("invalid", xfer.devices, { unified = "yes" }).message)
  end)
end)

describe("errors in string idioms", function()
  it("concatenate as their message and say where the script called", function()
    local ok, e = pcall(function() return xfer.arange(3):to("nope") end)
    assert.is_false(ok)
    assert.are.equal("step: " .. e.message, "step: " .. e)
    assert.are.equal(e.message, e .. "")
    assert.is_truthy(e.where:match("^spec/elements_spec%.lua:%d+$"), e.where)
    local _, traced = xpcall(function() xfer.arange(3):to("nope") end, debug.traceback)
    assert.is_truthy(tostring(traced):find("unknown device 'nope'", 1, true))
    -- raised from xferlua's own Lua (xfer.transfer), where still names the script
    local _, e2 = pcall(xfer.transfer, xfer.arange(3), "nope")
    assert.is_truthy(e2.where:match("^spec/elements_spec%.lua:%d+$"), e2.where)
  end)
end)
