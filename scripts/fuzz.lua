-- scripts/fuzz.lua -- a seeded random caller of the whole Lua API: sequences of creations,
-- moves (to, copy_from, clone, to_async, xfer.transfer) by every path, batches, views, files
-- saved and loaded back (safetensors, .npy, .npz) onto every device, frees, injected faults
-- (the file's reads, writes and syncs too), verified moves with a bit flipped on the way (they
-- must say corrupt), collections and setting changes over every device, each result checked
-- against a model kept in Lua strings. Usage (scripts/fuzz runs it):
--   xferlua scripts/fuzz.lua SEED STEPS [--verbose]
-- Exits non-zero, printing the seed, the step and what went wrong, at the first check that
-- fails: wrong bytes, a changed source, an error that is not an xfer.Error, an error where
-- none was injected or expected, a flipped bit verify did not catch, or memory not back where
-- it started.
local xfer = require "xfer"

local seed, steps = tonumber(arg and arg[1] or ...), tonumber(arg and arg[2] or select(2, ...))
local verbose = (arg and arg[3] or select(3, ...)) == "--verbose"
-- a line at a time: a process that dies (a signal) leaves its last step in the log
if verbose then io.stdout:setvbuf("line") end
assert(seed and steps, "usage: xferlua scripts/fuzz.lua SEED STEPS [--verbose]")
math.randomseed(seed)
local rand = math.random

local devices = xfer.devices()
local host = xfer.device("host")
local paths = { "auto", "auto", "auto", "same_device", "same_runtime", "interop", "direct", "staged", "host" }
local dtypes = { u8 = 1, i16 = 2, f32 = 4, u32 = 4, f64 = 8, i64 = 8 }
local dtype_names = { "u8", "i16", "f32", "u32", "f64", "i64" }
local fault_ops = { "alloc", "read", "write", "copy", "import", "export", "register", "sync", "peer" }
local runtimes = {}
for _, dev in ipairs(devices) do runtimes[dev.runtime] = true end
local runtime_list = {}
for r in pairs(runtimes) do runtime_list[#runtime_list + 1] = r end
runtime_list[#runtime_list + 1] = "file" -- a save's writes and syncs, a load's reads
table.sort(runtime_list)
local file_dir = os.tmpname() -- the files op's: removed at the end
os.remove(file_dir)
os.execute("mkdir -p " .. file_dir)

local live = {}   -- { t = tensor, bytes = its bytes or false (unknown after a failed copy) }
local step = 0
local counts = {}

local function fail(text)
  io.stderr:write(("fuzz seed %d step %d: %s\n"):format(seed, step, text))
  os.exit(1, true)
end

local function count(what) counts[what] = (counts[what] or 0) + 1 end

local function pick(list) return list[rand(#list)] end

local function random_bytes(n)
  local parts = {}
  for i = 1, n do parts[i] = string.char(rand(0, 255)) end
  return table.concat(parts)
end

-- Byte patterns that are valid for every dtype here: floats must not be NaN (NaN compares
-- unequal, and conversions may canonicalise it), so f32/f64 get bytes from small integers.
local function tensor_bytes(dtype, numel)
  if dtype == "f32" or dtype == "f64" then
    local values = {}
    for i = 1, numel do values[i] = rand(-1000, 1000) end
    local ok, t = pcall(xfer.tensor, values, { dtype = dtype })
    if not ok then return nil end
    local b = t:tobytes()
    t:free()
    return b
  end
  return random_bytes(numel * dtypes[dtype])
end

local function random_shape()
  local r = rand(100)
  if r <= 5 then return {} end                          -- a scalar
  if r <= 10 then return { 0 } end                      -- nothing
  if r <= 20 then return { rand(1, 3) * 1024 * 256 + rand(0, 7) } end -- a megabyte or so
  local shape = {}
  for i = 1, rand(1, 3) do shape[i] = rand(1, 40) end
  return shape
end

local function numel_of(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- Runs fn; an error must be an xfer.Error, and while no fault is injected, one of the codes
-- `expected` allows. Returns ok and the result.
local faulted = false
local function call(what, expected, fn, ...)
  local ok, result = pcall(fn, ...)
  if ok then return true, result end
  if not xfer.is_error(result) then fail(what .. ": not an xfer.Error: " .. tostring(result)) end
  count("error " .. result.code)
  if not faulted and not (expected and expected[result.code]) then
    fail(what .. ": failed with no fault injected: " .. result.message)
  end
  return false, result
end

-- Each entry says where its model bytes came from (`from`): told when they turn out wrong.
local function check(entry, what)
  if entry.t.freed or not entry.bytes then return end
  local ok, bytes = call("reading " .. what, nil, entry.t.tobytes, entry.t)
  if ok and bytes ~= entry.bytes then
    fail(("wrong bytes: %s %s (its bytes: %s)"):format(what, entry.t:summary(), entry.from or "?"))
  end
end

local function origin(op, src, extra)
  return ("step %d %s of %s%s"):format(step, op, src.t.freed and "a freed tensor" or src.t:summary(), extra or "")
end

-- What the host's conversion makes of an entry's model bytes in `dtype` (false: unknown).
local function converted_bytes(b, dtype)
  if not b.bytes then return false end
  local made, host_t = pcall(xfer.tensor, b.bytes, { dtype = b.t.dtype, shape = b.t.shape })
  local conv_ok, converted = false, nil
  if made then conv_ok, converted = pcall(host_t.to_dtype, host_t, dtype) end
  local read_ok, bytes = false, nil
  if conv_ok then read_ok, bytes = pcall(converted.tobytes, converted) end
  return read_ok and bytes or false
end

local function random_live()
  if #live == 0 then return nil end
  return live[rand(#live)]
end

-- A live entry of e's shape, most of the time (a pair of random entries rarely shares one, and
-- a copy between shapes that differ is refused before anything moves), else any.
local function partner_of(e)
  if rand(5) == 1 then return random_live() end
  local shape = table.concat(e.t.shape, ",")
  local same = {}
  for _, other in ipairs(live) do
    if not other.t.freed and table.concat(other.t.shape, ",") == shape then same[#same + 1] = other end
  end
  return #same > 0 and same[rand(#same)] or random_live()
end

local ops = {
  create = function()
    local dtype, shape, dev = pick(dtype_names), random_shape(), pick(devices)
    local bytes = tensor_bytes(dtype, numel_of(shape))
    if not bytes then return end
    local ok, t = call("create", nil, xfer.tensor, bytes, { dtype = dtype, shape = shape, device = dev })
    if ok then live[#live + 1] = { t = t, bytes = bytes, dev = dev, from = ("step %d create"):format(step) } end
  end,
  to = function()
    local e = random_live()
    if not e or e.t.freed then return end
    local dev, via = pick(devices), pick(paths)
    local ok, moved = call("to", { unsupported = true }, e.t.to, e.t, dev, { via = via })
    if ok then live[#live + 1] = { t = moved, bytes = e.bytes, dev = dev, from = origin("to", e, " via " .. via) } end
    check(e, "a source after to")
  end,
  copy_from = function()
    local a = random_live()
    local b = a and not a.t.freed and partner_of(a)
    if not a or not b or a.t.freed or b.t.freed then return end
    local same_shape = table.concat(a.t.shape, ",") == table.concat(b.t.shape, ",")
    local same = a.t.dtype == b.t.dtype and same_shape
    -- another dtype converts on the host (values that do not fit: invalid); other paths say
    -- unsupported for a conversion
    local via = pick(paths)
    local ok = call("copy_from", { unsupported = true, invalid = not same }, a.t.copy_from, a.t, b.t,
                    { via = via })
    if ok then a.from = origin("copy_from", b, " via " .. via) end
    if ok and same then
      a.bytes = b.bytes
    elseif ok then -- what the host's conversion makes of the model's bytes
      a.bytes = converted_bytes(b, a.t.dtype)
      count("convert")
    elseif same_shape and faulted then
      a.bytes = false
    end
    check(b, "a source after copy_from")
  end,
  -- a batch of one to four whole-tensor copies: a target written twice, or read by another
  -- element, and shapes that differ are refused before anything moves (invalid); dtypes that
  -- differ convert on the host, as copy_from does (values that do not fit: invalid; a path
  -- that passes no host: unsupported)
  batch = function()
    local items, pairs_ = {}, {}
    for i = 1, rand(1, 4) do
      local a = random_live()
      local b = a and not a.t.freed and partner_of(a)
      if not a or not b or a.t.freed or b.t.freed then return end
      items[i], pairs_[i] = { a.t, b.t }, { a, b }
    end
    local valid, converts = true, false
    for i, p in ipairs(pairs_) do
      if table.concat(p[1].t.shape, ",") ~= table.concat(p[2].t.shape, ",") then valid = false end
      if p[1].t.dtype ~= p[2].t.dtype then converts = true end
      for j, q in ipairs(pairs_) do
        if i ~= j and p[1].t.nbytes > 0 and (p[1] == q[1] or p[1] == q[2]) then valid = false end
      end
    end
    local via = pick(paths)
    local ok = call("copy_many", { invalid = not valid or converts, unsupported = true }, xfer.copy_many, items,
                    { via = via })
    if ok then
      for i, p in ipairs(pairs_) do
        p[1].from = origin("copy_many", p[2], (" (element %d of %d) via %s"):format(i, #pairs_, via))
      end
      local before = {}
      for i, p in ipairs(pairs_) do
        before[i] = p[1].t.dtype == p[2].t.dtype and p[2].bytes or converted_bytes(p[2], p[1].t.dtype)
      end
      for i, p in ipairs(pairs_) do p[1].bytes = before[i] end
    elseif valid then
      -- only a batch the checks refuse moves nothing; one that fails running (a fault, a
      -- value that does not fit a converted dtype) may have completed other elements first
      -- (b:done() would say which): their targets are unknown now
      for _, p in ipairs(pairs_) do p[1].bytes = false end
    end
    for _, p in ipairs(pairs_) do check(p[2], "a source after copy_many") end
  end,
  -- a view (rows of dimension 1, or dimension 1 and 2 swapped) read and moved at once, and
  -- dropped: views alias their base, which the model does not follow
  view = function()
    local e = random_live()
    if not e or e.t.freed or not e.bytes or #e.t.shape == 0 or e.t.shape[1] == 0 then return end
    local shape, n = e.t.shape, #e.bytes
    local row = n / shape[1]
    local ok, v, want
    if #shape >= 2 and shape[2] > 0 and rand(2) == 1 then
      ok, v = call("transpose", nil, e.t.transpose, e.t, 1, 2)
      local inner = row / shape[2]
      local parts = {}
      for j = 1, shape[2] do
        for i = 1, shape[1] do
          local at = ((i - 1) * shape[2] + (j - 1)) * inner
          parts[#parts + 1] = e.bytes:sub(at + 1, at + inner)
        end
      end
      want = table.concat(parts)
    else
      local first = rand(shape[1])
      local len = rand(0, shape[1] - first + 1)
      ok, v = call("narrow", nil, e.t.narrow, e.t, 1, first, len)
      want = e.bytes:sub((first - 1) * row + 1, (first - 1 + len) * row)
    end
    if not ok then return end
    local read_ok, bytes = call("reading a view", nil, v.tobytes, v)
    if read_ok and bytes ~= want then fail("wrong bytes: a view of " .. e.t:summary()) end
    local moved_ok, moved = call("moving a view", { unsupported = true }, v.to, v, pick(devices), { via = pick(paths) })
    if moved_ok then
      local got_ok, got = call("reading a moved view", nil, moved.tobytes, moved)
      if got_ok and got ~= want then fail("wrong bytes: a view of " .. e.t:summary() .. " moved") end
    end
    v:free()
    count("view")
  end,
  -- one to three live tensors saved (safetensors, .npz, or one to .npy) and loaded back onto a
  -- device: the same names, shapes, dtypes and bytes; a failed save leaves no file (nor its
  -- temporary), a failed load nothing allocated (the memory check at the end)
  file = function()
    local picked, names = {}, {}
    for i = 1, rand(1, 3) do
      local e = random_live()
      if not e or e.t.freed or not e.bytes then return end
      picked["t" .. i], names[#names + 1] = e, "t" .. i
    end
    local format = pick({ "safetensors", "npz", "npy" })
    if format == "npy" then names = { "t1" } end
    local path = ("%s/f%d.%s"):format(file_dir, step, format)
    local tensors = {}
    for _, n in ipairs(names) do tensors[n] = picked[n].t end
    -- at once, as a job, or as a job canceled at once (through when cancel returns: no file
    -- then, nor a load's tensors); verified now and then
    local how = rand(3)
    local verify = rand(4) == 1
    local canceled = { canceled = true }
    local function as_job(what, start, ...)
      local started, job = call(what, nil, start, ...)
      if not started then return false end
      if how == 3 then
        job:cancel()
        if not job:done() then fail(what .. ": cancel returned before its job was through") end
      end
      local ok, result = call(what .. " (waited)", how == 3 and canceled or nil, job.wait, job)
      if not ok and result.code == "canceled" then count(what .. " canceled") end
      return ok, result
    end
    local saved
    if how == 1 then
      saved = call("save", nil, xfer.save, path, format == "npy" and tensors.t1 or tensors, { verify = verify })
    else
      saved = as_job("save_async", xfer.save_async, path, format == "npy" and tensors.t1 or tensors,
                     { verify = verify })
    end
    if not saved then
      local f = io.open(path)
      if f then f:close() fail("a failed save left its file " .. path) end
      local listing = io.popen("ls -A " .. file_dir .. " | grep '^\\.' | head -1")
      local leftover = listing:read("*l")
      listing:close()
      if leftover then fail("a failed save left its temporary " .. leftover) end
      return
    end
    local dev = pick(devices)
    local load_opts = { device = dev, verify = verify and format == "safetensors" }
    -- now and then each tensor split along dimension 0 across two devices as it loads (shard)
    local split = rand(4) == 1 and { pick(devices), pick(devices) } or nil
    if split then
      load_opts.shard = function(_, info) if #info.shape > 0 then return { dim = 0, devices = split } end end
    end
    local loaded_ok, loaded
    if how == 1 then loaded_ok, loaded = call("load", nil, xfer.load, path, load_opts)
    else loaded_ok, loaded = as_job("load_async", xfer.load_async, path, load_opts) end
    os.remove(path)
    if not loaded_ok then return end
    if format == "npy" then loaded = { t1 = loaded } end
    for _, n in ipairs(names) do
      local t, e = loaded[n], picked[n]
      if not t then fail(("a loaded %s lacks %s"):format(format, n)) end
      if split and #e.t.shape > 0 then -- its parts: rows of the whole, in order, on their devices
        local rows, at = 0, 0
        for k, part in ipairs(t) do
          if part.device ~= split[k] or part.dtype ~= e.t.dtype then
            fail(("a split %s's part %d is %s, meant for %s"):format(n, k, part:summary(), split[k].name))
          end
          rows = rows + part.shape[1]
          live[#live + 1] = { t = part, bytes = e.bytes:sub(at + 1, at + part.nbytes), dev = split[k],
                              from = origin("save and load split (" .. format .. ")", e) }
          at = at + part.nbytes
        end
        if #t ~= 2 or rows ~= e.t.shape[1] or at ~= #e.bytes then
          fail(("a split %s has %d parts of %d rows, %d bytes: saved %s"):format(n, #t, rows, at, e.t:summary()))
        end
      else
        if t.dtype ~= e.t.dtype or table.concat(t.shape, ",") ~= table.concat(e.t.shape, ",") then
          fail(("a loaded %s's %s is %s, saved from %s"):format(format, n, t:summary(), e.t:summary()))
        end
        live[#live + 1] = { t = t, bytes = e.bytes, dev = dev, from = origin("save and load (" .. format .. ")", e) }
      end
    end
    count("file " .. format .. (split and " split" or ""))
  end,
  clone = function()
    local e = random_live()
    if not e or e.t.freed then return end
    local ok, c = call("clone", nil, e.t.clone, e.t)
    if ok then live[#live + 1] = { t = c, bytes = e.bytes, dev = e.dev, from = origin("clone", e) } end
  end,
  async = function()
    local e = random_live()
    if not e or e.t.freed then return end
    local dev = pick(devices)
    local ok, job = call("to_async", nil, e.t.to_async, e.t, dev)
    if not ok then return end
    if rand(3) == 1 then e.t:free() end -- free waits for the move
    local waited, moved = call("wait", nil, job.wait, job)
    if waited then live[#live + 1] = { t = moved, bytes = e.bytes, dev = dev, from = origin("to_async", e) } end
  end,
  transfer = function()
    local e = random_live()
    if not e or e.t.freed then return end
    local dev = pick(devices)
    local ok, moved = call("transfer", nil, xfer.transfer, e.t, dev,
                           { fallback = { "interop", "staged", "host" }, retries = rand(0, 1), log = false })
    if ok then live[#live + 1] = { t = moved, bytes = e.bytes, dev = dev, from = origin("transfer", e) } end
  end,
  free = function()
    local i = rand(math.max(#live, 1))
    local e = live[i]
    if not e then return end
    e.t:free()
    local ok, err = pcall(e.t.tobytes, e.t)
    if ok or not xfer.is_error(err) or err.code ~= "freed" then fail("a freed tensor did not raise freed") end
    table.remove(live, i)
  end,
  drop = function() -- to the collector
    if #live > 0 then table.remove(live, rand(#live)) end
  end,
  gc = function() collectgarbage(rand(2) == 1 and "collect" or "step") end,
  check = function()
    local e = random_live()
    if e then check(e, "a live tensor") end
  end,
  fault = function()
    xfer.faults.inject({ runtime = pick(runtime_list), op = pick(fault_ops), nth = rand(1, 4),
                         count = rand(1, 2) })
    faulted = true
  end,
  clear_faults = function()
    xfer.faults.clear()
    faulted = false
  end,
  close = function() -- a device closed: its tensors raise closed; opened again by name
    local dev = pick(devices)
    if dev == host then return end
    local ok, err = pcall(dev.close, dev)
    if not ok then fail("close: " .. tostring(err)) end
    for i = #live, 1, -1 do
      local e = live[i]
      if not e.t.freed and e.dev == dev then
        local read_ok, rerr = pcall(e.t.tobytes, e.t)
        if read_ok or not xfer.is_error(rerr) or rerr.code ~= "closed" then
          fail("a tensor of a closed device did not raise closed")
        end
        table.remove(live, i)
      end
    end
    xfer.device(dev.name)
  end,
  verified = function() -- a bit flipped on the way (fault "corrupt"): verify must say so
    local e = random_live()
    if not e or e.t.freed then return end
    local dev = pick(devices)
    xfer.faults.clear()
    xfer.faults.inject({ runtime = dev.runtime, op = "corrupt", nth = 1 })
    local ok, result = pcall(e.t.to, e.t, dev, { verify = true })
    local flipped = #xfer.faults.list() == 0 -- the rule was used: a move landed on dev
    xfer.faults.clear()
    faulted = false
    if ok and flipped then fail(origin("verified to", e, ": a bit flipped and verify said nothing")) end
    if not ok and (not xfer.is_error(result) or (result.code ~= "corrupt" and result.code ~= "unsupported")) then
      fail(origin("verified to", e, ": " .. tostring(result)))
    end
    count(ok and "verified" or "error " .. result.code)
    if ok then live[#live + 1] = { t = result, bytes = e.bytes, dev = dev, from = origin("verified to", e) } end
  end,
  deadline = function() -- past its deadline (spent at once, or a stall of the target's device)
    local a = random_live()
    if not a or a.t.freed then return end
    local b = partner_of(a)
    if not b or b == a or b.t.freed or a.t.dtype ~= b.t.dtype or
       table.concat(a.t.shape, ",") ~= table.concat(b.t.shape, ",") then return end
    local stall = rand(2) == 1
    if verbose then io.write("  deadline ", a.dev.name, " -> ", b.dev.name, " stall=", tostring(stall), " ", a.t.dtype, "[", table.concat(a.t.shape, ","), "]\n") end
    xfer.faults.clear()
    faulted = false
    if stall then xfer.faults.inject({ runtime = b.dev.runtime, op = "stall" }) end
    local ok, err = pcall(b.t.copy_from, b.t, a.t, { timeout = stall and 0.02 or 1e-6 })
    xfer.faults.clear()
    if ok then
      b.bytes, b.from = a.bytes, origin("copy_from in time", a)
      count("deadline met")
      return
    end
    if not xfer.is_error(err) then fail(origin("deadline", a, ": " .. tostring(err))) end
    count("deadline " .. err.code)
    if err.code ~= "timeout" then return end -- (a source left not valid: invalid)
    local read, rerr = pcall(b.t.tobytes, b.t)
    if read or not xfer.is_error(rerr) or rerr.code ~= "invalid" then
      fail(origin("deadline", a, ": its target read as valid after a timeout"))
    end
    local again = pcall(b.t.copy_from, b.t, a.t) -- written again: valid
    b.bytes, b.from = again and a.bytes or nil, origin("copy_from after a timeout", a)
  end,
  cancel = function() -- a job canceled: through when cancel returns, canceled or done before
    local e = random_live()
    if not e or e.t.freed then return end
    local dev = pick(devices)
    local ok, job = call("to_async", nil, e.t.to_async, e.t, dev)
    if not ok then return end
    job:cancel()
    if not job:done() then fail(origin("cancel", e, ": cancel returned before its job was through")) end
    local waited, moved = pcall(job.wait, job)
    if waited then
      live[#live + 1] = { t = moved, bytes = e.bytes, dev = dev, from = origin("to_async, canceled late", e) }
      count("cancel too late")
    elseif not xfer.is_error(moved) then
      fail(origin("cancel", e, ": " .. tostring(moved)))
    else
      count(moved.code == "canceled" and "canceled" or "error " .. moved.code)
    end
  end,
  config = function()
    local r = rand(4)
    if r == 1 then xfer.config({ staging_chunk = pick({ 4096, 65536, 1024 * 1024, 4 * 1024 * 1024 }),
                                 staging_depth = rand(2, 4) })
    elseif r == 2 then xfer.config({ cache = rand(2) == 1 })
    elseif r == 3 then xfer.config({ cache_limit = pick({ 0, 1, 4 * 1024 * 1024 }) })
    else xfer.empty_cache(rand(2) == 1 and pick(devices) or nil) end
  end,
}
local weights = { create = 14, to = 14, copy_from = 8, clone = 5, async = 4, transfer = 4, free = 8,
                  drop = 5, gc = 4, check = 10, fault = 3, clear_faults = 4, config = 3, close = 1,
                  view = 6, batch = 4, file = 3, verified = 3, deadline = 3, cancel = 3 }
local bag = {}
for name, w in pairs(weights) do for _ = 1, w do bag[#bag + 1] = name end end
table.sort(bag)

-- where memory starts
collectgarbage()
collectgarbage()
xfer.empty_cache()
local base = {}
for _, dev in ipairs(devices) do base[dev.name] = xfer.memory(dev).in_use end

for s = 1, steps do
  step = s
  local op = pick(bag)
  if verbose then io.write(("step %d: %s (%d live)\n"):format(s, op, #live)) end
  count(op)
  ops[op]()
end

-- every check once more, then everything back
xfer.faults.clear()
faulted = false
for _, e in ipairs(live) do check(e, "a live tensor at the end") end
live = nil
xfer.config({ staging_chunk = 4 * 1024 * 1024, staging_depth = 3, cache = true, cache_limit = 0 })
collectgarbage()
collectgarbage()
xfer.empty_cache()
for _, dev in ipairs(devices) do
  local m = xfer.memory(dev)
  if m.in_use ~= base[dev.name] then
    fail(("%s: %d bytes in use at the end, %d at the start"):format(dev.name, m.in_use, base[dev.name]))
  end
end
os.execute("rm -rf " .. file_dir)
local summary = {}
for k, v in pairs(counts) do summary[#summary + 1] = k .. " " .. v end
table.sort(summary)
io.write(("fuzz seed %d: %d steps, no problem (%s)\n"):format(seed, steps, table.concat(summary, ", ")))
os.exit(0, true)
