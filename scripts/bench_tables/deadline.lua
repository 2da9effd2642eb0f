-- scripts/bench_tables/deadline.lua -- the "deadline" table of scripts/bench.lua: how late a
-- remote deadline surfaces, and whether a healthy move ever misses one. A server on loopback
-- (xferlua --serve) over tcp and over shared memory; a request is due `timeout` seconds after
-- it was sent or after the server last answered, the later. In each of --deadline-runs runs:
--   stopped first: the server is stopped (SIGSTOP), then a pipelined --pair-size move to it
--   starts (to_async): every request is sent after the stop, so each is due no earlier than
--   the move's start + timeout, and (time from the start to the error - timeout) bounds the
--   lateness from above;
--   stopped mid-move: the move starts, the server is stopped 0-50 ms into it; the error is due
--   `timeout` after the last answer, no later than the stop, so (time from the stop to the
--   error - timeout) bounds the lateness from below (negative: due before stop + timeout).
-- Then as many moves of the same size to a running server with a deadline of 3 s, counting
-- timeouts (there should be none: a deadline is the time a peer may stay silent, not the
-- time a move may take).
local xfer = require "xfer"
local U = require "ucx_helpers"

local TIMEOUT = 1

local function percentile(sorted, p)
  if #sorted == 0 then return nil end
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

  -- One run: a server, a warm peer, the move with the server stopped before it (mid nil) or
  -- `mid` seconds into it; the milliseconds past the timeout (nil: done before the stop).
  local function one(tls, mid)
    local url, pid, log = U.serve_here("UCX_TLS=" .. tls, "nodeD")
    if not url then
      U.stop(pid, log)
      error("deadline bench: no server came up over " .. tls)
    end
    local server = tonumber(U.run("pgrep -P " .. pid)) or pid
    local peer = xfer.connect(url, { timeout = 10 })
    local there = xfer.empty({ n }, { dtype = "u8", device = peer.devices[1] })
    there:copy_from(src) -- warm: the server's buffers made, the lanes up
    there:free()
    peer:close()
    peer = xfer.connect(url, { timeout = TIMEOUT })
    local t0, job
    if mid then
      job = src:to_async(peer.devices[1])
      os.execute(("sleep %.3f"):format(mid))
      os.execute("kill -STOP " .. server)
      t0 = xfer.clock()
    else
      os.execute("kill -STOP " .. server)
      t0 = xfer.clock()
      job = src:to_async(peer.devices[1])
    end
    local ok, e = pcall(job.wait, job)
    local took = xfer.clock() - t0
    os.execute("kill -CONT " .. server)
    peer:close()
    U.stop(pid, log)
    job, there, peer = nil, nil, nil
    collectgarbage() -- the lost peer's devices give their places in the context back
    if ok then return nil end
    if type(e) ~= "table" or e.code ~= "timeout" then
      error(("deadline bench: a move over %s failed otherwise: %s"):format(tls, tostring(e)))
    end
    return (took - TIMEOUT) * 1000
  end

  -- Healthy moves with a short deadline: how many time out.
  local function healthy(tls)
    local url, pid, log = U.serve_here("UCX_TLS=" .. tls, "nodeE")
    local peer = xfer.connect(url, { timeout = 3 })
    local there = xfer.empty({ n }, { dtype = "u8", device = peer.devices[1] })
    local missed = 0
    for _ = 1, runs do
      local ok, e = pcall(there.copy_from, there, src)
      if not ok then
        if type(e) ~= "table" or e.code ~= "timeout" then error(tostring(e)) end
        missed = missed + 1
        peer:close()
        peer = xfer.connect(url, { timeout = 3 })
        there = xfer.empty({ n }, { dtype = "u8", device = peer.devices[1] })
      end
    end
    peer:close()
    U.stop(pid, log)
    return missed
  end

  local function ms(v) return v and ("%.0f"):format(v) or "-" end
  local rows = { { "over UCX_TLS", "move", "runs", "timeout s", "stopped first: late ms, min", "median", "p95",
                   "max (upper bound)", "stopped mid-move: median", "max (lower bound)", "healthy moves timed out" } }
  for _, tls in ipairs({ "tcp", "shm,tcp" }) do
    local first, mid = {}, {}
    for _ = 1, runs do
      first[#first + 1] = one(tls, nil)
      mid[#mid + 1] = one(tls, math.random() * 0.05)
    end
    table.sort(first)
    table.sort(mid)
    rows[#rows + 1] = { tls, ("host -> nodeD/host, %d MiB"):format(math.floor(n / 1048576)), runs, TIMEOUT,
                        ms(first[1]), ms(percentile(first, 0.5)), ms(percentile(first, 0.95)), ms(first[#first]),
                        ms(percentile(mid, 0.5)), ms(mid[#mid]), ("%d of %d"):format(healthy(tls), runs) }
  end
  say("\ndeadline: a server stopped before and during a pipelined move; how late its timeout came")
  emit(rows)
end
