-- scripts/bench_tables/files.lua -- the "files" table of scripts/bench.lua: a safetensors file
-- of --file-size bytes of bf16 tensors shaped like a 7B model's layers (written by xfer.save
-- into --file-dir, on the disk the note names), loaded by xfer.load onto every device, cold
-- (the file dropped from the page cache first: posix_fadvise through `dd iflag=nocache`, and
-- /proc/sys/vm/drop_caches where allowed) and warm; beside the raw device read (dd
-- iflag=direct, 16 MiB blocks) and the page cache's (dd), the host -> device link (a 256 MiB
-- copy_from), and the loaders users would otherwise pick (scripts/bench_files.py:
-- safetensors, fastsafetensors) in the same run; then xfer.save beside the raw write (dd
-- oflag=direct).
local xfer = require "xfer"
local bench = require "xfer.bench"

local MiB = 1024 * 1024

-- {name, shape} of a model-like file of about `size` bytes of bf16: embeddings and head of
-- 32000 x 4096, then layers of q/k/v/o 4096 x 4096, gate/up 11008 x 4096, down 4096 x 11008
-- and two norms of 4096
local function model_shapes(size)
  local out = { { "embed_tokens.weight", { 32000, 4096 } }, { "lm_head.weight", { 32000, 4096 } },
                { "norm.weight", { 4096 } } }
  local per_layer = (4 * 4096 * 4096 + 3 * 11008 * 4096 + 2 * 4096) * 2
  local layers = math.max(1, math.floor((size - 2 * 32000 * 4096 * 2) / per_layer))
  for l = 0, layers - 1 do
    local p = ("layers.%d."):format(l)
    for _, n in ipairs({ "q_proj", "k_proj", "v_proj", "o_proj" }) do out[#out + 1] = { p .. "attn." .. n .. ".weight", { 4096, 4096 } } end
    out[#out + 1] = { p .. "mlp.gate_proj.weight", { 11008, 4096 } }
    out[#out + 1] = { p .. "mlp.up_proj.weight", { 11008, 4096 } }
    out[#out + 1] = { p .. "mlp.down_proj.weight", { 4096, 11008 } }
    out[#out + 1] = { p .. "input_layernorm.weight", { 4096 } }
    out[#out + 1] = { p .. "post_attention_layernorm.weight", { 4096 } }
  end
  return out, layers
end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  return out
end

-- drops `path` from the page cache; says how
local function drop(path)
  sh("sync")
  local all = os.execute("echo 3 > /proc/sys/vm/drop_caches 2>/dev/null") == 0
  sh(("dd if=%q iflag=nocache count=0 status=none"):format(path))
  return all and "drop_caches" or "fadvise"
end

local function warm(path) sh(("cat %q > /dev/null"):format(path)) end

local function timed(fn)
  local t0 = xfer.clock()
  fn()
  return xfer.clock() - t0
end

-- GB/s of `bytes` from host memory into dev by copy_from of 256 MiB (the link)
local function link(dev, host)
  if dev == host then return nil end
  local n = 256 * MiB
  local ok, src = pcall(xfer.zeros, { n }, { dtype = "u8" })
  local ok2, dst = pcall(xfer.zeros, { n }, { dtype = "u8", device = dev })
  if not (ok and ok2) then return nil end
  dst:copy_from(src)
  local best = math.huge
  for _ = 1, 3 do best = math.min(best, timed(function() dst:copy_from(src); xfer.synchronize() end)) end
  src:free()
  dst:free()
  return n / best / 1e9
end

return function(B)
  local emit, say = B.emit, B.say
  local size = B.file_size
  local dir = B.file_dir
  os.execute(("mkdir -p %q"):format(dir))
  local path = dir .. "/bench-model.safetensors"
  local raw = dir .. "/bench-raw.bin"
  local shapes, layers = model_shapes(size)
  say(("# files: %s, %d layers of bf16 tensors, on %s"):format(path, layers,
      (sh(("df -h --output=source,fstype,size %q | tail -1"):format(dir)):gsub("%s+", " "))))
  -- written once: the tensors made on the host, saved, timed
  local tensors, bytes = {}, 0
  for _, s in ipairs(shapes) do
    local t = xfer.full(s[2], 0.5, { dtype = "bf16" })
    tensors[s[1]] = t
    bytes = bytes + t.nbytes
  end
  os.remove(path)
  local save_s = timed(function() xfer.save(path, tensors) end)
  local save_route = xfer.file_route().reason
  for _, t in pairs(tensors) do t:free() end
  tensors = nil
  collectgarbage()
  local file_bytes = bytes
  -- the raw disk: the same bytes written and read with O_DIRECT by dd
  local count = math.floor(file_bytes / (16 * MiB))
  os.remove(raw)
  local raw_write_s = timed(function() sh(("dd if=/dev/zero of=%q bs=16M count=%d oflag=direct conv=fsync status=none"):format(raw, count)) end)
  os.remove(raw)
  drop(path)
  local how = drop(path)
  -- the device's own pace: fio (16 requests of 16 MiB in flight, io_uring, O_DIRECT) where
  -- installed, else four dd processes over quarters of the file (O_DIRECT, 16 MiB blocks)
  local raw_tool
  local disk_s
  if sh("command -v fio") ~= "" then
    raw_tool = "fio io_uring direct iodepth=16 bs=16M"
    disk_s = timed(function() sh(("fio --name=r --filename=%q --rw=read --bs=16M --direct=1 --ioengine=io_uring --iodepth=16 --size=%d --output=/dev/null"):format(path, count * 16 * MiB)) end)
  else
    raw_tool = "4 x dd iflag=direct bs=16M"
    local q = math.floor(count / 4)
    local parts = {}
    for k = 0, 3 do
      parts[#parts + 1] = ("dd if=%q of=/dev/null bs=16M iflag=direct skip=%d count=%d status=none &"):format(path, k * q, k == 3 and count - 3 * q or q)
    end
    disk_s = timed(function() sh(table.concat(parts, " ") .. " wait") end)
  end
  disk_s = disk_s * file_bytes / (count * 16 * MiB) -- per byte of the file
  warm(path)
  local cache_s = timed(function() sh(("dd if=%q of=/dev/null bs=16M status=none"):format(path)) end)
  local disk = file_bytes / disk_s / 1e9
  local rows = { { ("%s, %d tensors (%s)"):format(bench.format_size(file_bytes), #shapes, how),
                   "cold GB/s", "warm GB/s", "cold / disk", "warm / link", "link GB/s", "read by (cold; warm)" } }
  rows[#rows + 1] = { "raw read (O_DIRECT; page cache by dd)", ("%.2f"):format(disk),
                      ("%.2f"):format(file_bytes / cache_s / 1e9), "1.00", "-", "-", raw_tool .. "; dd bs=16M" }
  -- the best of two cold runs and of three warm ones after a warm-up load (the first touches of
  -- fresh memory are the allocator's cost, not the file's), with these load options
  local function best_load(opts, devs)
    local result, reasons = {}, {}
    for _, mode in ipairs({ "cold", "warm" }) do
      local runs = mode == "cold" and 2 or 4
      for run = 1, runs do
        if mode == "cold" then drop(path) else warm(path) end
        local loaded
        local ok, err = pcall(function()
          local s = timed(function()
            loaded = xfer.load(path, opts)
            xfer.synchronize()
          end)
          if mode == "cold" or run > 1 then result[mode] = math.max(result[mode] or 0, file_bytes / s / 1e9) end
        end)
        if run == runs then reasons[#reasons + 1] = ok and xfer.file_route().reason:match("^[^;]*") or tostring(err) end
        for _, t in pairs(loaded or {}) do
          for _, part in ipairs(type(t) == "table" and t or { t }) do part:free() end
        end
        loaded = nil
        collectgarbage()
      end
      for _, dev in ipairs(devs) do xfer.empty_cache(dev) end
    end
    return result, table.concat(reasons, "; ")
  end
  local function load_row(label, result, l, reasons)
    rows[#rows + 1] = { label, B.fmt_gbps(result.cold), B.fmt_gbps(result.warm),
                        result.cold and ("%.2f"):format(result.cold / disk) or "-",
                        (l and result.warm) and ("%.2f"):format(result.warm / l) or "-",
                        l and ("%.1f"):format(l) or "-", reasons }
  end
  local links, gpus = {}, {}
  for _, dev in ipairs(xfer.devices()) do
    if dev.runtime ~= "remote" then
      links[dev.name] = link(dev, B.host)
      local result, reasons = best_load({ device = dev }, { dev })
      load_row("xfer.load -> " .. dev.name, result, links[dev.name], reasons)
      if dev.runtime == "cuda" then gpus[#gpus + 1] = dev end
    end
  end
  -- two GPUs (issue 39): the checkpoint placed tensor by tensor over both, and every tensor
  -- split in two along dimension 0 (tensor parallelism, as fastsafetensors loads it), beside
  -- the one-GPU load above; the link column is the two GPUs' links together
  if #gpus >= 2 then
    local pair = { gpus[1], gpus[2] }
    local both = (links[pair[1].name] or 0) + (links[pair[2].name] or 0)
    local k = 0
    local result, reasons = best_load({ device = function() k = k + 1 return pair[k % 2 + 1] end }, pair)
    load_row(("xfer.load -> %s, %s, tensor by tensor"):format(pair[1].name, pair[2].name), result, both, reasons)
    result, reasons = best_load({ shard = { dim = 0, devices = pair } }, pair)
    load_row(("xfer.load -> %s, %s, each tensor split (shard dim 0)"):format(pair[1].name, pair[2].name), result,
             both, reasons)
  end
  -- the others, in the same run
  local names = {}
  for _, dev in ipairs(xfer.devices()) do
    if dev.name == "host" or dev.runtime == "cuda" then names[#names + 1] = dev.name end
  end
  -- NIXL unpacked at XFER_NIXL_DIR: its POSIX plugin's own libraries beside it
  local nixl = os.getenv("XFER_NIXL_DIR")
  local ld = nixl and ("LD_LIBRARY_PATH=%q "):format(nixl .. "/.nixl_cu13.mesonpy.libs:" .. nixl .. "/nixl_cu13.libs") or ""
  local out = sh((ld .. "timeout 900 %s %s/bench_files.py %q %s"):format(os.getenv("XFER_PYTHON") or "python3", B.scripts_dir, path,
                                                                  table.concat(names, " ")))
  local others = {}
  for line in out:gmatch("[^\n]+") do
    local tool, mode, dev, gbps = line:match("^files (%S+) (%S+) (%S+) ([%d.]+)")
    if tool then
      local key = tool .. " -> " .. dev
      others[key] = others[key] or { order = #rows }
      others[key][mode] = tonumber(gbps)
    elseif line:match("^# files") then
      say(line)
    elseif line:match("Error") or line:match("Traceback") or line:match("rror:") then
      say("# files python: " .. line) -- what stopped a loader, said rather than dropped
    end
  end
  local keys = {}
  for k in pairs(others) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local o = others[k]
    local dev = k:match("-> (%S+)$")
    local l = links[dev]
    rows[#rows + 1] = { k, B.fmt_gbps(o.cold), B.fmt_gbps(o.warm), o.cold and ("%.2f"):format(o.cold / disk) or "-",
                        (l and o.warm) and ("%.2f"):format(o.warm / l) or "-", l and ("%.1f"):format(l) or "-", "" }
  end
  rows[#rows + 1] = { "xfer.save (host) / raw write (dd oflag=direct)", ("%.2f"):format(file_bytes / save_s / 1e9),
                      ("%.2f"):format(file_bytes / raw_write_s / 1e9),
                      ("%.2f save / raw"):format(raw_write_s / save_s), "-", "-", save_route:match("^[^;]*") }
  emit(rows)
  say("cold: dropped from the page cache before each run; warm: read once before; link: host -> device copy_from of 256 MiB; the save row's second column is dd's raw write")
  os.remove(path)
end
