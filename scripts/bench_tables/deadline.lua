-- scripts/bench_tables/deadline.lua -- the "deadline" table of scripts/bench.lua: how late a
-- remote deadline surfaces, and whether a healthy move ever misses one. A server on loopback
-- (xferlua --serve) over tcp and over shared memory; in each of --deadline-runs runs a
-- pipelined --pair-size move to it is started (to_async), the server is stopped (SIGSTOP)
-- a random 0-50 ms into it, and the time from the stop to the timeout error is taken: the
-- error is due `timeout` seconds after the server last answered, which is no later than the
-- stop, so (time taken - timeout) bounds the lateness from above. Then as many moves of
-- the same size to a running server with a deadline of 3 s, counting timeouts (there should
-- be none: a deadline is the time a peer may stay silent, not the time a move may take).
local xfer = require "xfer"
local U = require "ucx_helpers"

local TIMEOUT = 1

local function percentile(sorted, p)
  if #sorted == 0 then return 0 end
  return sorted[math.max(1, math.min(#sorted, math.ceil(p * #sorted)))]
end

return function(B)
  local emit, say = B.emit, B.say
  if not U.available() then
    say("\ndeadline: the remote runtime is unavailable here")
    return
  end
  local runs = B.deadline_runs or 20
  local n = B.pair_size
  local src = xfer.full({ n }, 7, { dtype = "u8" })
  local rows = { { "over UCX_TLS", "move", "runs", "timeout s", "late ms: min", "median", "p95", "max",
                   "healthy moves timed out" } }
  for _, tls in ipairs({ "tcp", "posix,sysv,self" }) do
    local late = {}
    for r = 1, runs do
      local url, pid, log = U.serve_here("UCX_TLS=" .. tls, "nodeD")
      if not url then
        U.stop(pid, log)
        error("deadline bench: no server came up over " .. tls)
      end
      local server = tonumber(U.run("pgrep -P " .. pid)) or pid
      local peer = xfer.connect(url, { timeout = TIMEOUT })
      local there = xfer.empty({ n }, { dtype = "u8", device = peer.devices[1] })
      there:copy_from(src) -- warm: the server's buffers are made, the lanes up
      local job = src:to_async(peer.devices[1])
      os.execute(("sleep %.3f"):format(math.random() * 0.05))
      os.execute("kill -STOP " .. server)
      local t0 = xfer.clock()
      local ok, e = pcall(job.wait, job)
      local took = xfer.clock() - t0
      os.execute("kill -CONT " .. server)
      if not ok and type(e) == "table" and e.code == "timeout" then
        late[#late + 1] = (took - TIMEOUT) * 1000
      elseif not ok then
        error(("deadline bench: run %d over %s failed otherwise: %s"):format(r, tls, tostring(e)))
      end -- done before the stop: nothing to measure
      peer:close()
      U.stop(pid, log)
    end
    -- healthy moves with a short deadline
    local url, pid, log = U.serve_here("UCX_TLS=" .. tls, "nodeE")
    local peer = xfer.connect(url, { timeout = 3 })
    local there = xfer.empty({ n }, { dtype = "u8", device = peer.devices[1] })
    local missed = 0
    for _ = 1, runs do
      local ok, e = pcall(there.copy_from, there, src)
      if not ok then
        if type(e) == "table" and e.code == "timeout" then missed = missed + 1 else error(tostring(e)) end
        peer:close()
        peer = xfer.connect(url, { timeout = 3 })
        there = xfer.empty({ n }, { dtype = "u8", device = peer.devices[1] })
      end
    end
    peer:close()
    U.stop(pid, log)
    table.sort(late)
    local median = percentile(late, 0.5)
    rows[#rows + 1] = { tls, ("host -> nodeD/host, %d MiB"):format(math.floor(n / 1048576)), #late, TIMEOUT,
                        ("%.0f"):format(late[1] or 0), ("%.0f"):format(median),
                        ("%.0f"):format(percentile(late, 0.95)), ("%.0f"):format(late[#late] or 0),
                        ("%d of %d"):format(missed, runs) }
  end
  say("\ndeadline: a server stopped mid-move; the timeout's lateness past its deadline (upper bound)")
  emit(rows)
end
