-- scripts/bench.lua -- the benchmark that scripts/bench runs (a benchmark prints figures;
-- the tests assert behaviour). Usage: xferlua scripts/bench.lua [--raw PROGRAM] [--sizes 4K,1M,...]
--   [--pair-size 256M] [--plan-sizes 4K,64K,1M,256M] [--tables host,pairs,staged,to,strided,plan,remote,selftest]
--   [--json [FILE]] [--svg DIR] [--remote URL [--token T]] [--remote-chunks 1M,16M,64M]
--   [--remote-depths 1,2,4]
--   --json [FILE] writes one JSON document -- {version, date, inventory, settings, tables =
--   [{header, rows}]} -- to FILE (the tables still print), or alone to stdout ("-" or none);
--   --svg DIR draws bandwidth.svg and pairs.svg there (scripts/bench_svg.lua).
--   Host <-> every device: dst:copy_from(src) between tensors made beforehand, GB/s (decimal)
--   as the median of several runs after a warm-up run, and the first (cold) run apart.
--   With --raw (bench-cuda-raw), CUDA rows stand beside the same copies made with raw
--   cuMemcpy* calls in the same run.
--   plan: after xfer.calibrate (not saved), every pair at --plan-sizes by the default path
--   beside every path forced: the default's time over the best one's (goal: within 1.1x).
--   remote: a server process on loopback (xferlua --serve), 256 MiB host -> remote host and
--   back by copy_from, over tcp and over shared memory, beside ucx_perftest (ucp_am_bw, the
--   same size, without and with -e, the peer error handling xferlua's endpoints have; and
--   tag_bw) on the same transport in the same run, and the lanes UCX gave xferlua; then host -> each
--   remote device and back (on the GPU machine: the server's CUDA, Vulkan and OpenCL
--   devices). --remote URL [--token T]: a server already running on another machine
--   (xferlua --serve there) instead, over whatever UCX_TLS says here. Where CUDA works, also
--   cuda:0 -> the server's CUDA devices and back, UCX_TLS unset, by the default path (direct
--   where UCX moves CUDA memory in place) and staged, beside PyTorch's and CuPy's copy of
--   another process's buffer through CUDA IPC (scripts/bench_frameworks.py --ipc). --remote-chunks LIST:
--   the moves to and from each remote device once per request size (xfer.config remote_chunk;
--   remote_depth requests in flight); --remote-depths LIST likewise for the requests in flight
--   (xfer.config remote_depth); with both, every pair.
--   On a terminal, a progress line on stderr (not when the output is piped).
local xfer = require "xfer"
local bench = require "xfer.bench"

local args = { ... }
local raw_program, sizes_text, pair_text = nil, "4K,1M,64M,1G", "256M"
local plan_sizes_text = "4K,64K,1M,256M"
local tables_text = "host,pairs,staged,to,strided,plan,remote,selftest"
local json, json_file, svg_dir, remote_url, remote_token = false, nil, nil, nil, nil
local remote_chunks_text, remote_depths_text = nil, nil
local i = 1
while i <= #args do
  if args[i] == "--raw" then raw_program = args[i + 1]; i = i + 2
  elseif args[i] == "--sizes" then sizes_text = args[i + 1]; i = i + 2
  elseif args[i] == "--pair-size" then pair_text = args[i + 1]; i = i + 2
  elseif args[i] == "--plan-sizes" then plan_sizes_text = args[i + 1]; i = i + 2
  elseif args[i] == "--tables" then tables_text = args[i + 1]; i = i + 2
  elseif args[i] == "--json" then -- --json [FILE]: the document to FILE ("-" or none: stdout)
    json = true
    if args[i + 1] and not args[i + 1]:match("^%-%-") then json_file = args[i + 1]; i = i + 2 else i = i + 1 end
  elseif args[i] == "--svg" then svg_dir = args[i + 1]; i = i + 2
  elseif args[i] == "--remote" then remote_url = args[i + 1]; i = i + 2
  elseif args[i] == "--token" then remote_token = args[i + 1]; i = i + 2
  elseif args[i] == "--remote-chunks" then remote_chunks_text = args[i + 1]; i = i + 2
  elseif args[i] == "--remote-depths" then remote_depths_text = args[i + 1]; i = i + 2
  else error("unknown argument '" .. args[i] .. "' (expected --raw PROGRAM, --sizes LIST, --pair-size SIZE, --plan-sizes LIST, --tables LIST, --json [FILE], --svg DIR, --remote URL, --token TOKEN, --remote-chunks LIST or --remote-depths LIST)") end
end
local wanted = {}
for name in tables_text:gmatch("[^,]+") do wanted[name] = true end
local sizes = {}
for text in sizes_text:gmatch("[^,]+") do sizes[#sizes + 1] = bench.parse_size(text) end

local host = xfer.device("host")

-- a table of figures: printed, or kept for the JSON document (--json)
local emitted = {}
local quiet = json and (json_file == nil or json_file == "-") -- the JSON alone on stdout
local function emit(rows)
  local body = {}
  for r = 2, #rows do body[#body + 1] = rows[r] end
  emitted[#emitted + 1] = { header = rows[1], rows = body }
  if not quiet then
    print()
    print(bench.table(rows))
  end
end
local function say(text) if not quiet then print(text) end end

-- a progress line on stderr while a table is measured, on a terminal only
local on_terminal = os.execute("[ -t 1 ] && [ -t 2 ]") == 0
local function progress(what, done, total)
  if not on_terminal then return end
  io.stderr:write(("\rbench: %s %d of %d"):format(what, done, total), done == total and "\r\27[K" or "")
  io.stderr:flush()
end

-- Raw CUDA figures: raw[direction][memory][bytes] = seconds
local function run_raw(dev)
  if not raw_program or raw_program == "" then return nil end
  local cmd = raw_program .. " " .. dev.index
  for _, n in ipairs(sizes) do cmd = cmd .. " " .. math.floor(n) end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  local raw = { h2d = { pinned = {}, pageable = {} }, d2h = { pinned = {}, pageable = {} } }
  local found = false
  for dir, mem, n, s in out:gmatch("(%a2%a) (%a+) (%d+) ([%d.e-]+)") do
    raw[dir][mem][tonumber(n)] = tonumber(s)
    found = true
  end
  if not found then io.stderr:write("bench-cuda-raw printed nothing usable:\n", out, "\n") end
  return found and raw or nil
end

local function fmt_rate(bytes, s)
  if not s then return "-" end
  return ("%.2f"):format(bench.gbps(bytes, s))
end

local function fmt_us(s) return s and ("%.1f"):format(s * 1e6) or "-" end

say(("xferlua %s benchmark -- %s"):format(xfer.version, os.date("!%Y-%m-%d %H:%M UTC")))
say(xfer.describe())

-- host -> host: the memcpy every other figure compares with
if wanted.host then
  local rows = { { "host->host (memcpy)", "size", "GB/s", "us" } }
  for _, n in ipairs(sizes) do
    local s = bench.copy(host, host, n, bench.reps_for(n, 0.3, 10))
    rows[#rows + 1] = { "", bench.format_size(n), fmt_rate(n, s), fmt_us(s) }
  end
  emit(rows)
end

for _, dev in ipairs(wanted.host and xfer.devices() or {}) do
  if dev ~= host then
    local raw = dev.runtime == "cuda" and run_raw(dev) or nil
    local header = { dev.name .. " (" .. dev.label .. ")", "size", "GB/s", "us", "first us" }
    if raw then
      for _, h in ipairs({ "raw pinned GB/s", "raw pinned us", "raw pageable GB/s", "vs pinned" }) do
        header[#header + 1] = h
      end
    end
    local rows = { header }
    for _, dir in ipairs({ "h2d", "d2h" }) do
      for _, n in ipairs(sizes) do
        local from, to = host, dev
        if dir == "d2h" then from, to = dev, host end
        local ok, s, first = pcall(bench.copy, from, to, n, bench.reps_for(n, 0.5, 5))
        if not ok then
          rows[#rows + 1] = { (dir == "h2d" and "host->" or "->host") .. " failed: " .. tostring(s) }
        else
          local row = { dir == "h2d" and "host -> " .. dev.name or dev.name .. " -> host",
                        bench.format_size(n), fmt_rate(n, s), fmt_us(s), fmt_us(first) }
          if raw then
            local rp, rg = raw[dir].pinned[n], raw[dir].pageable[n]
            row[#row + 1] = fmt_rate(n, rp)
            row[#row + 1] = fmt_us(rp)
            row[#row + 1] = fmt_rate(n, rg)
            row[#row + 1] = rp and ("%.2fx"):format(rp / s) or "-"
          end
          rows[#rows + 1] = row
        end
      end
    end
    emit(rows)
  end
end

-- Between devices: the default path beside the naive round-trip frameworks make today
-- (read everything into a fresh host buffer, make a new tensor from it).
if wanted.pairs then
  local n = bench.parse_size(pair_text)
  local memcpy_s = bench.copy(host, host, n, 5)
  local rows = { { ("device -> device, %s"):format(bench.format_size(n)), "path", "GB/s",
                   "naive GB/s", "vs naive", "vs memcpy" } }
  local devs = xfer.devices()
  for _, a in ipairs(devs) do
    for _, b in ipairs(devs) do
      if a ~= b and (a ~= host or b ~= host) then
        local src = xfer.full({ n }, 7, { dtype = "u8", device = a })
        local dst = xfer.full({ n }, 1, { dtype = "u8", device = b })
        local path = xfer.plan(src, b).path
        local ok, s = pcall(bench.time, function() dst:copy_from(src) end, 5)
        local naive_ok, naive = pcall(bench.time, function()
          local moved = xfer.tensor(src:tobytes(), { dtype = "u8", device = b })
          moved:free()
        end, 1)
        if ok then
          rows[#rows + 1] = { a.name .. " -> " .. b.name, path, fmt_rate(n, s),
                              naive_ok and fmt_rate(n, naive) or "-",
                              naive_ok and ("%.1fx"):format(naive / s) or "-",
                              ("%.2fx"):format(memcpy_s / s) }
        else
          rows[#rows + 1] = { a.name .. " -> " .. b.name, path, "failed: " .. tostring(s) }
        end
        src:free()
        dst:free()
        collectgarbage()
      end
    end
  end
  emit(rows)
  say(("memcpy of the same bytes: %s GB/s"):format(fmt_rate(n, memcpy_s)))
end

-- The staged path between every two devices, beside the single pinned hops it is made of
-- (host -> device and device -> host into tensors xferlua pinned or imported, measured
-- here) and, where CUDA works, raw cuMemcpy* from pinned memory at the same size.
if wanted.staged then
  local n = bench.parse_size(pair_text)
  local cfg = xfer.config()
  local hop = {}
  local function hop_rate(from, to)
    local key = from.name .. ">" .. to.name
    if hop[key] == nil then
      local ok, s = pcall(bench.copy, from, to, n, 5)
      hop[key] = ok and bench.gbps(n, s) or false
    end
    return hop[key]
  end
  local raw_pinned
  for _, dev in ipairs(xfer.devices()) do
    if dev.runtime == "cuda" and raw_program and raw_program ~= "" and not raw_pinned then
      local saved = sizes
      sizes = { n }
      local raw = run_raw(dev)
      sizes = saved
      local up, down = raw and raw.h2d.pinned[n], raw and raw.d2h.pinned[n]
      if up and down then raw_pinned = bench.gbps(n, math.max(up, down)) end
    end
  end
  local header = { ("staged, %s in %s chunks, %d in flight"):format(bench.format_size(n),
                   bench.format_size(cfg.staging_chunk), cfg.staging_depth),
                   "GB/s", "slower hop GB/s", "vs hop" }
  if raw_pinned then
    header[#header + 1] = "vs raw pinned"
  end
  local rows = { header }
  local devs = xfer.devices()
  for _, a in ipairs(devs) do
    for _, b in ipairs(devs) do
      if a ~= b and a ~= host and b ~= host then
        local ok, s = pcall(bench.copy, a, b, n, 5, { via = "staged" })
        local up, down = hop_rate(host, b), hop_rate(a, host)
        local slower = up and down and math.min(up, down)
        if ok then
          local rate = bench.gbps(n, s)
          local row = { a.name .. " -> " .. b.name, ("%.2f"):format(rate),
                        slower and ("%.2f"):format(slower) or "-",
                        slower and ("%.2fx"):format(rate / slower) or "-" }
          if raw_pinned then row[#row + 1] = ("%.2fx"):format(rate / raw_pinned) end
          rows[#rows + 1] = row
        else
          rows[#rows + 1] = { a.name .. " -> " .. b.name, "failed: " .. tostring(s) }
        end
        collectgarbage()
      end
    end
  end
  emit(rows)
  if raw_pinned then
    say(("raw pinned (cuMemcpy, the slower direction) at %s: %.2f GB/s"):format(
      bench.format_size(n), raw_pinned))
  end
end

-- t:to(dev) in a loop (each result freed) beside dst:copy_from(src) into a tensor made
-- beforehand, for every ordered pair of devices: the call users write against the copy's
-- ceiling. The first to() after empty_cache() (cold: memory from the driver, pins and
-- imports made) is shown apart; steady state comes from the caching allocator.
if wanted.to then
  local rows = { { "to() vs copy_from", "size", "path", "copy GB/s", "copy us", "to() GB/s",
                   "to() us", "cold to() us", "to/copy" } }
  local devs = xfer.devices()
  for _, n in ipairs({ 4096, bench.parse_size(pair_text) }) do
    local reps = n <= 65536 and 200 or 7
    for _, a in ipairs(devs) do
      for _, b in ipairs(devs) do
        if a ~= b then
          local src = xfer.full({ n }, 7, { dtype = "u8", device = a })
          local dst = xfer.full({ n }, 1, { dtype = "u8", device = b })
          local path = xfer.plan(src, b).path
          local ok, copy_s = pcall(bench.time, function() dst:copy_from(src) end, reps)
          dst:free()
          xfer.empty_cache()
          local ok2, to_s, cold = pcall(bench.time, function() src:to(b):free() end, reps)
          if ok and ok2 then
            -- bandwidth ratio for large moves, time ratio (lower is better) for small ones
            local ratio = n <= 65536 and ("%.2fx time"):format(to_s / copy_s)
                                      or ("%.2fx GB/s"):format(copy_s / to_s)
            rows[#rows + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), path,
                                fmt_rate(n, copy_s), fmt_us(copy_s), fmt_rate(n, to_s), fmt_us(to_s),
                                fmt_us(cold), ratio }
          else
            rows[#rows + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), path,
                                "failed: " .. tostring(ok and to_s or copy_s) }
          end
          src:free()
          collectgarbage()
        end
      end
    end
  end
  emit(rows)
end

-- strided: every other row of a matrix of --pair-size bytes (rows of 16 KiB), moved
-- host -> device and device -> host as a view, beside making it contiguous first and moving
-- that (what a user without views would do); bandwidth counts the bytes of the view.
if wanted.strided then
  local n = bench.parse_size(pair_text)
  local cols = 4096 -- f32: 16 KiB rows
  local rows_n = math.max(2, math.floor(n / (cols * 4)))
  local view_bytes = math.floor(rows_n / 2) * cols * 4
  local out = { { ("every other row of f32[%d,%d]"):format(rows_n, cols), "view bytes", "view GB/s",
                  "view ms", "contiguous() then to GB/s", "ms" } }
  for _, dev in ipairs(xfer.devices()) do
    if dev ~= host then
      for _, dir in ipairs({ "h2d", "d2h" }) do
        local from, to = host, dev
        if dir == "d2h" then from, to = dev, host end
        local m = xfer.zeros({ rows_n, cols }, { device = from })
        local v = m:slice({ { 1, -1, 2 } })
        local reps = bench.reps_for(view_bytes, 0.5, 2)
        local ok, s = pcall(bench.time, function() v:to(to):free() end, reps)
        local ok2, s2 = pcall(bench.time, function()
          local c = v:contiguous()
          c:to(to):free()
          if c ~= v then c:free() end
        end, reps)
        out[#out + 1] = { from.name .. " -> " .. to.name, bench.format_size(view_bytes),
                          ok and fmt_rate(view_bytes, s) or "failed", ok and ("%.2f"):format(s * 1e3) or tostring(s),
                          ok2 and fmt_rate(view_bytes, s2) or "failed", ok2 and ("%.2f"):format(s2 * 1e3) or tostring(s2) }
        v:free() -- the view first: memory that views use cannot be freed
        m:free()
        collectgarbage()
      end
    end
  end
  emit(out)
end

-- plan: does the default path (after calibration) come within 1.1x of the best forced path?
if wanted.plan then
  local plan_sizes = {}
  for text in plan_sizes_text:gmatch("[^,]+") do plan_sizes[#plan_sizes + 1] = bench.parse_size(text) end
  local cal = xfer.calibrate({ save = false, reps = 3,
                               progress = function(d, n) progress("calibrating: pair", d, n) end })
  say(("\ncalibrated %d paths in %.1f s (xfer.calibrate, not saved)"):format(#cal.results, cal.seconds))
  local rows = { { "pair", "size", "default", "us", "best forced", "us", "default / best" } }
  local within, total = 0, 0
  -- a move over 1.1x: what the planner estimated for each path beside what each measured
  local misses = { { "pair", "size", "path", "estimated us", "measured us" } }
  local devs = xfer.devices()
  local done, count = 0, #devs * #devs * #plan_sizes
  for _, n in ipairs(plan_sizes) do
    for _, a in ipairs(devs) do
      for _, b in ipairs(devs) do
        progress("plan: move", done, count)
        done = done + 1
        local src = xfer.full({ n }, 7, { dtype = "u8", device = a })
        local dst = xfer.empty({ n }, { dtype = "u8", device = b })
        local reps = bench.reps_for(n, 0.1, 2)
        local default_path = xfer.plan(src, b).path
        -- three rounds, the default and every forced path in turn in each, the best round of
        -- each counted: a machine's drift (another process, a frequency change) hits all alike
        local ok, default_s, best_path, best_s = true, math.huge, nil, math.huge
        local forced = {}
        for _ = 1, 3 do
          local dok, s = pcall(bench.time, function() dst:copy_from(src) end, reps)
          if not dok then ok, default_s = false, s break end
          default_s = math.min(default_s, s)
          for _, e in ipairs(xfer.plan(src, b).estimates) do
            local fok, fs = pcall(bench.time, function() dst:copy_from(src, { via = e.path }) end, reps)
            if fok then forced[e.path] = math.min(forced[e.path] or math.huge, fs) end
          end
        end
        for path, s in pairs(forced) do
          if s < best_s then best_path, best_s = path, s end
        end
        if ok and best_path then
          local ratio = default_s / best_s
          total = total + 1
          if ratio <= 1.1 then
            within = within + 1
          else
            for _, e in ipairs(xfer.plan(src, b).estimates) do
              misses[#misses + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), e.path,
                                      fmt_us(e.seconds), fmt_us(forced[e.path]) }
            end
          end
          rows[#rows + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), default_path, fmt_us(default_s),
                              best_path, fmt_us(best_s), ("%.2f%s"):format(ratio, ratio <= 1.1 and "" or " (over 1.1)") }
        else
          rows[#rows + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), default_path,
                              "failed: " .. tostring(ok and "no forced path ran" or default_s) }
        end
        src:free()
        dst:free()
        collectgarbage()
      end
    end
  end
  progress("plan: move", count, count)
  emit(rows)
  say(("the default within 1.1x of the best forced path: %d of %d moves"):format(within, total))
  if #misses > 1 then
    say("\nthe moves over 1.1x: the planner's estimate of each path (from the calibration) and its time here")
    emit(misses)
  end
  xfer.forget_costs()
end

-- remote: moves to and from a server on this machine, beside ucx_perftest
if wanted.remote then
  local ok_rt = false
  for _, r in ipairs(xfer.runtimes()) do if r.name == "remote" and r.available then ok_rt = true end end
  if not ok_rt then
    say("\nremote: the remote runtime is unavailable here")
  else
    local ffi = require "ffi"
    pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
    local n = bench.parse_size(pair_text)
    -- perftest's endpoints handle no peer errors unless -e; xferlua's always do (a lost peer
    -- is an error, not a hang), and with them UCX 1.13 picks other lanes (shared memory: no
    -- cma; tcp: no rma lanes), so both are beside it
    local rows = { { "over UCX_TLS", "move", "size", "request", "in flight", "xferlua GB/s",
                     "ucx_perftest am_bw GB/s", "am_bw -e GB/s", "tag_bw GB/s", "xferlua / am_bw",
                     "xferlua / am_bw -e" } }
    local lanes_seen = {}
    local configured_depth = xfer.config().remote_depth
    local host_depths = { configured_depth }
    if remote_depths_text then
      host_depths = {}
      for text in remote_depths_text:gmatch("[^,]+") do host_depths[#host_depths + 1] = tonumber(text) end
    end
    local configured_chunk = xfer.config().remote_chunk
    local host_chunks = { configured_chunk }
    if remote_chunks_text then
      host_chunks = {}
      for text in remote_chunks_text:gmatch("[^,]+") do host_chunks[#host_chunks + 1] = bench.parse_size(text) end
    end
    local function run(cmd)
      local p = io.popen(cmd .. " 2>&1")
      local out = p:read("*a")
      p:close()
      return out
    end
    local self = arg and arg[-1] or "xferlua"
    math.randomseed(os.time() + math.floor(xfer.clock() * 1e6) % 100000)
    -- an xferlua server on loopback, started with `env` ("UCX_TLS=tcp"): its url (nil when it did
    -- not come up), pid and log; port 0: the system picks a free port, and its line says which
    local function serve_here(env, name)
      local log = os.tmpname()
      local pid = tonumber(run(("%s timeout 300 %s --serve ucx://127.0.0.1:0 --name %s >%s 2>&1 & echo $!"):format(env, self, name, log)))
      for _ = 1, 100 do
        local f = io.open(log)
        local text = f and f:read("*a") or ""
        if f then f:close() end
        local url = text:match("serving .- on (ucx://%S+)")
        if url then return url, pid, log end
        os.execute("sleep 0.05")
      end
      return nil, pid, log
    end
    -- ucx_perftest on the same transport, loopback: a server, then its client (MB/s: 2^20 bytes)
    local function perftest(tls, test, errors)
      local e = errors and " -e" or ""
      for _ = 1, 3 do -- (a server slow to come up, or a port taken: again, on another port)
        local pport = 20000 + math.random(0, 30000)
        run(("UCX_TLS=%s timeout 120 ucx_perftest -p %d%s >/dev/null 2>&1 &"):format(tls, pport, e))
        os.execute("sleep 0.5")
        local out = run(("UCX_TLS=%s timeout 120 ucx_perftest 127.0.0.1 -p %d%s -t %s -s %d -n 10"):format(tls, pport, e, test, n))
        local mbs = tonumber(out:match("Final:%s+%d+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+([%d.]+)"))
        if mbs then return mbs * 1048576 / 1e9 end
      end
    end
    -- moves to and back from the devices of a peer (its host alone, or all but its host):
    -- {move, seconds, is the peer's host, request size}
    local function time_peer(peer, name, host_only)
      local src = xfer.full({ n }, 3, { dtype = "u8" })
      local back = xfer.empty({ n }, { dtype = "u8" })
      local timed = {}
      for _, dev in ipairs(peer.devices) do
        local is_host = dev.name == name .. "/host"
        if is_host ~= host_only then goto next_device end
        local there = xfer.empty({ n }, { dtype = "u8", device = dev })
        local reps = is_host and 5 or 3
        for _, depth in ipairs(host_depths) do
          for _, chunk in ipairs(host_chunks) do
            xfer.config({ remote_chunk = chunk, remote_depth = depth })
            local to_s = bench.time(function() there:copy_from(src) end, reps)
            local back_s = bench.time(function() back:copy_from(there) end, reps)
            assert(back:equals(src), "remote bench: the bytes came back wrong from " .. dev.name)
            timed[#timed + 1] = { "host -> " .. dev.name, to_s, is_host, chunk, depth }
            timed[#timed + 1] = { dev.name .. " -> host", back_s, is_host, chunk, depth }
          end
        end
        xfer.config({ remote_chunk = configured_chunk, remote_depth = configured_depth })
        there:free()
        ::next_device::
      end
      return timed
    end
    -- The host rows beside ucx_perftest, in three rounds that take turns, the fastest of each
    -- kept: the machine's drift (both processes share its cores with whatever else runs) hits
    -- both alike, where one run of each differed by 10-20% from one call to the next.
    local ROUNDS = 3
    local function time_host_rounds(peer, name, tls)
      local best, perf = nil, {}
      for _ = 1, ROUNDS do
        local timed = time_peer(peer, name, true)
        if not best then best = timed
        else for i, row in ipairs(timed) do best[i][2] = math.min(best[i][2], row[2]) end end
        if tls then
          local got = { am = perftest(tls, "ucp_am_bw"), am_e = perftest(tls, "ucp_am_bw", true),
                        tag = perftest(tls, "tag_bw") }
          for k, v in pairs(got) do perf[k] = math.max(perf[k] or 0, v) end
        end
      end
      return best, perf
    end
    local function add_rows(tls, timed, perf)
      perf = perf or {}
      for _, row in ipairs(timed) do
        local gbps = n / row[2] / 1e9
        local function vs(v) return row[3] and v and ("%.2f"):format(v) or (row[3] and "not run" or "-") end
        local function ratio(v) return row[3] and v and ("%.2fx"):format(gbps / v) or "-" end
        rows[#rows + 1] = { tls, row[1], bench.format_size(n), bench.format_size(row[4]), tostring(row[5]),
                            ("%.2f"):format(gbps), vs(perf.am), vs(perf.am_e), vs(perf.tag),
                            ratio(perf.am), ratio(perf.am_e) }
      end
    end
    if remote_url then -- a server of another machine (xferlua --serve there): UCX_TLS as set here
      local peer = xfer.connect(remote_url, { timeout = 60, token = remote_token })
      local tls = os.getenv("UCX_TLS") or "(UCX's choice)"
      lanes_seen[#lanes_seen + 1] = { tls, peer.transports }
      add_rows(tls, (time_host_rounds(peer, peer.name, nil)))
      add_rows(tls, time_peer(peer, peer.name, false))
      peer:close()
      rows[1][7] = "ucx_perftest am_bw GB/s (run it between the hosts)"
    end
    for _, tls in ipairs(remote_url and {} or { "tcp", "shm,tcp" }) do
      local url, pid, log = serve_here("UCX_TLS=" .. tls, "bench")
      if url then
        ffi.C.setenv("UCX_TLS", tls, 1) -- read when the peer's UCX context starts
        local peer = xfer.connect(url, { timeout = 60 })
        lanes_seen[#lanes_seen + 1] = { tls, peer.transports }
        local host_rows, perf = time_host_rounds(peer, "bench", tls)
        local device_rows = time_peer(peer, "bench", false)
        peer:close()
        add_rows(tls, host_rows, perf)
        add_rows(tls, device_rows)
      else
        rows[#rows + 1] = { tls, "no server came up", "", "", "", "", "", "", "", "", "" }
      end
      os.execute("kill " .. tostring(pid) .. " 2>/dev/null; pkill -P " .. tostring(pid) .. " 2>/dev/null")
      os.remove(log)
    end
    emit(rows)
    for _, seen in ipairs(lanes_seen) do
      say(("UCX_TLS=%s: xferlua's lanes %s"):format(seen[1], table.concat(seen[2], "; ")))
    end
    -- CUDA memory to a server's CUDA device and back, UCX_TLS unset (UCX's choice: cuda_ipc
    -- where its build has it), by the default path (direct where it applies) and staged,
    -- beside what a PyTorch or CuPy user does between two processes of one machine: copy the
    -- other's buffer opened through CUDA IPC (scripts/bench_frameworks.py --ipc)
    local has_cuda = false
    for _, d in ipairs(xfer.devices()) do if d.name == "cuda:0" then has_cuda = true end end
    if has_cuda and not remote_url then
      pcall(ffi.cdef, "int unsetenv(const char *name);")
      local anchors = {}
      local py = run(("timeout 300 python3 %s/bench_frameworks.py --ipc %d"):format(
        (arg and arg[0] or "scripts/bench.lua"):match("^(.*)/[^/]*$") or "scripts", n))
      for name, gbps in py:gmatch("ipc (%a+): another process's GPU buffer%s+%d+%s+([%d.]+) GB/s") do
        anchors[name] = tonumber(gbps)
      end
      for line in py:gmatch("# ipc [^\n]*") do say(line) end
      -- and ucx_perftest of the UCX xferlua loads (XFER_UCX_LIBRARY's, beside it in ../bin),
      -- CUDA memory at both ends, peer error handling on (-e) as xferlua's endpoints have it
      local lib = os.getenv("XFER_UCX_LIBRARY")
      local libdir = lib and lib:match("^(.*)/[^/]*$")
      local perf_bin = libdir and libdir .. "/../bin/ucx_perftest" or "ucx_perftest"
      local perf_env = libdir and ("env -u UCX_TLS LD_LIBRARY_PATH=%s"):format(libdir) or "env -u UCX_TLS"
      for _ = 1, 3 do
        local pport = 20000 + math.random(0, 30000)
        run(("%s timeout 120 %s -p %d -e >/dev/null 2>&1 &"):format(perf_env, perf_bin, pport))
        os.execute("sleep 1")
        local out = run(("%s timeout 120 %s 127.0.0.1 -p %d -e -t ucp_am_bw -m cuda,cuda -s %d -n 20"):format(perf_env, perf_bin, pport, n))
        local mbs = tonumber(out:match("Final:%s+%d+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+([%d.]+)"))
        if mbs then anchors.perftest = mbs * 1048576 / 1e9 break end
      end
      local url, pid, log = serve_here("env -u UCX_TLS", "benchc")
      local crows = { { "move", "size", "path", "xferlua GB/s", "ucx_perftest -e cuda GB/s", "PyTorch IPC GB/s",
                        "CuPy IPC GB/s", "xferlua / perftest", "xferlua / CuPy" } }
      if url then
        ffi.C.unsetenv("UCX_TLS")
        local peer = xfer.connect(url, { timeout = 60 })
        say(("UCX_TLS unset: lanes %s; memory UCX moves in place: here %s, there %s"):format(
          table.concat(peer.transports, "; "), table.concat(peer.memory.here, " "), table.concat(peer.memory.there, " ")))
        local src = xfer.full({ n }, 5, { dtype = "u8", device = "cuda:0" })
        local back = xfer.empty({ n }, { dtype = "u8", device = "cuda:0" })
        for _, dev in ipairs(peer.devices) do
          if dev.name:match("/cuda:%d+$") then
            local there = xfer.empty({ n }, { dtype = "u8", device = dev })
            local paths = { xfer.plan(src, dev).path }
            if paths[1] ~= "staged" then paths[2] = "staged" end
            for _, path in ipairs(paths) do
              local to_s = bench.time(function() there:copy_from(src, { via = path }) end, 5)
              local back_s = bench.time(function() back:copy_from(there, { via = path }) end, 5)
              assert(back:equals(src), "remote bench: the bytes came back wrong from " .. dev.name)
              for _, m in ipairs({ { "cuda:0 -> " .. dev.name, to_s }, { dev.name .. " -> cuda:0", back_s } }) do
                local gbps = n / m[2] / 1e9
                local function a(v) return v and ("%.1f"):format(v) or "not run" end
                local function ratio(v) return v and ("%.2fx"):format(gbps / v) or "-" end
                crows[#crows + 1] = { m[1], bench.format_size(n), path, ("%.2f"):format(gbps), a(anchors.perftest),
                                      a(anchors.PyTorch), a(anchors.CuPy), ratio(anchors.perftest), ratio(anchors.CuPy) }
              end
            end
            there:free()
          end
        end
        peer:close()
      else
        crows[#crows + 1] = { "no server came up", "", "", "", "", "", "", "", "" }
      end
      os.execute("kill " .. tostring(pid) .. " 2>/dev/null; pkill -P " .. tostring(pid) .. " 2>/dev/null")
      os.remove(log)
      emit(crows)
    end
  end
end

-- selftest: how long the quick and the full self-test take here (a figure, not a timed test)
if wanted.selftest then
  local rows = { { "xferlua --selftest", "moves", "seconds", "verdict" } }
  for _, quick in ipairs({ true, false }) do
    local r = xfer.selftest({ quick = quick })
    rows[#rows + 1] = { quick and "--quick" or "(full)", tostring(#r.results), ("%.3f"):format(r.seconds),
                        r.ok and "ok" or "FAILED" }
  end
  emit(rows)
end

local doc = { version = xfer.version, date = os.date("!%Y-%m-%dT%H:%M:%SZ"), inventory = xfer.inventory(),
              settings = xfer.config(), host = xfer.devices()[1].label, tables = emitted }
if json then
  local text = xfer.json(doc, { indent = 1 })
  if quiet then
    print(text)
  else
    local f = assert(io.open(json_file, "w"))
    f:write(text, "\n")
    f:close()
    print("\nfigures written to " .. json_file)
  end
end
if svg_dir then
  local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$") or "scripts"
  local svg = dofile(here .. "/bench_svg.lua")
  for _, name in ipairs(svg.write(doc, svg_dir)) do say("plot written to " .. svg_dir .. "/" .. name) end
end
