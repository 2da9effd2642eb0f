-- scripts/bench_tables/python.lua -- the "python" table of scripts/bench.lua: what a call costs
-- from Python (the package xferlua, a C extension) beside the same call from C
-- (scripts/bench-calls.c, built by scripts/bench) and from Lua, for every device but the host:
-- a 4 KiB copy_from, and a prepared batch of 4096 blocks of 16 KiB scattered from a host buffer
-- (its block tables NumPy arrays in Python). Issue 38's goals: Python within 1.2x of C's time
-- per call, the batch from Python at >= 0.95x Lua's GB/s. Where PyTorch has CUDA, its own ways
-- of moving the same blocks (a loop of copy_, index_copy_) in the same run
-- (scripts/bench_python.py).
local xfer = require "xfer"
local bench = require "xfer.bench"

local BLOCKS, BLOCK = 4096, 16384

-- lines "WHO DEVICE what seconds [bytes]" of a program's output -> t[who][device][what]
local function read_figures(cmd, into)
  local p = io.popen(cmd .. " 2>&1")
  local text = p:read("*a")
  p:close()
  for who, dev, what, s, n in text:gmatch("(%w+) (%S+) (%w+[_%w]*) ([%d.e-]+) ?(%d*)\n") do
    into[who] = into[who] or {}
    into[who][dev] = into[who][dev] or {}
    into[who][dev][what] = { s = tonumber(s), bytes = tonumber(n) }
  end
  local figures = 0
  for _ in text:gmatch("%w+ %S+ %w+[_%w]* [%d.e-]+") do figures = figures + 1 end
  for why in text:gmatch("# ([^\n]+)") do into.notes[#into.notes + 1] = why end
  if figures == 0 then into.notes[#into.notes + 1] = cmd .. ": no figures: " .. text:sub(-400) end
end

-- a python3 with NumPy: the one on PATH (the GPU machine's has PyTorch), else the system's
local function python()
  for _, p in ipairs({ "python3", "/usr/bin/python3" }) do
    if os.execute(p .. " -c 'import numpy' >/dev/null 2>&1") == 0 then return p end
  end
  return "python3"
end

local function lua_figures(dev)
  local src, dst = xfer.empty({ 4096 }, { dtype = "u8" }), xfer.empty({ 4096 }, { dtype = "u8", device = dev })
  local copy_s = bench.time(function() dst:copy_from(src) end, 2000)
  local big_src = xfer.empty({ BLOCKS * BLOCK }, { dtype = "u8" })
  local big_dst = xfer.empty({ BLOCKS * BLOCK }, { dtype = "u8", device = dev })
  local sb, db = {}, {}
  for i = 0, BLOCKS - 1 do sb[i + 1], db[i + 1] = i, (i * 7919) % BLOCKS end
  local b = xfer.batch { dst = big_dst, src = big_src, src_blocks = sb, dst_blocks = db, block_bytes = BLOCK }
  local batch_s = bench.time(function() b:run() end, 70)
  b:release()
  big_src:free()
  big_dst:free()
  return copy_s, batch_s
end

return function(B)
  local emit = B.emit
  -- hundredths of a microsecond: a 4 KiB call to host-visible memory takes a few tenths
  local function fmt_us(s) return s and ("%.2f"):format(s * 1e6) or "-" end
  local figures = { notes = {} }
  local root = B.scripts_dir .. "/.."
  if B.calls and B.calls ~= "" then read_figures(B.calls .. " " .. BLOCKS, figures) end
  read_figures(("cd %s && PYTHONPATH=src/python %s scripts/bench_python.py %d"):format(root, python(), BLOCKS),
               figures)
  local rows = { { "python vs C and Lua", "call", "C us", "Lua us", "Python us", "Python/C",
                   "Lua GB/s", "Python GB/s", "Python/Lua" } }
  local devs = xfer.devices()
  for _, dev in ipairs(devs) do
    if dev.name ~= "host" or #devs == 1 then
      local c = (figures.calls or {})[dev.name] or {}
      local py = (figures.python or {})[dev.name] or {}
      local ok, copy_s, batch_s = pcall(lua_figures, dev)
      if not ok then copy_s, batch_s = nil, nil end
      local function ratio(a, b) return a and b and ("%.2fx"):format(a / b) or "-" end
      local pc, cc = py.copy4k and py.copy4k.s, c.copy4k and c.copy4k.s
      rows[#rows + 1] = { "host -> " .. dev.name, "copy_from 4 KiB", fmt_us(cc), fmt_us(copy_s), fmt_us(pc),
                          ratio(pc, cc), "-", "-", "-" }
      local pb, cb, bytes = py.batch and py.batch.s, c.batch and c.batch.s, BLOCKS * BLOCK
      local lg, pg = batch_s and bench.gbps(bytes, batch_s), pb and bench.gbps(bytes, pb)
      rows[#rows + 1] = { "host -> " .. dev.name, ("batch %d x 16 KiB"):format(BLOCKS), fmt_us(cb),
                          fmt_us(batch_s), fmt_us(pb), ratio(pb, cb), B.fmt_gbps(lg), B.fmt_gbps(pg),
                          lg and pg and ("%.2fx"):format(pg / lg) or "-" }
    end
  end
  local torch = (figures.torch or {})["cuda:0"]
  if torch then
    for _, way in ipairs({ "copy_loop", "index_copy" }) do
      local f = torch[way]
      if f then
        rows[#rows + 1] = { "host -> cuda:0", "PyTorch " .. way .. (" %d x 16 KiB"):format(BLOCKS), "-", "-",
                            fmt_us(f.s), "-", "-", B.fmt_gbps(bench.gbps(f.bytes, f.s)), "-" }
      end
    end
  end
  emit(rows)
  for _, note in ipairs(figures.notes) do B.say("# " .. note) end
end
