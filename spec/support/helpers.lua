-- Shared spec helpers: error assertions, random data, and where the xferlua binary is.
local xfer = require "xfer"

local helpers = {}

-- Specs assert which path the planner takes: the figures of a plan cache the machine keeps
-- (~/.cache/xferlua/plan-cache.tsv, from an earlier calibration) would change its choices.
-- scripts/test sets XFER_PLAN_CACHE=off; a busted run by hand forgets them here.
xfer.forget_costs()

-- busted keeps one `finally` per spec: the helpers' restores share it, run last-first
local pending_restores = {}
local function on_finally(env, fn)
  pending_restores[#pending_restores + 1] = fn
  if #pending_restores == 1 then
    env.finally(function()
      for i = #pending_restores, 1, -1 do pending_restores[i]() end
      pending_restores = {}
    end)
  end
end


--- Calls fn(...) expecting an xfer error of `code`; returns the error object.
function helpers.raises(code, fn, ...)
  local ok, e = pcall(fn, ...)
  assert(not ok, "expected an error with code '" .. code .. "', but the call succeeded")
  assert(xfer.is_error(e), "expected an xfer error object, got: " .. tostring(e))
  assert(e.code == code, ("expected code '%s', got '%s': %s"):format(code, e.code, tostring(e)))
  return e
end

--- For the rest of the running spec the planner sets no path aside (a spec that fails one
--- path again and again on purpose); the setting comes back when the spec ends.
function helpers.no_setaside()
  local saved = xfer.config().setaside_after
  on_finally(getfenv(2), function() xfer.config({ setaside_after = saved }) end)
  xfer.config({ setaside_after = 0 })
end

--- One spec per case {name, fn, message}: fn() raises an `invalid` xfer.Error with exactly
--- that message. Call it inside a describe block.
function helpers.each_invalid(cases)
  local env = getfenv(2) -- busted's it and assert, in the spec file's env
  for _, case in ipairs(cases) do
    env.it(case[1], function()
      local e = helpers.raises("invalid", case[2])
      env.assert.are.equal(case[3], e.message)
    end)
  end
end

--- Whether the binary under test is a sanitizer build (its libraries need their runtime loaded
--- first: a plain program, or Python, cannot load them).
function helpers.sanitized()
  local build = helpers.xferlua():match("^(.*)/[^/]+$") or "."
  local cache = io.open(build .. "/CMakeCache.txt")
  local text = cache and cache:read("*a") or ""
  if cache then cache:close() end
  return text:find("XFER_SANITIZE:BOOL=ON", 1, true) ~= nil
end

--- `n` random bytes.
function helpers.random_bytes(n)
  local parts = {}
  for i = 1, n do parts[i] = string.char(math.random(0, 255)) end
  return table.concat(parts)
end

--- A prepared batch of `count` blocks of `block` bytes scattered between two u8 tensors of
--- `nblocks` blocks (random bytes on `a`, zeros on `b`): block (i*37) % nblocks of the source
--- into block (i*11+3) % nblocks of the target (distinct while nblocks shares no factor with
--- 11). Returns {batch, src, dst, seed, src_blocks, dst_blocks}; `check(got)` is nil when the
--- target's bytes `got` hold every block where the batch put it, else which one does not.
function helpers.scattered_batch(a, b, block, nblocks, count)
  local seed = helpers.random_bytes(block * nblocks)
  local src = xfer.tensor(seed, { dtype = "u8", device = a })
  local dst = xfer.zeros({ block * nblocks }, { dtype = "u8", device = b })
  local sb, db = {}, {}
  for i = 0, count - 1 do sb[#sb + 1] = (i * 37) % nblocks; db[#db + 1] = (i * 11 + 3) % nblocks end
  local batch = xfer.batch({ dst = dst, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block })
  local made = { batch = batch, src = src, dst = dst, seed = seed, src_blocks = sb, dst_blocks = db }
  function made.check(got)
    for k = 1, #sb do
      if seed:sub(sb[k] * block + 1, (sb[k] + 1) * block) ~= got:sub(db[k] * block + 1, (db[k] + 1) * block) then
        return ("block %d (source block %d, target block %d) differs"):format(k, sb[k], db[k])
      end
    end
  end
  return made
end

--- Bytes in use on every device, once the collector (and compiled traces, which keep
--- constants of what they were recorded on) let go of what nothing references.
function helpers.in_use_everywhere()
  if jit then jit.flush() end
  collectgarbage()
  collectgarbage()
  local n = 0
  for _, d in ipairs(xfer.devices()) do n = n + xfer.memory(d).in_use end
  return n
end

--- Bytes held in use on `dev` right now.
function helpers.in_use(dev)
  collectgarbage()
  collectgarbage()
  return xfer.memory(dev).in_use
end

--- For the rest of the running spec, every allocation reaches the driver (caching off,
--- every cache given back, nothing left for the collector to reclaim): an injected alloc
--- fault only fails a driver call, and host memory is imported or pinned afresh. Call it
--- inside an `it` (again is harmless, as in a loop over devices); the setting comes back when
--- the spec ends.
local restoring = false -- a restore is registered: a second call in one spec keeps it
function helpers.uncached()
  if not restoring then
    local saved = xfer.config().cache
    restoring = true
    on_finally(getfenv(2), function()
      xfer.config({ cache = saved })
      restoring = false
    end)
  end
  collectgarbage()
  collectgarbage()
  xfer.config({ cache = false })
end

--- The settings a spec starts from: the defaults, caching as XFER_CACHE says.
--- nil when the remote runtime is built here, or why not (a build without UCX's headers).
function helpers.remote_missing()
  for _, rt in ipairs(xfer.runtimes()) do
    if rt.name == "remote" and rt.reason and rt.reason:find("^built without") then return rt.reason end
  end
  return nil
end

--- xfer.config()'s defaults: a runtime's own settings are its table's (the remote runtime's
--- are 0 in a build without it: nothing there reads them).
function helpers.default_config()
  local built = not helpers.remote_missing()
  return { staging_chunk = 4194304, staging_depth = 3, cache = os.getenv("XFER_CACHE") ~= "0",
           cache_limit = 0, setaside_after = 3, remote_timeout = built and 10 or 0,
           remote_chunk = built and 4194304 or 0, remote_depth = built and 4 or 0,
           remote_device_chunk = built and 67108864 or 0, verify = false, timeout = 0 }
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

--- The runtimes() entry of runtime `name`.
function helpers.runtime(name)
  for _, r in ipairs(xfer.runtimes()) do
    if r.name == name then return r end
  end
end

--- Calls fn(dev) for every device of runtime `name`; where the runtime is unavailable,
--- calls `pending` (busted's, from the spec file) with the reason instead.
function helpers.each_device(name, pending, fn)
  local info = helpers.runtime(name)
  if not info.available then return pending(name .. " is unavailable here: " .. info.reason) end
  for _, dev in ipairs(xfer.devices()) do
    if dev.runtime == name then fn(dev) end
  end
end

--- What a fresh xferlua, started with `env` ("VAR=value ..."), says of runtime `name`:
--- "<available>\t<reason>\n".
function helpers.runtime_reason(name, env)
  local out, code = helpers.run(env .. " " .. helpers.xferlua() .. " -e 'for _, r in ipairs(require(" ..
    '"xfer").runtimes()) do if r.name == "' .. name .. '" then print(r.available, r.reason) end end' .. "'")
  assert(code == 0, out)
  return out
end

--- In a fresh xferlua: makes a copy on `dev` fail with driver code `native` (one that
--- loses the device), then tries three more uses of it and one host move. Returns what
--- it printed: "false\t<code>\t<native name>" and one "<ok>\t<code>" per use, then the
--- host move's result; with `memory`, then the device's reserved and cached bytes once its
--- tensor is freed.
function helpers.lose_device(dev, native, memory)
  local script = ([[
    local xfer = require "xfer"
    local dev = xfer.device("%s")
    local t = xfer.arange(4, { device = dev })
    xfer.faults.inject({ runtime = "%s", op = "copy", native = %d })
    local ok, e = pcall(t.clone, t)
    print(ok, e.code, e.native_name)
    for _, use in ipairs({ function() return t:totable() end,
                           function() return xfer.zeros({ 2 }, { device = dev }) end,
                           function() return xfer.arange(2):to(dev) end }) do
      local ok2, e2 = pcall(use)
      print(ok2, e2.code)
    end
    print(xfer.arange(2):to("host"):totable()[2])
    if %s then
      t:free() -- the last block on the lost device: its memory goes, nothing is cached
      print(xfer.memory(dev).reserved, xfer.memory(dev).cached)
    end]]):format(dev.name, dev.runtime, native, memory and "true" or "false")
  local out, code = helpers.run(helpers.xferlua() .. " -e '" .. script .. "'")
  assert(code == 0, out)
  return out
end

--- Every dtype, with its size in bytes.
helpers.dtypes = {
  f16 = 2, bf16 = 2, f32 = 4, f64 = 8, i8 = 1, i16 = 2, i32 = 4, i64 = 8,
  u8 = 1, u16 = 2, u32 = 4, u64 = 8, bool = 1,
}

return helpers
