-- Remote devices over UCX: a server process on loopback (xferlua --serve, under a time
-- limit), a client here. Byte-exact moves over tcp and shared memory, each in a process of its
-- own (spec/remote/moves.lua); the failures a peer can have, each a value: a wrong token
-- (unauthorized), a closed port (unreachable), a killed server (peer_lost within a second), a
-- stopped one (timeout at the deadline, never a hang).
local xfer = require "xfer"
local h = require "support.helpers"

local function remote_runtime()
  for _, r in ipairs(xfer.runtimes()) do if r.name == "remote" then return r end end
end

local rt = remote_runtime()
if not (rt and rt.available) then
  describe("remote devices #remote", function()
    it("is pending", function() pending("the remote runtime is unavailable here: " .. (rt and rt.reason or "?")) end)
  end)
  return
end

local function read(file)
  local f = io.open(file)
  if not f then return "" end
  local text = f:read("*a")
  f:close()
  return text
end

-- the protocol's version, as the sources say (a knock of another version is refused)
local wire_version = tonumber(read("src/transport/ucx/wire.h"):match("#define WIRE_VERSION (%d+)"))

-- What a spec started, closed after it whatever its outcome (a peer left connected would
-- list its devices in the specs that follow).
local started, peers = {}, {}
local function connect(url, opts)
  local ok, p = pcall(xfer.connect, url, opts)
  if not ok then -- a connect that fails where it should not says what the server said (CI saw
    -- "Connection refused" once from a server that had just said it serves)
    for _, server in ipairs(started) do
      if server.url == url then
        local alive = os.execute("kill -0 " .. server.pid .. " 2>/dev/null") == 0
        error(tostring(p) .. "\nserver " .. (alive and "running" or "GONE") .. ", its log:\n" .. read(server.log), 2)
      end
    end
    error(p, 2)
  end
  peers[#peers + 1] = p
  return p
end

-- A server on 127.0.0.1 at a port the system chooses (port 0: its serving line says which):
-- {url, pid, log, stop = function}. `env` sets UCX_TLS and the like; the process is stopped
-- after `limit` seconds whatever happens.
local function start_server(opts)
  opts = opts or {}
  local log = os.tmpname()
  local token_arg = ""
  if opts.token then
    local tf = os.tmpname()
    local f = io.open(tf, "w")
    f:write(opts.token, "\n")
    f:close()
    token_arg = " --token-file " .. tf
  end
  if opts.args then token_arg = token_arg .. " " .. opts.args end
  local url = "ucx://" .. (opts.host or "127.0.0.1") .. ":0"
  local cmd = ("%s timeout %d %s --serve %s --name %s%s >%s 2>&1 & echo $!"):format(
    opts.env or "", opts.limit or 120, h.xferlua(), url, opts.name or "nodeT", token_arg, log)
  local p = io.popen(cmd)
  local pid = tonumber(p:read("*a"))
  p:close()
  local t0 = xfer.clock()
  -- (30 s: an ASan build on the GPU machine, beside the other checks, opens every driver and
  -- took over 10 s to say it serves; alone, under 2)
  while xfer.clock() - t0 < 30 do
    local text = read(log)
    local bound = text:match("xferlua: serving .- on (ucx://%S+) as ")
    if bound then
      -- the xferlua under timeout: its child
      local q = io.popen("pgrep -P " .. pid)
      local child = tonumber(q:read("*a")) or pid
      q:close()
      local server = { url = bound, pid = child, log = log,
                       stop = function() os.execute("kill -9 " .. child .. " " .. pid .. " 2>/dev/null") end }
      started[#started + 1] = server
      return server
    end
    if text:find("xferlua: listen", 1, true) then break end
    os.execute("sleep 0.05")
  end
  os.execute("kill -9 " .. pid .. " 2>/dev/null")
  error("no server came up: " .. read(log))
end

describe("remote devices #remote", function()
  after_each(function()
    xfer.faults.clear()
    for _, p in ipairs(peers) do p:close() end
    for _, server in ipairs(started) do server.stop() end
    started, peers = {}, {}
  end)
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 1000)

  for _, tls in ipairs({ "tcp", "shm,tcp" }) do
    it("moves bytes exactly between every local device and every remote one (UCX_TLS=" .. tls .. ")", function()
      local env = "UCX_TLS=" .. tls .. " "
      local server = start_server({ env = env, token = "sesame" })
      local out, code = h.run(("%stimeout 300 %s spec/remote/moves.lua %s sesame"):format(env, h.xferlua(), server.url))
      server.stop()
      assert.are.equal(0, code, out .. read(server.log))
      assert.is_truthy(out:find("moves: %d+ checked, 0 failed"), out)
      -- the transport asked for is the one used: shared memory carries the messages (UCX 1.13
      -- leaves it out of an endpoint that handles peer errors unless told it may)
      local lanes = out:match("transports: ([^\n]*)")
      assert.is_truthy(lanes and #lanes > 0, out)
      if tls == "tcp" then
        for lane in lanes:gmatch("[^;]+") do assert.is_truthy(lane:match("^%s*tcp/"), lanes) end
      else
        assert.is_truthy(lanes:match("sysv/[^;]* am") or lanes:match("posix/[^;]* am"), lanes)
      end
    end)
  end

  it("lists the server's devices as name/device, with their fields", function()
    local server = start_server({ name = "nodeL" })
    local p = connect(server.url, { timeout = 10 })
    assert.are.equal("nodeL", p.name)
    local here = {}
    for _, d in ipairs(xfer.devices()) do if d.runtime ~= "remote" then here[#here + 1] = d end end
    assert.are.equal(#here, #p.devices)
    for i, d in ipairs(p.devices) do
      assert.are.equal("nodeL/" .. here[i].name, d.name)
      assert.are.equal("remote", d.runtime)
      assert.are.equal(here[i].label, d.label)
      -- a device in host memory sizes itself by what the host has free (PoCL): another
      -- process's figure differs
      if here[i].unified then assert.is_true(d.total_memory > 0)
      else assert.are.equal(here[i].total_memory, d.total_memory) end
      assert.are.equal(d, xfer.device(d.name))
    end
    assert.is_truthy(tostring(p):find("xfer.Peer(nodeL, " .. #here .. " devices)", 1, true))
    -- a remote tensor is a handle: its bytes stay there, its fields are here
    local t = xfer.arange(6, { dtype = "i32" }):reshape({ 2, 3 }):contiguous():to("nodeL/host")
    assert.are.same({ 2, 3 }, t.shape)
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, t:totable())
    -- within the remote device, the server copies: a clone, a copy_from, a view made contiguous
    xfer.stats_reset()
    local c = t:clone()
    assert.are.equal("same_device", xfer.stats()[1].path)
    assert.are.same(t:totable(), c:totable())
    local z = xfer.zeros({ 2, 3 }, { dtype = "i32", device = "nodeL/host" })
    z:copy_from(c)
    assert.are.same(t:totable(), z:totable())
    local row = t[2]
    assert.are.same({ 3, 4, 5 }, row:contiguous():totable())
    for _, x in ipairs({ row, t, c, z }) do x:free() end
    p:close()
    assert.is_true(p.lost)
    server.stop()
  end)

  -- CPU seconds a process has used (user + system), from /proc
  local function cpu_seconds(pid)
    local stat = read("/proc/" .. pid .. "/stat")
    local fields = {}
    for w in stat:gsub("^.*%) ", ""):gmatch("%S+") do fields[#fields + 1] = w end
    local p = io.popen("getconf CLK_TCK")
    local hz = tonumber(p:read("*a")) or 100
    p:close()
    return (tonumber(fields[12]) + tonumber(fields[13])) / hz -- utime, stime (fields 14, 15)
  end

  it("an idle server waits for events: it takes next to no CPU, and answers the next client", function()
    if not io.open("/proc/self/stat") then return pending("no /proc here to read a process's CPU time from") end
    local server = start_server({ name = "nodeI" })
    os.execute("sleep 0.5") -- past the first fifth of a second, when it still polls
    local before = cpu_seconds(server.pid)
    os.execute("sleep 2")
    local used = cpu_seconds(server.pid) - before
    -- polling with 20 us sleeps it took 15-20% of a core; waiting on UCX's event fd, ~1%
    assert.is_true(used < 0.2, ("an idle server used %.2f s of CPU in 2 s"):format(used))
    local p = connect(server.url, { timeout = 10 })
    local t = xfer.arange(5, { dtype = "i32" }):to("nodeI/host")
    assert.are.same({ 0, 1, 2, 3, 4 }, t:totable())
    t:free()
  end)

  it("a listener on a thread of its own serves with no progress calls, and closes promptly", function()
    -- its client is this very process: without the listener's thread nobody would answer
    local l = xfer.listen("ucx://127.0.0.1:0", { name = "nodeW", thread = true })
    local e = h.raises("invalid", l.progress, l, 0)
    assert.is_truthy(e.message:find("serves on a thread of its own", 1, true), e.message)
    local p = connect(l.url, { timeout = 10 })
    local t = xfer.arange(100000, { dtype = "f32" })
    local r = t:to("nodeW/host")
    assert.is_true(r:to("host"):equals(t))
    local j = t:to_async("nodeW/host")
    assert.is_true(j:wait():to("host"):equals(t))
    local st = l:stats()
    assert.are.equal(1, st.clients)
    assert.is_true(st.served >= 4, "served " .. st.served)
    r:free()
    p:close()
    local t0 = xfer.clock()
    l:close()
    assert.is_true(xfer.clock() - t0 < 2, ("closing took %.2f s"):format(xfer.clock() - t0))
    h.raises("closed", l.stats, l)
    h.raises("invalid", xfer.listen, "ucx://127.0.0.1:0", { thread = "yes" })
  end)

  it("l:progress(0) serves what has arrived and returns at once, idle for long or not", function()
    local l = xfer.listen("ucx://127.0.0.1:0", { name = "nodeZ" })
    local t0 = xfer.clock()
    while xfer.clock() - t0 < 0.4 do l:progress(0.01) end -- quiet long enough to wait for events
    local t1 = xfer.clock()
    for _ = 1, 100 do l:progress(0) end
    -- a wait of 10 ms per call would take a second
    assert.is_true(xfer.clock() - t1 < 0.5, ("100 calls of progress(0) took %.3f s"):format(xfer.clock() - t1))
    l:close()
  end)

  it("refuses a wrong or missing token (unauthorized), and takes the right one", function()
    local server = start_server({ token = "open sesame" })
    local e = h.raises("unauthorized", xfer.connect, server.url, { timeout = 5, token = "open sesam" })
    assert.is_truthy(e.message:find("the server refused the token", 1, true), e.message)
    h.raises("unauthorized", xfer.connect, server.url, { timeout = 5 })
    local p = connect(server.url, { timeout = 5, token = "open sesame" })
    assert.are.equal(3, #xfer.arange(4):to(p.devices[1]):totable() - 1)
    p:close()
    server.stop()
  end)

  it("says a closed port is unreachable", function()
    local server = start_server({})
    server.stop()
    os.execute("sleep 0.2")
    local t0 = xfer.clock()
    local e = h.raises("unreachable", xfer.connect, server.url, { timeout = 2 })
    assert.is_true(xfer.clock() - t0 < 2.5)
    assert.are.equal("connect", e.op)
  end)

  it("turns a server killed mid-move into peer_lost within a second", function()
    local server = start_server({})
    local p = connect(server.url, { timeout = 30 })
    local big = xfer.zeros({ 256 * 1024 * 1024 }, { dtype = "u8" })
    local r = xfer.arange(10):to(p.devices[1])
    local job = big:to_async(p.devices[1])
    os.execute("sleep 0.05")
    local killed = xfer.clock()
    os.execute("kill -9 " .. server.pid)
    local ok, e = pcall(job.wait, job)
    local took = xfer.clock() - killed
    if ok then return pending("the move ended before the kill (a faster machine): nothing to lose") end
    assert.are.equal("peer_lost", e.code, e.message)
    assert.is_true(took < 1.0, ("took %.2f s"):format(took))
    -- its tensors now raise peer_lost, and so does every move to its devices
    assert.are.equal("peer_lost", h.raises("peer_lost", r.tobytes, r).code)
    h.raises("peer_lost", xfer.arange(3).to, xfer.arange(3), p.devices[1])
    assert.is_true(p.lost)
    r:free() -- (a lost peer's buffers went with it: free is harmless)
    p:close()
    server.stop()
  end)

  it("gives up on a stopped server at the deadline (timeout), never hanging, then reconnects", function()
    local server = start_server({ name = "nodeS" })
    local p = connect(server.url, { timeout = 1 })
    local r = xfer.arange(1000):to("nodeS/host")
    os.execute("kill -STOP " .. server.pid)
    local t0 = xfer.clock()
    local e = h.raises("timeout", r.tobytes, r)
    local took = xfer.clock() - t0
    os.execute("kill -CONT " .. server.pid)
    -- at the deadline: the endpoint closed by force at once, not waited on (it took up to 2 s more)
    assert.is_true(took >= 0.9 and took < 1.5, ("took %.2f s"):format(took))
    assert.is_truthy(e.message:find("nodeS answered nothing within 1 s", 1, true), e.message)
    -- the peer is lost now: its tensors say so at once
    local e2 = h.raises("peer_lost", r.tobytes, r)
    assert.are.equal("device nodeS/host was lost: nodeS did not answer in time", e2.message)
    -- connecting again gives new devices of the same names; the old handles stay refused
    local again = connect(server.url, { timeout = 5 })
    assert.are_not.equal(p.devices[1], again.devices[1])
    assert.are.equal(again.devices[1], xfer.device("nodeS/host"))
    assert.are.same({ 0, 1, 2 }, xfer.arange(3):to("nodeS/host"):totable())
    h.raises("peer_lost", r.tobytes, r)
    again:close()
    p:close()
    server.stop()
  end)

  -- A server stopped (SIGSTOP) and its peer, with what its moves use, n u32 each: src (host),
  -- r (a target on the server), r2 (a source there), dst and spare (host).
  local function stopped_server(name)
    local server = start_server({ name = name })
    local p = connect(server.url, { timeout = 30 })
    local n = 1048576
    local src = xfer.arange(n, { dtype = "u32" })
    local r = xfer.zeros({ n }, { dtype = "u32", device = name .. "/host" })
    local r2 = src:to(name .. "/host")
    local dst = xfer.full({ n }, 7, { dtype = "u32" })
    local spare = xfer.zeros({ n }, { dtype = "u32" })
    os.execute("kill -STOP " .. server.pid)
    return server, p, n, src, r, r2, dst, spare
  end

  it("ends a move at its own deadline while the server is slow, keeps the peer, and its late answer lands nowhere", function()
    local server, p, n, src, r, r2, dst, spare = stopped_server("nodeD")
    local ok, e, ok2, e2, took, held
    local done = pcall(function()
      local t0 = xfer.clock()
      ok, e = pcall(r.copy_from, r, src, { timeout = 0.3 })
      ok2, e2 = pcall(dst.copy_from, dst, r2, { timeout = 0.3 })
      took = xfer.clock() - t0
      spare:free() -- freed while the device is stalled: held, its requests may still use memory
      held = xfer.device("host"):memory().held
    end)
    os.execute("kill -CONT " .. server.pid)
    assert(done)
    assert.is_false(ok)
    assert.are.equal("timeout", e.code, tostring(e))
    assert.is_false(ok2)
    assert.are.equal("timeout", e2.code, tostring(e2))
    assert.is_true(took >= 0.6 and took < 2, ("took %.2f s"):format(took))
    assert.is_false(p.lost) -- a slow server is not a lost one
    assert.is_true(held >= 4 * n, tostring(held))
    h.raises("invalid", dst.tobytes, dst) -- its bytes are not valid: not read as such
    -- the server goes on: the next moves land whole, and the requests the deadlines left are
    -- answered into nothing (dst is written by nothing but its next move)
    local t1 = xfer.clock()
    repeat r:copy_from(src) until xfer.device("host"):memory().held == 0 or xfer.clock() - t1 > 10
    assert.are.equal(0, xfer.device("host"):memory().held)
    assert.is_true(r:equals(src))
    dst:copy_from(r2)
    assert.is_true(dst:equals(src))
    -- the stall fault: a server that never answers this request
    xfer.faults.inject({ runtime = "remote", op = "stall" })
    local e3 = h.raises("timeout", r.copy_from, r, src, { timeout = 0.2 })
    xfer.faults.clear()
    assert.is_truthy(tostring(e3):find("had not done its work by the move's deadline", 1, true), tostring(e3))
    assert.is_false(p.lost)
    r:copy_from(src)
    assert.is_true(r:equals(src))
    p:close()
    server.stop()
  end)

  it("closes a peer whose deadlines left requests under way, and settles its stalled device after without touching UCX", function()
    -- a peer's requests are UCX's memory, freed with its worker at close: asked of after that
    -- (the stalled device settled in passing by a later move), they were read freed -- a save
    -- after a closed peer's 1 GiB deadlines died of SIGBUS in ucp_request_free on the H100
    local server, p, n, src, r, r2, dst, spare = stopped_server("nodeQ")
    local done, ok, ok2, held = pcall(function()
      local a = pcall(r.copy_from, r, src, { timeout = 0.2 })
      local b = pcall(dst.copy_from, dst, r2, { timeout = 0.2 })
      spare:free() -- held: the orphaned requests may still use memory
      local h0 = xfer.device("host"):memory().held
      p:close() -- the server still stopped: its requests still under way
      return a, b, h0
    end)
    os.execute("kill -CONT " .. server.pid)
    assert.is_true(done, tostring(ok))
    assert.is_false(ok)
    assert.is_false(ok2)
    assert.is_true(held >= 4 * n, tostring(held))
    -- moves elsewhere settle the stalled devices in passing, until what was held goes back
    local other = xfer.zeros({ n }, { dtype = "u32" })
    local t0 = xfer.clock()
    repeat other:copy_from(src) until xfer.device("host"):memory().held == 0 or xfer.clock() - t0 > 5
    assert.are.equal(0, xfer.device("host"):memory().held)
    assert.is_true(other:equals(src))
    h.raises("peer_lost", r.copy_from, r, src)
    server.stop()
  end)

  -- WIRE_CANCEL (protocol 7): what a move no longer wants, the server answers `canceled`
  -- without touching memory. The server is stopped (SIGSTOP) so that the requests are still
  -- queued when the CANCEL comes behind them; p.canceled counts its canceled answers.
  local function canceled_answers(p, dev, want) -- p.canceled once `want` came (10 s at most)
    local t0 = xfer.clock()
    repeat xfer.arange(1):to(dev) until p.canceled >= want or xfer.clock() - t0 > 10
    return p.canceled
  end

  it("tells the server what a move past its deadline no longer wants: answered canceled, untouched", function()
    local server = start_server({ name = "nodeK" })
    local p = connect(server.url, { timeout = 30 })
    local n = 1048576
    local src = xfer.arange(n, { dtype = "u32" })
    local r = src:to("nodeK/host")
    local r2 = xfer.zeros({ n }, { dtype = "u32", device = "nodeK/host" })
    assert.are.equal(0, p.canceled)
    os.execute("kill -STOP " .. server.pid)
    local ok, e = pcall(r2.copy_from, r2, r, { timeout = 0.3 }) -- a COPY on the server
    os.execute("kill -CONT " .. server.pid)
    assert.is_false(ok)
    assert.are.equal("timeout", e.code, tostring(e))
    -- the server, going on, finds the CANCEL behind the COPY: it answers canceled, copies nothing
    assert.are.equal(1, canceled_answers(p, "nodeK/host", 1))
    assert.is_false(p.lost)
    r2:copy_from(r)
    assert.is_true(r2:equals(src))
    p:close()
    server.stop()
  end)

  it("cancels a job whose server is stopped: returns at once, canceled; the server skips the rest", function()
    local server = start_server({ name = "nodeC" })
    local p = connect(server.url, { timeout = 30 })
    xfer.config({ remote_chunk = 65536 })
    local n = 262144 -- 1 MiB: 16 requests of 64 KiB, 4 on their way at a time
    local src = xfer.arange(n, { dtype = "u32" })
    local r = src:to("nodeC/host")
    os.execute("kill -STOP " .. server.pid)
    local took, ok, e
    local done = pcall(function()
      local job = r:to_async("host")
      os.execute("sleep 0.05") -- its first requests sent, unanswered
      local t0 = xfer.clock()
      job:cancel()
      took = xfer.clock() - t0
      ok, e = pcall(job.wait, job)
    end)
    os.execute("kill -CONT " .. server.pid)
    xfer.config({ remote_chunk = h.default_config().remote_chunk })
    assert(done)
    assert.is_false(ok)
    assert.are.equal("canceled", e.code, tostring(e))
    assert.is_true(took < 0.5, ("cancel took %.3f s"):format(took))
    -- the server, going on, answers the requests it was told of canceled (all of them: it
    -- served none while stopped), and nothing of theirs lands here
    assert.are.equal(4, canceled_answers(p, "nodeC/host", 4))
    assert.is_false(p.lost)
    assert.is_true(r:to("host"):equals(src))
    p:close()
    server.stop()
  end)

  -- A deadline is how long a server may stay silent, not how long a move may take: with four
  -- requests in flight, the last one waits for the three before it, and a move of many
  -- requests takes far longer than the deadline while every answer comes well within it.
  it("keeps a long pipelined move going while the server answers within the deadline", function()
    local server = start_server({ name = "nodeW", env = "UCX_TLS=tcp " })
    local saved = xfer.config()
    xfer.config({ remote_chunk = 64 * 1024 * 1024, remote_depth = 4 })
    local ok, err = pcall(function()
      local chunk = 64 * 1024 * 1024
      local src = xfer.full({ chunk }, 3, { dtype = "u8" })
      local p = connect(server.url, { timeout = 30 })
      assert.are.equal(30, p.timeout)
      local there = xfer.empty({ chunk }, { dtype = "u8", device = p.devices[1] })
      local t0 = xfer.clock()
      for _ = 1, 3 do there:copy_from(src) end -- one request each: what an answer takes
      local per_request = (xfer.clock() - t0) / 3
      local big = xfer.full({ 12 * chunk }, 5, { dtype = "u8" })
      local r = xfer.empty({ 12 * chunk }, { dtype = "u8", device = p.devices[1] }) -- allocated meanwhile
      -- a deadline of 1.5 answers; a move of 12 requests, 4 in flight: the last of each four
      -- is answered about 4 answers after it was sent, the move takes about 12
      local deadline = math.max(1.5 * per_request, 0.1)
      p:set_timeout(deadline)
      local t1 = xfer.clock()
      r:copy_from(big)
      local took = xfer.clock() - t1
      p:set_timeout(30)
      assert.is_true(took > deadline, ("the move took %.3f s, the deadline %.3f s: it proves nothing"):format(took, deadline))
      assert.are.equal(5, r:get(12 * chunk))
      h.raises("invalid", p.set_timeout, p, 0)
      p:close()
    end)
    xfer.config({ remote_chunk = saved.remote_chunk, remote_depth = saved.remote_depth })
    server.stop()
    assert(ok, err)
  end)

  it("moves between two devices of one server there (same_runtime), and says so in plan", function()
    local one, other = start_server({ name = "nodeM" }), start_server({ name = "nodeN" })
    local p = connect(one.url, { timeout = 10 })
    local q = connect(other.url, { timeout = 10 })
    if #p.devices < 2 then return pending("the server has one device here") end
    local a, b = p.devices[1], p.devices[#p.devices]
    local src = xfer.arange(1000, { dtype = "u32" }):to(a)
    local plan = xfer.plan(src, b)
    assert.are.equal("same_runtime", plan.path)
    assert.are.equal(("%s and %s are devices of one server: it moves the bytes between them, "
                      .. "nothing crosses the network"):format(a.name, b.name), plan.reason)
    xfer.stats_reset()
    local moved = src:to(b)
    assert.are.equal("same_runtime", xfer.stats()[1].path)
    assert.are.same(xfer.arange(1000, { dtype = "u32" }):totable(), moved:totable())
    -- two servers' devices: no such path (the bytes come through here)
    local e = h.raises("unsupported", xfer.plan, src, q.devices[1], { via = "same_runtime" })
    assert.are.equal(("%s and %s are not joined by remote (two servers' devices)"):format(
      a.name, q.devices[1].name), e.message)
    local there = src:to(q.devices[1])
    assert.are.same(moved:totable(), there:totable())
    -- a remote end in plan's steps: where it is
    local steps = table.concat(xfer.plan(xfer.arange(4), a).steps, "\n")
    assert.is_truthy(steps:find(a.name .. ": across the network, in chunks (remote " .. one.url .. ")", 1, true), steps)
  end)

  -- Random bytes of `nblocks` blocks in a host tensor, and two orders of its blocks (each a
  -- permutation: 37 and 101 share no factor with the counts used).
  local function scattered_blocks(block, nblocks)
    local seed = h.random_bytes(block * nblocks)
    local sb, db = {}, {}
    for i = 0, nblocks - 1 do sb[#sb + 1] = (i * 37) % nblocks; db[#db + 1] = (i * 101 + 3) % nblocks end
    return seed, xfer.tensor(seed, { dtype = "u8" }), sb, db
  end

  it("sums a remote tensor on its server, as the host sums the bytes, and verify catches a flipped bit", function()
    h.no_setaside()
    local server = start_server({ name = "nodeS" })
    local p = connect(server.url, { timeout = 10 })
    local ok, err = pcall(function()
      local t = xfer.tensor(h.random_bytes(300001), { dtype = "u8" })
      for _, dev in ipairs(p.devices) do
        local there = t:to(dev, { verify = true })
        assert.are.equal(t:crc32c(), there:crc32c(), dev.name)
        assert.are.equal(t:narrow(1, 101, 5000):crc32c(), there:narrow(1, 101, 5000):crc32c(), dev.name)
        xfer.faults.inject({ runtime = "remote", op = "corrupt", nth = 1 })
        local e = h.raises("corrupt", t.to, t, dev, { verify = true })
        xfer.faults.clear()
        assert.are.equal(dev.name, e.to)
      end
    end)
    xfer.faults.clear()
    server.stop()
    assert(ok, err)
  end)

  -- A write's pieces go in its request's header, so the server receives their bytes straight
  -- into its buffers: as many as a header holds (334 with UCX 1.13 over tcp), the rest in the
  -- next request; a read's answer is gathered from the buffers and lands in the pieces.
  it("moves a batch of more pieces than one request's header lists, bytes exact both ways", function()
    local server = start_server({ name = "nodeH" })
    local p = connect(server.url, { timeout = 10 })
    local ok, err = pcall(function()
      local block, nblocks = 24, 5000
      local seed, src, sb, db = scattered_blocks(block, nblocks)
      for _, dev in ipairs(p.devices) do
        local there = xfer.zeros({ block * nblocks }, { dtype = "u8", device = dev })
        xfer.batch({ dst = there, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block }):run()
        local back = xfer.zeros({ block * nblocks }, { dtype = "u8" })
        xfer.batch({ dst = back, src = there, src_blocks = db, dst_blocks = sb, block_bytes = block }):run()
        assert.are.equal(seed, back:tobytes(), dev.name .. ": host -> there -> host, block by block")
        there:free()
        back:free()
      end
    end)
    server.stop()
    assert(ok, err)
  end)

  it("takes a batch to, from and within a remote device in few requests, moved there as one batch", function()
    local server = start_server({ name = "nodeK" })
    local p = connect(server.url, { timeout = 10 })
    local saved = xfer.config()
    -- requests of 64 KiB: a batch of 2 MiB is several, pieces split across two of them
    xfer.config({ remote_chunk = 65536, remote_depth = 2 })
    local ok, err = pcall(function()
      local block, nblocks = 3000, 700 -- blocks that straddle the requests' ends
      local seed, src, sb, db = scattered_blocks(block, nblocks)
      for _, dev in ipairs(p.devices) do
        local there = xfer.zeros({ block * nblocks }, { dtype = "u8", device = dev })
        local up = xfer.batch({ dst = there, src = src, src_blocks = sb, dst_blocks = db, block_bytes = block })
        up:run()
        assert.are.equal(1, up.at_once, dev.name)
        local twin = xfer.zeros({ block * nblocks }, { dtype = "u8", device = dev })
        local within = xfer.batch({ dst = twin, src = there, src_blocks = db, dst_blocks = sb, block_bytes = block })
        within:run()
        assert.are.equal(1, within.at_once, dev.name)
        local back = xfer.zeros({ block * nblocks }, { dtype = "u8" })
        local down = xfer.batch({ dst = back, src = twin, src_blocks = { first = 0, count = nblocks },
                                  dst_blocks = { first = 0, count = nblocks }, block_bytes = block })
        down:run()
        assert.are.equal(1, down.at_once, dev.name)
        assert.are.equal(seed, back:tobytes(), dev.name .. ": host -> there -> within -> host")
        -- a fault in one request fails the batch, its first element named; the peer stays
        xfer.faults.inject({ runtime = "remote", op = "write", nth = 2 })
        local e = h.raises("write", up.run, up)
        xfer.faults.clear()
        assert.are.equal(1, e.element)
        assert.is_true(e.injected)
        assert.are.equal("host", e.from)
        assert.are.equal(dev.name, e.to)
        assert.is_false(p.lost)
        up:run()
        for _, t in ipairs({ there, twin, back }) do t:free() end
      end
    end)
    xfer.config({ remote_chunk = saved.remote_chunk, remote_depth = saved.remote_depth })
    server.stop()
    assert(ok, err)
  end)

  it("tells what memory UCX moves in place on each side, and refuses direct for host memory and for a UCX without CUDA", function()
    local server = start_server({ name = "nodeP" })
    local p = connect(server.url, { timeout = 10 })
    for _, side in ipairs({ "here", "there" }) do
      local kinds = p.memory[side]
      assert.are.equal("host", kinds[1])
      assert.is_true(#kinds == 1 or (#kinds == 2 and kinds[2] == "cuda"), table.concat(kinds, " "))
    end
    local r = p.devices[1]
    local e = h.raises("unsupported", xfer.plan, xfer.zeros({ 4 }), r, { via = "direct" })
    assert.are.equal("direct lends device memory to the transport in place, and host has none it lends "
                     .. "(CUDA's only; host memory takes the host path, one copy)", e.message)
    e = h.raises("unsupported", xfer.plan, xfer.zeros({ 4 }):to(r), p.devices[#p.devices], { via = "direct" })
    assert.are.equal(("direct moves between a remote device and local device memory; %s and %s are both remote")
                     :format(r.name, p.devices[#p.devices].name), e.message)
  end)

  it("moves CUDA memory straight to and from remote devices with a CUDA-enabled UCX (direct) #cuda", function()
    local cuda = h.runtime("cuda")
    if not (cuda and cuda.available) then return pending("no CUDA device here") end
    local server = start_server({ name = "nodeR" })
    local p = connect(server.url, { timeout = 30 })
    local r
    for _, d in ipairs(p.devices) do if d.name:match("/cuda:0$") then r = d end end
    if p.memory.here[2] ~= "cuda" then
      local e = h.raises("unsupported", xfer.plan, xfer.zeros({ 4 }, { device = "cuda:0" }), r, { via = "direct" })
      assert.is_truthy(e.message:find("reports no CUDA memory (a CUDA-enabled build does: XFER_UCX_LIBRARY)", 1, true), e.message)
      assert.are_not.equal("direct", xfer.plan(xfer.zeros({ 4 }, { device = "cuda:0" }), r).path)
      return pending("this UCX moves no CUDA memory (Debian's build): direct is refused, as checked; "
                     .. "XFER_UCX_LIBRARY naming a CUDA-enabled libucp runs the rest")
    end
    local saved = xfer.config()
    local ok, why = pcall(function()
      -- small requests, several in flight: a move is many direct requests, the last one short
      xfer.config({ remote_device_chunk = 64 * 1024, remote_depth = 3 })
      for _, n in ipairs({ 1, 4099, 1024 * 1024 + 7 }) do
        local bytes = h.random_bytes(n)
        local src = xfer.tensor(bytes, { dtype = "u8", device = "cuda:0" })
        for _, r in ipairs(p.devices) do
          local what = ("%d bytes cuda:0 <-> %s"):format(n, r.name)
          local plan = xfer.plan(src, r)
          if not r.name:match("/cuda:%d+$") then -- the others' memory is staged there: so here too
            assert.are_not.equal("direct", plan.path, what)
            local e = h.raises("unsupported", xfer.plan, src, r, { via = "direct" })
            assert.are.equal(("direct moves between CUDA memory at both ends; %s is not CUDA's"):format(r.name), e.message)
            goto next_device
          end
          assert.are.equal("direct", plan.path, what)
          assert.are.equal(("%s's transport moves cuda:0's memory in place: no host staging on this side")
                           :format(r.name), plan.reason)
          xfer.stats_reset()
          local there = src:to(r)
          assert.are.equal("direct", xfer.stats()[1].path, what)
          assert.are.equal(bytes, there:tobytes(), what)
          assert.are.equal("direct", xfer.plan(there, "cuda:0").path, what)
          local back = there:to("cuda:0")
          assert.are.equal(bytes, back:tobytes(), what .. " and back")
          local into = xfer.zeros({ n }, { dtype = "u8", device = r })
          into:copy_from(src)
          assert.are.equal(bytes, into:tobytes(), what .. " (copy_from)")
          local home = xfer.zeros({ n }, { dtype = "u8", device = "cuda:0" })
          home:copy_from(into)
          assert.are.equal(bytes, home:tobytes(), what .. " (copy_from back)")
          assert.are.equal(bytes, src:to_async(r):wait():to("cuda:0", { via = "direct" }):tobytes(), what .. " (to_async)")
          -- staged still there, forced: the same bytes
          assert.are.equal(bytes, src:to(r, { via = "staged" }):to("cuda:0", { via = "staged" }):tobytes(), what .. " (staged)")
          ::next_device::
        end
      end
      -- a failure on the way is a value: an injected write fault keeps the peer, and the
      -- fallback policy moves on to the next path
      xfer.faults.inject({ runtime = "remote", op = "write", nth = 1 })
      local src = xfer.arange(1000, { dtype = "f32", device = "cuda:0" })
      local e = h.raises("write", src.to, src, r)
      assert.are.equal("cuda:0", e.from)
      assert.are.equal(r.name, e.to)
      assert.is_false(p.lost)
      xfer.faults.inject({ runtime = "remote", op = "read", nth = 1 })
      local moved, attempts = xfer.transfer(src:to(r), "cuda:0", { fallback = { "direct", "staged" }, log = false })
      assert.are.equal(1, #attempts)
      assert.are.equal("direct", attempts[1].path)
      assert.are.same(xfer.arange(1000, { dtype = "f32" }):totable(), moved:totable())
    end)
    xfer.faults.clear()
    xfer.config({ remote_device_chunk = saved.remote_device_chunk, remote_depth = saved.remote_depth })
    assert(ok, why)
  end)

  it("pipelines a move in requests of remote_chunk bytes, remote_depth in flight, bytes exact both ways", function()
    local server = start_server({ name = "nodeQ" })
    local p = connect(server.url, { timeout = 10 })
    local saved = xfer.config()
    local ok, why = pcall(function()
      for _, depth in ipairs({ 1, 2, 4 }) do
        xfer.config({ remote_chunk = 4096, remote_depth = depth })
        local n = 1024 * 1024 + 7 -- 257 requests, the last of 7 bytes
        local src = xfer.tensor(h.random_bytes(n), { dtype = "u8" })
        for _, dev in ipairs(p.devices) do
          local there = src:to(dev)
          assert.is_true(there:to("host"):equals(src), dev.name .. " at depth " .. depth)
          local into = xfer.zeros({ n }, { dtype = "u8", device = dev })
          into:copy_from(src)
          assert.are.equal(src:tobytes(), into:tobytes(), dev.name .. " at depth " .. depth)
        end
      end
    end)
    xfer.config({ remote_chunk = saved.remote_chunk, remote_depth = saved.remote_depth })
    assert(ok, why)
  end)

  it("finds the connected device by name where a closed peer of the same name left a lost one", function()
    -- places given back by one closed peer's unused devices are taken by the next peer's, so a
    -- new nodeK/host may stand before the old, lost one (still held by a tensor)
    local j, k1, k2 = start_server({ name = "nodeJ" }), start_server({ name = "nodeK" }), start_server({ name = "nodeK" })
    local pj = connect(j.url, { timeout = 10 })
    local pk = connect(k1.url, { timeout = 10 })
    local held = xfer.zeros({ 16 }, { dtype = "u8", device = "nodeK/host" })
    pj:close()
    pk:close()
    local again = connect(k2.url, { timeout = 10 })
    local dev = xfer.device("nodeK/host")
    assert.are.equal(again.devices[1], dev)
    local t = xfer.arange(5, { dtype = "u8" }):to("nodeK/host")
    assert.are.same({ 0, 1, 2, 3, 4 }, t:to("host"):totable())
    local ok, e = pcall(function() return held:to("host") end)
    assert.is_false(ok)
    assert.are.equal("peer_lost", e.code)
  end)

  it("registers host segments with UCX once (ucp_mem_map), both ends, and lets go when they go", function()
    if os.getenv("XFER_UCX_REGISTER") == "0" then return pending("XFER_UCX_REGISTER=0: nothing is registered") end
    -- the server: a script of its own that listens, serves one client and, once it has gone,
    -- prints its registrations
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write([[
      local xfer = require "xfer"
      local l = xfer.listen("ucx://127.0.0.1:0", { name = "nodeM" })
      io.stderr:write("listening on ", l.url, "\n")
      local had = false
      local t0 = xfer.clock()
      while xfer.clock() - t0 < 60 do
        l:progress(0.05)
        had = had or l:stats().clients > 0
        if had and l:stats().clients == 0 then break end
      end
      local s = l:stats()
      io.stderr:write(("served %d, registrations made %d, now %d, refused %d\n"):format(s.served,
        s.registered.made, s.registered.segments, s.registered.refused))
      l:close()
    ]])
    f:close()
    local log = os.tmpname()
    local pipe = io.popen(("timeout 90 %s %s >%s 2>&1 & echo $!"):format(h.xferlua(), script, log))
    local pid = tonumber(pipe:read("*a"))
    pipe:close()
    started[#started + 1] = { stop = function() os.execute("kill -9 " .. pid .. " 2>/dev/null") end }
    local url
    local t0 = xfer.clock()
    while not url and xfer.clock() - t0 < 10 do
      url = read(log):match("listening on (ucx://%S+)")
      if not url then os.execute("sleep 0.05") end
    end
    assert(url, "no server came up: " .. read(log))
    local p = connect(url, { timeout = 10 })
    local before = p.registered
    assert.are.same({ segments = 0, bytes = 0, made = 0, refused = 0 }, before)
    local n = 3 * 1024 * 1024 + 5
    local src = xfer.tensor(h.random_bytes(n), { dtype = "u8" })
    local there = src:to("nodeM/host")
    local back = xfer.empty({ n }, { dtype = "u8" })
    back:copy_from(there)
    assert.are.equal(src:tobytes(), back:tobytes())
    local r = p.registered
    assert.is_true(r.segments >= 1, "segments: " .. r.segments)
    assert.is_true(r.bytes >= n, "bytes: " .. r.bytes)
    assert.are.equal(0, r.refused)
    assert.are.equal(r.segments, r.made)
    -- the same tensors again: no new registration
    there:copy_from(src)
    back:copy_from(there)
    assert.are.equal(r.made, p.registered.made)
    -- segments back to the system: their registrations undone with them
    src:free()
    back:free()
    there:free()
    collectgarbage()
    xfer.empty_cache()
    assert.are.equal(0, p.registered.segments)
    p:close()
    t0 = xfer.clock()
    while not read(log):find("registrations made", 1, true) and xfer.clock() - t0 < 10 do
      os.execute("sleep 0.05")
    end
    local text = read(log)
    local made, refused = text:match("registrations made (%d+), now %d+, refused (%d+)")
    assert(made, "the server said nothing of its registrations: " .. text)
    assert.is_true(tonumber(made) >= 1, text) -- the host buffer WRITEs landed in, at least
    assert.are.equal("0", refused, text)
    os.remove(script)
  end)

  it("moves on without a registration UCX refused (XFER_FAULTS remote:map), counting it", function()
    if os.getenv("XFER_UCX_REGISTER") == "0" then return pending("XFER_UCX_REGISTER=0: nothing is registered") end
    local server = start_server({ name = "nodeF" })
    local p = connect(server.url, { timeout = 10 })
    xfer.empty_cache() -- segments mapped by earlier specs' peers are gone: this one meets new ones
    xfer.faults.inject({ runtime = "remote", op = "map", count = 1000 })
    local n = 2 * 1024 * 1024 + 3
    local src = xfer.tensor(h.random_bytes(n), { dtype = "u8" })
    local back = src:to("nodeF/host"):to("host")
    xfer.faults.clear()
    assert.are.equal(src:tobytes(), back:tobytes())
    local r = p.registered
    assert.are.equal(0, r.segments)
    assert.is_true(r.refused >= 1, "refused: " .. r.refused)
  end)

  it("reconnects without end: a closed peer's sockets close, its unused devices give their places back", function()
    local server = start_server({ name = "nodeR" })
    local stat = io.open("/proc/self/stat")
    local pid = stat:read("*n")
    stat:close()
    local function fds() -- this process's open fds, the listing's own pipe left out
      collectgarbage() -- (file handles of earlier listings close when collected)
      local listing = io.popen("ls -l /proc/" .. pid .. "/fd")
      local open = {}
      for line in listing:lines() do
        local fd, target = line:match("(%d+) %-> (.*)$")
        if fd and not target:find("^pipe:") then open[#open + 1] = fd .. " -> " .. target end
      end
      listing:close()
      table.sort(open)
      return table.concat(open, "\n")
    end
    local function round()
      local p = xfer.connect(server.url, { timeout = 10 })
      local t = xfer.arange(100):to(p.devices[1])
      assert.are.same(xfer.arange(100):totable(), t:totable())
      t:free()
      p:close()
    end
    local function listed_here() -- nodeR's devices in xfer.devices(): none while no peer is open
      local names = {}
      for _, d in ipairs(xfer.devices()) do
        if d.name:find("^nodeR/") then names[#names + 1] = d.name end
      end
      return table.concat(names, ", ")
    end
    round()
    collectgarbage()
    local before = fds()
    -- more connections than the 128 places for remote devices, had none come back
    local counting = xfer.connect(server.url, { timeout = 10 })
    local rounds = math.floor(128 / #counting.devices) + 8
    counting:close()
    for _ = 1, rounds do
      round()
      collectgarbage() -- (its Device objects, each holding its device)
    end
    assert.are.equal(before, fds())
    assert.are.equal("", listed_here())
  end)

  it("injects faults on this side (remote:alloc/read/write keep the peer; send, recv lose it)", function()
    local server = start_server({ name = "nodeF" })
    local p = connect(server.url, { timeout = 5 })
    local r = xfer.arange(10):to("nodeF/host")
    xfer.faults.inject({ runtime = "remote", op = "read", count = 1 })
    local e = h.raises("read", r.tobytes, r)
    assert.is_true(e.injected)
    assert.are.equal("read", e.op)
    assert.are.equal("nodeF/host", e.device)
    assert.is_truthy(e.message:find("Failed to read a tensor off nodeF/host on the way to host", 1, true), e.message)
    assert.are.same(xfer.arange(10):totable(), r:totable()) -- the peer stays
    xfer.faults.inject({ runtime = "remote", op = "recv", count = 1 })
    e = h.raises("timeout", r.tobytes, r)
    assert.is_true(e.injected)
    assert.is_true(p.lost)
    h.raises("peer_lost", r.tobytes, r)
    xfer.faults.clear()
    p:close()
    local p2 = connect(server.url, { timeout = 5 })
    xfer.faults.inject({ runtime = "remote", op = "send", count = 1 })
    e = h.raises("peer_lost", xfer.arange(3).to, xfer.arange(3), "nodeF/host")
    assert.is_true(e.injected)
    assert.are.equal("send", e.op)
    assert.is_true(p2.lost)
    xfer.faults.clear()
    p2:close()
    server.stop()
  end)

  it("brings the server's own failures back as its errors (faults injected there)", function()
    -- a device of the server that reads through its driver (a host buffer is sent in place)
    local rt_name
    for _, d in ipairs(xfer.devices()) do
      if not rt_name and (d.runtime == "vulkan" or d.runtime == "opencl") then rt_name = d.runtime end
    end
    if not rt_name then return pending("no Vulkan or OpenCL device to serve here") end
    local server = start_server({ name = "nodeE", env = ("XFER_FAULTS=%s:read:2:1 "):format(rt_name) })
    local p = connect(server.url, { timeout = 5 })
    local r = xfer.arange(10):to("nodeE/" .. rt_name .. ":0")
    -- the server's second read call fails (a read there is one driver call or more: which
    -- move meets it depends on the driver), and that move only
    local failed, e = 0, nil
    for _ = 1, 3 do
      local ok, err = pcall(r.totable, r)
      if ok then assert.are.same(xfer.arange(10):totable(), err)
      else failed, e = failed + 1, err end
    end
    assert.are.equal(1, failed)
    assert.is_true(xfer.is_error(e), tostring(e))
    assert.are.equal("read", e.code, e.message)
    assert.is_true(e.injected)
    assert.are.equal("nodeE/" .. rt_name .. ":0", e.from)
    assert.are.equal("host", e.to)
    assert.is_truthy(e.message:find("(on nodeE)", 1, true), e.message)
    assert.is_false(p.lost) -- a failure of the server's device is no lost peer
    assert.are.same(xfer.arange(10):totable(), r:totable())
    p:close()
    server.stop()
  end)

  it("turns a network partition mid-move into timeout at the deadline (network namespaces)", function()
    -- a namespace of its own for the server, joined to this one by a veth pair; the link goes
    -- down while a move runs. Needs root and `ip netns` (pending with the reason elsewhere).
    local tag = ("xf%d"):format(math.random(10000, 99999))
    local ns, here, there = tag .. "n", tag .. "a", tag .. "b"
    local subnet = "10.77." .. math.random(1, 250)
    local setup = table.concat({
      "ip netns add " .. ns, "ip link add " .. here .. " type veth peer name " .. there,
      "ip link set " .. there .. " netns " .. ns, "ip addr add " .. subnet .. ".1/24 dev " .. here,
      "ip link set " .. here .. " up", "ip netns exec " .. ns .. " ip addr add " .. subnet .. ".2/24 dev " .. there,
      "ip netns exec " .. ns .. " ip link set " .. there .. " up", "ip netns exec " .. ns .. " ip link set lo up",
    }, " && ")
    local out, code = h.run(setup)
    local function cleanup()
      os.execute(("ip netns pids %s 2>/dev/null | xargs -r kill -9; ip netns del %s 2>/dev/null; ip link del %s 2>/dev/null")
                 :format(ns, ns, here))
    end
    if code ~= 0 then
      cleanup()
      return pending("no network namespaces here (root and `ip netns` needed): " .. out:gsub("\n", " "))
    end
    local addr = subnet .. ".2"
    local server = start_server({ env = "UCX_TLS=tcp ip netns exec " .. ns .. " ", name = "nodeP", host = addr })
    local ok, err = pcall(function()
      local p = connect(server.url, { timeout = 2 })
      local big = xfer.zeros({ 64 * 1024 * 1024 }, { dtype = "u8" })
      assert.is_true(big:to(p.devices[1]):equals(big)) -- the link works
      local job = big:to_async(p.devices[1])
      os.execute("ip link set " .. here .. " down")
      local t0 = xfer.clock()
      local e = h.raises("timeout", job.wait, job)
      local took = xfer.clock() - t0
      assert.is_true(took < 2.5, ("took %.2f s"):format(took)) -- the 2 s deadline (it once took 3.00)
      assert.is_truthy(e.message:find("nodeP answered nothing within 2 s", 1, true), e.message)
      assert.is_true(p.lost)
      p:close()
    end)
    server.stop()
    cleanup()
    assert(ok, err)
  end)

  -- A test program built beside xferlua (spec/c/), or nil where it was not.
  local function built(name)
    local path = h.xferlua():gsub("xferlua$", name)
    local exists = io.open(path)
    if not exists then return nil end
    exists:close()
    return path
  end

  it("drops clients that break the protocol and serves the others (a wire fuzzer)", function()
    local fuzz = built("wire_fuzz")
    if not fuzz then return pending("wire_fuzz was not built (it links UCX's libraries)") end
    local server = start_server({})
    local p = connect(server.url, { timeout = 10 }) -- a good client, connected throughout
    local r = xfer.arange(100):to(p.devices[1])
    for seed = 1, 3 do
      local out, code = h.run(("timeout 120 %s %s %d 100"):format(fuzz, server.url, seed))
      -- a run that hangs says where (its watchdog, at 100 s), and the server's log says why
      assert.are.equal(0, code, out .. "\nserver's log:\n" .. read(server.log))
      assert.is_truthy(out:match("version %d+: version_mismatch"), out) -- another version: told so
      assert.is_truthy(out:find("fuzz: 100 connections", 1, true), out)
      assert.is_truthy(out:match("rendezvous junk %d+"), out) -- junk of up to 1 MiB, turned away
    end
    assert.are.same(xfer.arange(100):totable(), r:totable()) -- the good client is served still
    -- a second connection to the same name is refused here (device names stay unique) ...
    h.raises("invalid", xfer.connect, server.url, { timeout = 10 })
    p:close()
    local p2 = connect(server.url, { timeout = 10 }) -- ... and new ones are served
    assert.are.same({ 0, 1 }, xfer.arange(2):to(p2.devices[1]):totable())
    p2:close()
    server.stop()
  end)

  -- The port is a gate: a stranger's bytes never reach UCX (17 zero bytes aborted UCX 1.13's
  -- listener, and so the server), each connection turned away gives its socket back, and
  -- however many hang, a client with the token gets in.
  local function gate_fuzz() return built("gate_fuzz") end
  -- The server lives: a client (with the token) moves bytes there, and UCX asserted nothing.
  local function still_serves(server, token)
    local p = connect(server.url, { timeout = 10, token = token })
    assert.are.same({ 0, 1, 2 }, xfer.arange(3):to(p.devices[1]):totable())
    p:close()
    assert.is_falsy(read(server.log):find("Assertion", 1, true), read(server.log))
    server.stop()
  end
  local function open_fds(pid)
    local p = io.popen("ls /proc/" .. pid .. "/fd | wc -l")
    local n = tonumber(p:read("*a"))
    p:close()
    return n
  end
  local function host_port(url) return url:match("^ucx://([%d.]+):(%d+)$") end

  it("survives raw bytes on its port, gives every socket back, and lets the token in (a raw-bytes fuzzer)", function()
    local fuzz = gate_fuzz()
    if not fuzz then return pending("gate_fuzz was not built (the remote runtime was not)") end
    local server = start_server({ name = "nodeG", token = "sesame" })
    local before = open_fds(server.pid)
    local host, port = host_port(server.url)
    for seed = 1, 3 do
      local out, code = h.run(("timeout 60 %s %s %s %d 300 100 sesame"):format(fuzz, host, port, seed))
      assert.are.equal(0, code, out .. read(server.log))
      assert.is_truthy(out:find("0 answers wrong", 1, true), out)
      assert.is_truthy(out:find("100 hanging, then the client let in", 1, true), out)
    end
    -- every hanging knock is closed by its deadline (2 s); what stays is a door each let-in
    -- knock opened and nobody used (closed after 10 s): three
    local t0, now = xfer.clock(), nil
    repeat
      os.execute("sleep 0.2")
      now = open_fds(server.pid)
    until now <= before + 3 or xfer.clock() - t0 > 5
    assert.is_true(now <= before + 3, ("%d descriptors before, %d after"):format(before, now))
    still_serves(server, "sesame")
  end)

  -- the issue's case was ulimit -n 128 on the CPU machine; a GPU machine's drivers hold more
  -- than 100 descriptors themselves, so the limit is set to 40 above what the server holds
  it("lets the token in while 140 strangers hang on its port with 40 descriptors to spare", function()
    local fuzz = gate_fuzz()
    if not fuzz then return pending("gate_fuzz was not built (the remote runtime was not)") end
    local server = start_server({ name = "nodeU", token = "sesame" })
    local limit = open_fds(server.pid) + 40
    local out, code = h.run(("prlimit --pid %d --nofile=%d:%d"):format(server.pid, limit, limit))
    if code ~= 0 then
      server.stop()
      return pending("prlimit cannot lower the server's limit here: " .. out)
    end
    assert.is_truthy(read("/proc/" .. server.pid .. "/limits"):match("Max open files%s+" .. limit .. "%s"))
    local host, port = host_port(server.url)
    local out, code = h.run(("timeout 60 %s %s %s 7 0 140 sesame"):format(fuzz, host, port))
    assert.are.equal(0, code, out .. read(server.log))
    assert.is_truthy(out:find("140 hanging, then the client let in", 1, true), out)
    -- the strangers' sockets go by their deadline (2 s): a client that comes while the server
    -- still sits at its limit may find no descriptor for its door (once seen on the H200:
    -- "Destination is unreachable"), which is the limit working, not the gate failing
    local t0 = xfer.clock()
    repeat os.execute("sleep 0.2") until open_fds(server.pid) <= limit - 20 or xfer.clock() - t0 > 5
    still_serves(server, "sesame")
  end)

  -- A knock opens a door (a UCX listener) for a moment; UCX's connection manager aborted on 17
  -- zero bytes, and anyone could send them there. The kernel now drops every packet to a door
  -- but those from the address and the port the knock named: from another address (127.0.0.2
  -- here: another address on loopback), or from the knocker's own address at another port (any
  -- other process of its host), the 17 bytes go nowhere.
  local function knock_then_send(server, from)
    local host, port = host_port(server.url)
    local script = os.tmpname()
    local f = io.open(script, "w")
    f:write([[
import socket, struct, sys
host, port, source = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for attempt in range(5):
    s = socket.create_connection((host, port), 5)
    held = socket.socket()  # the port the knock names, held as a client holds it
    held.bind((s.getsockname()[0], 0))
    named = held.getsockname()[1]
    s.sendall(b"xferKNCK" + struct.pack("<II", ]] .. wire_version .. [[, 0) + struct.pack("<I", named))
    a = b""
    while len(a) < 20:
        a += s.recv(20 - len(a))
    s.close()
    status, door = struct.unpack("<II", a[12:20])
    d = socket.socket()
    d.bind((source, 0))  # not the port named: that one is held
    d.settimeout(1)
    try:
        d.connect((host, door))
        d.sendall(b"\0" * 17)
        print("let in at", door)
    except OSError as e:
        print("status", status, "door", door, "shut:", type(e).__name__)
    d.close()
    held.close()
]])
    f:close()
    local out, code = h.run(("python3 %s %s %s %s"):format(script, host, port, from))
    os.remove(script)
    return out, code
  end

  it("shuts the door a knock opened to every other address: 17 zero bytes from 127.0.0.2 go nowhere", function()
    local server = start_server({ name = "nodeD" })
    local out, code = knock_then_send(server, "127.0.0.2")
    if code ~= 0 and out:find("Cannot assign requested address", 1, true) then
      server.stop()
      return pending("127.0.0.2 is not an address of this machine: " .. out)
    end
    assert.are.equal(0, code, out)
    local _, shut = out:gsub("status 0 door %d+ shut", "")
    assert.are.equal(5, shut, out)
    still_serves(server) -- and lets the next in
  end)

  it("shuts the door to another process of the knocker's host: 17 zero bytes from another port go nowhere", function()
    local server = start_server({ name = "nodeP" })
    local out, code = knock_then_send(server, "127.0.0.1")
    assert.are.equal(0, code, out)
    local _, shut = out:gsub("status 0 door %d+ shut", "")
    assert.are.equal(5, shut, out)
    still_serves(server)
  end)

  -- A gate that answers every knock with a door nobody listens at: the connection to the door
  -- is refused, and a connect knocks again, a new door each time, three times, then says so.
  it("knocks again, up to three times, when the door its knock opened refuses the connection", function()
    local script = os.tmpname()
    local f = io.open(script, "w")
    f:write([[
import socket, struct, sys, time
gate = socket.socket()
gate.bind(("127.0.0.1", 0))
gate.listen(8)
closed = socket.socket()  # a port that is bound, never listening: a refused door
closed.bind(("127.0.0.1", 0))
door = closed.getsockname()[1]
print(gate.getsockname()[1], flush=True)
gate.settimeout(20)
knocks = 0
try:
    while True:
        c, _ = gate.accept()
        c.settimeout(5)
        got = b""
        while len(got) < 20:  # magic, version, token length (0), the client's port
            got += c.recv(20 - len(got))
        knocks += 1
        version = struct.unpack("<I", got[8:12])[0]
        c.sendall(b"xferKNCK" + struct.pack("<III", version, 0, door))
        c.close()
        sys.stderr.write("knock %d\n" % knocks)
        sys.stderr.flush()
        gate.settimeout(2)  # one more knock comes at once, or none
except socket.timeout:
    pass
]])
    f:close()
    local log = os.tmpname()
    local gate = io.popen(("timeout 30 python3 %s 2>%s"):format(script, log), "r")
    local port = gate:read("*l")
    assert.is_truthy(tonumber(port), "the fake gate did not start")
    local t0 = xfer.clock()
    local e = h.raises("unreachable", xfer.connect, "ucx://127.0.0.1:" .. port, { timeout = 8 })
    assert.is_true(xfer.clock() - t0 < 8.5, "within the connect's timeout")
    local _, knocks = read(log):gsub("knock %d+", "")
    assert.are.equal(3, knocks, read(log) .. "\n" .. e.message)
    gate:close()
    os.remove(script)
    os.remove(log)
  end)

  it("over IPv6: connects where its UCX can, and says why not where it cannot (UCX 1.13)", function()
    local ok, l = pcall(xfer.listen, "ucx://[::1]:0", { thread = true })
    if not ok and l.code == "unavailable" and l.message:find("cannot connect over IPv6", 1, true) then
      -- UCX 1.13 overran a heap buffer on the server at every IPv6 connection, and rejected it
      local e = h.raises("unavailable", xfer.connect, "ucx://[::1]:9", { timeout = 2 })
      assert.matches("use an IPv4 address", e.message)
      return
    end
    if not ok then return pending("no IPv6 loopback here: " .. tostring(l.message or l)) end
    local p = connect(l.url, { timeout = 10 })
    assert.are.same({ 0, 1, 2 }, xfer.arange(3):to(p.devices[1]):totable())
    p:close()
    l:close()
  end)

  local function rss_mb(pid)
    return tonumber(read("/proc/" .. pid .. "/status"):match("VmRSS:%s+(%d+)")) / 1024
  end

  it("drops a client that asks for 40 reads of 64 MiB and never reads them, and gives the memory back", function()
    local fuzz = built("wire_fuzz")
    if not fuzz then return pending("wire_fuzz was not built (it links UCX's libraries)") end
    local server = start_server({ name = "nodeR" })
    local before = rss_mb(server.pid)
    -- device 1: one the server stages replies of (host buffers are sent from in place)
    local out, code = h.run(("timeout 60 %s %s greedy 40 1"):format(fuzz, server.url))
    assert.are.equal(0, code, out .. read(server.log))
    assert.is_truthy(out:find("none read: dropped", 1, true), out)
    local t0, now = xfer.clock(), nil
    repeat
      os.execute("sleep 0.1")
      now = rss_mb(server.pid)
    until now < before + 200 or xfer.clock() - t0 > 5
    assert.is_true(now < before + 200, ("%.0f MB before, %.0f MB after"):format(before, now))
    still_serves(server)
  end)

  it("serves other clients while one stopped in the middle of sending a write", function()
    -- a client stopped (SIGSTOP) while its 64 MiB writes go out over TCP: the server has its
    -- header and waits for the rest of its payload. Its later requests wait; no one else's
    -- may (a dropped client once held the whole queue: another's writes "answered nothing
    -- within 10 s", fresh-clone CI)
    local env = "UCX_TLS=tcp "
    local server = start_server({ env = env })
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(([[
      local xfer = require "xfer"
      local peer = xfer.connect("%s", { timeout = 60 })
      xfer.config({ remote_chunk = 64 * 2^20 })
      local t = xfer.zeros({ 2^26 }, { dtype = "u8" })
      io.write("writing\n"); io.flush()
      while true do t:to(peer.devices[1]):free() end
    ]]):format(server.url))
    f:close()
    local out = os.tmpname()
    local p = io.popen(("%stimeout 60 %s %s >%s 2>&1 & echo $!"):format(env, h.xferlua(), script, out))
    local pid = tonumber(p:read("*a"))
    p:close()
    local q = io.popen("sleep 0.05; pgrep -P " .. pid) -- the xferlua under timeout
    local client = tonumber(q:read("*a")) or pid
    q:close()
    local t0 = xfer.clock()
    while not read(out):find("writing", 1, true) and xfer.clock() - t0 < 20 do os.execute("sleep 0.05") end
    assert.is_truthy(read(out):find("writing", 1, true), read(out))
    os.execute("sleep 0.3") -- writes under way
    os.execute("kill -STOP " .. client)
    local ok, err = pcall(function()
      local peer = connect(server.url, { timeout = 3 })
      local small = xfer.arange(4096, { dtype = "u32" })
      for _ = 1, 5 do
        local there = small:to(peer.devices[1], { timeout = 3 })
        assert.is_true(there:to("host"):equals(small))
      end
    end)
    os.execute("kill -9 " .. client .. " " .. pid .. " 2>/dev/null")
    os.remove(script)
    os.remove(out)
    assert(ok, tostring(err) .. "\n" .. read(server.log))
  end)

  it("answers a handle used after its FREE stale, never with another buffer's bytes", function()
    local fuzz = built("wire_fuzz")
    if not fuzz then return pending("wire_fuzz was not built (it links UCX's libraries)") end
    local server = start_server({ name = "nodeS" })
    local out, code = h.run(("timeout 60 %s %s stale 1"):format(fuzz, server.url))
    assert.are.equal(0, code, out .. read(server.log))
    assert.is_truthy(out:find("stale, stale, stale, stale; invalid", 1, true), out)
    still_serves(server)
  end)

  it("takes a client's whole depth of 64 MiB requests (remote_chunk 64 MiB, depth 4, 16 KiB blocks)", function()
    local server = start_server({ name = "nodeQ" })
    local p = connect(server.url, { timeout = 60 })
    local saved = xfer.config()
    xfer.config({ remote_chunk = 64 * 1024 * 1024, remote_depth = 4 })
    local ok, err = pcall(function()
      local n = 256 * 1024 * 1024
      local src = xfer.arange(n / 4, { dtype = "i32" })
      local there = xfer.empty({ n / 4 }, { dtype = "i32", device = p.devices[1] })
      there:copy_blocks(src, { first = 0, count = n / 16384 }, { first = 0, count = n / 16384 }, 16384)
      local back = there:to("host")
      assert.is_true(back:tobytes() == src:tobytes(), "the bytes came back otherwise")
    end)
    xfer.config({ remote_chunk = saved.remote_chunk, remote_depth = saved.remote_depth })
    assert(ok, err)
    assert.is_falsy(read(server.log):find("Segmentation", 1, true), read(server.log))
    p:close()
    server.stop()
  end)

  it("refuses an ALLOC past a client's quota (--client-memory) or the memory the server has left", function()
    -- (the client's pool takes remote memory in segments larger than a small tensor)
    local server = start_server({ name = "nodeM", args = "--client-memory 32M" })
    assert.is_truthy(read(server.log):find("(at most 32M bytes a client)", 1, true), read(server.log))
    local p = connect(server.url, { timeout = 10 })
    local dev = p.devices[1]
    local e = h.raises("alloc", xfer.empty, { 48 * 2 ^ 20 }, { dtype = "u8", device = dev })
    assert.is_truthy(e.message:find("a client holds at most 33554432 bytes here", 1, true), e.message)
    assert.are.same({ 1, 2 }, xfer.tensor({ 1, 2 }):to(dev):totable()) -- within it: served
    p:close()
    server.stop()
    server = start_server({ name = "nodeN" })
    p = connect(server.url, { timeout = 10 })
    e = h.raises("alloc", xfer.empty, { 2 ^ 50 }, { dtype = "u8", device = p.devices[1] })
    assert.is_truthy(e.message:find("memory left", 1, true), e.message)
    assert.are.same({ 7 }, xfer.tensor({ 7 }):to(p.devices[1]):totable()) -- and it serves on
    p:close()
    server.stop()
  end)

  describe("bad input", function()
    h.each_invalid({
      { "connect: not a URL", function() xfer.connect("http://x:1") end,
        "connect: 'http://x:1' is no ucx://host:port address" },
      { "connect: no port", function() xfer.connect("ucx://host") end,
        "connect: 'ucx://host' names no host and port (ucx://host:port)" },
      { "connect: port 0", function() xfer.connect("ucx://host:0") end,
        "connect: 'ucx://host:0': the port must be 1 to 65535" },
      { "connect: a timeout of 0", function() xfer.connect("ucx://127.0.0.1:1", { timeout = 0 }) end,
        "connect: 'timeout' must be a number of seconds above 0 (at most 86400)" },
      { "connect: an unknown option", function() xfer.connect("ucx://127.0.0.1:1", { wait = 1 }) end,
        "connect: unknown option 'wait' (known: timeout, token)" },
      { "connect: a number for the URL", function() xfer.connect(5) end,
        "bad argument #1 to 'connect' (address string (ucx://host:port) expected, got number)" },
      { "listen: a name with a slash", function() xfer.listen("ucx://127.0.0.1:1", { name = "a/b" }) end,
        "listen: a name of at most 16 characters, without '/', ':', spaces or tabs, not 'a/b'" },
      { "listen: a name too long", function() xfer.listen("ucx://127.0.0.1:1", { name = string.rep("n", 17) }) end,
        "listen: a name of at most 16 characters, without '/', ':', spaces or tabs, not 'nnnnnnnnnnnnnnnnn'" },
      { "config: a remote_timeout of 0", function() xfer.config({ remote_timeout = 0 }) end,
        "remote_timeout must be 0.001 to 86400 seconds, not 0" },
      { "config: a remote_chunk of 4095", function() xfer.config({ remote_chunk = 4095 }) end,
        "remote_chunk must be 4096 to 67108864 bytes, not 4095" },
      { "config: a remote_chunk over 64 MiB", function() xfer.config({ remote_chunk = 67108865 }) end,
        "remote_chunk must be 4096 to 67108864 bytes, not 67108865" },
      { "config: a remote_depth of 0", function() xfer.config({ remote_depth = 0 }) end,
        "remote_depth must be 1 to 4, not 0" },
      { "config: a remote_depth of 5", function() xfer.config({ remote_depth = 5 }) end,
        "remote_depth must be 1 to 4, not 5" },
      { "config: a remote_device_chunk of 4095", function() xfer.config({ remote_device_chunk = 4095 }) end,
        "remote_device_chunk must be 4096 to 67108864 bytes, not 4095" },
    })
  end)
end)
