-- scripts/bench_tables/pairs.lua -- the "pairs" table of scripts/bench.lua.
-- Between devices: the default path beside the naive round-trip frameworks make today
-- (read everything into a fresh host buffer, make a new tensor from it).
local xfer = require "xfer"
local bench = require "xfer.bench"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local host, emit, say, fmt_rate, pair_size = B.host, B.emit, B.say, B.fmt_rate, B.pair_size
  local n = pair_size
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
