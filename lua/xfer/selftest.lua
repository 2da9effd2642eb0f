-- selftest.lua -- know the machine before it fails: xfer.selftest{...} moves a known pattern
-- between every ordered pair of devices (a device with itself included) by the default path
-- and by every path that can be forced, at a small size and one that crosses staging chunks,
-- verifies the bytes and times the move; xfer.selftest_report(result) prints it as a table
-- and a verdict (`xferlua --selftest`). XFER_SELFTEST=1 runs the quick one when xfer loads.
-- The binding runs this file with the module table.
local xfer = ...

local format, concat = string.format, table.concat

local PATHS = xfer.paths
local KNOWN_PATH = {}
for _, name in ipairs(PATHS) do KNOWN_PATH[name] = true end

local function fail(message)
  error(xfer.error({ code = "invalid", op = "selftest", message = "selftest: " .. message }), 3)
end

-- A pattern no two sizes or offsets share by accident: byte i is (i * 31 + 7) mod 251.
local patterns = setmetatable({}, { __mode = "v" })
local function pattern(n)
  if patterns[n] then return patterns[n] end
  local bytes, chunk = {}, {}
  for i = 0, 250 do chunk[i + 1] = string.char((i * 31 + 7) % 251) end
  local period = concat(chunk)
  for i = 1, math.ceil(n / 251) do bytes[i] = period end
  local text = concat(bytes):sub(1, n)
  patterns[n] = text
  return text
end

local function list_option(opts, key, kind)
  local v = opts[key]
  if v == nil then return nil end
  if type(v) ~= "table" then fail(format("option '%s' must be a list of %s", key, kind)) end
  return v
end

--- xfer.selftest{quick = false, sizes = {...}, devices = {...}, paths = {...}, time_limit = s,
--- progress = function(pairs_done, pairs_total) end, costs = false}
--- returns {ok = every default move worked, results = {{from, to, path, forced, bytes, ok,
--- code, message, seconds, gbps}, ...}, seconds}.
function xfer.selftest(opts)
  if opts ~= nil and type(opts) ~= "table" then xfer.arg_error(1, "selftest", "options table", opts, 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "quick" and k ~= "sizes" and k ~= "devices" and k ~= "paths" and k ~= "time_limit" and k ~= "progress"
       and k ~= "costs" and k ~= "files" then
      fail(format("unknown option '%s' (known: quick, sizes, devices, paths, time_limit, progress, costs, files)", tostring(k)))
    end
  end
  local chunk = xfer.config().staging_chunk
  local sizes = list_option(opts, "sizes", "byte counts")
    or (opts.quick and { 4096 + 3, 256 * 1024 + 5 } or { 4096 + 3, 2 * chunk + 4096 + 3 })
  for _, n in ipairs(sizes) do
    if type(n) ~= "number" or n < 1 or n % 1 ~= 0 then fail("sizes are whole numbers of bytes >= 1") end
  end
  local devices = {}
  for i, d in ipairs(list_option(opts, "devices", "devices") or xfer.devices()) do
    devices[i] = xfer.check_device(d, 1, "selftest", 3)
  end
  local paths = list_option(opts, "paths", "path names") or { "auto", unpack(PATHS) }
  for _, p in ipairs(paths) do
    if p ~= "auto" and not KNOWN_PATH[p] then
      fail(format("unknown path '%s' (auto, %s)", tostring(p), concat(PATHS, ", ")))
    end
  end
  local progress = opts.progress
  if progress ~= nil and type(progress) ~= "function" then fail("progress is a function(pairs_done, pairs_total)") end
  local limit = opts.time_limit
  if limit ~= nil and (type(limit) ~= "number" or limit <= 0) then fail("time_limit is a number of seconds > 0") end
  local started = xfer.clock()
  local results, all_ok = {}, true
  local pairs_done, pairs_total = 0, #devices * #devices
  for _, a in ipairs(devices) do
    for _, b in ipairs(devices) do
      if progress then progress(pairs_done, pairs_total) end
      pairs_done = pairs_done + 1
      for _, n in ipairs(sizes) do
        local bytes = pattern(n)
        local made, src = pcall(xfer.tensor, bytes, { dtype = "u8", device = a })
        for _, p in ipairs(paths) do
          local forced = p ~= "auto"
          local entry = { from = a.name, to = b.name, bytes = n, forced = forced }
          local applies = true
          if not made then -- one result: the default move could not even start
            applies = not forced
            entry.path, entry.ok, entry.code, entry.message = "auto", false, src.code, "making the source: " .. src.message
          else
            local planned, plan = pcall(xfer.plan, src, b, forced and { via = p } or nil)
            if not planned then
              applies = false -- a forced path that does not apply to this pair: not a result
            else
              entry.path = plan.path
            end
          end
          if applies and limit and xfer.clock() - started > limit then
            entry.ok, entry.skipped, entry.message = false, true, "not run: time_limit reached"
          elseif applies and made then
            local t0 = xfer.clock()
            local ok, moved = pcall(src.to, src, b, forced and { via = p } or nil)
            entry.seconds = xfer.clock() - t0
            if ok then
              local read, got = pcall(moved.tobytes, moved)
              if read and got == bytes then
                entry.ok, entry.gbps = true, n / entry.seconds / 1e9
              else
                entry.ok, entry.code = false, read and "wrong_bytes" or got.code
                entry.message = read and "the bytes that arrived differ" or "reading back: " .. got.message
              end
              moved:free()
            else
              entry.ok, entry.code, entry.message = false, moved.code, moved.message
            end
          end
          if applies then
            results[#results + 1] = entry
            if not entry.ok and not entry.forced and not entry.skipped then all_ok = false end
          end
        end
        if made then src:free() end
      end
    end
  end
  -- files as endpoints (files = false: not): the largest pattern saved from every device to a
  -- safetensors file and loaded from it onto every device, through O_DIRECT and the page cache
  if opts.files ~= false then
    local n = sizes[#sizes]
    local bytes = pattern(n)
    local file = os.tmpname() .. ".safetensors"
    for _, a in ipairs(devices) do
      local made, src = pcall(xfer.tensor, bytes, { dtype = "u8", device = a })
      local entry = { from = a.name, to = "file", bytes = n, path = "file" }
      local t0 = xfer.clock()
      local ok, e = false, src
      if made then ok, e = pcall(xfer.save, file, { pattern = src }) end
      entry.seconds = xfer.clock() - t0
      entry.ok, entry.gbps = ok, ok and n / entry.seconds / 1e9 or nil
      if not ok then entry.code, entry.message = e.code, e.message end
      results[#results + 1] = entry
      all_ok = all_ok and ok
      if made then src:free() end
      for _, b in ipairs(ok and devices or {}) do
        for _, direct in ipairs({ false, true }) do
          local back = { from = "file", to = b.name, bytes = n, path = direct and "file (O_DIRECT)" or "file" }
          local t1 = xfer.clock()
          local loaded, got = pcall(xfer.load, file, { device = b, direct = direct })
          back.seconds = xfer.clock() - t1
          if loaded then
            local read, have = pcall(got.pattern.tobytes, got.pattern)
            back.ok = read and have == bytes
            if not back.ok then
              back.code = read and "wrong_bytes" or have.code
              back.message = read and "the bytes that arrived differ" or "reading back: " .. have.message
            end
            got.pattern:free()
          else
            back.ok, back.code, back.message = false, got.code, got.message
          end
          back.gbps = back.ok and n / back.seconds / 1e9 or nil
          results[#results + 1] = back
          all_ok = all_ok and back.ok
        end
      end
    end
    os.remove(file)
  end
  if progress then progress(pairs_total, pairs_total) end
  local report = { ok = all_ok, results = results, seconds = xfer.clock() - started }
  -- costs = true: the forced moves' times become the planner's figures (xfer.calibrate's
  -- are steadier: a median of several runs each)
  if opts.costs then report.costs = xfer.costs_from_selftest(report) end
  return report
end

local function size_text(n)
  if n >= 1024 * 1024 then return format("%.1f MiB", n / 1048576) end
  if n >= 1024 then return format("%.1f KiB", n / 1024) end
  return n .. " B"
end

--- The result of xfer.selftest as a table and a verdict line.
function xfer.selftest_report(result)
  if type(result) ~= "table" or type(result.results) ~= "table" then
    xfer.arg_error(1, "selftest_report", "the result of xfer.selftest", result, 2)
  end
  local rows = { { "from", "to", "path", "size", "result", "GB/s" } }
  local failed_default, failed_forced = 0, 0
  for _, e in ipairs(result.results) do
    local outcome = e.ok and "ok" or e.skipped and e.message or (e.code .. ": " .. e.message)
    rows[#rows + 1] = { e.from, e.to, (e.path or "?") .. (e.forced and " (forced)" or ""),
                        size_text(e.bytes), outcome, e.gbps and format("%.2f", e.gbps) or "-" }
    if not e.ok and not e.skipped then
      if e.forced then failed_forced = failed_forced + 1 else failed_default = failed_default + 1 end
    end
  end
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do
      if i < #row and #cell > (widths[i] or 0) then widths[i] = math.min(#cell, 60) end
    end
  end
  local lines = {}
  for r, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do
      cells[i] = i < #row and format("%-" .. widths[i] .. "s", cell) or cell
    end
    lines[#lines + 1] = concat(cells, "  ")
    if r == 1 then lines[#lines + 1] = ("-"):rep(#lines[1]) end
  end
  lines[#lines + 1] = format("selftest: %s -- %d moves, %d default path%s failed, %d forced path%s failed, %.2f s",
                             result.ok and "ok" or "FAILED", #result.results, failed_default,
                             failed_default == 1 and "" or "s", failed_forced, failed_forced == 1 and "" or "s",
                             result.seconds)
  return concat(lines, "\n")
end

-- XFER_SELFTEST=1: the quick self-test when xfer loads, its report on stderr
local wanted = os.getenv("XFER_SELFTEST")
if wanted ~= nil and wanted ~= "" and wanted ~= "0" then
  if wanted ~= "1" then
    io.stderr:write(format("xferlua: XFER_SELFTEST takes 0 or 1, not '%s': not run\n", wanted))
  else
    local ok, result = pcall(xfer.selftest, { quick = true })
    io.stderr:write(ok and xfer.selftest_report(result) or ("xferlua: selftest: " .. tostring(result)), "\n")
  end
end
