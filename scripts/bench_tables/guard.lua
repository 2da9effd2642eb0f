-- scripts/bench_tables/guard.lua -- the "guard" table of scripts/bench.lua: what `verify` costs.
-- The same move with and without {verify = true} in one run, one after the other: --pair-size
-- bytes from the host to every device and back, and between two devices of one GPU where there
-- are (cuda:0 <-> vulkan:0); 4096 blocks of 16 KiB scattered in a buffer, host <-> each device,
-- by a prepared batch; and a safetensors file of --file-size bytes loaded onto each device
-- with verify against the sums xfer.save recorded. The cost is the time with verify over the
-- time without, less one (issue 37's goal on the H200: <= 5% at 256 MiB, <= 10% for batches).
-- Sums of device memory are made on the host from a read-back until a device computes its own.
local xfer = require "xfer"
local bench = require "xfer.bench"

local function cost(plain_s, verified_s)
  return plain_s and verified_s and ("%+.0f%%"):format((verified_s / plain_s - 1) * 100) or "-"
end

local function pairs_of(devs, host)
  local out = {}
  for _, d in ipairs(devs) do
    if d ~= host and d.runtime ~= "remote" then
      out[#out + 1] = { host, d }
      out[#out + 1] = { d, host }
    end
  end
  local cuda, vulkan
  for _, d in ipairs(devs) do
    if d.runtime == "cuda" and not cuda then cuda = d end
    if d.runtime == "vulkan" and not vulkan then vulkan = d end
  end
  if cuda and vulkan then
    out[#out + 1] = { cuda, vulkan }
    out[#out + 1] = { vulkan, cuda }
  end
  return out
end

local function moves(B, rows, devs)
  local n = B.pair_size
  for _, p in ipairs(pairs_of(devs, B.host)) do
    local src = xfer.full({ n }, 7, { dtype = "u8", device = p[1] })
    local dst = xfer.full({ n }, 1, { dtype = "u8", device = p[2] })
    local plain = bench.time(function() dst:copy_from(src) end, 5)
    local verified = bench.time(function() dst:copy_from(src, { verify = true }) end, 5)
    rows[#rows + 1] = { p[1].name .. " -> " .. p[2].name, bench.format_size(n), B.fmt_rate(n, plain),
                        B.fmt_rate(n, verified), cost(plain, verified) }
    src:free()
    dst:free()
  end
end

local function batches(B, rows, devs)
  local block, count = 16384, 4096
  local slots = count * 4
  local sb, db = bench.scatter(count, slots, 7), bench.scatter(count, slots, 11)
  for _, p in ipairs(pairs_of(devs, B.host)) do
    local src = xfer.full({ slots * block }, 7, { dtype = "u8", device = p[1] })
    local dst = xfer.full({ slots * block }, 1, { dtype = "u8", device = p[2] })
    local spec = { dst = dst, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block }
    local plain_b, verified_b = xfer.batch(spec), xfer.batch(spec, { verify = true })
    local plain = bench.time(function() plain_b:run() end, 5)
    local verified = bench.time(function() verified_b:run() end, 5)
    rows[#rows + 1] = { p[1].name .. " -> " .. p[2].name, ("%d x 16 KiB"):format(count),
                        B.fmt_rate(block * count, plain), B.fmt_rate(block * count, verified),
                        cost(plain, verified) }
    src:free()
    dst:free()
  end
end

local function loads(B, rows, devs)
  local size = math.min(B.file_size, 1024 * 2^20)
  local dir = B.file_dir or "build/bench-files"
  os.execute("mkdir -p '" .. dir .. "'")
  local path = dir .. "/guard.safetensors"
  local each = 64 * 2^20
  local tensors = {}
  for i = 1, math.max(1, math.floor(size / each)) do
    tensors[("layer.%d"):format(i)] = xfer.full({ each }, i % 251, { dtype = "u8" })
  end
  xfer.save(path, tensors)
  local bytes = 0
  for _, t in pairs(tensors) do bytes = bytes + #t end
  for _, d in ipairs(devs) do
    if d.runtime ~= "remote" then
      local plain = bench.time(function() xfer.load(path, { device = d }) collectgarbage() end, 3)
      local verified = bench.time(function() xfer.load(path, { device = d, verify = true }) collectgarbage() end, 3)
      rows[#rows + 1] = { "file -> " .. d.name, bench.format_size(bytes) .. " warm", B.fmt_rate(bytes, plain),
                          B.fmt_rate(bytes, verified), cost(plain, verified) }
    end
  end
  os.remove(path)
end

return function(B)
  local rows = { { "verify = true (CRC32C at both ends)", "size", "without GB/s", "with GB/s", "cost" } }
  local devs = xfer.devices()
  moves(B, rows, devs)
  batches(B, rows, devs)
  loads(B, rows, devs)
  B.emit(rows)
  B.say("guard: each move's time with verify over the same move's without, the median of several;" ..
        " a device end's sum made on the host from a read-back (no device kernel yet)")
end
