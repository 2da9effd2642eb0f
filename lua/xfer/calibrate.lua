-- calibrate.lua -- a planner that knows sizes: xfer.calibrate{...} times every path that applies
-- between every ordered pair of devices at a few sizes, fits latency + bytes / bandwidth to
-- each, hands the figures to the planner (xfer.set_cost) and writes them to the plan cache
-- (xfer.save_costs), so that later processes start with them. The binding runs this file with
-- the module table.
local xfer = ...

local format, concat = string.format, table.concat

local PATHS = xfer.paths
local KNOWN_PATH = {}
for _, name in ipairs(PATHS) do KNOWN_PATH[name] = true end
local KNOWN = { devices = 1, sizes = 1, paths = 1, reps = 1, save = 1, progress = 1 }

local function fail(message)
  error(xfer.error({ code = "invalid", op = "calibrate", message = "calibrate: " .. message }), 3)
end

-- The line through (bytes, seconds) -- latency (>= 0) and bandwidth -- that errs least in
-- proportion (least squares weighted by 1 / seconds^2): a plain fit is the large sizes' alone,
-- and its latency can be off by more than a small move takes. Where the times do not grow
-- with the size (noise at small sizes only), the largest size's rate.
local function weighted_fit(points)
  local sw, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
  for _, p in ipairs(points) do
    local x, y = p[1], p[2]
    local w = 1 / (y * y)
    sw, sx, sy, sxx, sxy = sw + w, sx + w * x, sy + w * y, sxx + w * x * x, sxy + w * x * y
  end
  local d = sw * sxx - sx * sx
  local slope = d > 0 and (sw * sxy - sx * sy) / d or 0
  if slope <= 0 then
    local last = points[#points]
    return math.min(points[1][2], last[2]), last[1] / last[2]
  end
  return math.max(0, (sy - slope * sx) / sw), 1 / slope
end

-- latency + bytes / bandwidth, true at both ends: the bandwidth is the rate between the two
-- largest sizes (what a move beyond them runs at: past the caches, where one line through
-- every size was too optimistic -- on the H200 a move from a GPU to PoCL's CPU device is
-- faster staged at 16 MiB and slower at 256 MiB), the latency what is left of the smallest
-- size's time. Points sorted by size; where the two largest do not grow, the weighted line.
local function fit(points)
  table.sort(points, function(a, b) return a[1] < b[1] end)
  local n = #points
  if n >= 2 then
    local a, b = points[n - 1], points[n]
    if b[1] > a[1] and b[2] > a[2] then
      local bandwidth = (b[1] - a[1]) / (b[2] - a[2])
      return math.max(0, points[1][2] - points[1][1] / bandwidth), bandwidth
    end
  end
  return weighted_fit(points)
end

-- Whether a calibration move of n bytes suits a device: within its largest buffer, and an
-- eighth of its memory at most (a small device is timed at the sizes it can take).
local function fits(n, dev)
  return n <= (dev.max_alloc or math.huge) and n <= (dev.total_memory or math.huge) / 8
end

-- How long each size's timing of a path aims to take, the most runs it takes, and the rounds
-- they come in. A small move is noisy (a 20 us move that once took 35 us decided a pair's path
-- on the H200 when the median was of 3 runs): it is repeated until about 10 ms is spent. The
-- paths of a pair take turns, round by round, so that a drift of the machine (another process,
-- a change of clock) hits them all alike rather than the one timed while it lasted.
local BUDGET_S, MAX_RUNS, ROUNDS = 0.01, 60, 3

local function time_once(dst, src, path)
  local t0 = xfer.clock()
  dst:copy_from(src, { via = path })
  return xfer.clock() - t0
end

local function median(list)
  table.sort(list)
  return list[math.floor((#list + 1) / 2)]
end

-- Times each path of `live` moving src to dst: the median of at least `reps` runs after one
-- untimed (first-use costs are not the path's). Returns seconds[path] and failed[path] = error
-- (a failure is no figure).
local function time_paths(live, src, dst, reps)
  local times, runs, failed = {}, {}, {}
  for _, p in ipairs(live) do
    local ok, e = pcall(function()
      dst:copy_from(src, { via = p })
      local one = time_once(dst, src, p)
      times[p] = { one }
      runs[p] = math.max(reps, math.min(MAX_RUNS, math.ceil(BUDGET_S / math.max(one, 1e-7))))
    end)
    if not ok then failed[p] = e end
  end
  for _ = 1, ROUNDS do
    for _, p in ipairs(live) do
      if not failed[p] then
        local list = times[p]
        local ok, e = pcall(function()
          for _ = 1, math.ceil((runs[p] - 1) / ROUNDS) do list[#list + 1] = time_once(dst, src, p) end
        end)
        if not ok then failed[p] = e end
      end
    end
  end
  local seconds = {}
  for _, p in ipairs(live) do
    if not failed[p] then seconds[p] = median(times[p]) end
  end
  return seconds, failed
end

--- xfer.calibrate{devices = {...}, sizes = {4096, 65536, 1048576, 16777216, 67108864, 268435456}, paths = {...}, reps = 5,
--- save = true, progress = function(pairs_done, pairs_total) end}
--- returns {results = {{from, to, path, latency, bandwidth, points = {{bytes, seconds}, ...}}
--- or {from, to, path, code, message}, ...}, seconds, saved = file or nil, save_error}.
function xfer.calibrate(opts)
  if opts ~= nil and type(opts) ~= "table" then xfer.arg_error(1, "calibrate", "options table", opts, 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if not KNOWN[k] then
      fail(format("unknown option '%s' (known: devices, sizes, paths, reps, save, progress)", tostring(k)))
    end
  end
  local sizes = opts.sizes or { 4096, 64 * 1024, 1024 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024, 256 * 1024 * 1024 }
  if type(sizes) ~= "table" or #sizes < 2 then fail("sizes is a list of at least two byte counts") end
  for _, n in ipairs(sizes) do
    if type(n) ~= "number" or n < 1 or n % 1 ~= 0 then fail("sizes are whole numbers of bytes >= 1") end
  end
  local paths = opts.paths or PATHS
  if type(paths) ~= "table" then fail("paths is a list of path names") end
  for _, p in ipairs(paths) do
    if not KNOWN_PATH[p] then
      fail(format("unknown path '%s' (%s)", tostring(p), concat(PATHS, ", ")))
    end
  end
  local reps = opts.reps or 5
  if type(reps) ~= "number" or reps < 1 or reps % 1 ~= 0 then fail("reps is a whole number >= 1") end
  local list = opts.devices or xfer.devices()
  if type(list) ~= "table" then fail("devices is a list of devices") end
  local devices = {}
  for i, d in ipairs(list) do devices[i] = xfer.check_device(d, 1, "calibrate", 3) end
  local progress = opts.progress
  if progress ~= nil and type(progress) ~= "function" then fail("progress is a function(pairs_done, pairs_total)") end

  local started, results = xfer.clock(), {}
  local pairs_done, pairs_total = 0, #devices * #devices
  for _, a in ipairs(devices) do
    for _, b in ipairs(devices) do
      if progress then progress(pairs_done, pairs_total) end
      pairs_done = pairs_done + 1
      local probe = xfer.empty({ 1 }, { dtype = "u8", device = a })
      local live, entries, points = {}, {}, {}
      for _, p in ipairs(paths) do
        if pcall(xfer.plan, probe, b, { via = p }) then -- the path applies to this pair
          live[#live + 1] = p
          entries[p], points[p] = { from = a.name, to = b.name, path = p }, {}
        end
      end
      for _, n in ipairs(sizes) do
        if #live == 0 then break end
        if fits(n, a) and fits(n, b) then
          local ok, seconds, failed = pcall(function()
            local src = xfer.zeros({ n }, { dtype = "u8", device = a })
            local dst = xfer.empty({ n }, { dtype = "u8", device = b })
            local s, f = time_paths(live, src, dst, reps)
            src:free()
            dst:free()
            return s, f
          end)
          if not ok then -- the tensors themselves: no path of the pair gets a figure
            failed = {}
            for _, p in ipairs(live) do failed[p] = seconds end
            seconds = {}
          end
          local still = {}
          for _, p in ipairs(live) do
            local e = failed[p]
            if e ~= nil then -- a failure is no figure: the path keeps none for the pair
              entries[p].code = xfer.is_error(e) and e.code or "error"
              entries[p].message = xfer.is_error(e) and e.message or tostring(e)
            else
              points[p][#points[p] + 1] = { n, seconds[p] }
              still[#still + 1] = p
            end
          end
          live = still
        end
      end
      for _, p in ipairs(paths) do
        local entry = entries[p]
        if entry then
          if not entry.code then
            entry.latency, entry.bandwidth = fit(points[p])
            entry.points = points[p]
            if #points[p] >= 2 and #points[p] <= 8 then -- the times themselves: estimates between them
              xfer.set_cost(a, b, p, points[p])
            else
              xfer.set_cost(a, b, p, entry.latency, entry.bandwidth)
            end
          end
          results[#results + 1] = entry
        end
      end
      probe:free()
    end
  end
  if progress then progress(pairs_total, pairs_total) end
  local report = { results = results, seconds = xfer.clock() - started }
  if opts.save ~= false then
    local ok, e = pcall(xfer.save_costs)
    if ok then report.saved = true else report.save_error = e.message end
  end
  return report
end

--- The planner's figures from a self-test's forced moves (each pair and path that worked at
--- two sizes or more); returns how many it set. xfer.selftest{costs = true} calls it.
function xfer.costs_from_selftest(result)
  if type(result) ~= "table" or type(result.results) ~= "table" then
    xfer.arg_error(1, "costs_from_selftest", "the result of xfer.selftest", result, 2)
  end
  local groups, order = {}, {}
  for _, e in ipairs(result.results) do
    if e.ok and e.forced and e.seconds and e.seconds > 0 then
      local key = e.from .. "\0" .. e.to .. "\0" .. e.path
      if not groups[key] then groups[key], order[#order + 1] = { e = e, points = {} }, key end
      local points = groups[key].points
      points[#points + 1] = { e.bytes, e.seconds }
    end
  end
  local set = 0
  for _, key in ipairs(order) do
    local g = groups[key]
    table.sort(g.points, function(x, y) return x[1] < y[1] end)
    if #g.points >= 2 and g.points[1][1] ~= g.points[#g.points][1] then
      local latency, bandwidth = fit(g.points)
      xfer.set_cost(g.e.from, g.e.to, g.e.path, latency, bandwidth)
      set = set + 1
    end
  end
  return set
end

--- The result of xfer.calibrate as a table: each pair and path with its figures.
function xfer.calibrate_report(result)
  if type(result) ~= "table" or type(result.results) ~= "table" then
    xfer.arg_error(1, "calibrate_report", "the result of xfer.calibrate", result, 2)
  end
  local lines = { format("%-10s %-10s %-13s %12s %12s", "from", "to", "path", "latency us", "GB/s") }
  for _, e in ipairs(result.results) do
    if e.code then
      lines[#lines + 1] = format("%-10s %-10s %-13s %s: %s", e.from, e.to, e.path, e.code, e.message)
    else
      lines[#lines + 1] = format("%-10s %-10s %-13s %12.1f %12.2f", e.from, e.to, e.path, e.latency * 1e6,
                                 e.bandwidth / 1e9)
    end
  end
  lines[#lines + 1] = format("calibrated %d path%s in %.1f s%s", #result.results,
                             #result.results == 1 and "" or "s", result.seconds,
                             result.saved and "; saved to the plan cache"
                               or result.save_error and ("; not saved: " .. result.save_error) or "")
  return concat(lines, "\n")
end
