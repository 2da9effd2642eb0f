-- scripts/bench.lua -- the benchmark that scripts/bench runs (a benchmark prints figures;
-- the tests assert behaviour): the options (lua-argparse: `--help` is made from the same
-- declarations that parse them), then each table of scripts/bench_tables/ in turn; each table
-- file's head says more of what it measures.
local xfer = require "xfer"
local bench = require "xfer.bench"
local argparse = require "argparse"

local scripts_dir = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$")) or "scripts"
package.path = scripts_dir .. "/bench_tables/?.lua;" .. package.path

-- the tables in the order they print; a name may run more than one file
local TABLES = { "host", "pairs", "staged", "to", "strided", "batch", "python", "files", "plan", "remote",
                 "deadline", "guard", "selftest" }
local FILES = { remote = { "remote", "remote_cuda" } }

local function fail(text)
  io.stderr:write("bench: ", text, "\n")
  os.exit(2, true) -- the state closed: nothing left for a leak checker to report
end

-- Converters: a value the option cannot take is a message, not a traceback.
local function size(text)
  local ok, n = pcall(bench.parse_size, text)
  if ok then return n end
  return nil, ("bad size '%s' (a whole number with K, M or G: 4K, 256M, 1G)"):format(text)
end
local function count(text)
  local n = tonumber(text)
  if not n or n < 1 or n % 1 ~= 0 then return nil, ("bad count '%s' (whole numbers >= 1)"):format(text) end
  return n
end
-- a comma-separated list, each item through `convert`
local function list_of(convert, empty)
  return function(text)
    local out = {}
    for item in text:gmatch("[^,]+") do
      local v, why = convert(item)
      if not v then return nil, why end
      out[#out + 1] = v
    end
    if #out == 0 then return nil, empty end
    return out
  end
end
local size_list, count_list = list_of(size, "an empty list of sizes"), list_of(count, "an empty list")
local function table_list(text)
  local wanted = {}
  for name in text:gmatch("[^,]+") do
    local known = false
    for _, t in ipairs(TABLES) do known = known or t == name end
    if not known then return nil, ("unknown table '%s' (tables: %s)"):format(name, table.concat(TABLES, ",")) end
    wanted[name] = true
  end
  return wanted
end
local function runs(text)
  local n = count(text)
  if n then return n end
  return nil, "--deadline-runs takes a whole number >= 1"
end

local parser = argparse("scripts/bench",
  "Prints host<->device bandwidth and latency for every device, every pair's default path beside the " ..
  "naive host round-trip, and the tables below, each beside what users would otherwise run (raw " ..
  "cuMemcpy*, PyTorch, dd, safetensors, ucx_perftest) in the same run. A benchmark prints figures; " ..
  "the specs assert behaviour.")
  :add_help(false)
  :help_max_width(100)
  :epilog([[
Tables (--tables; all by default, in this order; scripts/bench_tables/NAME.lua says more):
  host      host <-> every device: dst:copy_from(src) between tensors made beforehand, GB/s
            (decimal), the median of several runs after a warm-up, the cold run apart; with
            --raw, CUDA rows beside raw cuMemcpy* in the same run
  pairs     every pair's default path beside the naive host round-trip
  staged    the staged path between devices that share no memory
  to        t:to(dev) beside copy_from
  strided   every other row of a matrix moved as a view beside contiguous() first
  batch     blocks scattered in a buffer of --batch-buffer bytes, by batch beside a loop of
            copy_from and PyTorch (with two GPUs, a runtime's devices across them too)
  python    what a call costs from Python (the xferlua package) beside C (--calls) and Lua: a 4 KiB
            copy_from and a prepared batch of 4096 x 16 KiB blocks (NumPy block tables), per
            device; PyTorch's copy_ loop and index_copy_ of the same blocks where it has CUDA
  files     a safetensors file of --file-size bytes (bf16, a 7B model's shapes) in --file-dir,
            loaded onto every device cold and warm beside dd and safetensors/fastsafetensors;
            with two CUDA GPUs also onto both, tensor by tensor and each tensor split (shard)
  plan      after xfer.calibrate (not saved), every pair at --plan-sizes by the default path
            beside every path forced: the default's time over the best one's (goal: within 1.1x)
  remote    a server on loopback (xferlua --serve): 256 MiB host -> remote host and back over
            tcp and shared memory beside ucx_perftest on the same transport, then host -> each
            remote device (--remote URL: a server running elsewhere instead); where CUDA works,
            cuda:0 -> the server's CUDA devices beside PyTorch's and CuPy's CUDA IPC copy
  deadline  a server stopped mid-move --deadline-runs times: the timeout's lateness past its
            deadline; healthy moves with a 3 s deadline, how many missed it
  guard     what verify = true costs: each device's CRC32C rate where the bytes lie (sums),
            then the same move with and without verify -- --pair-size host <-> each device
            and cuda:0 <-> vulkan:0, 4096 x 16 KiB batches, a file load (verify); then
            --cancels cancels at random points of each pair's move, a batch of 16 KiB pieces, a
            save and a load of --cancel-size bytes, and of moves to and from the --remote
            server's devices (cancel's latency, bytes changed after it returned) and deadlines
            (how late one past its deadline ended) (cancel); --guard picks the parts,
            --cancel-devices and --cancel-rows the cancel rows
  selftest  how long the quick and full self-tests take

--json [FILE] writes one JSON document -- {version, date, inventory, settings, tables =
[{header, rows}]} -- to FILE (the tables still print), or alone to stdout ("-" or none); in
it a figure is a number, a size its bytes, a missing figure null. On a terminal, a progress
line on stderr. scripts/bench_frameworks.py makes the same moves with PyTorch, CuPy and JAX.]])
parser:flag("-h --help", "This help.")
parser:option("--tables", "The tables to run, comma-separated.", table.concat(TABLES, ","))
  :argname("LIST"):convert(table_list)
parser:option("--sizes", "Sizes of the host table.", "4K,1M,64M,1G"):argname("LIST"):convert(size_list)
parser:option("--pair-size", "The size each pair moves (pairs, staged, to, strided).", "256M")
  :argname("SIZE"):convert(size)
parser:option("--plan-sizes", "Sizes of the plan table.", "4K,64K,1M,256M"):argname("LIST"):convert(size_list)
parser:option("--json", "The figures as one JSON document, to FILE or stdout."):args("?"):argname("FILE")
parser:option("--svg", "Draws bandwidth.svg and pairs.svg in DIR (scripts/bench_svg.lua)."):argname("DIR")
parser:option("--remote", "A server running elsewhere (xferlua --serve) for the remote table."):argname("URL")
parser:option("--token", "The token of --remote's server."):argname("TOKEN")
parser:option("--remote-chunks", "Remote moves once per request size (xfer.config remote_chunk).")
  :argname("LIST"):convert(size_list)
parser:option("--remote-depths", "Remote moves once per requests in flight (xfer.config remote_depth).")
  :argname("LIST"):convert(count_list)
parser:option("--batch-buffer", "The buffer the batch table's blocks are scattered in.", "1G")
  :argname("SIZE"):convert(size)
parser:option("--file-size", "The safetensors file of the files table.", "4G"):argname("SIZE"):convert(size)
parser:option("--file-dir", "Where the files table writes its file.", "build/bench-files"):argname("DIR")
parser:option("--deadline-runs", "How often the deadline table stops a server.", "20")
  :argname("N"):convert(runs)
parser:option("--cancels", "How many cancels (and deadlines) the guard table makes per pair (0: its verify rows alone).", "20")
  :argname("N"):convert(function(text) if text == "0" then return 0 end return count(text) end)
parser:option("--cancel-size", "The size each of the guard table's canceled moves, batches, saves and loads moves.", "1G")
  :argname("SIZE"):convert(size)
parser:option("--guard", "The guard table's parts, comma-separated: sums (each device's CRC32C rate), verify (moves with and without it), cancel.", "sums,verify,cancel")
  :argname("LIST")
parser:option("--cancel-devices", "The devices whose pairs (with the host, and with each other) the guard table cancels, comma-separated (default: every device).")
  :argname("LIST")
parser:option("--verify-devices", "The devices whose moves (with the host, and with each other), batches and loads the guard table times with and without verify, comma-separated (default: every device).")
  :argname("LIST")
parser:option("--cancel-rows", "Only the guard table's cancel rows whose label holds one of these, comma-separated (as \"cuda:0 -> vulkan:0,file -> cuda:0\").")
  :argname("LIST")
-- scripts/bench passes the raw-CUDA program it built ("" without CUDA)
parser:option("--raw", "The raw cuMemcpy* program (scripts/bench builds it where CUDA works).")
  :argname("PROGRAM")
-- ... and the C side of the python table (scripts/bench-calls.c)
parser:option("--calls", "The C calls program of the python table (scripts/bench builds it).")
  :argname("PROGRAM")

local parsed_ok, opts = parser:pparse({ ... })
if not parsed_ok then fail(opts .. "\n(scripts/bench --help lists the options)") end
if opts.help then
  print(parser:get_help())
  os.exit(0, true)
end
local wanted = opts.tables
local raw_program = opts.raw
local json, json_file = opts.json ~= nil, opts.json and opts.json[1]
local svg_dir = opts.svg

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
    io.stdout:flush() -- a table printed is kept when a timeout stops the run after it
  end
end
local function say(text) if not quiet then print(text) io.stdout:flush() end end

-- a progress line on stderr while a table is measured, on a terminal only
local on_terminal = os.execute("[ -t 1 ] && [ -t 2 ]") == 0
local function progress(what, done, total)
  if not on_terminal then return end
  io.stderr:write(("\rbench: %s %d of %d"):format(what, done, total), done == total and "\r\27[K" or "")
  io.stderr:flush()
end

local sizes = opts.sizes

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
  pair_size = opts.pair_size,             -- --pair-size, bytes
  plan_sizes = opts.plan_sizes,           -- --plan-sizes, bytes
  batch_buffer = opts.batch_buffer,       -- --batch-buffer, bytes
  file_size = opts.file_size, file_dir = opts.file_dir, -- --file-size (bytes), --file-dir
  remote_url = opts.remote, remote_token = opts.token,
  remote_chunks = opts.remote_chunks,     -- --remote-chunks, bytes (nil: the default)
  remote_depths = opts.remote_depths,     -- --remote-depths, counts (nil: the default)
  deadline_runs = opts.deadline_runs,     -- --deadline-runs
  cancel_runs = opts.cancels,             -- --cancels
  cancel_size = opts.cancel_size,         -- --cancel-size, bytes
  cancel_devices = opts.cancel_devices,   -- --cancel-devices, names (nil: every device)
  verify_devices = opts.verify_devices,   -- --verify-devices, names (nil: every device)
  guard_parts = opts.guard,               -- --guard, part names
  cancel_rows = opts.cancel_rows,         -- --cancel-rows, label parts (nil: every row)
  scripts_dir = scripts_dir,
  calls = opts.calls,                     -- --calls: scripts/bench-calls.c built ("" or nil: none)
  emit = emit, say = say, progress = progress, run_raw = run_raw,
  bad_option = function(text) error({ bad_option = text }, 0) end, -- a table's options it cannot take
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
      -- a table's word on its options (B.bad_option: a device or part it does not know) is
      -- said as a bad argument is; anything else keeps its traceback
      local ok, e = xpcall(run, function(err)
        if type(err) == "table" and err.bad_option then return err end
        return debug.traceback(tostring(err), 2)
      end, B)
      if not ok then
        if type(e) == "table" then fail(e.bad_option .. "\n(scripts/bench --help lists the options)") end
        error(e, 0)
      end
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
