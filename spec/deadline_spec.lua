-- Deadlines and cancel: opts.timeout and xfer.config's timeout end a move as `timeout` at its
-- deadline -- between its steps, and in a device's wait (the "stall" fault: a wait that never
-- sees its work done) -- leaving its target not valid until written again and the memory a
-- stalled device may still write held until the device is done; job:cancel() returns once
-- nothing more writes into the job's targets, the job then `canceled`.
local xfer = require "xfer"
local h = require "support.helpers"

local devices = {}
for _, d in ipairs(xfer.devices()) do
  if d.runtime ~= "remote" then devices[#devices + 1] = d end
end

local N = 2^22 -- u32: 16 MiB

describe("deadlines #deadline", function()
  after_each(function()
    xfer.faults.clear()
    xfer.config({ timeout = 0 })
  end)

  it("says what a timeout must be", function()
    local t = xfer.arange(4)
    for _, bad in ipairs({ 0, -1, 1e9, "1", true, 0 / 0 }) do
      local e = h.raises("invalid", t.to, t, "host", { timeout = bad })
      assert.is_truthy(tostring(e):find("'timeout' must be seconds", 1, true), tostring(e))
    end
    assert.is_true(t:to("host", { timeout = false }):equals(t)) -- false: none
    local e = h.raises("invalid", xfer.config, { timeout = -2 })
    assert.is_truthy(tostring(e):find("timeout must be 0 (none) or 0.001 to 86400 seconds", 1, true),
                     tostring(e))
    xfer.config({ timeout = 30 })
    assert.are.equal(30, xfer.config().timeout)
  end)

  it("ends a move past its deadline between its steps, its target not valid until written", function()
    h.no_setaside()
    local src = xfer.arange(N, { dtype = "u32" })
    for _, d in ipairs(devices) do
      local dst = xfer.zeros({ N }, { dtype = "u32", device = d })
      local e = h.raises("timeout", dst.copy_from, dst, src, { timeout = 1e-6 })
      -- stopped between steps, or (a slow start: caching off) in the device's first wait
      if e.op == "deadline" then
        assert.is_truthy(tostring(e):find("passed its deadline (1e-06 s)", 1, true), tostring(e))
      else
        assert.is_truthy(tostring(e):find("had not done its work by the move's deadline", 1, true), tostring(e))
      end
      assert.are.equal(src.device.name, e.from)
      assert.are.equal(d.name, e.to)
      -- not valid: reading it, or moving from it, says so
      local r = h.raises("invalid", dst.tobytes, dst)
      assert.is_truthy(tostring(r):find("holds no valid bytes: a move into it ended timeout", 1, true),
                       tostring(r))
      h.raises("invalid", dst.to, dst, "host")
      dst:copy_from(src) -- written again: valid
      assert.is_true(dst:equals(src), d.name)
      -- a new tensor of to() that timed out is not made at all
      h.raises("timeout", src.to, src, d, { timeout = 1e-6 })
    end
  end)

  it("sets no path aside for moves that ran out of their callers' deadlines", function()
    -- a deadline shorter than the move is the caller's budget, not the path's failure: counted
    -- as one, three short deadlines set a pair's interop path aside on the H100, and its 1 GiB
    -- batch of 16 KiB pieces then ran element by element (246 ms where one submission takes 1.9)
    local src = xfer.arange(N, { dtype = "u32" })
    local runs = xfer.config().setaside_after + 1
    for _, d in ipairs(devices) do
      local there = src:to(d)
      for _, pair in ipairs({ { src, d }, { there, "host" }, { there, d } }) do
        local dst = xfer.zeros({ N }, { dtype = "u32", device = pair[2] })
        for _ = 1, runs do
          local ok, e = pcall(dst.copy_from, dst, pair[1], { timeout = 1e-6 })
          assert.is_true(ok or e.code == "timeout", tostring(e))
        end
        -- and a device that does not finish by the deadline (the stall fault), while the rule
        -- lasts (clearing it forgets what injected faults set aside)
        if d.runtime ~= "host" then
          xfer.faults.inject({ runtime = d.runtime, op = "stall", count = runs })
          for _ = 1, runs do pcall(dst.copy_from, dst, pair[1], { timeout = 0.02 }) end
          local aside = xfer.health().set_aside
          xfer.faults.clear()
          assert.are.same({}, aside, d.name)
        end
        assert.are.same({}, xfer.health().set_aside, d.name)
        dst:copy_from(pair[1])
        assert.is_true(dst:equals(pair[1]), d.name)
      end
    end
  end)

  it("takes xfer.config's timeout unless a move's own says otherwise", function()
    local src = xfer.arange(N, { dtype = "u32" })
    xfer.config({ timeout = 1e-3 })
    local d = devices[#devices]
    local dst = xfer.zeros({ N }, { dtype = "u32", device = d })
    local e = h.raises("timeout", dst.copy_from, dst, src, { timeout = 1e-6 })
    -- the move's own deadline (or, with a slow start, the device's first wait past it)
    assert.is_truthy(tostring(e):find("(1e-06 s)", 1, true) or
                     tostring(e):find("had not done its work by the move's deadline", 1, true), tostring(e))
    dst:copy_from(src, { timeout = false }) -- none
    assert.is_true(dst:equals(src))
    dst:copy_from(src, { timeout = 60 })
    assert.is_true(dst:equals(src))
  end)

  it("ends a device's wait that never sees its work done at the deadline (the stall fault)", function()
    h.no_setaside()
    local host = xfer.device("host")
    for _, d in ipairs(devices) do
      if d ~= host then
        -- within the device, host to it, and back: each path that waits for the device
        for _, case in ipairs({ "within", "to", "from" }) do
          local src = xfer.arange(N, { dtype = "u32" })
          if case ~= "to" then src = src:to(d) end
          local dst = xfer.zeros({ N }, { dtype = "u32", device = case == "from" and host or d })
          xfer.faults.inject({ runtime = d.runtime, op = "stall" })
          local t0 = xfer.clock()
          local ok, e = pcall(dst.copy_from, dst, src, { timeout = 0.2 })
          local took = xfer.clock() - t0
          local waited = #xfer.faults.list() == 0 -- the rule was used: a wait of the device
          xfer.faults.clear()
          local what = d.name .. " " .. case
          if waited then
            assert.is_false(ok, what)
            assert.are.equal("timeout", e.code, tostring(e))
            assert.is_truthy(tostring(e):find("had not done its work by the move's deadline", 1, true),
                             tostring(e))
            assert.is_true(took >= 0.2 and took < 2, what .. (": %.3f s"):format(took))
            h.raises("invalid", dst.tobytes, dst)
          else -- a path with no wait of its own (lavapipe's mapped memory: a memcpy)
            assert.is_true(ok, tostring(e))
          end
          -- the device goes on: the next move lands whole, the stalled target freed and reused
          dst:copy_from(src)
          assert.is_true(dst:equals(src), what)
          dst:free()
        end
      end
    end
  end)

  it("holds what is freed while a device is stalled -- any device's memory -- until a move finds it done", function()
    h.no_setaside()
    local host = xfer.device("host")
    local function held() -- bytes held, on every device
      local n = 0
      for _, d in ipairs(devices) do n = n + d:memory().held end
      return n
    end
    local stalled = 0
    for _, d in ipairs(devices) do
      if d ~= host then
        local from = xfer.arange(N, { dtype = "u32" })
        local a = from:to(d)
        local b = xfer.zeros({ N }, { dtype = "u32", device = d })
        local dst = xfer.zeros({ N }, { dtype = "u32", device = d })
        local other = xfer.zeros({ N }, { dtype = "u32", device = host }) -- no part of the move
        local t0 = xfer.clock() -- an earlier test's stalled device, done by now: let go
        while held() > 0 and xfer.clock() - t0 < 10 do b:copy_from(a) end
        assert.are.equal(0, held(), d.name)
        xfer.faults.inject({ runtime = d.runtime, op = "stall" })
        local ok, e = pcall(dst.copy_from, dst, a, { timeout = 0.05 })
        local waited = #xfer.faults.list() == 0
        local in_use = d:memory().in_use
        if waited then -- (lavapipe's mapped memory has no wait to stall)
          stalled = stalled + 1
          assert.is_false(ok, d.name)
          assert.are.equal("timeout", e.code, tostring(e))
          dst:free()
          from:free()
          other:free()
          -- the stalled work may use what it was given, and which that was is not known
          -- where memory is freed: all held, counted still (the stall fault's device is not
          -- done until the rules change)
          assert.are.equal(4 * N, d:memory().held, d.name)
          assert.are.equal(in_use, d:memory().in_use, d.name)
          assert.is_true(host:memory().held >= 8 * N, d.name)
          b:copy_from(a) -- a move meanwhile: the device is held still
          assert.are.equal(4 * N, d:memory().held, d.name)
        end
        xfer.faults.clear()
        if waited then
          local t1 = xfer.clock() -- a move on the device lets go once its work is done
          repeat b:copy_from(a) until held() == 0 or xfer.clock() - t1 > 10
          assert.are.equal(0, held(), d.name)
          assert.are.equal(in_use - 4 * N, d:memory().in_use, d.name)
          assert.is_true(b:equals(a), d.name)
        end
        a:free(); b:free(); dst:free(); from:free(); other:free()
      end
    end
    if stalled == 0 then pending("no device here waits for its work (each moved by a memcpy)") end
  end)

  it("ends a load and a save at their deadline: nothing half-loaded, no file left", function()
    local path = os.tmpname() .. ".safetensors"
    local a = xfer.arange(N / 4, { dtype = "u32" }) -- 4 MiB: 64 chunks of 64 KiB
    for _, d in ipairs(devices) do
      local t = a:to(d)
      local e = h.raises("timeout", xfer.save, path, { a = t }, { chunk = 65536, timeout = 1e-6 })
      assert.are.equal("deadline", e.op, d.name)
      assert.is_nil(io.open(path, "rb"), d.name .. ": a file was left")
      xfer.save(path, { a = t }, { chunk = 65536, timeout = 60 })
      e = h.raises("timeout", xfer.load, path, { device = d, chunk = 65536, timeout = 1e-6 })
      assert.are.equal("deadline", e.op, d.name)
      assert.are.equal(path, e.file)
      assert.is_true(xfer.load(path, { device = d, timeout = false }).a:equals(a), d.name)
      xfer.config({ timeout = 0.001 }) -- xfer.config's, where the call gives none
      local t0 = xfer.clock()
      local ok = pcall(xfer.save, path .. ".big", { a = xfer.zeros({ 64 * N }, { dtype = "u8" }) },
                       { chunk = 65536 })
      xfer.config({ timeout = 0 })
      assert.is_false(ok, d.name)
      assert.is_true(xfer.clock() - t0 < 5, d.name)
      os.remove(path)
    end
    local e = h.raises("invalid", xfer.save, path, { a = a }, { timeout = -1 })
    assert.is_truthy(tostring(e):find("'timeout' must be seconds", 1, true), tostring(e))
  end)

  it("ends a load and a save at their deadline while a request still runs (file stall): its memory held until it lands", function()
    local path = os.tmpname() .. ".safetensors"
    local a = xfer.arange(N / 4, { dtype = "u32" }) -- 4 MiB in requests of 1 MiB
    xfer.save(path, { a = a }, { chunk = 1048576 })
    local host = xfer.device("host")
    local function settled(before)
      for _ = 1, 200 do -- the stalled request lands 0.3 s after its move stopped, then its memory goes
        collectgarbage("collect")
        local m = host:memory()
        if m.in_use == before and m.held == 0 then return true end
        local t = xfer.clock()
        while xfer.clock() - t < 0.01 do end
      end
      return false
    end
    collectgarbage("collect")
    local before = host:memory().in_use
    -- the load's first request answers only 0.3 s after the load gave up on it
    xfer.faults.inject({ runtime = "file", op = "stall" })
    local t0 = xfer.clock()
    local e = h.raises("timeout", xfer.load, path, { engine = "threads", chunk = 1048576, timeout = 0.05 })
    local took = xfer.clock() - t0
    assert.are.equal(0, #xfer.faults.list(), "the stall rule was not used")
    assert.are.equal(path, e.file)
    assert.is_true(took < 0.3, ("the load waited for its stalled read: %.3f s"):format(took))
    -- what the read lands in is held (its chunks), then let go once it landed
    collectgarbage("collect")
    assert.is_true(host:memory().in_use > before, "the chunks a read still lands in were let go")
    assert.is_true(host:memory().held > 0, "the chunks a read still lands in are not said held")
    assert.is_true(settled(before), "the chunks were never let go")
    assert.is_true(xfer.load(path, { engine = "threads" }).a:equals(a))
    -- a save's write alike: no file left, its buffers held until the write is through
    os.remove(path)
    collectgarbage("collect")
    before = host:memory().in_use
    xfer.faults.inject({ runtime = "file", op = "stall" })
    t0 = xfer.clock()
    h.raises("timeout", xfer.save, path, { a = a }, { engine = "threads", chunk = 1048576, timeout = 0.05 })
    took = xfer.clock() - t0
    assert.is_true(took < 0.3, ("the save waited for its stalled write: %.3f s"):format(took))
    assert.is_nil(io.open(path, "rb"), "a file was left")
    assert.is_true(settled(before), "the save's buffers were never let go")
    assert.is_nil(io.open(path, "rb"), "the late write left a file")
  end)

  it("keeps a watched load's and save's requests in flight few (they are waited for when it stops)", function()
    local path = os.tmpname() .. ".safetensors"
    local a = xfer.zeros({ 16 * N }, { dtype = "u8" })
    xfer.save(path, { a = a }, { timeout = 60 })
    local saved = xfer.file_route()
    assert.is_true(saved.depth * saved.chunk <= 8 * 1048576 or saved.depth == 2, saved.reason)
    xfer.load(path)
    local plain = xfer.file_route()
    assert.is_true(xfer.load(path, { timeout = 60 }).a:equals(a))
    local watched = xfer.file_route()
    assert.is_true(watched.depth * watched.chunk <= 8 * 1048576 or watched.depth == 2, watched.reason)
    assert.is_true(watched.depth <= plain.depth, watched.reason)
    if plain.depth * plain.chunk > 8 * 1048576 then
      assert.is_truthy(watched.reason:find("(watched: canceled or timed, it stops within them)", 1, true), watched.reason)
    end
    -- a depth asked for is kept
    xfer.load(path, { timeout = 60, depth = 16 })
    assert.are.equal(16, xfer.file_route().depth)
    os.remove(path)
  end)

  it("stops a batch run between its groups past the deadline, its targets left not valid", function()
    local d = devices[#devices]
    local src = xfer.arange(N, { dtype = "u32" })
    local dst = xfer.zeros({ N }, { dtype = "u32", device = d })
    local other = xfer.zeros({ N }, { dtype = "u32", device = "host" })
    local b = xfer.batch({ { dst = dst, src = src }, { dst = other, src = src } }, { timeout = 1e-6 })
    local e = h.raises("timeout", b.run, b)
    assert.is_number(e.element)
    h.raises("invalid", dst.tobytes, dst)
    xfer.batch({ { dst = dst, src = src }, { dst = other, src = src } }):run()
    assert.is_true(dst:equals(src) and other:equals(src))
  end)
end)

describe("cancel #deadline", function()
  it("returns once the job is through: canceled, or done before it was asked", function()
    local src = xfer.arange(16 * N, { dtype = "u32" }) -- 256 MiB: steps of 64 MiB
    local d = devices[#devices]
    local canceled, done = 0, 0
    for _ = 1, 6 do
      local job = src:to_async(d)
      job:cancel()
      assert.is_true(job:done()) -- cancel returned: the job is through
      local ok, e = pcall(job.wait, job)
      if ok then
        done = done + 1
        assert.is_true(e:equals(src))
      else
        canceled = canceled + 1
        assert.are.equal("canceled", e.code, tostring(e))
        assert.are.equal("cancel", e.op)
      end
      job:cancel() -- a no-op once ended
    end
    assert.is_true(canceled > 0, ("%d canceled, %d done"):format(canceled, done))
  end)

  it("cancels a batch run: its elements not done are not valid", function()
    local d = devices[#devices]
    local src = xfer.arange(4 * N, { dtype = "u32" })
    local items, dsts = {}, {}
    for i = 1, 8 do
      dsts[i] = xfer.zeros({ 4 * N }, { dtype = "u32", device = d })
      items[i] = { dst = dsts[i], src = src }
    end
    local b = xfer.batch(items)
    local job = b:run_async()
    job:cancel()
    local ok, e = pcall(job.wait, job)
    if not ok then assert.are.equal("canceled", e.code, tostring(e)) end
    local done = b:done()
    for i = 1, 8 do
      if done[i] then assert.is_true(dsts[i]:equals(src), i)
      elseif not ok then h.raises("invalid", dsts[i].tobytes, dsts[i]) end
    end
  end)

  it("stops a batch going element by element between its elements", function()
    -- a group whose runner is set aside runs element by element (as a 1 GiB cuda:0 -> vulkan:0
    -- batch of 16 KiB pieces did on the H100: a quarter of a second, which a cancel waited out,
    -- its elements' interop moves looking at no flag): the run looks between elements
    local count, block = 65536, 256
    local src = xfer.full({ count * block }, 7, { dtype = "u8" })
    local dst = xfer.zeros({ count * block }, { dtype = "u8" })
    local blocks = {}
    for i = 1, count do blocks[i] = i - 1 end
    local b = xfer.batch({ dst = dst, src = src, src_blocks = blocks, dst_blocks = blocks, block_bytes = block })
    for _ = 1, xfer.config().setaside_after do
      xfer.faults.inject({ runtime = "host", op = "copy", count = 1 })
      pcall(b.run, b)
      if #xfer.health().set_aside > 0 then break end
    end
    assert.are.equal(1, #xfer.health().set_aside)
    local partly = 0
    for k = 1, 20 do
      local job = b:run_async()
      local at = xfer.clock() + 0.0005 * k -- a run takes about 20 ms here: canceled part way
      while xfer.clock() < at do end
      job:cancel()
      local ok, e = pcall(job.wait, job)
      local done, n = b:done(), 0
      for i = 1, count do n = n + (done[i] and 1 or 0) end
      if not ok then
        assert.are.equal("canceled", e.code, tostring(e))
        if n > 0 and n < count then partly = partly + 1 end
      end
    end
    xfer.faults.clear() -- the set-aside is over
    assert.is_true(partly > 0, "no cancel stopped the group between its elements")
  end)

  it("cancels a load and a save: nothing loaded kept, no file left; done ones whole", function()
    local path = os.tmpname() .. ".safetensors"
    local big = xfer.arange(4 * N, { dtype = "u32" }) -- 64 MiB in requests of 64 KiB
    local opts = { chunk = 65536 }
    local canceled = 0
    for _, d in ipairs(devices) do
      local there = big:to(d)
      local job = xfer.save_async(path, { big = there }, opts)
      job:cancel()
      assert.is_true(job:done(), d.name)
      local ok, e = pcall(job.wait, job)
      if ok then
        assert.is_true(xfer.load(path).big:equals(big), d.name)
      else
        canceled = canceled + 1
        assert.are.equal("canceled", e.code, tostring(e))
        assert.is_nil(io.open(path, "rb"), d.name .. ": a file was left")
        -- nor its temporary file's name (its blocks are let go on a helper thread)
        local dir, base = path:match("^(.*)/([^/]*)$")
        local ls = io.popen("ls -a '" .. dir .. "'")
        local listing = ls:read("*a")
        ls:close()
        assert.is_nil(listing:find("." .. base .. ".xfer-", 1, true), d.name .. ": a temporary file was left")
        xfer.save(path, { big = big }, opts)
      end
      there:free() -- (no longer busy: the job is through)
      collectgarbage("collect")
      local in_use = d:memory().in_use
      job = xfer.load_async(path, { device = d, chunk = 65536 })
      job:cancel()
      ok, e = pcall(job.wait, job)
      if ok then
        assert.is_true(e.big:equals(big), d.name)
      else
        canceled = canceled + 1
        assert.are.equal("canceled", e.code, tostring(e))
        collectgarbage("collect")
        assert.are.equal(in_use, d:memory().in_use - d:memory().held, d.name .. ": a load kept memory")
      end
      os.remove(path)
    end
    assert.is_true(canceled > 0, "no load or save was canceled")
    -- whole when not canceled, verified; a Lua progress callback cannot run on a job's thread
    local job = xfer.save_async(path, { a = big }, { verify = true, timeout = 60 })
    assert.is_true(job:wait())
    assert.is_true(xfer.load_async(path, { verify = true }):wait().a:equals(big))
    local f = xfer.open(path)
    local lj = f:load_async({ names = { "a" } })
    f:close() -- the job reads its own opening of the file
    assert.is_true(lj:wait().a:equals(big))
    local e = h.raises("invalid", xfer.load_async, path, { progress = function() end })
    assert.is_truthy(tostring(e):find("cannot run on the job's thread", 1, true), tostring(e))
    h.raises("invalid", xfer.save_async, path, { a = big }, { progress = function() end })
    os.remove(path)
  end)
end)
