-- values.lua -- what a user checks and makes by value, as NumPy and PyTorch users expect:
-- t:sum(), t:min(), t:max(), t:allclose(u, {rtol, atol}), t:equals(u) and t == u across
-- dtypes, xfer.ones, xfer.rand / xfer.randn (seeded), xfer.*_like, and print(t) with its
-- values. Values are read on the host as doubles (a device tensor is copied there once,
-- converted on the way), so integers are exact up to 2^53. The binding runs this file with
-- the module table, like prelude.lua.
local xfer = ...

local ffi = require "ffi"
local bit = require "bit"
local format = string.format
local Tensor = xfer.Tensor

-- the metatable of every tensor (a tensor of no elements asked once)
local meta
do
  local probe = xfer.zeros({ 0 })
  meta = getmetatable(probe)
  probe:free()
end

-- dtypes rand and randn make, by every name xfer.tensor takes for them
local FLOAT = { f16 = true, bf16 = true, f32 = true, f64 = true, float16 = true, half = true,
                bfloat16 = true, float32 = true, float = true, float64 = true, double = true }

local function invalid(op, fmt, ...)
  error(xfer.error({ code = "invalid", op = op, message = format(fmt, ...) }), 3)
end

local function check_tensor(t, arg, fname)
  if not xfer.is_tensor(t) then xfer.arg_error(arg, fname, "xfer.Tensor", t, 3) end
  if t.freed then error(xfer.error({ code = "freed", op = fname, message = "attempt to use a freed tensor" }), 3) end
end

local function check_options(opts, fname, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then xfer.arg_error(2, fname, "options table", opts, 3) end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      table.sort(names)
      invalid(fname, "%s: unknown option '%s' (known: %s)", fname, tostring(k), table.concat(names, ", "))
    end
  end
  return opts
end

-- The elements of t as a host f64 tensor (a copy, packed: views too) and an FFI pointer to
-- its doubles; the tensor is returned so that it outlives the pointer.
local function as_doubles(t)
  local h = t:to("host", { dtype = "f64" })
  return h, ffi.cast("const double *", h:ptr())
end

-- -- Reductions ------------------------------------------------------------------------------

local function reduce(t, fname, start, step)
  check_tensor(t, 1, fname)
  local n = t.numel
  if n == 0 then
    if start ~= nil then return start end
    invalid(fname, "%s: the tensor has no elements", fname)
  end
  local h, p = as_doubles(t)
  local acc = start
  if acc == nil then acc = p[0] end
  for i = (start == nil) and 1 or 0, n - 1 do acc = step(acc, p[i]) end
  h:free()
  return acc
end

--- t:sum(): the sum of every element (a number; 0 for an empty tensor).
function Tensor.sum(t)
  return reduce(t, "sum", 0, function(a, v) return a + v end)
end

--- t:min(), t:max(): the least and greatest element (NaN when any is NaN, as NumPy).
function Tensor.min(t)
  return reduce(t, "min", nil, function(a, v) return (v < a or v ~= v or a ~= a) and (a ~= a and a or v) or a end)
end

function Tensor.max(t)
  return reduce(t, "max", nil, function(a, v) return (v > a or v ~= v or a ~= a) and (a ~= a and a or v) or a end)
end

-- -- Comparisons ----------------------------------------------------------------------------

local function same_shape(a, b)
  local sa, sb = a.shape, b.shape
  if #sa ~= #sb then return false end
  for i = 1, #sa do if sa[i] ~= sb[i] then return false end end
  return true
end

local function shape_text(t) return "[" .. table.concat(t.shape, ",") .. "]" end

-- Whether every pair of elements passes `close(a, b)`; shapes must be equal.
local function all_pairs(a, b, close)
  local ha, pa = as_doubles(a)
  local hb, pb = as_doubles(b)
  local ok = true
  for i = 0, a.numel - 1 do
    if not close(pa[i], pb[i]) then ok = false; break end
  end
  ha:free()
  hb:free()
  return ok
end

local byte_equals = Tensor.equals

--- t:equals(u): the same shape and the same values -- bytes compared when the dtypes are one,
--- values otherwise (f32 1.5 equals f64 1.5 and i32 3 equals f16 3).
function Tensor.equals(a, b)
  check_tensor(a, 1, "equals")
  check_tensor(b, 2, "equals")
  if a.dtype == b.dtype then return byte_equals(a, b) end
  if not same_shape(a, b) then return false end
  return all_pairs(a, b, function(x, y) return x == y end)
end

--- t:allclose(u, {rtol = 1e-5, atol = 1e-8, equal_nan = false}): |t - u| <= atol + rtol * |u|
--- for every element, as numpy.allclose; the shapes must be equal (else invalid).
function Tensor.allclose(a, b, opts)
  check_tensor(a, 1, "allclose")
  check_tensor(b, 2, "allclose")
  opts = check_options(opts, "allclose", { rtol = true, atol = true, equal_nan = true })
  local rtol, atol = opts.rtol or 1e-5, opts.atol or 1e-8
  if type(rtol) ~= "number" or rtol < 0 or type(atol) ~= "number" or atol < 0 then
    invalid("allclose", "allclose: rtol and atol must be numbers >= 0")
  end
  local equal_nan = opts.equal_nan and true or false
  if not same_shape(a, b) then
    invalid("allclose", "allclose: shapes %s and %s differ", shape_text(a), shape_text(b))
  end
  local abs = math.abs
  return all_pairs(a, b, function(x, y)
    if x ~= x or y ~= y then return equal_nan and x ~= x and y ~= y end
    if x == y then return true end -- infinities of one sign
    return abs(x - y) <= atol + rtol * abs(y)
  end)
end

-- t == u: equals (shapes and values; dtypes may differ). Tensors as table keys stay
-- identities: a table compares keys raw.
meta.__eq = function(a, b)
  if not (xfer.is_tensor(a) and xfer.is_tensor(b)) then return false end
  return Tensor.equals(a, b)
end

-- -- Makers ---------------------------------------------------------------------------------

--- xfer.ones(shape [, {dtype, device}]): every element 1.
function xfer.ones(shape, opts)
  return xfer.full(shape, 1, opts)
end

-- A small seeded generator (xorshift32 in LuaJIT's 32-bit bit operations): the same seed
-- gives the same values on every machine; math.random's state is left alone.
local function generator(seed)
  local x = bit.tobit(seed * 2654435761 + 1)
  if x == 0 then x = 1 end
  return function()
    x = bit.bxor(x, bit.lshift(x, 13))
    x = bit.bxor(x, bit.rshift(x, 17))
    x = bit.bxor(x, bit.lshift(x, 5))
    return (bit.band(x, 0xffffff) + 0.5) / 16777216 -- (0, 1), 24 bits: exact in f32
  end
end

local seed_counter = 0

-- xfer.rand / xfer.randn: filled on the host as f64, then converted and moved as asked.
local function random_tensor(fname, shape, opts, normal)
  opts = check_options(opts, fname, { dtype = true, device = true, seed = true })
  local dtype = opts.dtype or "f32"
  if opts.seed ~= nil and (type(opts.seed) ~= "number" or opts.seed % 1 ~= 0) then
    invalid(fname, "%s: option 'seed' must be a whole number", fname)
  end
  if not FLOAT[dtype] then
    invalid(fname, "%s: a floating dtype (f16, bf16, f32, f64), not '%s'", fname, tostring(dtype))
  end
  local t = xfer.empty(shape, { dtype = "f64" })
  if opts.seed == nil then seed_counter = seed_counter + 1 end
  local next = generator(opts.seed or (os.time() + seed_counter * 7919))
  local p = ffi.cast("double *", t:ptr())
  local n = t.numel
  if normal then -- Box-Muller, two values a draw
    local log, sqrt, cos, sin, pi = math.log, math.sqrt, math.cos, math.sin, math.pi
    for i = 0, n - 1, 2 do
      local r, a = sqrt(-2 * log(next())), 2 * pi * next()
      p[i] = r * cos(a)
      if i + 1 < n then p[i + 1] = r * sin(a) end
    end
  else
    for i = 0, n - 1 do p[i] = next() end
  end
  local out = t:to(opts.device or "host", { dtype = dtype })
  t:free()
  return out
end

--- xfer.rand(shape [, {dtype = "f32", device, seed}]): uniform in (0, 1); the same seed, the
--- same values.
function xfer.rand(shape, opts) return random_tensor("rand", shape, opts, false) end

--- xfer.randn(shape [, {dtype = "f32", device, seed}]): standard normal (mean 0, deviation 1).
function xfer.randn(shape, opts) return random_tensor("randn", shape, opts, true) end

-- xfer.X_like(t [, value], {dtype, device}): t's shape, and its dtype and device unless the
-- options say otherwise.
local function like(fname, make, has_value)
  return function(t, a, b)
    check_tensor(t, 1, fname)
    local value, opts = nil, a
    if has_value then value, opts = a, b end
    opts = check_options(opts, fname, { dtype = true, device = true, seed = true })
    local o = { dtype = opts.dtype or t.dtype, device = opts.device or t.device, seed = opts.seed }
    if make == "rand" or make == "randn" then return xfer[make](t.shape, o) end
    if o.seed ~= nil then invalid(fname, "%s: unknown option 'seed' (known: device, dtype)", fname) end
    o.seed = nil
    if has_value then return xfer[make](t.shape, value, o) end
    return xfer[make](t.shape, o)
  end
end

xfer.zeros_like = like("zeros_like", "zeros")
xfer.ones_like = like("ones_like", "ones")
xfer.empty_like = like("empty_like", "empty")
xfer.full_like = like("full_like", "full", true)
xfer.rand_like = like("rand_like", "rand")
xfer.randn_like = like("randn_like", "randn")

-- print(t) shows the values: the binding's __tostring calls t:format (format.lua) in a
-- protected call of its own, and t:summary() is the one line.
