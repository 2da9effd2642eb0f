-- scripts/bench-copy-blocks.lua [FROM TO BLOCK_BYTES COUNT]: a batch's time per call, made each call (copy_blocks) and
-- prepared once (b:run()), best of 30; run by each tree's build/xferlua to compare two commits on one machine,
-- alternately (docs/development.md, "before and after"): CPU-side costs, which scripts/bench's batch table mixes with noise.
local xfer = require "xfer"
local bench = require "xfer.bench"
local now = xfer.clock
local devs = { arg[1] or "host", arg[2] or "vulkan:0" }
local block, count = tonumber(arg[3] or 16), tonumber(arg[4] or 4096)
local slots = count * 4
local src = xfer.zeros({ slots * block }, { dtype = "u8", device = xfer.device(devs[1]) })
local dst = xfer.zeros({ slots * block }, { dtype = "u8", device = xfer.device(devs[2]) })
local sb, db = bench.scatter(count, slots, 7), bench.scatter(count, slots, 11)
local function best(f, n)
  local b = math.huge
  for _ = 1, n do local t0 = now(); f(); local t = now() - t0; if t < b then b = t end end
  return b
end
for _ = 1, 3 do dst:copy_blocks(src, sb, db, block) end
local cb = best(function() dst:copy_blocks(src, sb, db, block) end, 30)
local b = xfer.batch({ dst = dst, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block })
b:run()
local pr = best(function() b:run() end, 30)
print(string.format("%s->%s %d x %d B: copy_blocks %.3f ms  prepared run %.3f ms", devs[1], devs[2], count, block, cb * 1e3, pr * 1e3))
