-- scripts/bench-move-cost.lua: the cost of one move, per pair of the devices here: a 4 KiB copy_from and to() (best of
-- 300) and a 64 MiB copy_from (best of 5). Run by each tree's build/xferlua, alternately, to compare two commits
-- on one machine where scripts/bench's to and pairs tables differ by less than its noise (docs/development.md).
local xfer = require "xfer"
local pairs_ = {}
local names = {}
for _, d in ipairs(xfer.devices()) do names[#names + 1] = d.name end
local function has(n) for _, x in ipairs(names) do if x == n then return true end end end
for _, p in ipairs({ { "host", "cuda:0" }, { "cuda:0", "host" }, { "host", "vulkan:0" }, { "vulkan:0", "host" },
                     { "host", "opencl:0" }, { "cuda:0", "vulkan:0" } }) do
  if has(p[1]) and has(p[2]) then pairs_[#pairs_ + 1] = p end
end
local function best(f, n) local b = math.huge; for _ = 1, n do local t0 = xfer.clock(); f(); b = math.min(b, xfer.clock() - t0) end; return b end
for _, p in ipairs(pairs_) do
  local a, b = xfer.device(p[1]), xfer.device(p[2])
  local s = xfer.zeros({ 4096 }, { dtype = "u8", device = a })
  local d = xfer.zeros({ 4096 }, { dtype = "u8", device = b })
  for _ = 1, 20 do d:copy_from(s) end
  local c4 = best(function() d:copy_from(s) end, 300)
  local t4 = best(function() local x = s:to(b); x:free() end, 300)
  local S = xfer.zeros({ 64 * 2^20 }, { dtype = "u8", device = a })
  local D = xfer.zeros({ 64 * 2^20 }, { dtype = "u8", device = b })
  D:copy_from(S)
  local c64 = best(function() D:copy_from(S) end, 5)
  print(("%-18s 4 KiB copy %6.1f us  to() %6.1f us   64 MiB copy %7.2f GB/s"):format(p[1] .. " -> " .. p[2], c4 * 1e6, t4 * 1e6, 64 * 2^20 / c64 / 1e9))
  S:free(); D:free(); s:free(); d:free()
end
