-- scripts/bench_tables/guard.lua -- the "guard" table of scripts/bench.lua: what `verify` costs.
-- The same move with and without {verify = true} in one run, one after the other: --pair-size
-- bytes from the host to every device and back, and between two devices of one GPU where there
-- are (cuda:0 <-> vulkan:0); 4096 blocks of 16 KiB scattered in a buffer, host <-> each device,
-- by a prepared batch; and a safetensors file of --file-size bytes loaded onto each device
-- with verify against the sums xfer.save recorded. The cost is the time with verify over the
-- time without, less one (issue 37's goal on the H200: <= 5% at 256 MiB, <= 10% for batches).
-- Then cancel and deadlines: cancel()'s latency at random points of each pair's move, the
-- target's checksum 100 ms after cancel returned (0 changed: nothing wrote after it), and how
-- late a move given a deadline ended past it.
local xfer = require "xfer"
local bench = require "xfer.bench"

local function cost(plain_s, verified_s)
  return plain_s and verified_s and ("%+.0f%%"):format((verified_s / plain_s - 1) * 100) or "-"
end

local function pairs_of(devs, host)
  local out = {}
  for _, d in ipairs(devs) do
    if d ~= host and d.runtime ~= "remote" then
      out[#out + 1] = { host, d }
      out[#out + 1] = { d, host }
    end
  end
  local cuda, vulkan
  for _, d in ipairs(devs) do
    if d.runtime == "cuda" and not cuda then cuda = d end
    if d.runtime == "vulkan" and not vulkan then vulkan = d end
  end
  if cuda and vulkan then
    out[#out + 1] = { cuda, vulkan }
    out[#out + 1] = { vulkan, cuda }
  end
  return out
end

-- The host and the devices a comma-separated list names (nil: every device), for `option`.
local function named_devices(B, devs, list, option)
  if not list then return devs end
  local named, kept = {}, {}
  for name in list:gmatch("[^,]+") do named[name] = true end
  for _, d in ipairs(devs) do
    if d == B.host or named[d.name] then kept[#kept + 1] = d end
    named[d.name] = nil
  end
  local unknown = next(named)
  if unknown then B.bad_option(("%s: no device '%s'"):format(option, unknown)) end
  return kept
end

local function moves(B, rows, devs)
  local n = B.pair_size
  for _, p in ipairs(pairs_of(devs, B.host)) do
    local src = xfer.full({ n }, 7, { dtype = "u8", device = p[1] })
    local dst = xfer.full({ n }, 1, { dtype = "u8", device = p[2] })
    local plain = bench.time(function() dst:copy_from(src) end, 5)
    local verified = bench.time(function() dst:copy_from(src, { verify = true }) end, 5)
    rows[#rows + 1] = { p[1].name .. " -> " .. p[2].name, bench.format_size(n), B.fmt_rate(n, plain),
                        B.fmt_rate(n, verified), cost(plain, verified) }
    src:free()
    dst:free()
  end
end

local function batches(B, rows, devs)
  local block, count = 16384, 4096
  local slots = count * 4
  local sb, db = bench.scatter(count, slots, 7), bench.scatter(count, slots, 11)
  for _, p in ipairs(pairs_of(devs, B.host)) do
    local src = xfer.full({ slots * block }, 7, { dtype = "u8", device = p[1] })
    local dst = xfer.full({ slots * block }, 1, { dtype = "u8", device = p[2] })
    local spec = { dst = dst, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block }
    local plain_b, verified_b = xfer.batch(spec), xfer.batch(spec, { verify = true })
    local plain = bench.time(function() plain_b:run() end, 5)
    local verified = bench.time(function() verified_b:run() end, 5)
    rows[#rows + 1] = { p[1].name .. " -> " .. p[2].name, ("%d x 16 KiB"):format(count),
                        B.fmt_rate(block * count, plain), B.fmt_rate(block * count, verified),
                        cost(plain, verified) }
    src:free()
    dst:free()
  end
end

local function loads(B, rows, devs)
  local size = B.file_size
  local dir = B.file_dir or "build/bench-files"
  os.execute("mkdir -p '" .. dir .. "'")
  local path = dir .. "/guard.safetensors"
  local each = 64 * 2^20
  local tensors = {}
  for i = 1, math.max(1, math.floor(size / each)) do
    tensors[("layer.%d"):format(i)] = xfer.full({ each }, i % 251, { dtype = "u8" })
  end
  xfer.save(path, tensors)
  local bytes = 0
  for _, t in pairs(tensors) do bytes = bytes + #t end
  for _, d in ipairs(devs) do
    if d.runtime ~= "remote" then
      local plain = bench.time(function() xfer.load(path, { device = d }) collectgarbage() end, 3)
      local verified = bench.time(function() xfer.load(path, { device = d, verify = true }) collectgarbage() end, 3)
      rows[#rows + 1] = { "file -> " .. d.name, bench.format_size(bytes) .. " warm", B.fmt_rate(bytes, plain),
                          B.fmt_rate(bytes, verified), cost(plain, verified) }
    end
  end
  os.remove(path)
end

local function wait_for(seconds)
  local until_ = xfer.clock() + seconds
  while xfer.clock() < until_ do end
end

local function percentile(list, p)
  if #list == 0 then return nil end
  table.sort(list)
  return list[math.max(1, math.ceil(#list * p))]
end

local function ms(x) return x and ("%.2f"):format(x * 1e3) or "-" end

-- One pair's cancels and deadlines: `runs` batch runs of one element (its target kept) canceled
-- at a random point of the move -- how long cancel() took, and whether the target changed in
-- the 100 ms after it returned -- then `runs` moves given a deadline at a random point: how late
-- each that timed out ended past its deadline.
local function cancels_of(pair, n, runs, rng)
  local src = xfer.full({ n }, 7, { dtype = "u8", device = pair[1] })
  local dst = xfer.full({ n }, 1, { dtype = "u8", device = pair[2] })
  local whole = bench.time(function() dst:copy_from(src) end, 3)
  local latency, changed, canceled = {}, 0, 0
  local b = xfer.batch({ { dst = dst, src = src } })
  for _ = 1, runs do
    local job = b:run_async()
    wait_for(rng() * whole)
    local t0 = xfer.clock()
    job:cancel()
    latency[#latency + 1] = xfer.clock() - t0
    local ok = pcall(job.wait, job)
    if not ok then
      canceled = canceled + 1
      local at_return = dst:crc32c() -- (not valid: read for the check only)
      wait_for(0.1)
      if dst:crc32c() ~= at_return then changed = changed + 1 end
    end
  end
  local late = {}
  for _ = 1, runs do
    local timeout = math.max(1e-4, rng() * whole)
    local t0 = xfer.clock()
    local ok = pcall(dst.copy_from, dst, src, { timeout = timeout })
    if not ok then late[#late + 1] = xfer.clock() - t0 - timeout end
  end
  src:free()
  dst:free()
  return { pair[1].name .. " -> " .. pair[2].name, bench.format_size(n), ("%.2f"):format(whole * 1e3),
           ("%d/%d"):format(canceled, runs), ms(percentile(latency, 0.5)), ms(percentile(latency, 0.99)),
           tostring(changed), ("%d/%d"):format(#late, runs), ms(percentile(late, 0.5)), ms(percentile(late, 0.99)) }
end

-- Cancels and deadlines of any job: `start()` starts it, `after()` says whether something
-- changed in the 100 ms after a cancel returned (nil: nothing to look at), `timed(s)` gives a
-- function that runs it with a deadline of s seconds (what it prepares -- a batch of 65536
-- pieces planned, about 10 ms -- is not counted as lateness: the deadline starts with the run).
local function job_cancels(what, size, whole, runs, rng, start, after, timed)
  local latency, changed, canceled = {}, 0, 0
  for _ = 1, runs do
    local job = start()
    wait_for(rng() * whole)
    local t0 = xfer.clock()
    job:cancel()
    latency[#latency + 1] = xfer.clock() - t0
    if not pcall(job.wait, job) then
      canceled = canceled + 1
      if after and after() then changed = changed + 1 end
    end
    collectgarbage()
  end
  local late = {}
  for _ = 1, runs do
    local timeout = math.max(1e-4, rng() * whole)
    local run = timed(timeout)
    local t0 = xfer.clock()
    if not pcall(run) then late[#late + 1] = xfer.clock() - t0 - timeout end
    collectgarbage()
  end
  return { what, size, ("%.2f"):format(whole * 1e3), ("%d/%d"):format(canceled, runs), ms(percentile(latency, 0.5)),
           ms(percentile(latency, 0.99)), after and tostring(changed) or "-", ("%d/%d"):format(#late, runs),
           ms(percentile(late, 0.5)), ms(percentile(late, 0.99)) }
end

-- A batch of 16 KiB pieces of one buffer into another's (the dst's CRC32C looked at again
-- 100 ms after cancel returned).
local function batch_cancels(pair, n, runs, rng)
  local block = 16384
  local count = math.max(1, math.floor(n / block))
  local src = xfer.full({ count * block }, 7, { dtype = "u8", device = pair[1] })
  local dst = xfer.full({ count * block }, 1, { dtype = "u8", device = pair[2] })
  local blocks = {}
  for i = 1, count do blocks[i] = i - 1 end
  local spec = { dst = dst, src = src, src_blocks = blocks, dst_blocks = blocks, block_bytes = block }
  local b = xfer.batch(spec)
  local whole = bench.time(function() b:run() end, 3)
  local row = job_cancels(("batch %s -> %s"):format(pair[1].name, pair[2].name),
                          ("%d x 16 KiB"):format(count), whole, runs, rng, function() return b:run_async() end,
                          function()
                            local at_return = dst:crc32c()
                            wait_for(0.1)
                            return dst:crc32c() ~= at_return
                          end,
                          function(s)
                            local timed = xfer.batch(spec, { timeout = s })
                            return function() timed:run() end
                          end)
  src:free()
  dst:free()
  return row
end

-- A safetensors file of n bytes saved (a canceled save's file looked for 100 ms after cancel
-- returned: none may appear) and loaded onto dev (a canceled load keeps nothing to look at).
local function file_cancels(B, dev, n, runs, rng)
  local dir = B.file_dir or "build/bench-files"
  os.execute("mkdir -p '" .. dir .. "'")
  local path = dir .. "/guard-cancel.safetensors"
  local t = xfer.full({ n }, 5, { dtype = "u8", device = dev })
  local opts = { chunk = 16 * 2^20 }
  local whole = bench.time(function() xfer.save(path, { t = t }, opts) end, 3)
  local saves = job_cancels("save " .. dev.name .. " -> file", bench.format_size(n), whole, runs, rng,
                            function() os.remove(path) return xfer.save_async(path, { t = t }, opts) end,
                            function()
                              wait_for(0.1)
                              local f = io.open(path, "rb")
                              if f then f:close() end
                              return f ~= nil
                            end,
                            function(s)
                              return function() xfer.save(path, { t = t }, { chunk = opts.chunk, timeout = s }) end
                            end)
  xfer.save(path, { t = t }, opts)
  whole = bench.time(function() xfer.load(path, { device = dev }) collectgarbage() end, 3)
  local loads = job_cancels("load file -> " .. dev.name, bench.format_size(n) .. " warm", whole, runs, rng,
                            function() return xfer.load_async(path, { device = dev, chunk = opts.chunk }) end, nil,
                            function(s)
                              return function() xfer.load(path, { device = dev, chunk = opts.chunk, timeout = s }) end
                            end)
  os.remove(path)
  t:free()
  return saves, loads
end

local function cancels(B, devs)
  local runs = B.cancel_runs or 20
  if runs == 0 then return B.say("cancel: not measured (--cancels 0)") end
  local rows = { { "cancel and deadline", "size", "move ms", "canceled", "cancel p50 ms", "p99 ms",
                   "changed after", "timed out", "late p50 ms", "p99 ms" } }
  local seed = 12345
  local function rng() seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 end
  local n = B.cancel_size or B.pair_size
  devs = named_devices(B, devs, B.cancel_devices, "--cancel-devices") -- (the host's own file rows not)
  local function add(row) -- each row said as it is made too: a long run cut short keeps them
    rows[#rows + 1] = row
    B.say("  " .. table.concat(row, " | "))
  end
  local function wanted(...) -- --cancel-rows: a row runs when one of its labels holds a part named
    if not B.cancel_rows then return true end
    for _, label in ipairs({ ... }) do
      for part in B.cancel_rows:gmatch("[^,]+") do
        if label:find(part, 1, true) then return true end
      end
    end
    return false
  end
  local function label(p) return p[1].name .. " -> " .. p[2].name end
  for _, p in ipairs(pairs_of(devs, B.host)) do
    if wanted(label(p)) then add(cancels_of(p, n, runs, rng)) end
  end
  for _, p in ipairs(pairs_of(devs, B.host)) do
    if wanted("batch " .. label(p)) then add(batch_cancels(p, n, runs, rng)) end
  end
  if B.remote_url then -- moves to and from the server's first device (--remote)
    local peer = xfer.connect(B.remote_url, { token = B.remote_token, timeout = 30 })
    local far = peer.devices[1]
    if wanted(label({ B.host, far }), label({ far, B.host })) then
      add(cancels_of({ B.host, far }, n, runs, rng))
      add(cancels_of({ far, B.host }, n, runs, rng))
    end
    peer:close()
  end
  for _, d in ipairs(devs) do
    if d.runtime ~= "remote" and not (B.cancel_devices and d == B.host) and
       wanted("save " .. d.name .. " -> file", "load file -> " .. d.name) then
      local saves, loads = file_cancels(B, d, n, runs, rng)
      add(saves)
      add(loads)
    end
  end
  B.emit(rows)
  B.say(("cancel: %d runs of each canceled at random points -- a move (a batch of one element), a" ..
         " batch of 16 KiB pieces, a save, a load: cancel()'s time, and targets whose CRC32C changed" ..
         " in the 100 ms after cancel returned (a save: its file appearing; must be 0); then %d runs" ..
         " given a deadline at a random point: how late those that timed out ended"):format(runs, runs))
end

-- What verify's parts cost alone: t:crc32c() of --pair-size bytes, of 4 MiB, and of a
-- batch's 4096 x 16 KiB ranges' worth (one 64 MiB tensor), on each device where the bytes lie
-- -- a device's own kernel, or the host's sum pool.
local function sums(B, devs)
  local rows = { { "CRC32C where the bytes lie", "size", "GB/s", "ms" } }
  for _, d in ipairs(devs) do
    if d.runtime ~= "remote" then
      for _, n in ipairs({ B.pair_size, 4 * 2^20 }) do
        local t = xfer.full({ n }, 7, { dtype = "u8", device = d })
        t:crc32c() -- (the kernel made and loaded once)
        local s = bench.time(function() t:crc32c() end, 7)
        rows[#rows + 1] = { d.name, bench.format_size(n), B.fmt_rate(n, s), ("%.3f"):format(s * 1e3) }
        t:free()
      end
    end
  end
  B.emit(rows)
end

return function(B)
  local parts = {}
  for name in (B.guard_parts or "sums,verify,cancel"):gmatch("[^,]+") do
    if name ~= "sums" and name ~= "verify" and name ~= "cancel" then
      B.bad_option(("--guard: no part '%s' (sums, verify, cancel)"):format(name))
    end
    parts[name] = true
  end
  local devs = xfer.devices()
  if parts.sums then sums(B, devs) end
  if parts.verify then
    local rows = { { "verify = true (CRC32C at both ends)", "size", "without GB/s", "with GB/s", "cost" } }
    local vdevs = named_devices(B, devs, B.verify_devices, "--verify-devices")
    moves(B, rows, vdevs)
    batches(B, rows, vdevs)
    loads(B, rows, vdevs)
    B.emit(rows)
    B.say("guard: each move's time with verify over the same move's without, the median of several;" ..
          " a device end's sum made by the device (CUDA, OpenCL, Vulkan kernels) or, for a device of the" ..
          " host's memory, by the CPU from a read-back")
  end
  if parts.cancel then cancels(B, devs) end
end
