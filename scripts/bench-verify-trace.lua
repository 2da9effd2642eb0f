-- scripts/bench-verify-trace.lua DEVICE...: where a verified move's time goes, per device named (cuda:0 ...):
-- XFER_TRACE's verify lines ("moved X ms, then sums Y ms (waiting for the devices' D ms, the host pool's
-- P ms)", and how many submissions a batch group went in) of a prepared batch of 4096 x 16 KiB and of a
-- 256 MiB copy_from, host -> device and back, each plain then verified, twice (the first runs cold).
-- VERIFY_TRACE_ONLY=batch: the batches alone. Run as `XFER_TRACE=1 build/xferlua scripts/bench-verify-trace.lua
-- cuda:0 2>&1 | grep -e '^==' -e verify`; the guard table (scripts/bench --tables guard --guard verify) gives
-- the costs, this the breakdown of one.
local xfer = require "xfer"
local bench = require "xfer.bench"
if #arg == 0 or arg[1] == "-h" or arg[1] == "--help" then
  io.write("usage: XFER_TRACE=1 xferlua scripts/bench-verify-trace.lua DEVICE... (see the file's head)\n")
  os.exit(#arg == 0 and 2 or 0)
end
local host = xfer.device("host")
for _, name in ipairs(arg) do
  local d = xfer.device(name)
  local block, count = 16384, 4096
  local slots = count * 4
  local sb, db = bench.scatter(count, slots, 7), bench.scatter(count, slots, 11)
  for _, p in ipairs({ { host, d }, { d, host } }) do
    io.stderr:write("== batch ", p[1].name, " -> ", p[2].name, "\n")
    local src = xfer.full({ slots * block }, 7, { dtype = "u8", device = p[1] })
    local dst = xfer.full({ slots * block }, 1, { dtype = "u8", device = p[2] })
    local spec = { dst = dst, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block }
    local plain, verified = xfer.batch(spec), xfer.batch(spec, { verify = true })
    for _ = 1, 2 do
      plain:run()
      verified:run()
    end
    src:free()
    dst:free()
  end
  if os.getenv("VERIFY_TRACE_ONLY") ~= "batch" then
    for _, p in ipairs({ { host, d }, { d, host } }) do
      io.stderr:write("== 256 MiB ", p[1].name, " -> ", p[2].name, "\n")
      local n = 256 * 2^20
      local src = xfer.full({ n }, 7, { dtype = "u8", device = p[1] })
      local dst = xfer.full({ n }, 1, { dtype = "u8", device = p[2] })
      for _ = 1, 2 do
        dst:copy_from(src)
        dst:copy_from(src, { verify = true })
      end
      src:free()
      dst:free()
    end
  end
end
