-- scripts/bench_tables/plan.lua -- the "plan" table of scripts/bench.lua.
-- plan: does the default path (after calibration) come within 1.1x of the best forced path?
local xfer = require "xfer"
local bench = require "xfer.bench"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local emit, say, progress, fmt_us, plan_sizes = B.emit, B.say, B.progress, B.fmt_us, B.plan_sizes
  local cal = xfer.calibrate({ save = false, reps = 3,
                               progress = function(d, n) progress("calibrating: pair", d, n) end })
  say(("\ncalibrated %d paths in %.1f s (xfer.calibrate, not saved)"):format(#cal.results, cal.seconds))
  local rows = { { "pair", "size", "default", "us", "best forced", "us", "default / best" } }
  local within, total = 0, 0
  -- a move over 1.1x: what the planner estimated for each path beside what each measured
  local misses = { { "pair", "size", "path", "estimated us", "measured us" } }
  local devs = xfer.devices()
  local done, count = 0, #devs * #devs * #plan_sizes
  for _, n in ipairs(plan_sizes) do
    for _, a in ipairs(devs) do
      for _, b in ipairs(devs) do
        progress("plan: move", done, count)
        done = done + 1
        local src = xfer.full({ n }, 7, { dtype = "u8", device = a })
        local dst = xfer.empty({ n }, { dtype = "u8", device = b })
        local reps = bench.reps_for(n, 0.1, 2)
        local default_path = xfer.plan(src, b).path
        -- three rounds, the default and every forced path in turn in each, the best round of
        -- each counted: a machine's drift (another process, a frequency change) hits all alike
        local ok, default_s, best_path, best_s = true, math.huge, nil, math.huge
        local forced = {}
        for _ = 1, 3 do
          local dok, s = pcall(bench.time, function() dst:copy_from(src) end, reps)
          if not dok then ok, default_s = false, s break end
          default_s = math.min(default_s, s)
          for _, e in ipairs(xfer.plan(src, b).estimates) do
            local fok, fs = pcall(bench.time, function() dst:copy_from(src, { via = e.path }) end, reps)
            if fok then forced[e.path] = math.min(forced[e.path] or math.huge, fs) end
          end
        end
        for path, s in pairs(forced) do
          if s < best_s then best_path, best_s = path, s end
        end
        if ok and best_path then
          local ratio = default_s / best_s
          total = total + 1
          if ratio <= 1.1 then
            within = within + 1
          else
            for _, e in ipairs(xfer.plan(src, b).estimates) do
              misses[#misses + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), e.path,
                                      fmt_us(e.seconds), fmt_us(forced[e.path]) }
            end
          end
          rows[#rows + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), default_path, fmt_us(default_s),
                              best_path, fmt_us(best_s), ("%.2f%s"):format(ratio, ratio <= 1.1 and "" or " (over 1.1)") }
        else
          rows[#rows + 1] = { a.name .. " -> " .. b.name, bench.format_size(n), default_path,
                              "failed: " .. tostring(ok and "no forced path ran" or default_s) }
        end
        src:free()
        dst:free()
        collectgarbage()
      end
    end
  end
  progress("plan: move", count, count)
  emit(rows)
  say(("the default within 1.1x of the best forced path: %d of %d moves"):format(within, total))
  if #misses > 1 then
    say("\nthe moves over 1.1x: the planner's estimate of each path (from the calibration) and its time here")
    emit(misses)
  end
  xfer.forget_costs()
end
