-- scripts/bench_tables/remote.lua -- the "remote" table of scripts/bench.lua: moves to and from
-- an xferlua server on this machine (xferlua --serve on loopback, over tcp and over shared
-- memory) beside ucx_perftest on the same transport in the same run, then host -> each
-- remote device and back; or, with --remote URL, a server of another machine. The CUDA rows
-- are remote_cuda.lua's.
local xfer = require "xfer"
local bench = require "xfer.bench"
local U = require "ucx_helpers"

return function(B)
  local emit, say, pair_size = B.emit, B.say, B.pair_size
  if not U.available() then
    say("\nremote: the remote runtime is unavailable here")
    return
  end
  local ffi = require "ffi"
  pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
  local n = pair_size
  -- perftest's endpoints handle no peer errors unless -e; xferlua's always do (a lost peer
  -- is an error, not a hang), and with them UCX 1.13 picks other lanes (shared memory: no
  -- cma; tcp: no rma lanes), so both are beside it
  local rows = { { "over UCX_TLS", "move", "size", "request", "in flight", "xferlua GB/s",
                   "ucx_perftest am_bw GB/s", "am_bw -e GB/s", "tag_bw GB/s", "xferlua / am_bw",
                   "xferlua / am_bw -e" } }
  local lanes_seen = {}
  local configured_depth = xfer.config().remote_depth
  local host_depths = B.remote_depths or { configured_depth }
  local configured_chunk = xfer.config().remote_chunk
  local host_chunks = B.remote_chunks or { configured_chunk }
  -- moves to and back from the devices of a peer (its host alone, or all but its host):
  -- {move, seconds, is the peer's host, request size}
  local function time_peer(peer, name, host_only)
    local src = xfer.full({ n }, 3, { dtype = "u8" })
    local back = xfer.empty({ n }, { dtype = "u8" })
    local timed = {}
    for _, dev in ipairs(peer.devices) do
      local is_host = dev.name == name .. "/host"
      if is_host ~= host_only then goto next_device end
      local there = xfer.empty({ n }, { dtype = "u8", device = dev })
      local reps = is_host and 5 or 3
      for _, depth in ipairs(host_depths) do
        for _, chunk in ipairs(host_chunks) do
          xfer.config({ remote_chunk = chunk, remote_depth = depth })
          local to_s = bench.time(function() there:copy_from(src) end, reps)
          local back_s = bench.time(function() back:copy_from(there) end, reps)
          assert(back:equals(src), "remote bench: the bytes came back wrong from " .. dev.name)
          timed[#timed + 1] = { "host -> " .. dev.name, to_s, is_host, chunk, depth }
          timed[#timed + 1] = { dev.name .. " -> host", back_s, is_host, chunk, depth }
        end
      end
      xfer.config({ remote_chunk = configured_chunk, remote_depth = configured_depth })
      there:free()
      ::next_device::
    end
    return timed
  end
  -- The host rows beside ucx_perftest, in three rounds that take turns, the fastest of each
  -- kept: the machine's drift (both processes share its cores with whatever else runs) hits
  -- both alike, where one run of each differed by 10-20% from one call to the next.
  local ROUNDS = 3
  local function time_host_rounds(peer, name, tls)
    local best, perf = nil, {}
    for _ = 1, ROUNDS do
      local timed = time_peer(peer, name, true)
      if not best then best = timed
      else for i, row in ipairs(timed) do best[i][2] = math.min(best[i][2], row[2]) end end
      if tls then
        local got = { am = U.perftest(tls, "ucp_am_bw", false, n), am_e = U.perftest(tls, "ucp_am_bw", true, n),
                      tag = U.perftest(tls, "tag_bw", false, n) }
        for k, v in pairs(got) do perf[k] = math.max(perf[k] or 0, v) end
      end
    end
    return best, perf
  end
  local function add_rows(tls, timed, perf)
    perf = perf or {}
    for _, row in ipairs(timed) do
      local gbps = n / row[2] / 1e9
      local function vs(v) return row[3] and v and ("%.2f"):format(v) or (row[3] and "not run" or "-") end
      local function ratio(v) return row[3] and v and ("%.2fx"):format(gbps / v) or "-" end
      rows[#rows + 1] = { tls, row[1], bench.format_size(n), bench.format_size(row[4]), tostring(row[5]),
                          ("%.2f"):format(gbps), vs(perf.am), vs(perf.am_e), vs(perf.tag),
                          ratio(perf.am), ratio(perf.am_e) }
    end
  end
  if B.remote_url then -- a server of another machine (xferlua --serve there): UCX_TLS as set here
    local peer = xfer.connect(B.remote_url, { timeout = 60, token = B.remote_token })
    local tls = os.getenv("UCX_TLS") or "(UCX's choice)"
    lanes_seen[#lanes_seen + 1] = { tls, peer.transports }
    add_rows(tls, (time_host_rounds(peer, peer.name, nil)))
    add_rows(tls, time_peer(peer, peer.name, false))
    peer:close()
    rows[1][7] = "ucx_perftest am_bw GB/s (run it between the hosts)"
  end
  for _, tls in ipairs(B.remote_url and {} or { "tcp", "shm,tcp" }) do
    local url, pid, log = U.serve_here("UCX_TLS=" .. tls, "bench")
    if url then
      ffi.C.setenv("UCX_TLS", tls, 1) -- read when the peer's UCX context starts
      local peer = xfer.connect(url, { timeout = 60 })
      lanes_seen[#lanes_seen + 1] = { tls, peer.transports }
      local host_rows, perf = time_host_rounds(peer, "bench", tls)
      local device_rows = time_peer(peer, "bench", false)
      peer:close()
      add_rows(tls, host_rows, perf)
      add_rows(tls, device_rows)
    else
      rows[#rows + 1] = { tls, "no server came up", "", "", "", "", "", "", "", "", "" }
    end
    os.execute("kill " .. tostring(pid) .. " 2>/dev/null; pkill -P " .. tostring(pid) .. " 2>/dev/null")
    os.remove(log)
  end
  emit(rows)
  for _, seen in ipairs(lanes_seen) do
    say(("UCX_TLS=%s: xferlua's lanes %s"):format(seen[1], table.concat(seen[2], "; ")))
  end
end
