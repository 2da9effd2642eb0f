-- cli.lua -- what `xferlua --load` and `xferlua --serve` run (src/cli/xferlua.c calls them).
-- A user's mistake (a missing file, a bad URL, an empty token file) raises an xfer.Error,
-- which the executable prints as one line and exits 2 with; anything else is a bug of ours
-- and comes with its traceback.
local xfer = require "xfer"

local cli = {}

local function refuse(op, fmt, ...)
  error(xfer.error({ code = "invalid", op = op, message = fmt:format(...) }), 0)
end

-- The entries of a tensor file, or of every shard an index names (in the index's name order),
-- its format and its size in bytes.
local function entries_of(file)
  if not file:match("%.index%.json$") then
    local f = xfer.open(file)
    local entries, format, size = f:entries(), f.format, f.size
    f:close()
    return entries, format, size, nil
  end
  local map = xfer.read_index(file)
  local dir = file:match("^(.*)/[^/]*$") or "."
  local shards, seen = {}, {}
  for _, shard in pairs(map) do
    if not seen[shard] then seen[shard], shards[#shards + 1] = true, shard end
  end
  table.sort(shards)
  local entries, size = {}, 0
  for _, shard in ipairs(shards) do
    local f = xfer.open(dir .. "/" .. shard)
    for _, e in ipairs(f:entries()) do
      if map[e.name] == shard then entries[#entries + 1] = e end
    end
    size = size + f.size
    f:close()
  end
  table.sort(entries, function(a, b) return a.name < b.name end)
  return entries, "safetensors index", size, #shards
end

--- --load FILE [--device DEV] [--json]: every tensor loaded; the names, shapes and speed said.
function cli.load(file, device, json)
  local dev = xfer.device(device or "host")
  local entries, format, size, shards = entries_of(file)
  local t0 = xfer.clock()
  local loaded = xfer.load(file, { device = dev })
  if format == "npy" then loaded = { [""] = loaded } end
  xfer.synchronize()
  local seconds = xfer.clock() - t0
  local route = xfer.file_route()
  local bytes = 0
  for _, e in ipairs(entries) do bytes = bytes + e.nbytes end
  if json then
    local tensors = {}
    for i, e in ipairs(entries) do tensors[i] = { name = e.name, dtype = e.dtype, shape = e.shape, bytes = e.nbytes } end
    print(xfer.json({ file = file, format = format, shards = shards, device = dev.name, tensors = tensors, bytes = bytes,
                      seconds = seconds, gbps = bytes / seconds / 1e9, direct = route.direct,
                      engine = route.engine, reason = route.reason }))
  else
    print(("%s: %s%s, %d tensors, %.3f GB"):format(file, format, shards and
      (" of %d shard%s"):format(shards, shards == 1 and "" or "s") or "", #entries, size / 1e9))
    for _, e in ipairs(entries) do
      print(("  %-40s %s[%s]"):format(e.name == "" and "(the array)" or e.name, e.dtype, table.concat(e.shape, ",")))
    end
    print(("read by %s"):format(route.reason))
    if route.gds_reason then print(route.gds_reason) end
    print(("loaded %d tensors, %.3f GB onto %s in %.3f s: %.2f GB/s"):format(#entries, bytes / 1e9,
      dev.name, seconds, bytes / seconds / 1e9))
  end
  for _, t in pairs(loaded) do t:free() end
end

--- --serve URL [--name N] [--token-file F] [--client-memory SIZE]: this machine's devices,
--- served until the process is stopped (Ctrl-C: the executable stops the loop within a tenth of
--- a second).
function cli.serve(url, name, token_file, client_memory)
  local quota
  if client_memory then
    local ok, bytes = pcall(require("xfer.bench").parse_size, client_memory)
    if not ok or bytes == 0 then
      refuse("serve", "--client-memory %s: a size of bytes such as 512M or 4G, more than 0", client_memory)
    end
    quota = bytes
  end
  local token
  if token_file then
    local f, why = io.open(token_file, "rb")
    if not f then refuse("serve", "--token-file: %s", why) end
    local text = f:read("*a") or ""
    f:close()
    token = text:gsub("[\r\n]+$", "")
    if token == "" then
      refuse("serve", "--token-file %s is empty: a token of 1 to 255 bytes is needed (without " ..
             "--token-file the server admits anyone)", token_file)
    end
  end
  local l = xfer.listen(url, { name = name, token = token, client_memory = quota })
  local names = {}
  for _, d in ipairs(xfer.devices()) do if d.runtime ~= "remote" then names[#names + 1] = d.name end end
  io.stderr:write(("xferlua: serving %s on %s as %s%s%s\n"):format(table.concat(names, ", "), l.url,
    name or "node", token and " (token required)" or "",
    quota and (" (at most %s bytes a client)"):format(client_memory) or ""))
  for _, r in ipairs(xfer.runtimes()) do
    if r.reason and r.reason ~= "" and r.name ~= "remote" then
      io.stderr:write(("xferlua: %s%s: %s\n"):format(r.name, r.available and "" or " unavailable", r.reason))
    end
  end
  while true do l:progress(0.1) end
end

return cli
