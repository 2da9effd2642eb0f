-- Torture scenario: remote devices -- a server process on loopback (started once, for every
-- run), connected anew in each run: a tensor to every remote device, back to every local
-- one, a copy between two of the server's devices, a remote tensor's copy_from and free.
-- A failed remote call loses the peer or fails that move; the run stops using the peer at
-- its first error, and closes it (what a script does), so one failed call surfaces once.
-- Requests of 16 KiB (xfer.config remote_chunk): each move is five, two in flight at a time,
-- so a failure meets a request with another on its way. Where UCX moves CUDA memory in place
-- (a CUDA-enabled UCX, cuda_ipc), CUDA memory to the server's CUDA device and back too: the
-- direct path, in requests of 16 KiB (remote_device_chunk).
local xfer = require "xfer"

local server -- {url, pid}: one for the whole scenario
local saved_chunk, saved_device_chunk -- the settings before the scenario changed them
local function start()
  if server then return server end
  local log = os.tmpname()
  local self = arg and arg[-1] or "xferlua"
  local p = io.popen(("timeout 900 %s --serve ucx://127.0.0.1:0 --name tort >%s 2>&1 & echo $!"):format(self, log))
  local pid = p:read("*n")
  p:close()
  -- 60 s: the server opens every runtime first, and on the GPU machine, 85 torture processes
  -- on 16 cores beside it, that took over 10 s (2026-12-05, H100: "did not come up" at 10 s)
  local text = ""
  for _ = 1, 1200 do
    local f = io.open(log)
    text = f and f:read("*a") or ""
    if f then f:close() end
    local url = text:match("serving .- on (ucx://%S+)")
    if url then
      server = { url = url, pid = pid, log = log }
      return server
    end
    local alive = os.execute(("kill -0 %d 2>/dev/null"):format(pid)) -- (LuaJIT: 0, Lua 5.2: true)
    if alive ~= 0 and alive ~= true then break end -- it ended
    os.execute("sleep 0.05")
  end
  error(("the torture server did not come up; it printed: %s"):format(text ~= "" and text or "(nothing)"))
end

return {
  name = "remote",
  available = function()
    for _, r in ipairs(xfer.runtimes()) do
      if r.name == "remote" then return r.available, r.reason end
    end
    return false, "no remote runtime"
  end,
  run = function(T)
    local s = start()
    saved_chunk = saved_chunk or xfer.config().remote_chunk
    saved_device_chunk = saved_device_chunk or xfer.config().remote_device_chunk
    xfer.config({ remote_chunk = 16384, remote_device_chunk = 16384 })
    -- connect has no device to blame yet: its failure is checked here -- an injected one,
    -- told as the peer's loss, a timeout, or (the first message lost) unreachable
    local ok, peer = pcall(xfer.connect, s.url, { timeout = 10 })
    if not ok then
      local told = { peer_lost = true, timeout = true, unreachable = true }
      if not (xfer.is_error(peer) and peer.injected and told[peer.code]) then
        T.problems[#T.problems + 1] = "connect failed otherwise than by the injected fault: " .. tostring(peer)
      end
      return
    end
    local function done() peer:close() end
    local function failed() return #T.errors > 0 end
    local n = 65536 + 11
    local bytes = T.bytes(n, 9)
    local made, src = T.try("make on host", xfer.tensor, bytes, { dtype = "u8" })
    if not made then return done() end
    T.source(src)
    local there = {}
    for _, dev in ipairs(peer.devices) do
      local moved, r = T.move(T.host, dev, "to " .. dev.name, src.to, src, dev)
      if not moved then return done() end
      T.expect(bytes, r, "host -> " .. dev.name)
      if failed() then return done() end
      there[#there + 1] = r
    end
    -- back to every local device, from the first remote one
    for _, dev in ipairs(T.devices) do
      if dev.runtime ~= "remote" then
        local moved, back = T.move(there[1].device, dev, "back to " .. dev.name, there[1].to, there[1], dev)
        if not moved then return done() end
        T.expect(bytes, back, there[1].device.name .. " -> " .. dev.name)
        if failed() then return done() end
      end
    end
    -- CUDA memory to the server's CUDA devices and back: the direct path where UCX moves it
    for _, dev in ipairs(T.devices) do
      if dev.runtime == "cuda" then
        for _, r in ipairs(there) do
          if r.device.name:match("/cuda:%d+$") then -- (direct, or staged where UCX cannot)
            local put, c = T.move(T.host, dev, "to " .. dev.name, src.to, src, dev)
            if not put then return done() end
            local moved, d = T.move(dev, r.device, "cuda to " .. r.device.name, c.to, c, r.device)
            if not moved then return done() end
            T.expect(bytes, d, dev.name .. " -> " .. r.device.name)
            if failed() then return done() end
            local back_ok, e = T.move(r.device, dev, "cuda back to " .. dev.name, d.to, d, dev)
            if not back_ok then return done() end
            T.expect(bytes, e, r.device.name .. " -> " .. dev.name)
            if failed() then return done() end
          end
        end
      end
    end
    -- between two of the server's devices (there), and into a remote tensor made first
    if #there >= 2 then
      local a, b = there[1], there[#there]
      local moved, c = T.move(a.device, b.device, "within the server", a.to, a, b.device)
      if not moved then return done() end
      T.expect(bytes, c, "within " .. s.url)
      if failed() then return done() end
      local z_ok, z = T.try("zeros there", xfer.zeros, { n }, { dtype = "u8", device = a.device })
      if not z_ok then return done() end
      local copied = T.move(b.device, a.device, "copy_from there", z.copy_from, z, b)
      if not copied then return done() end
      T.expect(bytes, z, "copy_from within the server")
    end
    if failed() then return done() end
    -- a batch to the first remote device and back: blocks split across requests of 16 KiB,
    -- two in flight (every request's send, answer and the server's batch are fallible calls)
    local BLOCK, SRC_BLOCKS, DST_BLOCKS = 6000, { 3, 0, 9, 5, 1 }, { 8, 2, 0, 6, 4 }
    local z_ok, z = T.try("zeros there for blocks", xfer.zeros, { n }, { dtype = "u8", device = there[1].device })
    if not z_ok then return done() end
    if not T.move(T.host, there[1].device, "blocks to " .. there[1].device.name, z.copy_blocks, z, src,
                  SRC_BLOCKS, DST_BLOCKS, BLOCK) then return done() end
    local back_ok, back = T.try("zeros here for blocks", xfer.zeros, { n }, { dtype = "u8" })
    if not back_ok then return done() end
    if not T.move(there[1].device, T.host, "blocks back from " .. there[1].device.name, back.copy_blocks,
                  back, z, DST_BLOCKS, SRC_BLOCKS, BLOCK) then return done() end
    local parts = {}
    for k = 0, math.floor(n / BLOCK) - 1 do parts[k + 1] = string.rep("\0", BLOCK) end
    for _, b in ipairs(SRC_BLOCKS) do parts[b + 1] = bytes:sub(b * BLOCK + 1, (b + 1) * BLOCK) end
    local want = table.concat(parts) .. string.rep("\0", n - #table.concat(parts))
    T.expect(want, back, "blocks host -> " .. there[1].device.name .. " -> host")
    z:free()
    for _, r in ipairs(there) do r:free() end
    done()
  end,
  finish = function()
    if saved_chunk then xfer.config({ remote_chunk = saved_chunk, remote_device_chunk = saved_device_chunk }) end
    if server then os.execute("kill " .. server.pid .. " 2>/dev/null; pkill -P " .. server.pid .. " 2>/dev/null") end
    if server then os.remove(server.log) end
  end,
}
