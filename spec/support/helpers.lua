-- Shared spec helpers: error assertions, random data, and where the xferlua binary is.
local xfer = require "xfer"

local helpers = {}

--- Calls fn(...) expecting an xfer error of `code`; returns the error object.
function helpers.raises(code, fn, ...)
  local ok, e = pcall(fn, ...)
  assert(not ok, "expected an error with code '" .. code .. "', but the call succeeded")
  assert(xfer.is_error(e), "expected an xfer error object, got: " .. tostring(e))
  assert(e.code == code, ("expected code '%s', got '%s': %s"):format(code, e.code, tostring(e)))
  return e
end

--- `n` random bytes.
function helpers.random_bytes(n)
  local parts = {}
  for i = 1, n do parts[i] = string.char(math.random(0, 255)) end
  return table.concat(parts)
end

--- Bytes held in use on `dev` right now.
function helpers.in_use(dev)
  collectgarbage()
  collectgarbage()
  return xfer.memory(dev).in_use
end

--- The xferlua binary under test (scripts/test sets XFERLUA).
function helpers.xferlua()
  return os.getenv("XFERLUA") or "./build/xferlua"
end

--- Runs a shell command; returns its output and exit code.
function helpers.run(cmd)
  local tmp = os.tmpname()
  local p = io.popen(cmd .. " >" .. tmp .. " 2>&1; echo $?")
  local code = tonumber(p:read("*a"))
  p:close()
  local f = io.open(tmp)
  local out = f:read("*a")
  f:close()
  os.remove(tmp)
  return out, code
end

--- "host, opencl:0, ...": the device list that unknown-device messages give.
function helpers.device_names()
  local names = {}
  for i, dev in ipairs(xfer.devices()) do names[i] = dev.name end
  return table.concat(names, ", ")
end

--- Every dtype, with its size in bytes.
helpers.dtypes = {
  f16 = 2, bf16 = 2, f32 = 4, f64 = 8, i8 = 1, i16 = 2, i32 = 4, i64 = 8,
  u8 = 1, u16 = 2, u32 = 4, u64 = 8, bool = 1,
}

return helpers
