-- Integrity: t:crc32c() and `verify`, the bytes of a move checked once they arrived, on every
-- device here; and the "corrupt" fault, which flips one bit of a move's target after the move
-- (what a link that corrupts leaves behind), silent without `verify`, `corrupt` with it.
local xfer = require "xfer"
local h = require "support.helpers"

local devices = {}
for _, d in ipairs(xfer.devices()) do
  if d.runtime ~= "remote" then devices[#devices + 1] = d end
end

-- a script in a file of its own, for a process of its own
local function script_file(text)
  local file = os.tmpname()
  local f = assert(io.open(file, "w"))
  f:write(text)
  f:close()
  return file
end

-- the devices that sum with a kernel of their own: every one but the host
local function kernel_devices()
  local names = {}
  for _, d in ipairs(devices) do
    if d.runtime ~= "host" then names[#names + 1] = d.name end
  end
  return names
end

describe("integrity #integrity", function()
  after_each(function() xfer.faults.clear() end)

  it("computes CRC32C as everyone does: the check value, the empty string, any length", function()
    assert.are.equal(0xe3069283, xfer.tensor("123456789", { dtype = "u8" }):crc32c())
    assert.are.equal(0, xfer.zeros({ 0 }, { dtype = "u8" }):crc32c())
    assert.are.equal(0x8a9136aa, xfer.zeros({ 32 }, { dtype = "u8" }):crc32c()) -- RFC 3720 B.4
    assert.are.equal(0x62a8ab43, xfer.full({ 32 }, 255, { dtype = "u8" }):crc32c())
  end)

  it("gives the instruction's sums and the tables' alike, at every length and alignment", function()
    local script = [[
      local xfer = require "xfer"
      local s = {}
      for i = 1, 100011 do s[i] = string.char((i * 7919) % 251) end
      local bytes = table.concat(s)
      local out = {}
      -- past 3 x 4096 bytes the instruction runs three streams and joins them
      for _, len in ipairs({ 1, 7, 8, 9, 63, 64, 65, 1000, 4099, 12287, 12288, 12289, 24583, 100000 }) do
        for _, from in ipairs({ 1, 2, 3, 8 }) do
          if from + len - 1 <= #bytes then
            out[#out + 1] = xfer.tensor(bytes:sub(from, from + len - 1), { dtype = "u8" }):crc32c()
          end
        end
      end
      print(table.concat(out, ","))
    ]]
    local file = script_file(script)
    local by_cpu, c1 = h.run(h.xferlua() .. " " .. file)
    local by_tables, c2 = h.run("XFER_CRC_TABLES=1 " .. h.xferlua() .. " " .. file)
    os.remove(file)
    assert.are.equal(0, c1, by_cpu)
    assert.are.equal(0, c2, by_tables)
    assert.is_truthy(by_cpu:match("^%d+,"), by_cpu)
    assert.are.equal(by_cpu, by_tables)
  end)

  it("sums a view's elements in order, as its packed copy's", function()
    local m = xfer.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }, { dtype = "f32" })
    local col = m:slice({ {}, { 2, 4, 2 } }) -- columns 2 and 4: a strided view
    assert.are.equal(col:contiguous():crc32c(), col:crc32c())
    for _, d in ipairs(devices) do
      local there = m:to(d)
      assert.are.equal(m:crc32c(), there:crc32c(), d.name)
    end
  end)

  it("has each device with a kernel sum its own memory, as the host sums the same bytes", function()
    local summers = kernel_devices()
    if #summers == 0 then return pending("no device here but the host") end
    -- a device of the host's memory (PoCL, lavapipe) is read and summed by the CPU unless
    -- XFER_DEVICE_SUMS=1 asks its kernel (CUDA, OpenCL) or compute shader (Vulkan), as a GPU's
    -- is asked
    local script = [[
      local xfer = require "xfer"
      local bytes = xfer.arange(1100001, { dtype = "u32" }):tobytes() -- 4.2 MiB
      for name in ("]] .. table.concat(summers, " ") .. [["):gmatch("%S+") do
        local d = xfer.device(name)
        -- shorter than a thread's stretch, edges of the pieces (4 KiB and 16 KiB: a call of
        -- small ranges has threads of 16 or 64 bytes; 64 KiB) and of 1 MiB, several pieces,
        -- and more than 64 (their sums joined by a table)
        for _, n in ipairs({ 1, 3, 15, 16, 17, 100, 4080, 4095, 4096, 4097, 8192, 16368, 16383,
                             16384, 16385, 65535, 65536, 65537, 2^20 - 1, 2^20, 2^20 + 1,
                             2^21 + 4097, 2^22 + 2^17 + 7, #bytes }) do
          io.write(name, " ", n, " bytes; "); io.flush()
          local host = xfer.tensor(bytes:sub(1, n), { dtype = "u8" })
          assert(host:crc32c() == host:to(d):crc32c(), name .. ": " .. n .. " bytes")
        end
        local there = xfer.tensor(bytes, { dtype = "u8" }):to(d)
        -- windows at every alignment: a thread's stretch starts where a word does not
        for _, from in ipairs({ 2, 3, 4, 5, 70001, 1048577 }) do
          local len = 1200000 - from
          local window = there:narrow(1, from, len)
          assert(xfer.tensor(bytes:sub(from, from + len - 1), { dtype = "u8" }):crc32c() ==
                 window:crc32c(), name .. ": window from " .. from)
        end
        -- batches of small ranges verified (each device's ranges summed in one call, by
        -- threads of 16, 64 and 256 bytes), and a bit flipped in one of them said
        for _, size in ipairs({ 512, 4096, 5000, 16384, 20000 }) do
          local src = xfer.tensor(bytes:sub(1, 40 * size), { dtype = "u8" })
          local dst = xfer.zeros({ 40 * size }, { dtype = "u8", device = d })
          local list = {}
          for i = 0, 39 do list[#list + 1] = { dst:narrow(1, i * size + 1, size), src:narrow(1, i * size + 1, size) } end
          xfer.copy_many(list, { verify = true })
          assert(dst:crc32c() == src:crc32c(), name .. ": a batch of " .. size .. "-byte ranges")
          xfer.faults.inject({ runtime = d.runtime, op = "corrupt" })
          local ok, e = pcall(xfer.copy_many, list, { verify = true })
          xfer.faults.clear()
          assert(not ok and e.code == "corrupt", name .. ": a flipped bit in a batch of " .. size .. "-byte ranges")
          -- and back: the device's ranges the sources
          xfer.copy_many(list, { verify = true })
          local back, home = xfer.zeros({ 40 * size }, { dtype = "u8" }), {}
          for i = 0, 39 do home[#home + 1] = { back:narrow(1, i * size + 1, size), dst:narrow(1, i * size + 1, size) } end
          xfer.copy_many(home, { verify = true })
          assert(back:crc32c() == src:crc32c(), name .. ": a batch of " .. size .. "-byte ranges back")
        end
        -- who summed it: a kernel's calls fail under a fault rule of op verify, a read's not
        xfer.faults.inject({ runtime = d.runtime, op = "verify" })
        local ok = pcall(there.crc32c, there)
        xfer.faults.clear()
        print(name .. " summed by " .. (ok and "read" or "kernel"))
      end
    ]]
    local file = script_file(script)
    -- each way in a process of its own, stopped after a minute (a hang says where it stood)
    local kernel, c1 = h.run("XFER_DEVICE_SUMS=1 timeout 60 " .. h.xferlua() .. " " .. file)
    local read, c2 = h.run("XFER_DEVICE_SUMS=0 timeout 60 " .. h.xferlua() .. " " .. file)
    os.remove(file)
    assert.are.equal(0, c1, kernel)
    assert.are.equal(0, c2, read)
    for _, name in ipairs(summers) do
      local at = name:gsub("%p", "%%%0")
      assert.is_truthy(kernel:find(at .. " summed by kernel"), kernel)
      assert.is_truthy(read:find(at .. " summed by read"), read)
    end
  end)

  it("moves with verify on every pair here, and says corrupt when a bit flipped on the way", function()
    h.no_setaside()
    local seed = h.random_bytes(3 * 65536 + 11)
    for _, a in ipairs(devices) do
      local src = xfer.tensor(seed, { dtype = "u8" }):to(a)
      for _, b in ipairs(devices) do
        local moved = src:to(b, { verify = true })
        assert.are.equal(seed, moved:tobytes(), a.name .. " -> " .. b.name)
        -- a bit flipped in the target: unseen without verify ...
        xfer.faults.inject({ runtime = b.runtime, op = "corrupt", nth = 1 })
        local silent = src:to(b)
        assert.are_not.equal(seed, silent:tobytes(), a.name .. " -> " .. b.name)
        xfer.faults.clear()
        -- ... and an error with it, naming both ends and both sums
        local dst = xfer.zeros({ #seed }, { dtype = "u8", device = b })
        xfer.faults.inject({ runtime = b.runtime, op = "corrupt", nth = 1 })
        local e = h.raises("corrupt", dst.copy_from, dst, src, { verify = true })
        xfer.faults.clear()
        assert.are.equal("verify", e.op)
        assert.are.equal(a.name, e.from)
        assert.are.equal(b.name, e.to)
        assert.is_truthy(tostring(e):find("CRC32C %x+ sent from " .. a.name:gsub("%p", "%%%0")),
                         tostring(e))
        dst:copy_from(src, { verify = true }) -- the next move is whole again
        assert.are.equal(seed, dst:tobytes())
      end
    end
  end)

  it("sums a large range in pieces on several threads, as one pass sums it", function()
    -- 41 MiB and some: ten pieces of 4 MiB and a short one, summed by the pool and joined;
    -- the file's sum is made in one pass as it is written
    local w = xfer.arange(41 * 2^18 + 3, { dtype = "u32" })
    local file = os.tmpname()
    xfer.save(file, { w = w })
    local meta = xfer.open(file):metadata()
    os.remove(file)
    assert.are.equal(meta["crc32c.w"], ("%08x"):format(w:crc32c()))
    for _, d in ipairs(devices) do
      assert.are.equal(w:crc32c(), w:to(d):crc32c(), d.name)
    end
  end)

  it("checks a large move as its bytes land, a bit flipped in any step said", function()
    h.no_setaside()
    local src = xfer.arange(17 * 2^20 + 5, { dtype = "u32" }) -- 68 MiB
    local host = xfer.device("host")
    for _, d in ipairs(devices) do
      local there = src:to(d, { verify = true })
      local back = xfer.zeros({ src.numel }, { dtype = "u32" })
      back:copy_from(there, { verify = true })
      assert.is_true(back:equals(src), d.name)
      -- a move between host memory and a device's own memory is paced by its host end's
      -- sums: 9 steps of 8 MiB, each caught; one whose ends are both in host memory (memory
      -- a device maps) lands in one copy, summed as three 32 MiB steps land -- a corrupt
      -- fault at the k-th step is caught for every k up to the count
      local function caught_steps(from, to, runtime)
        local caught = 0
        for nth = 1, 10 do
          xfer.faults.inject({ runtime = runtime, op = "corrupt", nth = nth })
          local ok, e = pcall(to.copy_from, to, from, { verify = true })
          xfer.faults.clear()
          local what = from.device.name .. " -> " .. to.device.name .. ", step " .. nth
          if ok then
            assert.is_true(to:equals(from), what)
          else
            assert.are.equal("corrupt", e.code, tostring(e))
            assert.are.equal(nth - 1, caught, what .. ": a step after one not caught")
            caught = nth
          end
        end
        return caught
      end
      local sent, came_back = caught_steps(src, there, d.runtime), caught_steps(there, back, host.runtime)
      if d == host then
        assert.are.same({ 1, 1 }, { sent, came_back })
      elseif came_back == 9 or d.runtime == "cuda" then
        assert.are.same({ 9, 9 }, { sent, came_back }, d.name .. " (paced)")
      else
        assert.are.same({ 1, 3 }, { sent, came_back }, d.name .. " (mapped)")
      end
    end
  end)

  it("checks moves and batches by each device's own kernel, a stall ended at the deadline", function()
    -- with XFER_DEVICE_SUMS=1 every device's kernel is asked (PoCL's and lavapipe's too, which
    -- are read back otherwise): steps of a paced move, a stall in a verified move and in its
    -- sum, a batch. Each device in a process of its own.
    local names = kernel_devices()
    if #names == 0 then return pending("no device here but the host") end
    local script = [[
      local xfer = require "xfer"
      local d = xfer.device(arg[1])
      local src = xfer.arange(10 * 2^20 + 3, { dtype = "u32" }) -- 40 MiB: 6 steps of 8 MiB
      local there = src:to(d, { verify = true })
      local back = xfer.zeros({ src.numel }, { dtype = "u32" })
      back:copy_from(there, { verify = true })
      assert(back:equals(src), "moved back")
      -- a flipped bit at the k-th landing is said, for every k up to the steps
      local function caught(from, to, runtime)
        local n = 0
        for nth = 1, 8 do
          xfer.faults.inject({ runtime = runtime, op = "corrupt", nth = nth })
          local ok, e = pcall(to.copy_from, to, from, { verify = true })
          xfer.faults.clear()
          if ok then
            assert(to:equals(from), "step " .. nth .. ": unchanged")
          else
            assert(e.code == "corrupt", tostring(e))
            assert(n == nth - 1, "step " .. nth .. " caught after one that was not")
            n = nth
          end
        end
        assert(n >= 1, "no step caught")
        return n
      end
      io.write(d.name, " steps caught ", caught(src, there, d.runtime), " and ", caught(there, back, "host"), "\n")
      -- a device that stops completing ends at the deadline, verified or not, and the next
      -- move is whole
      xfer.faults.inject({ runtime = d.runtime, op = "stall" })
      local ok, e = pcall(back.copy_from, back, there, { verify = true, timeout = 0.3 })
      xfer.faults.clear()
      assert(not ok and e.code == "timeout", ok and "no timeout" or tostring(e))
      back:copy_from(there, { verify = true })
      assert(back:equals(src), "moved again")
      -- ... and one that stops in its sum (each wait of the move stalled in turn: its steps',
      -- then the sum's): the sum's wait ends at the deadline too, op verify
      local in_sum = false
      for nth = 1, 10 do
        xfer.faults.inject({ runtime = d.runtime, op = "stall", nth = nth })
        local done, e2 = pcall(back.copy_from, back, there, { verify = true, timeout = 0.3 })
        xfer.faults.clear()
        assert(done or e2.code == "timeout", tostring(e2))
        in_sum = in_sum or (not done and e2.op == "verify")
      end
      assert(in_sum, "no wait of a sum was stalled")
      back:copy_from(there, { verify = true })
      assert(back:equals(src), "moved again after the sums' stalls")
      -- a batch verified both ways, a flipped bit named by its element
      local pieces, list = {}, {}
      for i = 1, 200 do
        pieces[i] = src:narrow(1, i * 1000, 4096)
        list[i] = { xfer.zeros({ 4096 }, { dtype = "u32", device = d }), pieces[i] }
      end
      xfer.copy_many(list, { verify = true })
      local home = {}
      for i = 1, 200 do home[i] = { xfer.zeros({ 4096 }, { dtype = "u32" }), list[i][1] } end
      xfer.copy_many(home, { verify = true })
      for i = 1, 200 do assert(home[i][1]:equals(pieces[i]), "element " .. i) end
      xfer.faults.inject({ runtime = "host", op = "corrupt", nth = 1 })
      ok, e = pcall(xfer.copy_many, home, { verify = true })
      xfer.faults.clear()
      assert(not ok and e.code == "corrupt" and e.element >= 1, ok and "not caught" or tostring(e))
      -- a batch of 36 MiB: in slices, its targets summed as each lands (by the pool in host
      -- memory; by the device beside the move where it can), whole both ways, a flipped bit said
      local big = src:narrow(1, 1, 9 * 2^20)
      local on = xfer.zeros({ big.numel }, { dtype = "u32", device = d })
      local off = xfer.zeros({ big.numel }, { dtype = "u32" })
      local out, back_list = {}, {}
      for i = 0, 2303 do
        out[#out + 1] = { on:narrow(1, i * 4096 + 1, 4096), big:narrow(1, i * 4096 + 1, 4096) }
        back_list[#back_list + 1] = { off:narrow(1, i * 4096 + 1, 4096), on:narrow(1, i * 4096 + 1, 4096) }
      end
      xfer.copy_many(out, { verify = true })
      xfer.copy_many(back_list, { verify = true })
      assert(off:equals(big), "36 MiB there and back")
      for _, way in ipairs({ { out, d.runtime }, { back_list, "host" } }) do
        xfer.faults.inject({ runtime = way[2], op = "corrupt", nth = 1 })
        ok, e = pcall(xfer.copy_many, way[1], { verify = true })
        xfer.faults.clear()
        assert(not ok and e.code == "corrupt" and e.element >= 1, ok and "36 MiB: not caught" or tostring(e))
      end
      print(d.name .. " checked")
    ]]
    local file = script_file(script)
    for _, name in ipairs(names) do
      local out, code = h.run("XFER_DEVICE_SUMS=1 timeout 120 " .. h.xferlua() .. " " .. file .. " " .. name)
      assert.are.equal(0, code, out)
      assert.is_truthy(out:find(name:gsub("%p", "%%%0") .. " checked"), out)
    end
    os.remove(file)
  end)

  it("verifies each element of a batch, naming the one that arrived changed", function()
    h.no_setaside()
    for _, d in ipairs(devices) do
      local block, n = 4096, 64
      local seed = h.random_bytes(block * n)
      local src = xfer.tensor(seed, { dtype = "u8" })
      local dst = xfer.zeros({ block * n }, { dtype = "u8", device = d })
      local blocks = { first = 0, count = n }
      local b = xfer.batch({ dst = dst, src = src, src_blocks = blocks, dst_blocks = blocks,
                             block_bytes = block }, { verify = true })
      b:run()
      assert.are.equal(seed, dst:tobytes(), d.name)
      xfer.faults.inject({ runtime = d.runtime, op = "corrupt", nth = 1 })
      local e = h.raises("corrupt", b.run, b)
      xfer.faults.clear()
      assert.are.equal("verify", e.op)
      assert.is_number(e.element)
      b:run() -- whole again
      assert.are.equal(seed, dst:tobytes(), d.name)
    end
  end)

  it("sums a large batch's host targets slice by slice as they land, a flipped bit still said", function()
    h.no_setaside()
    local host = xfer.device("host")
    local block, n = 16384, 3072 -- 48 MiB: three slices of 16 MiB
    local seed = h.random_bytes(block)
    local want = seed:rep(n)
    local blocks = { first = 0, count = n }
    for _, d in ipairs(devices) do
      local src = xfer.tensor(want, { dtype = "u8" }):to(d)
      local dst = xfer.zeros({ block * n }, { dtype = "u8", device = host })
      local b = xfer.batch({ dst = dst, src = src, src_blocks = blocks, dst_blocks = blocks,
                             block_bytes = block }, { verify = true })
      b:run()
      assert.are.equal(xfer.tensor(want, { dtype = "u8" }):crc32c(), dst:crc32c(), d.name)
      xfer.faults.inject({ runtime = "host", op = "corrupt", nth = 1 })
      local e = h.raises("corrupt", b.run, b)
      xfer.faults.clear()
      assert.are.equal("verify", e.op, d.name)
      assert.is_number(e.element, d.name)
      b:run() -- whole again
      assert.is_true(dst:equals(xfer.tensor(want, { dtype = "u8" })), d.name)
      src:free()
      dst:free()
    end
  end)

  it("checks every move when xfer.config says so, unless a move's own verify = false", function()
    h.no_setaside()
    local before = xfer.config().verify
    local t = xfer.tensor("checked everywhere", { dtype = "u8" })
    xfer.config({ verify = true })
    local ok, err = pcall(function()
      for _, d in ipairs(devices) do
        xfer.faults.inject({ runtime = d.runtime, op = "corrupt", nth = 1 })
        h.raises("corrupt", t.to, t, d)
        xfer.faults.inject({ runtime = d.runtime, op = "corrupt", nth = 1 })
        assert.are_not.equal(t:tobytes(), t:to(d, { verify = false }):tobytes(), d.name)
        xfer.faults.clear()
      end
    end)
    xfer.config({ verify = before })
    xfer.faults.clear()
    assert(ok, err)
    assert.is_false(xfer.config().verify)
  end)

  it("says what verify must be", function()
    local t = xfer.zeros({ 4 }, { dtype = "u8" })
    local e = h.raises("invalid", t.to, t, "host", { verify = "yes" })
    assert.is_truthy(tostring(e):find("'verify' must be true or false", 1, true), tostring(e))
    local freed = xfer.zeros({ 4 }, { dtype = "u8" })
    freed:free()
    h.raises("freed", freed.crc32c, freed)
  end)
end)

describe("integrity of files #integrity", function()
  local path = os.tmpname() .. ".safetensors"
  after_each(function()
    xfer.faults.clear()
    os.remove(path)
  end)

  local function file_bytes()
    local f = assert(io.open(path, "rb"))
    local d = f:read("*a")
    f:close()
    return d
  end

  it("records each tensor's CRC32C in the header, as t:crc32c() gives it", function()
    local w = xfer.arange(1000, { dtype = "f32" })
    local b = xfer.tensor("123456789", { dtype = "u8" })
    xfer.save(path, { w = w, ["odd \"name\""] = b }, { metadata = { format = "pt" } })
    local meta = xfer.open(path):metadata()
    assert.are.equal(("%08x"):format(w:crc32c()), meta["crc32c.w"])
    assert.are.equal("e3069283", meta['crc32c.odd "name"'])
    assert.are.equal("pt", meta.format)
    local e = h.raises("invalid", xfer.save, path, { w = w }, { metadata = { ["crc32c.w"] = "0" } })
    assert.is_truthy(tostring(e):find("crc32c.* are xferlua's", 1, true), tostring(e))
  end)

  it("loads with verify onto every device, and says which tensor landed changed", function()
    h.no_setaside()
    local seed = h.random_bytes(65536 * 3)
    xfer.save(path, { a = xfer.tensor(seed, { dtype = "u8" }), b = xfer.arange(300, { dtype = "i32" }) })
    for _, d in ipairs(devices) do
      local loaded = xfer.load(path, { device = d, verify = true })
      assert.are.equal(seed, loaded.a:tobytes(), d.name)
      -- a bit flipped on the way: by the file's read, or into the device (a host tensor is
      -- read into straight: no move)
      for _, runtime in ipairs(d.runtime == "host" and { "file" } or { "file", d.runtime }) do
        xfer.faults.inject({ runtime = runtime, op = "corrupt", nth = 1 })
        local e = h.raises("corrupt", xfer.load, path, { device = d, verify = true })
        xfer.faults.clear()
        assert.are.equal("verify", e.op)
      end
    end
    -- a byte of the file changed on the disk: the load says which tensor
    local bytes = file_bytes()
    local header = 8 + (bytes:byte(1) + 256 * bytes:byte(2) + 65536 * bytes:byte(3))
    local a_at = header + 1 -- "a" is the first tensor (name order), its first byte
    local f = assert(io.open(path, "r+b"))
    f:seek("set", a_at - 1 + 100)
    f:write(string.char((seed:byte(101) + 1) % 256))
    f:close()
    local e = h.raises("corrupt", xfer.load, path, { verify = true })
    assert.is_truthy(tostring(e):find("'a' landed changed", 1, true), tostring(e))
    -- the record names them too, as every file error does
    assert.are.equal(path, e.file)
    assert.are.equal("a", e.tensor)
    assert.are.equal("file", e.from)
    assert.are_not.equal(seed, xfer.load(path).a:tobytes()) -- unseen without verify
  end)

  it("saves with verify from every device, every format, and leaves no file when a bit flipped on the way", function()
    h.no_setaside()
    local seed = h.random_bytes(65536 * 3 + 5)
    local dir = os.tmpname()
    os.remove(dir)
    for _, d in ipairs(devices) do
      local t = xfer.tensor(seed, { dtype = "u8" }):to(d)
      local i = xfer.arange(300, { dtype = "i32" }):to(d)
      for _, ext in ipairs({ ".safetensors", ".npz", ".npy" }) do
        local file = dir .. ext
        local what = d.name .. " " .. ext
        local tensors = ext == ".npy" and t or { a = t, b = i }
        xfer.save(file, tensors, { verify = true, chunk = 65536 })
        local back = xfer.load(file)
        assert.are.equal(seed, (ext == ".npy" and back or back.a):tobytes(), what)
        os.remove(file)
        -- a bit flipped in a chunk the save writes, or in the move off the device
        for _, runtime in ipairs(d.runtime == "host" and { "file" } or { "file", "host" }) do
          xfer.faults.inject({ runtime = runtime, op = "corrupt", nth = 1 })
          local e = h.raises("corrupt", xfer.save, file, tensors, { verify = true, chunk = 65536 })
          xfer.faults.clear()
          assert.are.equal("verify", e.op, what)
          assert.is_nil(io.open(file, "rb"), what .. ": a file was left")
        end
      end
    end
    -- unseen without verify: the file is written with the bit flipped, and its recorded sum
    -- (taken before the write) tells a verified load
    local file = dir .. ".safetensors"
    xfer.faults.inject({ runtime = "file", op = "corrupt", nth = 1 })
    xfer.save(file, { a = xfer.tensor(seed, { dtype = "u8" }) }, { chunk = 65536 })
    xfer.faults.clear()
    h.raises("corrupt", xfer.load, file, { verify = true })
    os.remove(file)
  end)

  it("says so when a file records no sums to verify against", function()
    -- a safetensors file written by hand, as another tool would: no __metadata__
    local json = '{"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}'
    local n = #json
    local len = string.char(n % 256, math.floor(n / 256) % 256, 0, 0, 0, 0, 0, 0)
    local f = assert(io.open(path, "wb"))
    f:write(len, json, "abcd")
    f:close()
    assert.are.equal("abcd", xfer.load(path).t:tobytes())
    local e = h.raises("unsupported", xfer.load, path, { verify = true })
    assert.is_truthy(tostring(e):find("records no CRC32C", 1, true), tostring(e))
    assert.are.equal("t", e.tensor)
    h.raises("invalid", xfer.load, path, { verify = 1 })
  end)
end)
