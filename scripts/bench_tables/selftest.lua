-- scripts/bench_tables/selftest.lua -- the "selftest" table of scripts/bench.lua.
-- selftest: how long the quick and the full self-test take here (a figure, not a timed test)
local xfer = require "xfer"

-- B: what scripts/bench.lua shares with every table (its head says what each holds)
return function(B)
  local emit = B.emit
  local rows = { { "xferlua --selftest", "moves", "seconds", "verdict" } }
  for _, quick in ipairs({ true, false }) do
    local r = xfer.selftest({ quick = quick })
    rows[#rows + 1] = { quick and "--quick" or "(full)", tostring(#r.results), ("%.3f"):format(r.seconds),
                        r.ok and "ok" or "FAILED" }
  end
  emit(rows)
end
