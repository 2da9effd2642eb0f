-- spec/support/batch_faults.lua -- run by combinations_spec in a fresh xferlua, with the
-- environment it is given (XFER_CACHE=0, XFER_VULKAN_NO_MAP=1): on every pair of devices, a
-- move_many and a copy_many of tensors of several sizes (empty ones among them, first) with
-- each fallible call failed in turn. Every run either moves every byte right or raises an
-- xfer.Error naming the element; the sources stay as they were; memory comes back. Prints
-- "ok RUNS FAULTS" or the first problem, and exits non-zero on a problem. Arguments: STRIDE
-- (fail every STRIDE-th call only; 1: every one) and SECONDS (start no new pair after that
-- long: "ok" then says "stopped after P of N pairs"). Each pair is told on stderr as it starts.
package.path = "spec/?.lua;" .. package.path -- run from the project's root, as the specs are
local xfer = require "xfer"
local in_use = require("support.helpers").in_use_everywhere
local stride, seconds = tonumber(arg[1]) or 1, tonumber(arg[2])
local started = xfer.clock()
local sizes = { 0, 1001, 2001, 0, 3001, 4001, 100000 }

local function pattern(n, dev, seed)
  local s = {}
  for i = 0, n - 1 do s[#s + 1] = string.char((i * 7 + seed) % 251) end
  return xfer.tensor(table.concat(s), { dtype = "u8", device = dev })
end

local function fail(fmt, ...)
  io.write("problem: ", fmt:format(...), "\n")
  os.exit(1, true)
end

local runs, faults, pairs_done, stopped = 0, 0, 0, false
for _, from in ipairs(xfer.devices()) do
  for _, to in ipairs(xfer.devices()) do
    if seconds and xfer.clock() - started > seconds then stopped = true break end
    io.stderr:write(("pair %s -> %s, %.1f s\n"):format(from.name, to.name, xfer.clock() - started))
    local srcs, want = {}, {}
    for i, n in ipairs(sizes) do
      srcs[i] = pattern(n, from, i)
      want[i] = srcs[i]:tobytes()
    end
    for _, how in ipairs({ "move_many", "copy_many" }) do
      for k = 1, 400, stride do
        local base = in_use()
        local dsts = {}
        if how == "copy_many" then
          for i, n in ipairs(sizes) do dsts[i] = xfer.zeros({ n }, { dtype = "u8", device = to }) end
        end
        xfer.faults.fail_at(k)
        local ok, res
        if how == "move_many" then
          ok, res = pcall(xfer.move_many, srcs, to)
        else
          local items = {}
          for i = 1, #sizes do items[i] = { dsts[i], srcs[i] } end
          ok, res = pcall(xfer.copy_many, items)
        end
        local failed = xfer.faults.failed()
        xfer.faults.fail_at(0)
        runs = runs + 1
        local what = ("%s %s -> %s, call %d"):format(how, from.name, to.name, k)
        if ok then
          local got = how == "move_many" and res or dsts
          for i = 1, #sizes do
            if got[i]:tobytes() ~= want[i] then fail("%s: element %d holds wrong bytes", what, i) end
          end
          if how == "move_many" then for _, t in ipairs(res) do t:free() end end
        else
          if not xfer.is_error(res) then fail("%s: not an xfer.Error: %s", what, tostring(res)) end
          if not failed then fail("%s: failed with no call failed: %s", what, tostring(res)) end
          if not res.element then fail("%s: the error names no element: %s", what, tostring(res)) end
          faults = faults + 1
        end
        for i = 1, #sizes do
          if srcs[i]:tobytes() ~= want[i] then fail("%s: source %d changed", what, i) end
        end
        for _, t in ipairs(dsts) do t:free() end
        res, dsts = nil, nil
        if in_use() ~= base then fail("%s: %d bytes still in use", what, in_use() - base) end
        if not failed then break end -- every call of this move has been failed once
      end
    end
    for _, t in ipairs(srcs) do t:free() end
    pairs_done = pairs_done + 1
  end
  if stopped then break end
end
local n = #xfer.devices()
io.write(("ok %d %d%s\n"):format(runs, faults, stopped and (" stopped after %d of %d pairs"):format(pairs_done, n * n) or ""))
