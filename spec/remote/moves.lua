-- spec/remote/moves.lua URL [TOKEN]: byte-exact moves between every local device and every
-- device of the server at URL, both ways, at 0, 1, odd and 64 MiB, by to, copy_from and
-- to_async. Run by spec/remote_spec.lua in a process of its own (UCX reads UCX_TLS when it
-- starts: one process per transport). Prints the transports UCX chose ("transports: sysv/memory:
-- am ...; tcp/lo: rma_bw") and the memory UCX moves in place on each side ("memory: here host
-- cuda; there host cuda"), one line per failure, the paths the moves took ("paths: direct 40,
-- host 120, staged 60"), then "moves: N checked, N failed"; exits 1 on any failure.
local xfer = require "xfer"
local url, token = ...
local peer = xfer.connect(url, { timeout = 20, token = token })
print("transports: " .. table.concat(peer.transports, "; "))
print(("memory: here %s; there %s"):format(table.concat(peer.memory.here, " "), table.concat(peer.memory.there, " ")))
local took = {} -- path -> moves that took it
local function tally(src, dst)
  local path = xfer.plan(src, dst).path
  took[path] = (took[path] or 0) + 1
end

local checked, failed = 0, 0
local function check(ok, what)
  checked = checked + 1
  if not ok then
    failed = failed + 1
    print("FAILED: " .. what)
  end
end

local function pattern(n, seed)
  local parts = {}
  local period = {}
  for i = 0, 250 do period[i + 1] = string.char((i * 37 + seed) % 251) end
  local block = table.concat(period)
  for i = 1, math.ceil(n / 251) do parts[i] = block end
  return table.concat(parts):sub(1, n)
end

local locals = {}
for _, d in ipairs(xfer.devices()) do
  if d.runtime ~= "remote" then locals[#locals + 1] = d end
end
for _, n in ipairs({ 0, 1, 4099, 64 * 1024 * 1024 }) do
  local bytes = pattern(n, n % 7)
  for _, a in ipairs(locals) do
    for _, r in ipairs(peer.devices) do
      -- 64 MiB: fewer pairs (host at one end, or CUDA memory UCX moves in place: many requests)
      local direct = a.runtime == "cuda" and xfer.plan(xfer.empty({ 1 }, { device = a }), r).path == "direct"
      if n < 1024 * 1024 or a.runtime == "host" or r.name:match("/host$") or direct then
        local what = ("%d bytes %s -> %s"):format(n, a.name, r.name)
        local src = xfer.tensor(bytes, { dtype = "u8", device = a })
        tally(src, r)
        local there = src:to(r)
        check(there.device == r and there:tobytes() == bytes, what .. " (to)")
        tally(there, a)
        local back = there:to(a)
        check(back:tobytes() == bytes, what .. " and back (to)")
        local into = xfer.zeros({ n }, { dtype = "u8", device = r })
        into:copy_from(src)
        check(into:tobytes() == bytes, what .. " (copy_from into the remote)")
        local home = xfer.zeros({ n }, { dtype = "u8", device = a })
        home:copy_from(into)
        check(home:tobytes() == bytes, what .. " and back (copy_from out of the remote)")
        local job = src:to_async(r)
        check(job:wait():tobytes() == bytes, what .. " (to_async)")
        for _, t in ipairs({ src, there, back, into, home }) do t:free() end
      end
    end
  end
end
peer:close()
local paths = {}
for path, n in pairs(took) do paths[#paths + 1] = path .. " " .. n end
table.sort(paths)
print("paths: " .. table.concat(paths, ", "))
print(("moves: %d checked, %d failed"):format(checked, failed))
os.exit(failed == 0 and 0 or 1, true) -- closing the state frees what it holds (LeakSanitizer)
