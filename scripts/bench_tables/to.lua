-- scripts/bench_tables/to.lua -- the "to" table of scripts/bench.lua.
-- t:to(dev) in a loop (each result freed) beside dst:copy_from(src) into a tensor made
-- beforehand, for every ordered pair of devices: the call users write against the copy's
-- ceiling. The first to() after empty_cache() (cold: memory from the driver, pins and
-- imports made) is shown apart; steady state comes from the caching allocator.
local xfer = require "xfer"
local bench = require "xfer.bench"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local emit, fmt_rate, fmt_us, pair_size = B.emit, B.fmt_rate, B.fmt_us, B.pair_size
  local rows = { { "to() vs copy_from", "size", "path", "copy GB/s", "copy us", "to() GB/s",
                   "to() us", "cold to() us", "to/copy" } }
  local devs = xfer.devices()
  for _, n in ipairs({ 4096, pair_size }) do
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
