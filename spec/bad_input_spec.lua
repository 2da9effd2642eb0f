-- Bad input: every case raises an xfer error with code invalid and an exact message.
local xfer = require "xfer"
local h = require "support.helpers"

local t = xfer.tensor({ 1, 2, 3 })

local cases = {
  { "tensor of a function", function() xfer.tensor(print) end,
    "bad argument #1 to 'tensor' (table of values, byte string or number expected, got function)" },
  { "tensor with options not a table", function() xfer.tensor({ 1 }, "f32") end,
    "bad argument #2 to 'tensor' (options table expected, got string)" },
  { "unknown option", function() xfer.tensor({ 1 }, { dtpye = "f32" }) end,
    "tensor: unknown option 'dtpye' (known: dtype, shape, device)" },
  { "unknown dtype", function() xfer.tensor({ 1 }, { dtype = "f33" }) end,
    "tensor: unknown dtype 'f33' (expected f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64 or bool)" },
  { "dtype not a string", function() xfer.zeros({ 1 }, { dtype = 32 }) end,
    "zeros: option 'dtype' must be a string, not a number" },
  { "ragged rows", function() xfer.tensor({ { 1, 2 }, { 3 } }) end,
    "ragged nested table: element[2] has 1 entries where 2 were expected" },
  { "ragged depth", function() xfer.tensor({ { 1, 2 }, 3 }) end,
    "ragged nested table: element[2] is a number where a table of 2 was expected" },
  { "too deep a leaf", function() xfer.tensor({ 1, { 2 } }) end,
    "ragged nested table: element[2] is a table where a number was expected" },
  { "a string among numbers", function() xfer.tensor({ { 1, "2" } }) end,
    "element[1][2] is a string, expected a number or boolean" },
  { "deeper than 8", function() xfer.tensor({ { { { { { { { { 1 } } } } } } } } }) end,
    "nested table deeper than 8 dimensions" },
  { "values do not fit the shape", function() xfer.tensor({ 1, 2, 3 }, { shape = { 2, 2 } }) end,
    "tensor: 3 values given for shape f32[2,2] (4)" },
  { "bytes of the wrong length", function() xfer.tensor("abc", { dtype = "i32", shape = { 1 } }) end,
    "tensor: a byte string of 3 bytes does not fill i32[1] (4 bytes)" },
  { "bytes not a whole number of elements", function() xfer.tensor("abcde", { dtype = "i32" }) end,
    "tensor: a byte string of 5 bytes is not a whole number of i32 elements (4 bytes each)" },
  { "negative dimension", function() xfer.zeros({ 2, -1 }) end,
    "zeros: dimension 2 must be a whole number >= 0, not -1" },
  { "fractional dimension", function() xfer.empty({ 1.5 }) end,
    "empty: dimension 1 must be a whole number >= 0, not 1.5" },
  { "dimension not a number", function() xfer.zeros({ "2" }) end,
    "zeros: dimension 1 must be a whole number >= 0, not string" },
  { "nine dimensions", function() xfer.zeros({ 1, 1, 1, 1, 1, 1, 1, 1, 1 }) end,
    "zeros: a tensor has at most 8 dimensions, not 9" },
  { "shape not a table", function() xfer.zeros("2x3") end,
    "bad argument #1 to 'zeros' (shape (table of sizes) expected, got string)" },
  { "shape too large", function() xfer.empty({ 2^40, 2^40 }) end,
    "shape too large for memory" },
  { "full without a value", function() xfer.full({ 2 }) end,
    "bad argument #2 to 'full' (number or boolean expected, got no value)" },
  { "arange step 0", function() xfer.arange(0, 1, 0) end,
    "arange: start, stop and step must be finite and step not 0" },
  { "arange of nothing", function() xfer.arange() end,
    "bad argument #1 to 'arange' (number expected, got no value)" },
  { "arange options not a table", function() xfer.arange(1, 2, 1, "x") end,
    "bad argument #4 to 'arange' (options table expected, got string)" },
  { "unknown device name", function() t:to("gpu") end,
    "unknown device 'gpu' (devices here: " .. h.device_names() .. ")" },
  { "device not a device", function() t:to(42) end,
    "bad argument #2 to 'to' (xfer.Device or device name expected, got number)" },
  { "device() of a non-string", function() xfer.device(0) end,
    "bad argument #1 to 'device' (device name expected, got number)" },
  { "unknown device in options", function() xfer.zeros({ 1 }, { device = "cuda:7" }) end,
    "unknown device 'cuda:7' (devices here: " .. h.device_names() .. ")" },
  { "to with a bad path", function() t:to("host", { via = "pcie" }) end,
    "to: unknown path 'pcie' (expected auto, same_device, same_runtime, interop, staged or host)" },
  { "to with an unknown option", function() t:to("host", { async = true }) end,
    "to: unknown option 'async' (known: via)" },
  { "method on a non-tensor", function() t.to({}, "host") end,
    "bad argument #1 to 'to' (xfer.Tensor expected, got table)" },
  { "copy_from a non-tensor", function() t:copy_from({ 1, 2, 3 }) end,
    "bad argument #2 to 'copy_from' (xfer.Tensor expected, got table)" },
  { "equals a number", function() t:equals(3) end,
    "bad argument #2 to 'equals' (xfer.Tensor expected, got number)" },
  { "totable with bad options", function() t:totable({ nested = false }) end,
    "totable: unknown option 'nested' (known: flat)" },
  { "memory of a non-device", function() xfer.memory({}) end,
    "bad argument #1 to 'memory' (xfer.Device or device name expected, got table)" },
  { "inject without a table", function() xfer.faults.inject("host:read") end,
    "bad argument #1 to 'inject' (table {runtime=, op=, nth=, count=, native=} expected, got string)" },
  { "inject an unknown runtime", function() xfer.faults.inject({ runtime = "tpu", op = "read" }) end,
    "unknown runtime 'tpu' (expected host, cuda, vulkan or opencl)" },
  { "inject an unknown op", function() xfer.faults.inject({ runtime = "host", op = "explode" }) end,
    "unknown op 'explode' (expected alloc, read, write, copy, peer, import, export, register, map or sync)" },
  { "inject nth 0", function() xfer.faults.inject({ runtime = "host", op = "read", nth = 0 }) end,
    "nth and count must be at least 1 (got nth=0, count=1)" },
  { "inject without op", function() xfer.faults.inject({ runtime = "host" }) end,
    "faults.inject: 'op' must be a string, not nil" },
  { "inject unknown key", function() xfer.faults.inject({ runtime = "host", op = "read", n = 2 }) end,
    "inject: unknown option 'n' (known: runtime, op, nth, count, native)" },
}

describe("bad input", function()
  after_each(function() xfer.faults.clear() end)
  for _, case in ipairs(cases) do
    it(case[1], function()
      local e = h.raises("invalid", case[2])
      assert.are.equal(case[3], e.message)
    end)
  end

  it("leaves no tensor memory behind", function()
    local host = xfer.device("host")
    local before = h.in_use(host)
    for _, case in ipairs(cases) do pcall(case[2]) end
    assert.are.equal(before, h.in_use(host))
  end)
end)
