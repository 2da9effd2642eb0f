-- scripts/soak.lua -- issue 37's "a process that cancels and retries in a loop for an hour
-- neither leaks nor corrupts": cycles of a job started, canceled at a random point of its time
-- and run again to the end, over every pair of devices here (the host and each device, both
-- ways) and every kind of job -- a batch of one element into a kept target, a batch of 16 KiB
-- blocks scattered, a `to_async` (a new tensor each time), a save and a load of a file. Checked
-- every cycle: a canceled job ends `canceled` (or done, when the cancel came too late), its
-- target is not valid and nothing writes into it after cancel returned (its CRC32C read again
-- after 20 ms), a canceled save leaves no file, and the retry (with `verify` every other time)
-- gives exactly the source's bytes. Checked every 100 cycles, the caches emptied first:
-- tensors' memory back where it was before the first cycle, nothing held. Driver objects are not compared then: a
-- host segment's registration or import is kept with the segment, and a segment that holds a
-- kept tensor also lends staging chunks, so one may be made at any cycle and stays while the
-- tensor lives (seen: 6 objects, then 7 from cycle 200 on, H100; Vulkan unmapped, 4 then 6).
-- At the end, every tensor and batch let go and the caches emptied, memory and driver objects
-- must be back where they were before the soak made anything: what leaked never comes back.
-- And the process's resident memory must not grow by more than 16 MiB over the second half
-- (not asked under AddressSanitizer, whose quarantine holds freed memory; its leak check at
-- exit speaks there).
-- Usage (scripts/soak runs it; scripts/test runs 600 cycles):
--   xferlua scripts/soak.lua [--cycles N | --seconds S] [--seed N] [--size BYTES]
local xfer = require "xfer"

local opts = { cycles = nil, seconds = nil, seed = 1, size = 1048576 }
do
  local args = arg or { ... }
  local i = 1
  while i <= #args do
    local name, value = args[i], args[i + 1]
    local key = name:match("^%-%-(%a+)$")
    if not key or opts[key] == nil and key ~= "cycles" and key ~= "seconds" or not tonumber(value) then
      io.stderr:write("usage: xferlua scripts/soak.lua [--cycles N | --seconds S] [--seed N] [--size BYTES]\n")
      os.exit(2, true)
    end
    opts[key] = tonumber(value)
    i = i + 2
  end
end
if not opts.cycles and not opts.seconds then opts.cycles = 600 end
math.randomseed(opts.seed)
local rand = math.random
local BLOCK = 16384
local n = math.max(BLOCK, opts.size - opts.size % BLOCK)

local host = xfer.device("host")
local devices = {}
for _, d in ipairs(xfer.devices()) do
  if d.runtime ~= "remote" then devices[#devices + 1] = d end
end
local pairs_here = {}
for _, d in ipairs(devices) do
  pairs_here[#pairs_here + 1] = { host, d }
  if d ~= host then pairs_here[#pairs_here + 1] = { d, host } end
end
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local problems = 0
local function problem(cycle, what)
  problems = problems + 1
  print(("soak: cycle %d: %s"):format(cycle, what))
  if problems >= 10 then
    print("soak: stopping after 10 problems")
    os.exit(1, true)
  end
end

local function busy_wait(seconds)
  local till = xfer.clock() + seconds
  while xfer.clock() < till do end
end

-- The bytes of each source: a pattern of its own, and its blocks reversed for the scatter.
local pattern = {}
for i = 0, n - 1 do pattern[i + 1] = string.char((i * 131 + math.floor(i / 4096)) % 251) end
pattern = table.concat(pattern)
local reversed = {}
for b = math.floor(n / BLOCK) - 1, 0, -1 do reversed[#reversed + 1] = pattern:sub(b * BLOCK + 1, (b + 1) * BLOCK) end
local want_crc = xfer.tensor(pattern, { dtype = "u8" }):crc32c()
local want_reversed_crc = xfer.tensor(table.concat(reversed), { dtype = "u8" }):crc32c()
local block_list, reversed_list = {}, {}
for b = 0, math.floor(n / BLOCK) - 1 do
  block_list[#block_list + 1] = b
  reversed_list[#reversed_list + 1] = math.floor(n / BLOCK) - 1 - b
end

-- What must come back: every device's tensors' memory and objects, nothing held.
local function memory_now()
  xfer.synchronize()
  collectgarbage()
  collectgarbage()
  xfer.empty_cache()
  local m = {}
  for _, d in ipairs(devices) do
    local s = xfer.memory(d)
    m[d.name] = { in_use = s.in_use, objects = s.objects, held = s.held }
  end
  return m
end

local function memory_problems(cycle, base, now, with_objects)
  for name, b in pairs(base) do
    local c = now[name]
    if c.in_use ~= b.in_use or with_objects and c.objects ~= b.objects or c.held ~= 0 then
      problem(cycle, ("%s: in_use %d (was %d), objects %d (was %d), held %d"):format(
        name, c.in_use, b.in_use, c.objects, b.objects, c.held))
    end
  end
end

-- before the soak made anything: what its end must find back
local before = memory_now()

-- Per pair: its source, its target, and the prepared batches over them (made once).
local kept = {}
for k, p in ipairs(pairs_here) do
  local src = xfer.tensor(pattern, { dtype = "u8" }):to(p[1])
  local dst = xfer.full({ n }, 0, { dtype = "u8", device = p[2] })
  local blocks = { dst = dst, src = src, src_blocks = block_list, dst_blocks = reversed_list, block_bytes = BLOCK }
  kept[k] = {
    src = src, dst = dst,
    one = xfer.batch({ { dst = dst, src = src } }), one_verified = xfer.batch({ { dst = dst, src = src } }, { verify = true }),
    blocks = xfer.batch(blocks), blocks_verified = xfer.batch(blocks, { verify = true }),
    took = 1e-3, -- how long the move took the last time it ran to the end (the cancel's range)
  }
end

-- A job canceled at a random point of `took`: "canceled", "done" (the cancel came too late)
-- or the unexpected error.
local function cancel_at_random(job, took)
  busy_wait(rand() * took)
  job:cancel()
  local ok, err = pcall(job.wait, job)
  if ok then return "done", err end
  if type(err) == "table" and err.code == "canceled" then return "canceled" end
  return "error", err
end

local function silent_after_cancel(cycle, t, what)
  local ok_at, at_return = pcall(t.crc32c, t)
  busy_wait(0.02)
  local ok_later, later = pcall(t.crc32c, t)
  if not ok_at or not ok_later or at_return ~= later then
    problem(cycle, what .. ": its target changed after cancel returned")
  end
  local readable = pcall(t.to, t, host)
  if readable then problem(cycle, what .. ": canceled, yet its target reads as valid") end
end

local counts = { canceled = 0, done = 0 }
local function count(what) counts[what] = (counts[what] or 0) + 1 end

local function batch_cycle(cycle, k, which)
  local p, keep = pairs_here[k], kept[k]
  local what = ("%s %s -> %s"):format(which, p[1].name, p[2].name)
  local outcome, err = cancel_at_random(keep[which]:run_async(), keep.took)
  count(outcome)
  if outcome == "error" then return problem(cycle, what .. ": cancel gave " .. tostring(err)) end
  if outcome == "canceled" then silent_after_cancel(cycle, keep.dst, what) end
  local again = keep[which .. (cycle % 2 == 0 and "_verified" or "")]
  local t0 = xfer.clock()
  local ok, run_err = pcall(again.run, again)
  keep.took = xfer.clock() - t0
  if not ok then return problem(cycle, what .. ": the retry failed: " .. tostring(run_err)) end
  local want = which == "one" and want_crc or want_reversed_crc
  if keep.dst:crc32c() ~= want then problem(cycle, what .. ": the retry's bytes are wrong") end
end

local function to_async_cycle(cycle, k)
  local p, keep = pairs_here[k], kept[k]
  local what = ("to_async %s -> %s"):format(p[1].name, p[2].name)
  local outcome, moved = cancel_at_random(keep.src:to_async(p[2]), keep.took)
  count(outcome)
  if outcome == "error" then return problem(cycle, what .. ": cancel gave " .. tostring(moved)) end
  if outcome == "done" and moved:crc32c() ~= want_crc then problem(cycle, what .. ": its bytes are wrong") end
  if moved then moved:free() end
  local ok, again = pcall(keep.src.to, keep.src, p[2], { verify = cycle % 2 == 0 })
  if not ok then return problem(cycle, what .. ": the retry failed: " .. tostring(again)) end
  if again:crc32c() ~= want_crc then problem(cycle, what .. ": the retry's bytes are wrong") end
  again:free()
end

local function file_cycle(cycle, k)
  local p, keep = pairs_here[k], kept[k]
  local path = ("%s/soak-%d.safetensors"):format(dir, k)
  os.remove(path)
  local what = ("save %s -> file"):format(p[1].name)
  local outcome, err = cancel_at_random(xfer.save_async(path, { t = keep.src }), keep.took * 4)
  count(outcome)
  if outcome == "error" then return problem(cycle, what .. ": cancel gave " .. tostring(err)) end
  if outcome == "canceled" and io.open(path, "rb") then problem(cycle, what .. ": canceled, yet the file is there") end
  local saved, save_err = pcall(xfer.save, path, { t = keep.src })
  if not saved then return problem(cycle, what .. ": the retry failed: " .. tostring(save_err)) end
  what = ("load file -> %s"):format(p[2].name)
  local loaded_outcome, loaded = cancel_at_random(xfer.load_async(path, { device = p[2] }), keep.took * 4)
  count(loaded_outcome)
  if loaded_outcome == "error" then return problem(cycle, what .. ": cancel gave " .. tostring(loaded)) end
  if loaded_outcome == "done" then
    if loaded.t:crc32c() ~= want_crc then problem(cycle, what .. ": its bytes are wrong") end
    loaded.t:free()
  end
  local ok, again = pcall(xfer.load, path, { device = p[2], verify = cycle % 2 == 0 })
  if not ok then return problem(cycle, what .. ": the retry failed: " .. tostring(again)) end
  if again.t:crc32c() ~= want_crc then problem(cycle, what .. ": the retry's bytes are wrong") end
  again.t:free()
end

local function resident_bytes()
  local f = io.open("/proc/self/statm", "r")
  if not f then return 0 end
  local pages = f:read("*n") and f:read("*n") or 0
  f:close()
  return pages * 4096
end

local kinds = { "one", "blocks", "to_async", "file" }
local function run_cycle(cycle, k, kind)
  if kind == "to_async" then to_async_cycle(cycle, k)
  elseif kind == "file" then file_cycle(cycle, k)
  else batch_cycle(cycle, k, kind) end
end
local base = memory_now() -- what the checks every 100 cycles compare with
local started = xfer.clock()
local warm_rss, half_rss, last_rss
local function finished(cycle)
  if opts.cycles then return cycle > opts.cycles end
  return xfer.clock() - started >= opts.seconds
end
local function fraction(cycle)
  if opts.cycles then return (cycle - 1) / opts.cycles end
  return (xfer.clock() - started) / opts.seconds
end

local cycle = 1
while not finished(cycle) do
  local k = rand(#pairs_here)
  run_cycle(cycle, k, kinds[rand(#kinds)])
  if cycle % 100 == 0 then
    memory_problems(cycle, base, memory_now())
    last_rss = resident_bytes()
    if not warm_rss and fraction(cycle + 1) >= 0.1 then warm_rss = last_rss end
    if not half_rss and fraction(cycle + 1) >= 0.5 then half_rss = last_rss end
  end
  cycle = cycle + 1
end
memory_problems(cycle, base, memory_now())
last_rss = resident_bytes()
half_rss = half_rss or last_rss
local grew = last_rss - half_rss
-- (under AddressSanitizer freed memory waits in its quarantine, up to 256 MiB: resident memory
-- says nothing there, and LeakSanitizer says what leaked at exit)
local sanitized = os.getenv("ASAN_OPTIONS") ~= nil
if grew > 16 * 2^20 and not sanitized then
  problem(cycle, ("resident memory grew by %.1f MiB over the second half (%.1f -> %.1f MiB)"):format(
    grew / 2^20, half_rss / 2^20, last_rss / 2^20))
end
-- everything let go: what the soak began with must be back (memory, driver objects)
for k, keep in ipairs(kept) do
  for _, which in ipairs({ "one", "one_verified", "blocks", "blocks_verified" }) do keep[which]:release() end
  keep.src:free()
  keep.dst:free()
  os.remove(("%s/soak-%d.safetensors"):format(dir, k))
end
memory_problems(cycle, before, memory_now(), true)
os.remove(dir)
print(("soak: %d cycles in %.0f s over %d pairs, %d canceled, %d done before the cancel; resident " ..
       "%.1f MiB after the first tenth, %.1f at half, %.1f at the end; %s"):format(
  cycle - 1, xfer.clock() - started, #pairs_here, counts.canceled, counts.done, (warm_rss or last_rss) / 2^20,
  half_rss / 2^20, last_rss / 2^20, problems == 0 and "0 problems" or (problems .. " problems")))
os.exit(problems == 0 and 0 or 1, true) -- closing the state frees the context (LeakSanitizer)
