-- scripts/bench_tables/staged.lua -- the "staged" table of scripts/bench.lua.
-- The staged path between every two devices, beside the single pinned hops it is made of
-- (host -> device and device -> host into tensors xferlua pinned or imported, measured
-- here) and, where CUDA works, raw cuMemcpy* from pinned memory at the same size.
local xfer = require "xfer"
local bench = require "xfer.bench"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local host, emit, say, run_raw, pair_size = B.host, B.emit, B.say, B.run_raw, B.pair_size
  local n = pair_size
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
    if dev.runtime == "cuda" and not raw_pinned then
      local raw = run_raw(dev, { n })
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
