-- fallback.lua -- the pcall-and-fall-back pattern as a reusable policy: xfer.transfer.
-- The binding runs this file with the module table, like prelude.lua.
local xfer = ...

local format = string.format

local function default_log(attempt)
  io.stderr:write(format("xfer.transfer: %s -> %s via %s failed (%s): %s\n", attempt.from,
                         attempt.to, attempt.path, attempt.code, attempt.message))
end

--- Moves `t` to `dev`, trying the paths of opts.fallback in order (default: the planner's
--- choice, then "host"). A path that does not apply is skipped; a failure that says it is
--- retryable is tried again up to opts.retries times (default 0); every failed attempt is
--- passed to opts.log (default: a line on stderr; false: silent). Returns the new tensor and
--- the list of failed attempts {path, code, op, message, retryable}; raises the last error
--- when every path failed, and a canceled move's at once (no other path is tried).
local paths_known = {}
for _, name in ipairs(xfer.paths) do paths_known[name] = true end
local paths_listed = table.concat(xfer.paths, ", ", 1, #xfer.paths - 1) .. " or " .. xfer.paths[#xfer.paths]

local function invalid(message)
  error(xfer.error({ code = "invalid", op = "transfer", message = "transfer: " .. message }), 3)
end

local function check_options(opts)
  if type(opts) ~= "table" then invalid("options must be a table, not a " .. type(opts)) end
  for key in pairs(opts) do
    if key ~= "fallback" and key ~= "retries" and key ~= "log" then
      invalid("unknown option '" .. tostring(key) .. "' (known: fallback, retries, log)")
    end
  end
  local paths = opts.fallback
  if paths ~= nil then
    if type(paths) ~= "table" then invalid("fallback must be a list of paths") end
    -- a list: keys 1..n and nothing else ({nil, "host"} has a hole ipairs would stop at)
    local n = 0
    for k in pairs(paths) do
      if type(k) ~= "number" or k < 1 or k % 1 ~= 0 then
        invalid(format("fallback must be a list of paths, not a table with the key %s", tostring(k)))
      end
      if k > n then n = k end
    end
    if n == 0 then invalid("fallback must be a list of paths") end
    for i = 1, n do
      local path = paths[i]
      if type(path) ~= "string" or not paths_known[path] then
        invalid(format("fallback[%d] is %s, not a path (%s)", i,
                       type(path) == "string" and "'" .. path .. "'" or "a " .. type(path), paths_listed))
      end
    end
  end
  local retries = opts.retries
  if retries ~= nil and (type(retries) ~= "number" or retries < 0 or retries % 1 ~= 0 or
                         retries ~= retries or retries == math.huge) then
    invalid("retries must be a whole number >= 0, not " ..
            (type(retries) == "number" and tostring(retries) or "a " .. type(retries)))
  end
  local log = opts.log
  if log ~= nil and log ~= false and type(log) ~= "function" then
    invalid("log must be a function or false, not a " .. type(log))
  end
end

function xfer.transfer(t, dev, opts)
  if not xfer.is_tensor(t) then xfer.arg_error(1, "transfer", "xfer.Tensor", t, 2) end
  dev = xfer.check_device(dev, 2, "transfer", 2)
  opts = opts or {}
  check_options(opts)
  local paths = opts.fallback or { xfer.plan(t, dev).path, "host" }
  local retries = opts.retries or 0
  local log = opts.log == nil and default_log or opts.log or function() end
  local attempts, last = {}, nil
  for _, path in ipairs(paths) do
    local applies, why = pcall(xfer.plan, t, dev, { via = path })
    if applies then
      for try = 0, retries do
        local ok, result = pcall(t.to, t, dev, { via = path })
        if ok then return result, attempts end
        if not xfer.is_error(result) then error(result, 0) end -- not ours: a bug, not a failure
        local attempt = { path = path, try = try + 1, code = result.code, op = result.op,
                          from = result.from, to = result.to, message = result.message,
                          retryable = result.retryable }
        attempts[#attempts + 1] = attempt
        log(attempt)
        last = result
        -- canceled: whoever canceled wants the move stopped, not moved another way
        if result.code == "canceled" then error(result, 0) end
        if not result.retryable then break end
      end
    elseif not xfer.is_error(why) or why.code ~= "unsupported" then
      error(why, 0)
    end
  end
  if last then error(last, 0) end
  error(xfer.error({ code = "unsupported", op = "transfer",
                     message = format("transfer: none of the paths %s applies to %s -> %s",
                                      table.concat(paths, ", "), t.device.name,
                                      type(dev) == "string" and dev or dev.name) }), 2)
end
