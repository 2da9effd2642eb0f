-- scripts/bench_tables/remote_cuda.lua -- the CUDA rows of the "remote" table of scripts/bench.lua.
-- CUDA memory to a server's CUDA device and back, UCX_TLS unset (UCX's choice: cuda_ipc
-- where its build has it), by the default path (direct where it applies) and staged,
-- beside what a PyTorch or CuPy user does between two processes of one machine: copy the
-- other's buffer opened through CUDA IPC (scripts/bench_frameworks.py --ipc)
-- Where CUDA works and the server is this machine's (no --remote URL).
local xfer = require "xfer"
local bench = require "xfer.bench"
local ffi = require "ffi"
local U = require "ucx_helpers"

return function(B)
  local emit, say, n = B.emit, B.say, B.pair_size
  local has_cuda = false
  for _, d in ipairs(xfer.devices()) do if d.name == "cuda:0" then has_cuda = true end end
  if not (U.available() and has_cuda) or B.remote_url then return end
  pcall(ffi.cdef, "int unsetenv(const char *name);")
  local anchors = {}
  local py = U.run(("timeout 300 python3 %s/bench_frameworks.py --ipc %d"):format(
    B.scripts_dir, n))
  for name, gbps in py:gmatch("ipc (%a+): another process's GPU buffer%s+%d+%s+([%d.]+) GB/s") do
    anchors[name] = tonumber(gbps)
  end
  for line in py:gmatch("# ipc [^\n]*") do say(line) end
  -- and ucx_perftest of the UCX xferlua loads (XFER_UCX_LIBRARY's, beside it in ../bin),
  -- CUDA memory at both ends, peer error handling on (-e) as xferlua's endpoints have it
  local lib = os.getenv("XFER_UCX_LIBRARY")
  local libdir = lib and lib:match("^(.*)/[^/]*$")
  local perf_bin = libdir and libdir .. "/../bin/ucx_perftest" or "ucx_perftest"
  local perf_env = libdir and ("env -u UCX_TLS LD_LIBRARY_PATH=%s"):format(libdir) or "env -u UCX_TLS"
  for _ = 1, 3 do
    local pport = 20000 + math.random(0, 30000)
    U.run(("%s timeout 120 %s -p %d -e >/dev/null 2>&1 &"):format(perf_env, perf_bin, pport))
    os.execute("sleep 1")
    local out = U.run(("%s timeout 120 %s 127.0.0.1 -p %d -e -t ucp_am_bw -m cuda,cuda -s %d -n 20"):format(perf_env, perf_bin, pport, n))
    anchors.perftest = U.perftest_gbps(out)
    if anchors.perftest then break end
  end
  local url, pid, log = U.serve_here("env -u UCX_TLS", "benchc")
  local crows = { { "move", "size", "path", "xferlua GB/s", "ucx_perftest -e cuda GB/s", "PyTorch IPC GB/s",
                    "CuPy IPC GB/s", "xferlua / perftest", "xferlua / CuPy" } }
  if url then
    ffi.C.unsetenv("UCX_TLS")
    local peer = xfer.connect(url, { timeout = 60 })
    say(("UCX_TLS unset: lanes %s; memory UCX moves in place: here %s, there %s"):format(
      table.concat(peer.transports, "; "), table.concat(peer.memory.here, " "), table.concat(peer.memory.there, " ")))
    local src = xfer.full({ n }, 5, { dtype = "u8", device = "cuda:0" })
    local back = xfer.empty({ n }, { dtype = "u8", device = "cuda:0" })
    for _, dev in ipairs(peer.devices) do
      if dev.name:match("/cuda:%d+$") then
        local there = xfer.empty({ n }, { dtype = "u8", device = dev })
        local paths = { xfer.plan(src, dev).path }
        if paths[1] ~= "staged" then paths[2] = "staged" end
        for _, path in ipairs(paths) do
          local to_s = bench.time(function() there:copy_from(src, { via = path }) end, 5)
          local back_s = bench.time(function() back:copy_from(there, { via = path }) end, 5)
          assert(back:equals(src), "remote bench: the bytes came back wrong from " .. dev.name)
          for _, m in ipairs({ { "cuda:0 -> " .. dev.name, to_s }, { dev.name .. " -> cuda:0", back_s } }) do
            local gbps = n / m[2] / 1e9
            local function a(v) return v and ("%.1f"):format(v) or "not run" end
            local function ratio(v) return v and ("%.2fx"):format(gbps / v) or "-" end
            crows[#crows + 1] = { m[1], bench.format_size(n), path, ("%.2f"):format(gbps), a(anchors.perftest),
                                  a(anchors.PyTorch), a(anchors.CuPy), ratio(anchors.perftest), ratio(anchors.CuPy) }
          end
        end
        there:free()
      end
    end
    peer:close()
  else
    crows[#crows + 1] = { "no server came up", "", "", "", "", "", "", "", "" }
  end
  U.stop(pid, log)
  emit(crows)
end
