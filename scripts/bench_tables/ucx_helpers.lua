-- scripts/bench_tables/ucx_helpers.lua -- what the remote tables share: running a command,
-- an xferlua server on loopback, and ucx_perftest's figure for one transport.
local xfer = require "xfer"

local M = {}

function M.run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  return out
end

-- the xferlua binary running this benchmark (a server is another process of it)
M.self = arg and arg[-1] or "xferlua"

math.randomseed(os.time() + math.floor(xfer.clock() * 1e6) % 100000)

-- An xferlua server on loopback, started with `env` ("UCX_TLS=tcp"): its url (nil when it did
-- not come up), pid and log; port 0: the system picks a free port, and its line says which.
function M.serve_here(env, name)
  local log = os.tmpname()
  local pid = tonumber(M.run(("%s timeout 300 %s --serve ucx://127.0.0.1:0 --name %s >%s 2>&1 & echo $!")
                             :format(env, M.self, name, log)))
  for _ = 1, 100 do
    local f = io.open(log)
    local text = f and f:read("*a") or ""
    if f then f:close() end
    local url = text:match("serving .- on (ucx://%S+)")
    if url then return url, pid, log end
    os.execute("sleep 0.05")
  end
  return nil, pid, log
end

function M.stop(pid, log)
  os.execute("kill " .. tostring(pid) .. " 2>/dev/null; pkill -P " .. tostring(pid) .. " 2>/dev/null")
  os.remove(log)
end

-- ucx_perftest's final bandwidth line in GB/s (it prints MB/s of 2^20 bytes), or nil
function M.perftest_gbps(out)
  local mbs = tonumber(out:match("Final:%s+%d+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+([%d.]+)"))
  return mbs and mbs * 1048576 / 1e9
end

-- ucx_perftest on one transport, loopback: a server, then its client, `n` bytes a message;
-- `errors`: with -e (peer error handling, as xferlua's endpoints have). GB/s or nil.
function M.perftest(tls, test, errors, n)
  local e = errors and " -e" or ""
  for _ = 1, 3 do -- (a server slow to come up, or a port taken: again, on another port)
    local pport = 20000 + math.random(0, 30000)
    M.run(("UCX_TLS=%s timeout 120 ucx_perftest -p %d%s >/dev/null 2>&1 &"):format(tls, pport, e))
    os.execute("sleep 0.5")
    local gbps = M.perftest_gbps(M.run(("UCX_TLS=%s timeout 120 ucx_perftest 127.0.0.1 -p %d%s -t %s -s %d -n 10")
                                       :format(tls, pport, e, test, n)))
    if gbps then return gbps end
  end
end

-- whether the remote runtime works here
function M.available()
  for _, r in ipairs(xfer.runtimes()) do if r.name == "remote" and r.available then return true end end
  return false
end

return M
