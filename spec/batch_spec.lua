-- Batches: many copies as one (xfer.batch, xfer.copy_many, xfer.move_many, t:copy_blocks) on
-- every pair of devices here, their bad input, and a failure in the middle of one.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

-- bytes of a u8 tensor as a Lua string
local function bytes_of(t) return t:tobytes() end

-- a u8 tensor of n bytes on dev, byte i = (i * 7 + seed) % 251
local function pattern(n, dev, seed)
  local s = {}
  for i = 0, n - 1 do s[#s + 1] = string.char((i * 7 + seed) % 251) end
  return xfer.tensor(table.concat(s), { dtype = "u8", device = dev })
end

describe("batches", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function() xfer.faults.clear() end)

  it("copy_blocks moves blocks between every two devices, others untouched", function()
    local block, nblocks = 64, 16
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        local src = pattern(block * nblocks, a, 3)
        local dst = xfer.zeros({ block * nblocks }, { dtype = "u8", device = b })
        local src_blocks, dst_blocks = { 5, 0, 15, 7 }, { 1, 14, 2, 9 }
        dst:copy_blocks(src, src_blocks, dst_blocks, block)
        local want = {}
        for i = 1, block * nblocks do want[i] = 0 end
        local s = bytes_of(src)
        for k = 1, #src_blocks do
          for j = 1, block do
            want[dst_blocks[k] * block + j] = s:byte(src_blocks[k] * block + j)
          end
        end
        assert.are.same(want, { bytes_of(dst):byte(1, -1) }, a.name .. " -> " .. b.name)
        assert.are.equal(s, bytes_of(src), "the source is untouched")
        src:free()
        dst:free()
      end
    end
  end)

  it("takes block ranges {first, count}", function()
    local src = pattern(256, host, 1)
    for _, dev in ipairs(xfer.devices()) do
      local dst = xfer.zeros({ 256 }, { dtype = "u8", device = dev })
      dst:copy_blocks(src, { first = 2, count = 2 }, { first = 0, count = 2 }, 32)
      assert.are.equal(bytes_of(src):sub(65, 128), bytes_of(dst):sub(1, 64), dev.name)
      assert.are.equal(string.rep("\0", 192), bytes_of(dst):sub(65), dev.name)
      dst:free()
    end
  end)

  it("copy_many copies whole tensors of any shapes, dtypes and devices in one call", function()
    local devs = xfer.devices()
    local items, pairs_made = {}, {}
    for i, a in ipairs(devs) do
      for j, b in ipairs(devs) do
        local src = xfer.arange(i * 10 + j, { dtype = "f32", device = a })
        local dst = xfer.zeros({ i * 10 + j }, { dtype = "f32", device = b })
        items[#items + 1] = { dst, src }
        pairs_made[#pairs_made + 1] = { dst, src }
      end
    end
    -- a view and a dtype change ride along, moved as copy_from moves them
    local m = xfer.arange(12, { dtype = "f32" }):view({ 3, 4 })
    local v = m:slice({ { 1, -1, 2 } })
    local vdst = xfer.zeros({ 2, 4 }, { dtype = "f32", device = devs[#devs] })
    local conv = xfer.zeros({ 3 }, { dtype = "i32", device = devs[#devs] })
    items[#items + 1] = { vdst, v }
    items[#items + 1] = { conv, xfer.tensor({ 1.0, 2.0, 3.0 }) }
    xfer.copy_many(items)
    for _, p in ipairs(pairs_made) do assert.is_true(p[1]:equals(p[2])) end
    assert.are.same({ { 0, 1, 2, 3 }, { 8, 9, 10, 11 } }, vdst:totable())
    assert.are.same({ 1, 2, 3 }, conv:totable())
  end)

  it("a prepared batch runs again and again, planned once, copying what the sources hold now", function()
    for _, dev in ipairs(xfer.devices()) do
      local src = pattern(1024, host, 0)
      local dst = xfer.zeros({ 1024 }, { dtype = "u8", device = dev })
      local b = xfer.batch({ dst = dst, src = src, src_blocks = { 0, 3 }, dst_blocks = { 3, 0 },
                             block_bytes = 256 })
      assert.are.equal(2, b.count)
      assert.are.equal(512, b.bytes)
      assert.are.equal(1, b.groups)
      b:run()
      assert.are.same({ true, true }, b:done())
      assert.are.equal(bytes_of(src):sub(1, 256), bytes_of(dst):sub(769, 1024))
      src:fill(9)
      b:run()
      assert.are.equal(string.rep("\9", 256), bytes_of(dst):sub(1, 256))
      assert.is_truthy(tostring(b):match("^xfer%.Batch%(2 elements, 512 bytes, 1 groups, %d at once%)$"))
      b:release()
      assert.are.equal("xfer.Batch(released)", tostring(b))
      h.raises("freed", b.run, b)
      dst:free()
    end
  end)

  it("byte ranges: {dst = , src = , dst_offset = , src_offset = , nbytes = }", function()
    local src = pattern(100, host, 5)
    for _, dev in ipairs(xfer.devices()) do
      local dst = xfer.zeros({ 100 }, { dtype = "u8", device = dev })
      xfer.copy_many({ { dst = dst, src = src, dst_offset = 10, src_offset = 50, nbytes = 7 } })
      assert.are.equal(bytes_of(src):sub(51, 57), bytes_of(dst):sub(11, 17), dev.name)
      dst:free()
    end
  end)

  it("move_many moves a list of tensors to a device", function()
    local list = { xfer.tensor({ 1, 2 }), xfer.tensor({ { 3, 4 }, { 5, 6 } }, { dtype = "i16" }) }
    for _, dev in ipairs(xfer.devices()) do
      local moved = xfer.move_many(list, dev)
      assert.are.equal(2, #moved)
      assert.are.equal(dev, moved[2].device)
      assert.are.equal("i16", moved[2].dtype)
      assert.are.same({ { 3, 4 }, { 5, 6 } }, moved[2]:totable())
      for _, t in ipairs(moved) do t:free() end
    end
  end)

  it("runs a prepared batch as a job, one run at a time, the batch kept alive by the job", function()
    for _, dev in ipairs(xfer.devices()) do
      local src = pattern(2048, host, 4)
      local dst = xfer.zeros({ 2048 }, { dtype = "u8", device = dev })
      local b = xfer.batch({ dst = dst, src = src, src_blocks = { 0, 1 }, dst_blocks = { 7, 6 }, block_bytes = 256 })
      local job = b:run_async()
      -- refused while the job runs (another batch, of 8192 elements and 128 MiB, keeps a job
      -- busy long enough to see it every time; this one may be through already: then the run
      -- is allowed)
      local long_src = xfer.zeros({ 8192 * 16384 }, { dtype = "u8" })
      local long_dst = xfer.zeros({ 8192 * 16384 }, { dtype = "u8", device = dev })
      local long = xfer.batch({ dst = long_dst, src = long_src, src_blocks = { first = 0, count = 8192 },
                                dst_blocks = { first = 0, count = 8192 }, block_bytes = 16384 })
      -- (a thread descheduled for a millisecond sees the job through: the woken job thread
      -- takes the caller's core on a loaded two-core machine, and 20 tries of a 16 MiB batch
      -- all lost so in a fresh-clone CI with caching off on 2026-12-03; five tries of it lost
      -- once before)
      local refused
      for _ = 1, 20 do
        local long_job = long:run_async()
        local ran, e = pcall(long.run, long)
        assert.is_true(long_job:wait())
        if not ran then
          refused = e
          break
        end
      end
      assert.is_true(xfer.is_error(refused), "a run while a job ran was never refused: " .. tostring(refused))
      assert.are.equal("batch: it is running already (a job runs it: wait for the job first)", refused.message)
      long:release()
      long_src:free()
      long_dst:free()
      local ok, e = pcall(b.run, b)
      if ok then
        assert.is_true(job:wait())
      else
        assert.is_true(xfer.is_error(e), tostring(e))
        assert.are.equal("invalid", e.code)
        assert.are.equal("batch: it is running already (a job runs it: wait for the job first)", e.message)
      end
      b:release() -- the job holds its own reference
      assert.is_true(job:wait())
      assert.is_true(job:done())
      assert.are.equal(bytes_of(src):sub(1, 256), bytes_of(dst):sub(1793, 2048), dev.name)
      dst:free()
    end
    assert.is_true(xfer.batch({}):run_async():wait())
  end)

  it("a job's failure is raised by wait, naming the element", function()
    local src, dst = pattern(64, host, 0), xfer.zeros({ 64 }, { dtype = "u8" })
    local b = xfer.batch({ { dst, src } })
    xfer.faults.inject({ runtime = "host", op = "copy" })
    local job = b:run_async()
    local e = h.raises("write", job.wait, job)
    assert.are.equal(1, e.element)
    xfer.faults.clear()
    assert.is_true(b:run_async():wait())
    assert.are.equal(bytes_of(src), bytes_of(dst))
  end)

  it("an empty batch does nothing", function()
    xfer.copy_many({})
    local b = xfer.batch({})
    assert.are.equal(0, b.count)
    b:run()
    assert.are.same({}, b:done())
    assert.are.same({}, xfer.move_many({}, host))
  end)

  -- an empty tensor has no memory behind it: its batch pieces are 0 bytes at NULL, which no
  -- runner may pass on (UBSan caught the host's memcpy(NULL, ..., 0) under the fuzzer)
  it("empty tensors in a batch beside full ones, on every pair: nothing moved for them", function()
    for _, from in ipairs(xfer.devices()) do
      for _, to in ipairs(xfer.devices()) do
        local src, dst = pattern(32, from, 3), xfer.zeros({ 32 }, { dtype = "u8", device = to })
        local empty_src = xfer.zeros({ 0 }, { dtype = "u8", device = from })
        local empty_dst = xfer.zeros({ 0 }, { dtype = "u8", device = to })
        local empty_2d = xfer.zeros({ 4, 0 }, { dtype = "f32", device = to })
        local empty_f32 = xfer.zeros({ 0 }, { dtype = "f32", device = from }) -- converted: moved alone
        local empty_i16 = xfer.zeros({ 0 }, { dtype = "i16", device = to })
        xfer.copy_many({ { empty_dst, empty_src }, { dst, src }, { empty_2d, empty_2d }, { empty_i16, empty_f32 } })
        assert.are.equal(bytes_of(src), bytes_of(dst), from.name .. " -> " .. to.name)
        assert.are.equal(0, #bytes_of(empty_dst))
        for _, t in ipairs({ src, dst, empty_src, empty_dst, empty_2d, empty_f32, empty_i16 }) do t:free() end
      end
    end
  end)

  describe("bad input", function()
    local src, dst
    before_each(function()
      src = pattern(64, host, 0)
      dst = xfer.zeros({ 64 }, { dtype = "u8" })
    end)

    it("names what is wrong", function()
      local cases = {
        { "copy_blocks: 2 source blocks for 1 target blocks", dst.copy_blocks, dst, src, { 0, 1 }, { 0 }, 8 },
        { "copy_blocks: src_blocks[2] = 8 is out of range: the source holds 8 blocks of 8 bytes (numbered from 0)",
          dst.copy_blocks, dst, src, { 0, 8 }, { 0, 1 }, 8 },
        { "copy_blocks: dst_blocks[1] = 99 is out of range", dst.copy_blocks, dst, src, { 0 }, { 99 }, 8 },
        { "copy_blocks: src_blocks[1] must be a whole number >= 0, not -1", dst.copy_blocks, dst, src, { -1 }, { 0 }, 8 },
        { "copy_blocks: block_bytes must be above 0", dst.copy_blocks, dst, src, { 0 }, { 0 }, 0 },
        { "copy_blocks: src_blocks must be a list of block numbers", dst.copy_blocks, dst, src, "0", { 0 }, 8 },
        { "batch: elements 1 and 2 of 2 write the same bytes of a tensor on host", dst.copy_blocks, dst, src, { 0, 1 }, { 3, 3 }, 8 },
        { "batch: elements 1 and 2 of 2: one reads bytes the other writes", dst.copy_blocks, dst, dst, { 0, 1 }, { 1, 2 }, 8 },
        { "copy_many: element 2 must be a table {dst, src}, not a number", xfer.copy_many, { { dst, src }, 3 } },
        { "copy_many: element 1: its src must be an xfer.Tensor, not a nil", xfer.copy_many, { { dst } } },
        { "copy_many: a list of {dst, src} elements is needed, not a string", xfer.copy_many, "x" },
        { "batch: element 1 of 1: one shape is needed at both ends: target u8[64], source f32[2]", xfer.copy_many,
          { { dst, xfer.tensor({ 1, 2 }) } } },
        { "batch: element 1 of 1: bytes 60 to 70 are outside the target (64 bytes)", xfer.copy_many,
          { { dst = dst, src = src, dst_offset = 60, nbytes = 10 } } },
        { "batch: element 1 of 1: offsets need a byte count", xfer.copy_many, { { dst = dst, src = src, dst_offset = 4 } } },
        { "copy_many: element 1's nbytes must be a whole number >= 0, not 1.5", xfer.copy_many,
          { { dst = dst, src = src, nbytes = 1.5 } } },
        { "batch: element 1 of 1: byte ranges need contiguous tensors", xfer.copy_many,
          { { dst = dst, src = src:view({ 8, 8 }):slice({ { 1, -1, 2 } }), nbytes = 4 } } },
        { "copy_many: a dtype change is made by the targets' dtypes", xfer.copy_many, { { dst, src } }, { dtype = "f32" } },
      }
      for _, case in ipairs(cases) do
        local e = h.raises("invalid", (table.unpack or unpack)(case, 2))
        assert.is_truthy(e.message:find(case[1], 1, true), e.message .. "\n  expected: " .. case[1])
      end
      assert.are.equal(string.rep("\0", 64), bytes_of(dst), "nothing was copied")
    end)

    it("a freed tensor in the middle is named, the elements before it done, nothing else", function()
      local gone = pattern(8, host, 1)
      local a, b, c = xfer.zeros({ 8 }, { dtype = "u8" }), xfer.zeros({ 8 }, { dtype = "u8" }), xfer.zeros({ 8 }, { dtype = "u8" })
      local batch = xfer.batch({ { a, src:view({ 8, 8 })[1] }, { b, gone }, { c, src:view({ 8, 8 })[2] } })
      gone:free()
      local e = h.raises("freed", batch.run, batch)
      assert.are.equal(2, e.element)
      assert.are.equal("batch element 2 of 3: attempt to use a freed tensor", e.message)
      local done = batch:done()
      assert.is_false(done[2])
      assert.is_false(done[1] and done[3], "the group with the freed tensor did not run")
      h.raises("freed", xfer.batch, { { a, gone } })
    end)
  end)

  it("a fault in a batch names the element and its ends; the sources are intact and nothing is left", function()
    h.no_setaside()
    for _, dev in ipairs(xfer.devices()) do
      if dev ~= host then
        local before = h.in_use(dev)
        local src = pattern(4096, host, 2)
        local dst = xfer.zeros({ 4096 }, { dtype = "u8", device = dev })
        local b = xfer.batch({ dst = dst, src = src, src_blocks = { first = 0, count = 8 },
                               dst_blocks = { 7, 6, 5, 4, 3, 2, 1, 0 }, block_bytes = 512 })
        xfer.faults.inject({ runtime = dev.runtime, op = "write", count = 100 })
        local ok, e = pcall(b.run, b)
        xfer.faults.clear()
        if ok then -- the runtime took the batch in one call, which no write fault reaches
          assert.is_true(b.at_once >= 1, dev.name)
        else
          assert.is_true(xfer.is_error(e), tostring(e))
          assert.are.equal("write", e.code, e.message)
          assert.are.equal("host", e.from)
          assert.are.equal(dev.name, e.to)
          assert.is_true(e.injected)
          assert.is_true(e.element >= 1 and e.element <= 8)
          assert.is_truthy(e.message:match("^batch element %d of 8: Failed to write a tensor to " .. dev.name), e.message)
          assert.is_false(b:done()[e.element])
        end
        assert.are.equal(string.char(2), bytes_of(src):sub(1, 1))
        b:run() -- and runs whole once the fault is gone
        assert.are.same({ true, true, true, true, true, true, true, true }, b:done())
        b:release()
        dst:free()
        assert.are.equal(before, h.in_use(dev), "nothing left on " .. dev.name)
      end
    end
  end)

  it("between devices that share no memory: packed into host memory and scattered, two submissions", function()
    h.no_setaside()
    local tried = 0
    for _, a in ipairs(xfer.devices()) do
      for _, b in ipairs(xfer.devices()) do
        local probe = xfer.empty({ 4 }, { dtype = "u8", device = a })
        local staged = a ~= host and b ~= host and xfer.plan(probe, b).path == "staged"
        probe:free()
        if staged then
          tried = tried + 1
          local before_a, before_b, before_h = h.in_use(a), h.in_use(b), h.in_use(host)
          -- the packed host memory 1.25 MiB: CUDA pins it even with caching off
          local made = h.scattered_batch(a, b, 65536, 32, 20)
          local bt, src, dst, seed = made.batch, made.src, made.dst, made.seed
          bt:run()
          assert.are.equal(1, bt.at_once, a.name .. " -> " .. b.name)
          assert.is_nil(made.check(dst:tobytes()))
          -- a fault in the packing or the scattering submission fails the group whole
          for _, rt in ipairs({ a.runtime, b.runtime }) do
            xfer.faults.inject({ runtime = rt, op = "copy", count = 100 })
            local ok, e = pcall(bt.run, bt)
            xfer.faults.clear()
            if not ok then
              assert.is_true(xfer.is_error(e), tostring(e))
              assert.are.equal(1, e.element)
              assert.are.equal(a.name, e.from)
              assert.are.equal(b.name, e.to)
              assert.is_false(bt:done()[1])
            end
          end
          bt:run()
          assert.are.equal(seed, src:tobytes(), "the source is untouched")
          bt:release()
          src:free()
          dst:free()
          -- more than one chunk of host memory (16 MiB): packing overlaps scattering, pieces
          -- cut at the chunks' edges
          local big = h.scattered_batch(a, b, 3 * 1024 * 1024 + 7, 13, 12)
          big.batch:run()
          assert.are.equal(1, big.batch.at_once)
          assert.is_nil(big.check(big.dst:tobytes()))
          -- a fault in the second chunk of either side: the group fails whole, the other side
          -- stops, and the next run is whole
          for _, rt in ipairs({ a.runtime, b.runtime }) do
            xfer.faults.inject({ runtime = rt, op = "copy", nth = 2 })
            local ok, e = pcall(big.batch.run, big.batch)
            xfer.faults.clear()
            if not ok then
              assert.is_true(xfer.is_error(e), tostring(e))
              assert.is_true(e.injected)
              assert.are.equal(1, e.element)
            end
            big.dst:zero()
            big.batch:run()
            assert.is_nil(big.check(big.dst:tobytes()))
          end
          big.batch:release()
          big.src:free()
          big.dst:free()
          collectgarbage()
          assert.are.equal(before_a, h.in_use(a))
          assert.are.equal(before_b, h.in_use(b))
          assert.are.equal(before_h, h.in_use(host), "the packed host memory went back")
        end
      end
    end
    if tried == 0 then pending("no two devices here move by staging") end
  end)

  it("host batches go to the host at once, and a host fault there names the first element", function()
    local src, dst = pattern(64, host, 0), xfer.zeros({ 64 }, { dtype = "u8" })
    local b = xfer.batch({ dst = dst, src = src, src_blocks = { 0, 1 }, dst_blocks = { 1, 0 }, block_bytes = 32 })
    assert.are.equal(1, b.at_once)
    xfer.faults.inject({ runtime = "host", op = "copy" })
    local e = h.raises("write", b.run, b)
    assert.are.equal(1, e.element)
    assert.are.equal("copy", e.op)
    assert.are.same({ false, false }, b:done())
  end)

  -- Alike view elements (one tensor's views into another's, one layout) share one plan, made
  -- once; an element that differs in between makes its own, and every element moves its bytes.
  it("alike view elements, planned once, each move their own bytes, on every pair", function()
    for _, a in ipairs(xfer.devices()) do
      for _, d in ipairs(xfer.devices()) do
        local src = xfer.arange(8 * 6 * 2, { dtype = "f32", device = a }):view({ 8, 6, 2 })
        local dst = xfer.zeros({ 8, 6 }, { dtype = "f32", device = d })
        local odd = xfer.zeros({ 6 }, { dtype = "f64", device = d })
        local items = {}
        for i = 1, 8 do items[#items + 1] = { dst[i], src[i]:select(2, 1) } end -- strided rows
        table.insert(items, 4, { odd, src[2]:select(2, 2) }) -- another dtype: a plan of its own
        local b = xfer.batch(items)
        b:run()
        local host = xfer.device("host")
        local want = src:to(host):totable()
        local got = dst:to(host):totable()
        for i = 1, 8 do
          for j = 1, 6 do assert.are.equal(want[i][j][1], got[i][j], a.name .. " -> " .. d.name .. " row " .. i) end
        end
        local o = odd:to(host):totable()
        for j = 1, 6 do assert.are.equal(want[2][j][2], o[j]) end
        local plans = b:plan()
        assert.are.same(plans[1].steps, plans[3].steps)
        assert.are.same(plans[1].steps, plans[#plans].steps)
      end
    end
  end)

  -- The ledger keys a group run at once by its runner too: its failures set aside that runner
  -- for the pair and path, not the path every other move of the pair takes.
  it("a group whose runner keeps failing is set aside for it and runs element by element", function()
    local src, dst = pattern(256, host, 3), xfer.zeros({ 256 }, { dtype = "u8" })
    local b = xfer.batch({ dst = dst, src = src, src_blocks = { 0, 1, 2 }, dst_blocks = { 3, 2, 1 }, block_bytes = 64 })
    local move = b:plan()[1].moves[1]
    assert.are.same({ from = "host", to = "host", path = "same_device", runner = "host" }, move)
    local function rows(list)
      local out = {}
      for _, r in ipairs(list) do
        if r.from == "host" and r.to == "host" then out[#out + 1] = (r.runner or "") .. ":" .. r.path end
      end
      table.sort(out)
      return table.concat(out, " ")
    end
    -- one failure sets it aside where the error will not go away by itself, else setaside_after
    for _ = 1, xfer.config().setaside_after do
      xfer.faults.inject({ runtime = "host", op = "copy", count = 1 })
      h.raises("write", b.run, b)
      if #xfer.health().set_aside > 0 then break end
    end
    local aside = xfer.health().set_aside
    assert.are.equal("host:same_device", rows(aside), "set aside: the runner, for this pair and path")
    assert.is_truthy(aside[1].reason:match("injected"), aside[1].reason)
    xfer.stats_reset()
    b:run() -- the rule is used up; the runner is still set aside: one element at a time
    assert.are.equal(":same_device", rows(xfer.stats()))
    local want = src:tobytes()
    assert.are.equal(want:sub(1, 64) .. want:sub(65, 128) .. want:sub(129, 192),
                     dst:tobytes():sub(193, 256) .. dst:tobytes():sub(129, 192) .. dst:tobytes():sub(65, 128))
    xfer.faults.clear() -- what injected faults set aside is over
    xfer.stats_reset()
    b:run()
    assert.are.equal("host:same_device", rows(xfer.stats()))
    assert.are.same({}, xfer.health().set_aside)
  end)
end)
