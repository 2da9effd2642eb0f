-- examples/remote.lua -- another machine's devices, here played by a second process on this
-- one: `xferlua --serve` serves its devices, xfer.connect makes them ours as "nodeB/...",
-- tensors move there and back like any other, and a server that stops answering is an
-- error value at the deadline (never a hang) that the script handles.
--   xferlua examples/remote.lua
local xfer = require "xfer"

local remote_rt
for _, r in ipairs(xfer.runtimes()) do if r.name == "remote" then remote_rt = r end end
if not remote_rt.available then
  print("the remote runtime is unavailable here: " .. remote_rt.reason)
  return
end

-- the server: this very program, serving on a loopback port (a real one runs on nodeB)
local self = arg and arg[-1] or "xferlua"
local log = os.tmpname()
-- port 0: the system picks a free one; the server's first line says which
local pid = io.popen(("timeout 60 %s --serve ucx://127.0.0.1:0 --name nodeB >%s 2>&1 & echo $!"):format(self, log)):read("*n")
local function server_says()
  local f = io.open(log)
  local text = f and f:read("*a") or ""
  if f then f:close() end
  return text
end
for _ = 1, 200 do
  if server_says():find("serving", 1, true) then break end
  os.execute("sleep 0.05")
end
local serving = server_says():match("xferlua: (serving [^\n]*)") -- (then what it left out)
print("the server: " .. tostring(serving))
local url = serving and serving:match(" on (ucx://%S+)")
if not url then error("the server did not come up: " .. server_says(), 0) end

local peer = xfer.connect(url, { timeout = 2 })
print(("connected to %s: %d devices"):format(peer.name, #peer.devices))
print("over " .. table.concat(peer.transports, "; ")) -- the lanes UCX chose
-- what UCX moves in place on each side ("host cuda" with a CUDA-enabled UCX over cuda_ipc: the
-- direct path, cuda:0 -> nodeB/cuda:0 with no host memory between)
print(("memory moved in place: here %s, there %s"):format(table.concat(peer.memory.here, " "),
                                                        table.concat(peer.memory.there, " ")))
local t = xfer.arange(1000000, { dtype = "f32" })
for _, dev in ipairs(peer.devices) do
  local there = t:to(dev)
  local back = there:to("host")
  print(("%-18s %s, back equal: %s"):format(dev.name, there:summary(), tostring(back:equals(t))))
end

-- the server stops answering: the move fails at the deadline, as a value
local r = t:to(peer.devices[1])
os.execute("pkill -STOP -P " .. pid) -- (the xferlua under `timeout`)
local ok, e = pcall(r.to, r, "host")
print(("a stopped server: %s after the deadline -- %s"):format(e.code, e.message))
print(("its tensors now: %s"):format(select(2, pcall(r.tobytes, r)).code))
os.execute("pkill -CONT -P " .. pid .. "; pkill -P " .. pid .. "; kill " .. pid .. " 2>/dev/null")
os.remove(log)
-- the script goes on: the data was here all along
print(("the local tensor is intact: %s"):format(tostring(t:equals(xfer.arange(1000000, { dtype = "f32" })))))
