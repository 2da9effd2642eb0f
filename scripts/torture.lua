-- scripts/torture.lua -- torture, curl-style: each scenario runs once to warm up, once to count its fallible
-- driver calls N, then N more times with call k = 1..N failed (xfer.faults.fail_at), and
-- every run is checked: nothing crashed; the failure surfaced as an xfer.Error naming the
-- op and the runtime of the call that failed (or the move recovered, bytes right); sources
-- byte for byte as they were; every device's memory and the process's open fds back to
-- where they were. A scenario may say it cannot run here (available(), with the reason) and
-- end what it started for all its runs (finish()). Usage (scripts/torture runs it):
--   xferlua scripts/torture.lua [--stride S] [--shard I/N] [--calls K,K...] [--deadline SECONDS] [--verbose] spec/torture/<scenario>.lua ...
-- --stride S fails every S-th call only (a bounded run for CI); --shard I/N makes only the
-- I-th of every N of those runs (N processes, one shard each, share a long scenario among
-- cores: the GPU machine's); --deadline stops starting new runs once that many seconds have
-- passed, and says how many of the runs it made (a bounded run where the machine's time is
-- short: the GPU machine); --calls K,K... fails only those calls (a problem found again).
-- A run with a problem is told with the call that failed and the errors that surfaced.
-- --points wait stalls the k-th wait for a device's work instead (it never sees the work done,
-- every move under a deadline of --stall-timeout seconds, 0.25 by default: the move must end
-- `timeout` and what it leaves be given back once the device is done); --points step cancels
-- the move at its k-th step (a point where it tells its progress: it must end `canceled`, op
-- cancel, its sources as they were, nothing leaked).
local xfer = require "xfer"

local stride, verbose, files, deadline = 1, false, {}, nil
local points, stall_timeout = "call", 0.25
local shard, shards, only_calls = 1, 1, nil
local args = { ... }
-- line by line: a run that hangs until a timeout kills the process leaves its call in the log
io.stdout:setvbuf("line")
local i = 1
while i <= #args do
  if args[i] == "--stride" then
    stride = tonumber(args[i + 1])
    assert(stride and stride >= 1 and stride % 1 == 0, "--stride takes a whole number >= 1")
    i = i + 2
  elseif args[i] == "--shard" then
    shard, shards = (args[i + 1] or ""):match("^(%d+)/(%d+)$")
    shard, shards = tonumber(shard), tonumber(shards)
    assert(shard and shards >= 1 and shard >= 1 and shard <= shards, "--shard takes I/N, 1 <= I <= N")
    i = i + 2
  elseif args[i] == "--calls" then
    only_calls = {}
    for k in (args[i + 1] or ""):gmatch("[^,]+") do
      local n = tonumber(k)
      assert(n and n >= 1 and n % 1 == 0, "--calls takes whole numbers >= 1, separated by commas")
      only_calls[#only_calls + 1] = n
    end
    assert(#only_calls > 0, "--calls takes whole numbers >= 1, separated by commas")
    i = i + 2
  elseif args[i] == "--deadline" then
    deadline = tonumber(args[i + 1])
    assert(deadline and deadline > 0, "--deadline takes a number of seconds > 0")
    deadline, i = os.time() + deadline, i + 2
  elseif args[i] == "--points" then
    points = args[i + 1]
    assert(points == "call" or points == "wait" or points == "step", "--points takes call, wait or step")
    i = i + 2
  elseif args[i] == "--stall-timeout" then
    stall_timeout = tonumber(args[i + 1])
    assert(stall_timeout and stall_timeout > 0, "--stall-timeout takes a number of seconds > 0")
    i = i + 2
  elseif args[i] == "--verbose" then
    verbose, i = true, i + 1
  else
    files[#files + 1], i = args[i], i + 1
  end
end
assert(#files > 0, "usage: xferlua scripts/torture.lua [--stride S] [--shard I/N] [--calls K,K...] [--deadline SECONDS] [--points call|wait|step] [--stall-timeout S] [--verbose] SCENARIO.lua ...")

-- This process's open fds: /proc/self opened here is this process (in a shell it would be
-- the shell's).
local pid = (function()
  local f = io.open("/proc/self/stat")
  local n = f and f:read("*n")
  if f then f:close() end
  return n
end)()

-- This process's open fds and what each is ("7 -> /dev/dri/renderD128"); the pipe of the
-- listing itself is left out, and so is an fd closed while it was listed (no target).
local function open_fds()
  local p = io.popen("cd /proc/" .. tostring(pid) .. "/fd && for f in *; do " ..
                     "printf '%s -> %s\\n' \"$f\" \"$(readlink \"$f\")\"; done 2>/dev/null")
  local fds = {}
  for line in p:lines() do
    if not line:find("pipe:", 1, true) and not line:find(" -> $") then fds[line] = true end
  end
  p:close()
  return fds
end

-- Memory a stalled device holds (freed while its wait had ended at a deadline) goes back once a
-- move finds the device done: moves of a byte until none is held (a stall is a fault's, over
-- once the rules change; the device's real work ends at once), 10 s at most.
local function settle_held()
  local t0 = xfer.clock()
  while xfer.clock() - t0 < 10 do
    local held = 0
    for _, dev in ipairs(xfer.devices()) do held = held + xfer.memory(dev).held end
    if held == 0 then break end
    xfer.zeros({ 1 }, { dtype = "u8" }):to("host")
  end
  collectgarbage() -- (the byte moves' tensors)
  collectgarbage()
end

-- What must come back after every run: each device's memory (with the caches given back)
-- and the open file descriptors (interop fds, driver handles).
-- Bytes in use on every device now, after collecting: what a run's end must find back --
-- before xfer.synchronize, so that a job the scenario waited for and let go is back at once
-- (a job's thread once held its source and result until it got round to dropping the job:
-- the memory came back "one job late", which a synchronize first hid).
local function in_use_now()
  if jit then jit.flush() end
  collectgarbage()
  collectgarbage()
  settle_held() -- (held for a stalled device: not a job's late release)
  local s = {}
  for _, dev in ipairs(xfer.devices()) do s[dev.name] = xfer.memory(dev).in_use end
  return s
end

local function snapshot()
  -- compiled traces keep constants of the values they were recorded on (seen: five tensors
  -- of one run alive after every collection, none with -joff or after jit.flush)
  if jit then jit.flush() end
  xfer.synchronize() -- a move whose job was dropped unwaited gives its memory back when it ends
  collectgarbage()
  collectgarbage()
  settle_held()
  collectgarbage()
  collectgarbage()
  xfer.empty_cache()
  local s = { fds = open_fds(), objects = {} }
  for _, rt in ipairs(xfer.runtimes()) do s.objects[rt.name] = rt.objects end
  for _, dev in ipairs(xfer.devices()) do
    local m = xfer.memory(dev)
    s[dev.name] = { in_use = m.in_use, allocated = m.allocated, reserved = m.reserved,
                    buffers = m.buffers }
  end
  return s
end

local function differences(before, after)
  local out = {}
  for fd in pairs(after.fds) do
    if not before.fds[fd] then out[#out + 1] = "an fd opened and not closed: " .. fd end
  end
  for name, n in pairs(after.objects) do -- buffers, memory, imports, pins, registrations
    if n ~= before.objects[name] then out[#out + 1] = ("%s driver objects %d -> %d"):format(name, before.objects[name], n) end
  end
  for _, dev in ipairs(xfer.devices()) do
    for _, key in ipairs({ "in_use", "allocated", "reserved", "buffers" }) do
      local a, b = before[dev.name][key], after[dev.name][key]
      if a ~= b then out[#out + 1] = ("%s %s %.0f -> %.0f"):format(dev.name, key, a, b) end
    end
  end
  return out
end

local byte_cache = {}

-- The scenario's side: T.try runs a fallible step, T.source keeps a source's bytes,
-- T.expect compares a result with the bytes it must hold.
local function new_T()
  local T = { devices = xfer.devices(), host = xfer.device("host"), errors = {}, problems = {},
              sources = {} }
  function T.try(what, fn, ...)
    local ok, result = pcall(fn, ...)
    if not ok then T.errors[#T.errors + 1] = { what = what, e = result } end
    return ok, result
  end
  -- a move from one device to another: a failure must also name both ends
  function T.move(from, to, what, fn, ...)
    local ok, result = pcall(fn, ...)
    if not ok then
      T.errors[#T.errors + 1] = { what = what, e = result, from = from.name, to = to.name }
    end
    return ok, result
  end
  function T.source(t)
    local ok, bytes = T.try("reading a source", t.tobytes, t)
    if ok then T.sources[#T.sources + 1] = { t = t, bytes = bytes } end
    return t
  end
  function T.expect(bytes, t, what)
    local ok, got = pcall(t.tobytes, t)
    if not ok then
      T.errors[#T.errors + 1] = { what = what .. " (reading the result)", e = got }
    elseif got ~= bytes then
      local first, differ = nil, 0
      for j = 1, math.max(#got, #bytes) do
        if got:byte(j) ~= bytes:byte(j) then
          first, differ = first or j, differ + 1
        end
      end
      T.problems[#T.problems + 1] = ("wrong bytes: %s (%d of %d bytes differ, the first at byte %d: %s where %s belongs)")
        :format(what, differ, #bytes, first - 1, tostring(got:byte(first)), tostring(bytes:byte(first)))
    end
  end
  function T.bytes(n, seed)
    local key = n .. ":" .. seed
    if not byte_cache[key] then -- made once: a run is short, a megabyte string is not
      local parts = {}
      for j = 1, n do parts[j] = string.char((j * 131 + seed * 17) % 251) end
      byte_cache[key] = table.concat(parts)
    end
    return byte_cache[key]
  end
  return T
end

local function device_runtime(name)
  if name == nil or name == "" then return nil end
  local ok, dev = pcall(xfer.device, name)
  return ok and dev.runtime or nil
end

-- Checks one run; returns its problems and whether the failure surfaced as an error.
local function check(T, ok, raised, failed)
  local problems = {}
  for _, p in ipairs(T.problems) do problems[#problems + 1] = p end
  if not ok then problems[#problems + 1] = "the scenario raised: " .. tostring(raised) end
  for _, rec in ipairs(T.errors) do
    local e = rec.e
    if not xfer.is_error(e) then
      problems[#problems + 1] = rec.what .. ": not an xfer.Error: " .. tostring(e)
    elseif not failed then
      problems[#problems + 1] = rec.what .. ": failed with no call failed: " .. e.message
    elseif failed.op == "stall" or failed.op == "cancel" then -- a stalled wait, a canceled step
      local want = failed.op == "stall" and "timeout" or "canceled"
      if e.code ~= want or (want == "canceled" and e.op ~= "cancel") then
        problems[#problems + 1] = ("%s: %s at the %s, not %s: %s"):format(rec.what, e.code, failed.op, want, e.message)
      end
    elseif not e.injected or e.op ~= failed.op or
           (failed.runtime == "file" and not (e.file and e.file ~= "")) or
           (failed.runtime ~= "file" and device_runtime(e.device) ~= failed.runtime) then
      problems[#problems + 1] = ("%s: blames %s on %s (%s), but the call that failed was %s on %s: %s")
        :format(rec.what, e.op, e.device, tostring(device_runtime(e.device)), failed.op,
                failed.runtime, e.message)
    elseif rec.from and (e.from ~= rec.from or e.to ~= rec.to) then
      problems[#problems + 1] = ("%s: names the move %s -> %s: %s"):format(rec.what, e.from, e.to,
                                                                          e.message)
    end
  end
  if #T.errors > 1 then
    problems[#problems + 1] = ("one failed call surfaced %d times"):format(#T.errors)
  end
  for _, s in ipairs(T.sources) do
    local read_ok, bytes = pcall(s.t.tobytes, s.t)
    if not read_ok then
      problems[#problems + 1] = "a source cannot be read after the run: " .. tostring(bytes)
    elseif bytes ~= s.bytes then
      problems[#problems + 1] = "a source changed"
    end
  end
  return problems, #T.errors > 0
end

-- One run with call k failed (0: none), in a function of its own so that nothing it made is
-- still referenced when the next snapshot is taken. Returns its problems, the call that
-- failed (or nil), whether an error surfaced, and how many fallible calls the run made.
local function one_run(scenario, k)
  local base = snapshot()
  xfer.faults.fail_at(k, points)
  if points == "wait" then xfer.config({ timeout = stall_timeout }) end
  local T = new_T()
  local ok, raised = xpcall(scenario.run, function(e) return tostring(e) .. (os.getenv("XFER_TORTURE_TRACE") and debug.traceback("", 2) or "") end, T)
  local failed, calls = xfer.faults.failed(), xfer.faults.calls(points)
  xfer.faults.fail_at(0, points)
  if points == "wait" then xfer.config({ timeout = 0 }) end
  local problems, seen = check(T, ok, raised, failed)
  -- what happened in the run, for the report of a run with a problem
  local told = { failed and ("the call failed: %s:%s"):format(failed.runtime, failed.op) or "no call failed" }
  for _, rec in ipairs(T.errors) do told[#told + 1] = ("raised at %s: %s"):format(rec.what, tostring(rec.e)) end
  problems.context = table.concat(told, "; ")
  T, raised = nil, nil
  local early = in_use_now()
  local after = snapshot()
  if not scenario.drops_jobs then -- every job waited for: nothing may come back late
    for _, dev in ipairs(xfer.devices()) do
      if early[dev.name] ~= after[dev.name].in_use then
        problems[#problems + 1] = ("a late release: %s had %.0f bytes in use after the run, %.0f once its jobs were synchronized")
          :format(dev.name, early[dev.name], after[dev.name].in_use)
      end
    end
  end
  for _, d in ipairs(differences(base, after)) do problems[#problems + 1] = "leaked: " .. d end
  return problems, failed, seen, calls
end

local total_problems = 0
for _, file in ipairs(files) do
  local scenario = dofile(file)
  local name = scenario.name or file
  local usable, why = true, nil
  if scenario.available then usable, why = scenario.available() end
  if not usable then
    io.write(("torture %s: not run: %s\n"):format(name, tostring(why)))
    goto next_scenario
  end
  do
  local function report(k, list)
    for _, p in ipairs(list) do
      io.write(("%s: call %s: %s\n"):format(name, tostring(k), p))
      total_problems = total_problems + 1
    end
    if #list > 0 and list.context then io.write(("%s: call %s: (%s)\n"):format(name, tostring(k), list.context)) end
  end
  -- a warm-up run: drivers open device nodes on first use and keep them for the process
  -- (NVIDIA's /dev/nvidiaN, a second one per GPU), and one eventfd (seen with UCX 1.22 the
  -- first time it moved CUDA memory over cuda_ipc: one for the process, none in the hundreds
  -- of runs after it); that is no leak, anything else is -- and every later run is checked
  -- for every fd
  local warm = {}
  for _, p in ipairs((one_run(scenario, 0))) do
    if not (p:find("^leaked: an fd opened and not closed: %d+ %-> /dev/") or
            p:find("^leaked: an fd opened and not closed: %d+ %-> anon_inode:%[eventfd%]$")) then
      warm[#warm + 1] = p
    end
  end
  report("0 (warm-up)", warm)
  -- the counting run, which must itself leave nothing behind
  local problems, _, _, calls = one_run(scenario, 0)
  report(0, problems)
  local runs, surfaced, recovered, missed, by_op = 0, 0, 0, 0, {}
  local all_planned = math.floor((calls - 1) / stride) + 1
  local started, cut = os.time(), false
  local planned = math.floor((all_planned - shard) / shards) + 1 -- runs j = shard, shard + N, ...
  local ks = only_calls or {}
  if not only_calls then
    for k = 1 + (shard - 1) * stride, calls, stride * shards do ks[#ks + 1] = k end
  else
    planned = #ks
  end
  for _, k in ipairs(ks) do
    if deadline and os.time() >= deadline then cut = true break end
    local failed, seen
    if verbose then io.write(("%s: call %d: starting\n"):format(name, k)) end
    problems, failed, seen = one_run(scenario, k)
    runs = runs + 1
    if not failed then
      missed = missed + 1 -- threads ran in another order: fewer calls this time
    else
      local key = failed.runtime .. ":" .. failed.op
      by_op[key] = (by_op[key] or 0) + 1
      if seen then surfaced = surfaced + 1 else recovered = recovered + 1 end
    end
    if verbose then
      io.write(("%s: call %d: %s%s\n"):format(name, k, failed and (failed.runtime .. ":" .. failed.op) or "-",
                                               seen and " surfaced" or " no error"))
    end
    report(k, problems)
  end
  local ops = {}
  for key, n in pairs(by_op) do ops[#ops + 1] = key .. " " .. n end
  table.sort(ops)
  io.write(("torture %s: %d %s, %d runs (stride %d%s): %d surfaced as errors, %d recovered " ..
            "(bytes right), %d with no call failed; faults by runtime:op: %s\n")
           :format(name, calls, points == "call" and "calls" or points == "wait" and "waits" or "steps", runs, stride, shards > 1 and (", shard %d/%d"):format(shard, shards) or "", surfaced, recovered, missed, table.concat(ops, ", ")))
  io.write(("torture %s: %d s, %s\n"):format(name, os.time() - started, cut and
    ("stopped by --deadline after %d of its %d runs"):format(runs, planned) or "every run made"))
  if scenario.finish then scenario.finish() end -- what it started for every run (a server)
  end
  ::next_scenario::
end
io.write(("torture: %d problem%s\n"):format(total_problems, total_problems == 1 and "" or "s"))
os.exit(total_problems == 0 and 0 or 1, true) -- closing the state frees the context (LeakSanitizer)
