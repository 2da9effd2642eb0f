-- bench.lua -- measuring moves: `require "xfer.bench"` (shipped inside xferlua).
-- Times are wall-clock (xfer.clock), the median of several runs after a warm-up run, so
-- that one-time costs (a first registration, a first staging pool) are reported apart.
local xfer = require "xfer"

local bench = {}

local function median(list)
  table.sort(list)
  local n = #list
  return n % 2 == 1 and list[(n + 1) / 2] or (list[n / 2] + list[n / 2 + 1]) / 2
end

--- Times fn(): returns the median seconds of `reps` runs and the first (cold) run's.
function bench.time(fn, reps)
  if type(fn) ~= "function" then xfer.arg_error(1, "bench.time", "function", fn, 2) end
  if reps ~= nil and (type(reps) ~= "number" or reps < 1 or reps % 1 ~= 0) then
    xfer.arg_error(2, "bench.time", "whole number of runs >= 1", reps, 2)
  end
  reps = reps or 10
  local t0 = xfer.clock()
  fn()
  local first = xfer.clock() - t0
  local times = {}
  for i = 1, reps do
    t0 = xfer.clock()
    fn()
    times[i] = xfer.clock() - t0
  end
  return median(times), first
end

--- Repetitions that keep a measurement near `budget` seconds (at least 3, at most 200).
function bench.reps_for(bytes, budget, guess_gbps)
  local per = bytes / ((guess_gbps or 10) * 1e9)
  return math.max(3, math.min(200, math.floor((budget or 0.5) / math.max(per, 1e-6))))
end

function bench.gbps(bytes, seconds) return bytes / seconds / 1e9 end

--- "4K", "64M", "1G" -> bytes
function bench.parse_size(text)
  if type(text) ~= "string" then xfer.arg_error(1, "bench.parse_size", "string", text, 2) end
  local n, unit = text:match("^(%d+)([KMG]?)$")
  if not n then
    error(xfer.error({ code = "invalid", op = "bench.parse_size",
                       message = "bad size '" .. text .. "' (expected a number with K, M or G)" }), 2)
  end
  return tonumber(n) * ({ [""] = 1, K = 2^10, M = 2^20, G = 2^30 })[unit]
end

function bench.format_size(bytes)
  for _, u in ipairs({ { 2^30, "GiB" }, { 2^20, "MiB" }, { 2^10, "KiB" } }) do
    if bytes >= u[1] then return ("%g %s"):format(bytes / u[1], u[2]) end
  end
  return bytes .. " B"
end

--- A plain-text table: rows of cells, the first row the header.
function bench.table(rows)
  local ok = type(rows) == "table"
  for _, row in ipairs(ok and rows or {}) do ok = ok and type(row) == "table" end
  if not ok then xfer.arg_error(1, "bench.table", "list of rows (lists of cells)", rows, 2) end
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do widths[i] = math.max(widths[i] or 0, #tostring(cell)) end
  end
  local lines = {}
  for r, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do
      local text = tostring(cell)
      cells[i] = i == 1 and text .. (" "):rep(widths[i] - #text) or (" "):rep(widths[i] - #text) .. text
    end
    lines[#lines + 1] = table.concat(cells, "  ")
    if r == 1 then
      local rule = {}
      for i = 1, #row do rule[i] = ("-"):rep(widths[i]) end
      lines[#lines + 1] = table.concat(rule, "  ")
    end
  end
  return table.concat(lines, "\n")
end

--- Times dst:copy_from(src) for tensors of `bytes` on two devices: median seconds, first.
function bench.copy(src_dev, dst_dev, bytes, reps, opts)
  -- both written first: memory never written reads as the kernel's shared zero page,
  -- which sits in cache and flatters every figure
  local src = xfer.full({ bytes }, 7, { dtype = "u8", device = src_dev })
  local dst = xfer.full({ bytes }, 1, { dtype = "u8", device = dst_dev })
  local median_s, first = bench.time(function() dst:copy_from(src, opts) end, reps)
  src:free()
  dst:free()
  return median_s, first
end

--- The block numbers of one scatter: `count` distinct blocks of a buffer of `slots`, shuffled
function bench.scatter(count, slots, seed)
  local perm = {}
  for i = 0, slots - 1 do perm[i + 1] = i end
  local state = seed
  for i = slots, 2, -1 do -- MINSTD: exact in doubles, the same blocks everywhere
    state = (state * 48271) % 2147483647
    local j = state % i + 1
    perm[i], perm[j] = perm[j], perm[i]
  end
  local out = {}
  for i = 1, count do out[i] = perm[i] end
  return out
end

return bench
