-- fallback.lua -- xfer.transfer: try the fastest path, fall back when it fails.
--   scripts/xferlua examples/fallback.lua
local xfer = require "xfer"

local devices = xfer.devices()
local from, to = devices[#devices], devices[math.max(1, #devices - 1)]
print(("moving 8 MiB from %s to %s"):format(from.name, to.name))
local t = xfer.tensor(string.rep("xferlua!", 1024 * 1024), { dtype = "u8", device = from })
print(("  the planner's choice: %s (%s)"):format(xfer.plan(t, to).path, xfer.plan(t, to).reason))

-- Make the first read off the source fail, as a flaky driver would.
xfer.faults.inject({ runtime = from.runtime, op = "read", nth = 1 })

local moved, attempts = xfer.transfer(t, to, {
  fallback = { xfer.plan(t, to).path, "host" },
  retries = 1,
  log = function(a) print(("  attempt %d via %s failed: %s"):format(a.try, a.path, a.message)) end,
})
print(("  arrived: %s, %d failed attempt(s), bytes equal: %s"):format(
  moved:summary(), #attempts, tostring(moved:tobytes() == t:tobytes())))
