-- scripts/bench_tables/strided.lua -- the "strided" table of scripts/bench.lua.
-- strided: every other row of a matrix of --pair-size bytes (rows of 16 KiB), moved
-- host -> device and device -> host as a view, beside making it contiguous first and moving
-- that (what a user without views would do); bandwidth counts the bytes of the view.
local xfer = require "xfer"
local bench = require "xfer.bench"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local host, emit, fmt_rate, pair_size = B.host, B.emit, B.fmt_rate, B.pair_size
  local n = pair_size
  local cols = 4096 -- f32: 16 KiB rows
  local rows_n = math.max(2, math.floor(n / (cols * 4)))
  local view_bytes = math.floor(rows_n / 2) * cols * 4
  local out = { { ("every other row of f32[%d,%d]"):format(rows_n, cols), "view bytes", "view GB/s",
                  "view ms", "contiguous() then to GB/s", "ms" } }
  for _, dev in ipairs(xfer.devices()) do
    if dev ~= host then
      for _, dir in ipairs({ "h2d", "d2h" }) do
        local from, to = host, dev
        if dir == "d2h" then from, to = dev, host end
        local m = xfer.zeros({ rows_n, cols }, { device = from })
        local v = m:slice({ { 1, -1, 2 } })
        local reps = bench.reps_for(view_bytes, 0.5, 2)
        local ok, s = pcall(bench.time, function() v:to(to):free() end, reps)
        local ok2, s2 = pcall(bench.time, function()
          local c = v:contiguous()
          c:to(to):free()
          if c ~= v then c:free() end
        end, reps)
        out[#out + 1] = { from.name .. " -> " .. to.name, bench.format_size(view_bytes),
                          ok and fmt_rate(view_bytes, s) or "failed", ok and ("%.2f"):format(s * 1e3) or tostring(s),
                          ok2 and fmt_rate(view_bytes, s2) or "failed", ok2 and ("%.2f"):format(s2 * 1e3) or tostring(s2) }
        v:free() -- the view first: memory that views use cannot be freed
        m:free()
        collectgarbage()
      end
    end
  end
  emit(out)
end
