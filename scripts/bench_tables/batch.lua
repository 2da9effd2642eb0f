-- scripts/bench_tables/batch.lua -- the "batch" table of scripts/bench.lua: blocks scattered in
-- a buffer of --batch-buffer bytes (1 GiB by default: a paged KV cache's shape), 4096 blocks of
-- 16 KiB and 1024 of 256 KiB, copied into scattered blocks of a buffer on another device, for
-- every pair with a device at one end: by a prepared batch (xfer.batch once, b:run() timed), by
-- a batch made each time (dst:copy_blocks), and by a loop of copy_from over the blocks; beside
-- the same bytes moved contiguously (the link), and where CUDA works PyTorch's loop of copy_ and
-- its index_select/index_copy_ (scripts/bench_frameworks.py --batch) and NIXL's transfers
-- made and prepared, in one process and into another process's memory (scripts/bench_nixl.py;
-- XFER_NIXL_DIR: an unpacked wheel) in the same run.
local xfer = require "xfer"
local bench = require "xfer.bench"

local function frameworks(B, buffer)
  local p = io.popen(("timeout 300 python3 %s/bench_frameworks.py --batch %d 2>&1"):format(B.scripts_dir, buffer))
  local out = p:read("*a")
  p:close()
  -- NIXL where it is installed, or unpacked where XFER_NIXL_DIR says (a wheel carried to a
  -- machine that cannot install one)
  local nixl_dir = os.getenv("XFER_NIXL_DIR") or ""
  p = io.popen(("timeout 300 python3 %s/bench_nixl.py %d %s 2>&1"):format(B.scripts_dir, buffer, nixl_dir))
  out = out .. "\n" .. p:read("*a")
  p:close()
  local rows = {}
  for line in out:gmatch("[^\n]+") do
    local name, dir, block, gbps = line:match("^batch (%S+) (%S+) (%d+) ([%d.]+)")
    if name then rows[name .. " " .. dir .. " " .. block] = tonumber(gbps) end
    if line:match("^# batch") then B.say(line) end
  end
  return rows
end

-- One pair's rows (a row per block shape) appended to `rows`.
local function measure_pair(B, rows, a, b, buffer, torch)
  local shapes = { { 16384, 4096 }, { 262144, 1024 } }
  local ok, src = pcall(xfer.zeros, { buffer }, { dtype = "u8", device = a })
  local ok2, dst = pcall(xfer.zeros, { buffer }, { dtype = "u8", device = b })
  if not (ok and ok2) then
    rows[#rows + 1] = { a.name .. " -> " .. b.name, "no room: " .. tostring(ok and dst or src) }
    return
  end
  local views = {} -- freed before the buffers they look into
  for _, shape in ipairs(shapes) do
    local block, count = shape[1], math.min(shape[2], math.floor(buffer / shape[1]))
    local slots = math.floor(buffer / block)
    local sb, db = bench.scatter(count, slots, 7), bench.scatter(count, slots, 11)
    local bytes = block * count
    local prepared = xfer.batch({ dst = dst, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block })
    local reps = bench.reps_for(bytes, 0.5, 3)
    local s_prep = bench.time(function() prepared:run() end, reps)
    local s_made = bench.time(function() dst:copy_blocks(src, sb, db, block) end, reps)
    local sv, dv = src:view({ slots, block }), dst:view({ slots, block })
    views[#views + 1], views[#views + 2] = sv, dv
    local s_loop = bench.time(function()
      for k = 1, count do dv[db[k] + 1]:copy_from(sv[sb[k] + 1]) end
    end, math.max(1, math.floor(reps / 3)))
    local whole_src, whole_dst = sv:slice({ { 1, count } }), dv:slice({ { 1, count } })
    views[#views + 1], views[#views + 2] = whole_src, whole_dst
    local s_whole = bench.time(function() whole_dst:copy_from(whole_src) end, reps)
    local dir = a == B.host and "h2d" or b == B.host and "d2h" or nil
    local t_loop = dir and a.runtime ~= "vulkan" and b.runtime ~= "vulkan" and a.runtime ~= "opencl"
                   and b.runtime ~= "opencl" and a.runtime ~= "remote" and b.runtime ~= "remote"
                   and torch["loop " .. dir .. " " .. block]
    local t_index = t_loop and torch["index " .. dir .. " " .. block]
    local n_made = t_loop and torch["nixl-made " .. dir .. " " .. block]
    local n_prep = t_loop and torch["nixl-prepared " .. dir .. " " .. block]
    local n_two = t_loop and torch["nixl-2proc-prepared " .. dir .. " " .. block]
    local function r(s) return ("%.2f"):format(bench.gbps(bytes, s)) end
    rows[#rows + 1] = { a.name .. " -> " .. b.name, ("%d x %s"):format(count, bench.format_size(block)),
                        r(s_prep), r(s_made), r(s_loop), r(s_whole),
                        ("%.2fx"):format(s_whole / s_prep),
                        t_loop and ("%.2f"):format(t_loop) or "-", t_index and ("%.2f"):format(t_index) or "-",
                        n_made and ("%.2f"):format(n_made) or "-", n_prep and ("%.2f"):format(n_prep) or "-",
                        n_prep and ("%.2fx"):format(bench.gbps(bytes, s_prep) / n_prep) or "-",
                        n_two and ("%.2f"):format(n_two) or "-", tostring(prepared.at_once) }
    prepared:release()
    collectgarbage()
  end
  for k = #views, 1, -1 do views[k]:free() end
  collectgarbage()
  collectgarbage() -- the rows the loop made
  src:free()
  dst:free()
end

-- Rows to a server on loopback (another process, over UCX as UCX_TLS says): host and cuda:0
-- to and from the server's host and CUDA devices, 256 MiB buffers at most.
local function remote_rows(B, rows, torch)
  local U = require "ucx_helpers"
  if not U.available() then
    B.say("# batch remote: the remote runtime is unavailable here")
    return
  end
  local url, pid, log = U.serve_here("", "nodeR")
  if not url then
    B.say("# batch remote: the loopback server did not start")
    U.stop(pid, log)
    return
  end
  local ok, err = pcall(function()
    local peer = xfer.connect(url, { timeout = 60 })
    local here = { B.host }
    for _, d in ipairs(xfer.devices()) do if d.runtime == "cuda" and #here < 2 then here[#here + 1] = d end end
    local buffer = math.min(B.batch_buffer, 256 * 1024 * 1024)
    for _, there in ipairs(peer.devices) do
      if there.runtime == "remote" and (there.name:match("/host$") or there.name:match("/cuda:0$")) then
        for _, d in ipairs(here) do
          measure_pair(B, rows, d, there, buffer, torch)
          measure_pair(B, rows, there, d, buffer, torch)
        end
      end
    end
    peer:close()
  end)
  U.stop(pid, log)
  if not ok then B.say("# batch remote: " .. tostring(err)) end
end

return function(B)
  local emit, say = B.emit, B.say
  local buffer = B.batch_buffer
  local devs = xfer.devices()
  local has_cuda, cuda_gpus = false, 0
  for _, d in ipairs(devs) do
    has_cuda = has_cuda or d.runtime == "cuda"
    if d.runtime == "cuda" then cuda_gpus = cuda_gpus + 1 end
  end
  -- two GPUs (issue 39): also vulkan:0 <-> vulkan:1 and opencl:0 <-> opencl:1, a runtime's own
  -- devices on distinct CUDA GPUs
  local function across_gpus(a, b)
    return cuda_gpus > 1 and a.runtime == b.runtime and a.uuid and b.uuid and a.uuid ~= b.uuid and
           a.runtime ~= "host" and a.runtime ~= "remote"
  end
  local torch = has_cuda and frameworks(B, buffer) or {}
  local rows = { { ("blocks in %s"):format(bench.format_size(buffer)), "blocks", "prepared GB/s",
                   "copy_blocks GB/s", "copy_from loop GB/s", "contiguous GB/s", "prepared / contiguous",
                   "PyTorch copy_ loop GB/s", "PyTorch index GB/s", "NIXL GB/s", "NIXL prepared GB/s",
                   "prepared / NIXL prepared", "NIXL 2 processes prepared GB/s", "at once" } }
  for _, a in ipairs(devs) do
    for _, b in ipairs(devs) do
      if a ~= b and (a == B.host or b == B.host or a.runtime == "cuda" or b.runtime == "cuda" or
                     across_gpus(a, b)) then
        measure_pair(B, rows, a, b, buffer, torch)
      end
    end
  end
  remote_rows(B, rows, torch)
  emit(rows)
  say("prepared: xfer.batch once, b:run() timed; copy_blocks: a batch made each call; at once: groups a runtime took in one submission; remote rows: a server on loopback, buffers of at most 256 MiB")
end
