-- scripts/bench.lua -- the benchmark that scripts/bench runs (a benchmark prints figures;
-- the tests assert behaviour): the options, then each table of scripts/bench_tables/ in turn.
-- Usage: xferlua scripts/bench.lua [--raw PROGRAM] [--sizes 4K,1M,...] [--pair-size 256M]
--   [--plan-sizes 4K,64K,1M,256M] [--tables host,pairs,staged,to,strided,batch,files,plan,remote,deadline,selftest]
--   [--json [FILE]] [--svg DIR] [--remote URL [--token T]] [--remote-chunks 1M,16M,64M]
--   [--remote-depths 1,2,4] [--batch-buffer 1G] [--file-size 4G] [--file-dir DIR] [--deadline-runs 20]
--   deadline: a server stopped mid-move --deadline-runs times over tcp and shared memory, the
--   timeout's lateness past its deadline; healthy moves with a 3 s deadline, how many missed it
--   (scripts/bench_tables/deadline.lua says more).
--   files: a safetensors file of --file-size bytes (bf16, a 7B model's shapes) in --file-dir
--   (build/bench-files), loaded onto every device cold and warm beside dd and the Python
--   loaders (scripts/bench_tables/files.lua says more).
--   batch: blocks scattered in a buffer of --batch-buffer bytes, by batch and by a loop
--   (scripts/bench_tables/batch.lua says more).
--   --json [FILE] writes one JSON document -- {version, date, inventory, settings, tables =
--   [{header, rows}]} -- to FILE (the tables still print), or alone to stdout ("-" or none);
--   in it a figure is a number (a remark after it dropped: "2.26 (over 1.1)" is 2.26), a size
--   its bytes ("4 KiB": 4096), a missing figure null;
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

local scripts_dir = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$")) or "scripts"
package.path = scripts_dir .. "/bench_tables/?.lua;" .. package.path

-- the tables in the order they print; a name may run more than one file
local TABLES = { "host", "pairs", "staged", "to", "strided", "batch", "files", "plan", "remote", "deadline",
                 "selftest" }
local FILES = { remote = { "remote", "remote_cuda" } }

local args = { ... }
local raw_program, sizes_text, pair_text = nil, "4K,1M,64M,1G", "256M"
local plan_sizes_text = "4K,64K,1M,256M"
local tables_text = table.concat(TABLES, ",")
local json, json_file, svg_dir, remote_url, remote_token = false, nil, nil, nil, nil
local remote_chunks_text, remote_depths_text = nil, nil
local batch_buffer_text = "1G"
local file_size_text, file_dir = "4G", "build/bench-files"
local deadline_runs = 20
local function fail(text)
  io.stderr:write("bench: ", text, "\n")
  os.exit(2, true) -- the state closed: nothing left for a leak checker to report
end
local i = 1
local function value(name)
  local v = args[i + 1]
  if v == nil or v:match("^%-%-") then fail(name .. " needs a value") end
  i = i + 2
  return v
end
-- --help: this file's head, the one description of the options
local function usage()
  local f = assert(io.open(scripts_dir .. "/bench.lua"))
  for line in f:lines() do
    if not line:match("^%-%-") then break end
    print((line:gsub("^%-%- ?", "")))
  end
  f:close()
end
while i <= #args do
  local a = args[i]
  if a == "--help" or a == "-h" then usage(); os.exit(0, true)
  elseif a == "--raw" then raw_program = args[i + 1] or ""; i = i + 2 -- scripts/bench passes "" without CUDA
  elseif a == "--sizes" then sizes_text = value(a)
  elseif a == "--pair-size" then pair_text = value(a)
  elseif a == "--plan-sizes" then plan_sizes_text = value(a)
  elseif a == "--tables" then tables_text = value(a)
  elseif a == "--json" then -- --json [FILE]: the document to FILE ("-" or none: stdout)
    json = true
    if args[i + 1] and not args[i + 1]:match("^%-%-") then json_file = args[i + 1]; i = i + 2 else i = i + 1 end
  elseif a == "--svg" then svg_dir = value(a)
  elseif a == "--remote" then remote_url = value(a)
  elseif a == "--token" then remote_token = value(a)
  elseif a == "--remote-chunks" then remote_chunks_text = value(a)
  elseif a == "--remote-depths" then remote_depths_text = value(a)
  elseif a == "--batch-buffer" then batch_buffer_text = value(a)
  elseif a == "--file-size" then file_size_text = value(a)
  elseif a == "--file-dir" then file_dir = value(a)
  elseif a == "--deadline-runs" then
    deadline_runs = tonumber(value(a))
    if not deadline_runs or deadline_runs < 1 or deadline_runs % 1 ~= 0 then fail("--deadline-runs takes a whole number >= 1") end
  else fail("unknown argument '" .. a .. "' (--help lists them: --raw PROGRAM, --sizes LIST, --pair-size SIZE, --plan-sizes LIST, --tables LIST, --json [FILE], --svg DIR, --remote URL, --token TOKEN, --remote-chunks LIST, --remote-depths LIST, --batch-buffer SIZE, --file-size SIZE, --file-dir DIR or --deadline-runs N)") end
end
local wanted = {}
for name in tables_text:gmatch("[^,]+") do
  local known = false
  for _, t in ipairs(TABLES) do known = known or t == name end
  if not known then fail(("unknown table '%s' (tables: %s)"):format(name, table.concat(TABLES, ","))) end
  wanted[name] = true
end
local function sizes_of(text)
  local out = {}
  for s in text:gmatch("[^,]+") do out[#out + 1] = bench.parse_size(s) end
  return out
end

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

local sizes = sizes_of(sizes_text)

-- Raw CUDA figures at `at` (default: --sizes): raw[direction][memory][bytes] = seconds, or nil
-- without --raw
local function run_raw(dev, at)
  if not raw_program or raw_program == "" then return nil end
  local cmd = raw_program .. " " .. dev.index
  for _, n in ipairs(at or sizes) do cmd = cmd .. " " .. math.floor(n) end
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

-- what every table file is given
local B = {
  host = xfer.device("host"),
  sizes = sizes,                          -- --sizes, bytes
  pair_size = bench.parse_size(pair_text), -- --pair-size, bytes
  plan_sizes = sizes_of(plan_sizes_text), -- --plan-sizes, bytes
  batch_buffer = bench.parse_size(batch_buffer_text), -- --batch-buffer, bytes
  file_size = bench.parse_size(file_size_text), file_dir = file_dir, -- --file-size, --file-dir
  remote_url = remote_url, remote_token = remote_token,
  remote_chunks = remote_chunks_text, remote_depths = remote_depths_text, -- lists as given
  deadline_runs = deadline_runs,          -- --deadline-runs
  scripts_dir = scripts_dir,
  emit = emit, say = say, progress = progress, run_raw = run_raw,
  fmt_rate = function(bytes, s) return s and ("%.2f"):format(bench.gbps(bytes, s)) or "-" end,
  fmt_gbps = function(v) return v and ("%.2f"):format(v) or "-" end,
  fmt_us = function(s) return s and ("%.1f"):format(s * 1e6) or "-" end,
}

say(("xferlua %s benchmark -- %s"):format(xfer.version, os.date("!%Y-%m-%d %H:%M UTC")))
say(xfer.describe())
for _, name in ipairs(TABLES) do
  if wanted[name] then
    for _, file in ipairs(FILES[name] or { name }) do
      local run = dofile(scripts_dir .. "/bench_tables/" .. file .. ".lua")
      run(B)
    end
  end
end

local doc = { version = xfer.version, date = os.date("!%Y-%m-%dT%H:%M:%SZ"), inventory = xfer.inventory(),
              settings = xfer.config(), host = xfer.devices()[1].label, tables = emitted }

-- A cell as JSON carries it: a figure as a number, a size ("4 KiB", "256 MiB") as its bytes,
-- "-" or "" (no figure) as null; words stay words.
local SIZE = { B = 1, KiB = 1024, MiB = 1048576, GiB = 1073741824, TiB = 1099511627776 }
local function json_cell(cell)
  if type(cell) ~= "string" then return cell end
  if cell == "" or cell == "-" then return xfer.json_null end
  local n = tonumber(cell)
  if n and cell:match("^%s*[-+]?[%d.]+[eE]?[-+]?%d*%s*$") then return n end
  -- a figure with a remark ("2.26 (over 1.1)", "1.20x"): the figure
  local lead = cell:match("^([-+]?%d+%.?%d*)x?%s*%(.*%)$") or cell:match("^([-+]?%d+%.?%d*)x$")
  if lead then return tonumber(lead) end
  local v, unit = cell:match("^([%d.]+) (%a+)$")
  if v and SIZE[unit] then return math.floor(tonumber(v) * SIZE[unit] + 0.5) end
  return cell
end

if json then
  local tables = {}
  for i, t in ipairs(emitted) do
    local rows = {}
    for r, row in ipairs(t.rows) do
      rows[r] = {}
      for c = 1, #t.header do rows[r][c] = json_cell(row[c]) end
    end
    tables[i] = { header = t.header, rows = rows }
  end
  local figures = {}
  for k, v in pairs(doc) do figures[k] = v end
  figures.tables = tables
  local text = xfer.json(figures, { indent = 1 })
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
  local svg = dofile(scripts_dir .. "/bench_svg.lua")
  for _, name in ipairs(svg.write(doc, svg_dir)) do say("plot written to " .. svg_dir .. "/" .. name) end
end
