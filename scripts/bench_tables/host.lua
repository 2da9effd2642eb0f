-- scripts/bench_tables/host.lua -- the "host" table of scripts/bench.lua.
-- host <-> every device: dst:copy_from(src) between tensors made beforehand, GB/s (decimal)
-- as the median of several runs after a warm-up run, and the first (cold) run apart; with --raw
-- (bench-cuda-raw), CUDA rows beside raw cuMemcpy* calls in the same run. First host -> host,
-- the memcpy every other figure compares with.
local xfer = require "xfer"
local bench = require "xfer.bench"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local host, emit, sizes, run_raw, fmt_rate, fmt_us = B.host, B.emit, B.sizes, B.run_raw, B.fmt_rate, B.fmt_us
  do
    local rows = { { "host->host (memcpy)", "size", "GB/s", "us" } }
    for _, n in ipairs(sizes) do
      local s = bench.copy(host, host, n, bench.reps_for(n, 0.3, 10))
      rows[#rows + 1] = { "", bench.format_size(n), fmt_rate(n, s), fmt_us(s) }
    end
    emit(rows)
  end
  for _, dev in ipairs(xfer.devices()) do
    if dev ~= host then
      local raw = dev.runtime == "cuda" and run_raw(dev) or nil
      local header = { dev.name .. " (" .. dev.label .. ")", "size", "GB/s", "us", "first us" }
      if raw then
        for _, h in ipairs({ "raw pinned GB/s", "raw pinned us", "raw pageable GB/s", "vs pinned" }) do
          header[#header + 1] = h
        end
      end
      local rows = { header }
      for _, dir in ipairs({ "h2d", "d2h" }) do
        for _, n in ipairs(sizes) do
          local from, to = host, dev
          if dir == "d2h" then from, to = dev, host end
          local ok, s, first = pcall(bench.copy, from, to, n, bench.reps_for(n, 0.5, 5))
          if not ok then
            rows[#rows + 1] = { (dir == "h2d" and "host->" or "->host") .. " failed: " .. tostring(s) }
          else
            local row = { dir == "h2d" and "host -> " .. dev.name or dev.name .. " -> host",
                          bench.format_size(n), fmt_rate(n, s), fmt_us(s), fmt_us(first) }
            if raw then
              local rp, rg = raw[dir].pinned[n], raw[dir].pageable[n]
              row[#row + 1] = fmt_rate(n, rp)
              row[#row + 1] = fmt_us(rp)
              row[#row + 1] = fmt_rate(n, rg)
              row[#row + 1] = rp and ("%.2fx"):format(rp / s) or "-"
            end
            rows[#rows + 1] = row
          end
        end
      end
      emit(rows)
    end
  end
end
