-- Files as endpoints: xfer.save / xfer.load / xfer.open for safetensors, .npy and .npz, onto
-- every device here, through O_DIRECT and the page cache, io_uring and threads; files that lie,
-- files cut short, failed reads and writes (nothing half-loaded, no partial file left).
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")
-- Debian's python3 (python3-numpy), else the one on the PATH (the GPU machine's has NumPy)
local python = "/usr/bin/python3"

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)

local function path(name) return dir .. "/" .. name end

local function write_file(p, bytes)
  local f = assert(io.open(p, "wb"))
  f:write(bytes)
  f:close()
end

local function read_file(p)
  local f = io.open(p, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- the little-endian 8 bytes of n
local function u64(n)
  local s = {}
  for i = 1, 8 do s[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(s)
end

-- a safetensors file of the given header text and data bytes
local function safetensors(header, data) return u64(#header) .. header .. (data or "") end

-- the files a directory holds (to see that no temporary stayed)
local function listing(d)
  local out = h.run("ls -A " .. d)
  local names = {}
  for name in out:gmatch("[^\n]+") do names[#names + 1] = name end
  table.sort(names)
  return table.concat(names, " ")
end

local function has_numpy()
  local _, code = h.run(python .. " -c 'import numpy'")
  if code ~= 0 then
    _, code = h.run("python3 -c 'import numpy'")
    if code == 0 then python = "python3" end
  end
  return code == 0
end

local all_dtypes = { "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32",
                     "u64", "bool" }

-- a tensor of dtype on dev whose elements depend on their index (i % 97; bools every third)
local function sample(dtype, shape, dev)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local values = {}
  for i = 1, n do values[i] = dtype == "bool" and ((i % 3 == 0) and 1 or 0) or (i - 1) % 97 end
  local t = xfer.tensor(values, { dtype = dtype }):reshape(shape)
  return dev and t:to(dev) or t
end

describe("files", function()
  before_each(function() xfer.faults.clear() end)
  after_each(function() xfer.faults.clear() end)
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("saves and loads every dtype as safetensors, .npz and (but bf16) .npy", function()
    local tensors = {}
    for i, dtype in ipairs(all_dtypes) do
      tensors[dtype] = sample(dtype, i % 2 == 0 and { 3, 5 } or { 7 })
    end
    tensors.scalar = xfer.tensor(2.5, { dtype = "f32" })
    tensors.empty = xfer.zeros({ 0, 4 }, { dtype = "f32" })
    for _, ext in ipairs({ "safetensors", "npz" }) do
      local p = path("all." .. ext)
      local bf16 = tensors.bf16
      if ext == "npz" then tensors.bf16 = nil end -- NumPy has no bf16
      xfer.save(p, tensors)
      tensors.bf16 = bf16
      local got = xfer.load(p)
      for name, t in pairs(tensors) do
        if ext == "npz" and name == "bf16" then break end
        assert.is_truthy(got[name], ext .. ": " .. name)
        assert.is_true(got[name]:equals(t), ext .. ": " .. name)
      end
      local f = xfer.open(p)
      assert.are.equal(ext, f.format)
      assert.are.equal(ext == "npz" and 14 or 15, f.count)
      f:close()
    end
    for _, dtype in ipairs(all_dtypes) do
      if dtype ~= "bf16" then
        local p = path(dtype .. ".npy")
        xfer.save(p, tensors[dtype])
        assert.is_true(xfer.load(p):equals(tensors[dtype]), dtype)
      end
    end
    local e = h.raises("unsupported", xfer.save, path("bf16.npy"), tensors.bf16)
    assert.matches("bf16 has no NumPy dtype", e.message)
  end)

  it("loads onto every device here, each tensor where a function says", function()
    local t = { w = sample("f32", { 64, 33 }), b = sample("i64", { 33 }), m = sample("u8", { 1000 }) }
    local p = path("devices.safetensors")
    xfer.save(p, t)
    for _, dev in ipairs(xfer.devices()) do
      local got = xfer.load(p, { device = dev })
      for name, want in pairs(t) do
        assert.are.equal(dev.name, got[name].device.name)
        assert.is_true(got[name]:to(host):equals(want), dev.name .. " " .. name)
      end
    end
    local devs = xfer.devices()
    local last = devs[#devs]
    local got = xfer.load(p, { device = function(name, info)
      assert.are.equal(name, info.name)
      return name == "w" and last or nil
    end })
    assert.are.equal(last.name, got.w.device.name)
    assert.are.equal("host", got.b.device.name)
  end)

  it("reads large tensors in many requests: O_DIRECT and the page cache, io_uring and threads", function()
    -- odd sizes, so that tensors start and end off the 4096-byte blocks and straddle chunks
    local t = { a = sample("u8", { 300001 }), b = sample("f32", { 77, 1001 }),
                c = sample("i16", { 5 }), d = sample("f64", { 123457 }) }
    local p = path("large.safetensors")
    xfer.save(p, t, { chunk = 65536, depth = 3 })
    local engines = { "threads", "io_uring" }
    for _, direct in ipairs({ true, false }) do
      for _, engine in ipairs(engines) do
        for _, dev in ipairs(xfer.devices()) do
          local got = xfer.load(p, { device = dev, direct = direct, engine = engine,
                                     chunk = 65536, depth = 4 })
          local route = xfer.file_route()
          for name, want in pairs(t) do
            assert.is_true(got[name]:to(host):equals(want),
                           ("%s %s direct=%s: %s (%s)"):format(dev.name, engine, tostring(direct), name, route.reason))
          end
        end
      end
    end
    -- saved the same ways, read back the same
    for _, direct in ipairs({ true, false }) do
      local q = path("saved-" .. tostring(direct) .. ".safetensors")
      xfer.save(q, t, { chunk = 65536, direct = direct })
      assert.are.equal(read_file(p), read_file(q))
    end
  end)

  it("tells a load's and a save's progress a request at a time; a callback that raises stops it, nothing kept", function()
    local t = { a = sample("u8", { 300000 }) }
    local p = path("progress.safetensors")
    local saves = {}
    xfer.save(p, t, { chunk = 65536, progress = function(done, total) saves[#saves + 1] = { done, total } end })
    assert.is_true(#saves >= 5)
    assert.are.same(saves[#saves][1], saves[#saves][2])
    for _, dev in ipairs(xfer.devices()) do
      local seen = {}
      xfer.load(p, { device = dev, chunk = 65536, progress = function(done, total) seen[#seen + 1] = { done, total } end })
      assert.is_true(#seen >= 5, dev.name)
      assert.are.same({ 300000, 300000 }, seen[#seen])
      for i = 2, #seen do assert.is_true(seen[i][1] > seen[i - 1][1]) end
      local before = h.in_use(dev)
      local e = h.raises("invalid", xfer.load, p, { device = dev, chunk = 65536, progress = function(done)
        if done > 100000 then error("enough") end
      end })
      assert.are.equal("progress", e.op)
      assert.matches("enough", e.message)
      assert.are.equal(before, h.in_use(dev))
    end
    assert.matches("must be a function", h.raises("invalid", xfer.load, p, { progress = 1 }).message)
  end)

  it("says how it reads a file: the page cache for a file that is there, O_DIRECT asked for", function()
    local p = path("plan.safetensors")
    xfer.save(p, { x = sample("f32", { 1000 }) })
    local f = xfer.open(p)
    local plan = f:plan()
    assert.is_false(plan.direct)
    assert.matches("page cache", plan.reason)
    plan = f:plan({ direct = true, engine = "threads", chunk = 1048576, depth = 5 })
    assert.is_true(plan.direct)
    assert.are.equal("threads", plan.engine)
    assert.are.equal(1048576, plan.chunk)
    assert.are.equal(5, plan.depth)
    f:close()
  end)

  it("says its steps -- the reads, then each destination -- and a load records what they say", function()
    local p = path("steps.safetensors")
    local names, tensors = {}, {}
    for i = 1, 6 do
      names[i] = "w" .. i
      tensors[names[i]] = sample("f32", { 20000 + i })
    end
    xfer.save(p, tensors)
    local devs = xfer.devices()
    local function place(name) return devs[tonumber(name:sub(2)) % #devs + 1] end
    local f = xfer.open(p)
    local plan = f:plan({ device = place, direct = true })
    assert.matches("^read with O_DIRECT", plan.steps[1])
    local said = table.concat(plan.steps, "\n")
    for _, name in ipairs(names) do
      local dev = place(name)
      local want = dev.name == "host" and "into host tensors: copied out of each chunk by the CPU"
                   or ("into " .. dev.name .. ": each chunk's pieces by one part of the load's batch")
      assert.is_truthy(said:find(want, 1, true), want .. " in:\n" .. said)
    end
    xfer.stats_reset()
    local loaded = f:load({ device = place, direct = true })
    local route = xfer.file_route()
    assert.are.equal(plan.steps[1], route.steps[1])
    -- each device's step names who runs its pieces ("by X"), and the ledger recorded X's moves
    local ran = {}
    for _, r in ipairs(xfer.stats()) do
      if r.from == "host" then ran[r.to .. " by " .. (r.runner or r.path)] = true end
    end
    local devices_said, devices = 0, 0
    for _, dev in ipairs(devs) do devices = devices + (dev.name ~= "host" and 1 or 0) end
    for _, step in ipairs(route.steps) do
      local dev = step:match("^into (%S+): each chunk's pieces by a part of the load's batch %(the first chunk's: ")
      -- at once ("one batch of N copies by X", maybe over imports), or one by one on its path
      local runner = step:match("one batch of %d+ cop%a+ by (%S+)%)$")
      if dev then
        devices_said = devices_said + 1
        local any = false
        for key in pairs(ran) do any = any or key:sub(1, #dev + 4) == dev .. " by " end
        assert.is_true(runner and ran[dev .. " by " .. runner] or (not runner and any), step)
      end
      assert.is_nil(step:find("prepared once for the file", 1, true), "a step the load did not say again: " .. step)
    end
    assert.are.equal(devices, devices_said, table.concat(route.steps, "\n"))
    for _, name in ipairs(names) do
      assert.are.equal(tensors[name]:tobytes(), loaded[name]:to(xfer.device("host")):tobytes(), name)
    end
    f:close()
  end)

  it("says whether GPUDirect Storage reads into CUDA memory, and why not #cuda", function()
    local p = path("gds.safetensors")
    xfer.save(p, { x = sample("f32", { 10 }) })
    local f = xfer.open(p)
    assert.is_nil(f:plan({ device = "host" }).gds_reason)
    h.each_device("cuda", pending, function(dev)
      local plan = f:plan({ device = dev })
      assert.is_false(plan.gds)
      assert.matches("GPUDirect Storage", plan.gds_reason)
      local out = h.run(h.xferlua() .. " --load " .. p .. " --device " .. dev.name)
      assert.matches("GPUDirect Storage", out)
    end)
    f:close()
  end)

  it("saves views as their elements, in row-major order", function()
    local base = sample("f32", { 6, 8 })
    local view = base:transpose(1, 2):narrow(1, 1, 5)
    local p = path("view.safetensors")
    xfer.save(p, { v = view })
    local got = xfer.load(p).v
    assert.are.same(view:contiguous().shape, got.shape)
    assert.is_true(got:equals(view:contiguous()))
  end)

  it("opens lazily: names, shapes and metadata without reading a tensor, then one at a time", function()
    local p = path("lazy.safetensors")
    xfer.save(p, { b = sample("i32", { 4, 2 }), a = sample("f16", { 3 }) },
              { metadata = { format = "pt", note = "ok \"quoted\"" } })
    local f = xfer.open(p)
    assert.are.same({ "a", "b" }, f:names())
    local info = f:info("b")
    assert.are.equal("i32", info.dtype)
    assert.are.same({ 4, 2 }, info.shape)
    assert.are.equal(32, info.nbytes)
    assert.are.same({ format = "pt", note = "ok \"quoted\"", -- and each tensor's CRC32C
                      ["crc32c.a"] = ("%08x"):format(sample("f16", { 3 }):crc32c()),
                      ["crc32c.b"] = ("%08x"):format(sample("i32", { 4, 2 }):crc32c()) },
                    f:metadata())
    local b = f:load("b")
    assert.is_true(b:equals(sample("i32", { 4, 2 })))
    local only = f:load({ names = { "a" } })
    assert.is_nil(only.b)
    assert.is_truthy(only.a)
    local e = h.raises("invalid", f.load, f, "nope")
    assert.are.equal("nope", e.tensor)
    assert.are.equal(p, e.file)
    assert.matches("has no tensor named 'nope'", e.message)
    f:close()
    assert.matches("closed", h.raises("invalid", f.names, f).message)
    assert.matches("xfer.File%(closed%)", tostring(f))
  end)

  it("converts floating-point tensors to the dtype asked for, integers as they are", function()
    local p = path("convert.safetensors")
    xfer.save(p, { w = sample("bf16", { 8 }), ids = sample("i64", { 4 }) })
    local got = xfer.load(p, { dtype = "f32" })
    assert.are.equal("f32", got.w.dtype)
    assert.are.equal("i64", got.ids.dtype)
    assert.are.same(sample("f32", { 8 }):totable(), got.w:totable())
    assert.are.same(sample("i64", { 4 }):totable(), got.ids:totable())
    local one = xfer.load(p, { dtype = function(name) return name == "ids" and "i32" or nil end })
    assert.are.equal("i32", one.ids.dtype)
    assert.are.equal("bf16", one.w.dtype)
  end)

  it("refuses bad options and bad arguments, saying what they should be", function()
    local p = path("opts.safetensors")
    xfer.save(p, { x = sample("f32", { 4 }) })
    assert.matches("unknown option 'devce'", h.raises("invalid", xfer.load, p, { devce = "host" }).message)
    assert.matches("engine is \"io_uring\" or \"threads\"", h.raises("invalid", xfer.load, p, { engine = "aio" }).message)
    assert.matches("a multiple of 4096", h.raises("invalid", xfer.load, p, { chunk = 5000 }).message)
    assert.matches("2 to 64 requests", h.raises("invalid", xfer.load, p, { depth = 1 }).message)
    assert.matches("is not a dtype", h.raises("invalid", xfer.load, p, { dtype = "f33" }).message)
    assert.matches("unknown device", h.raises("invalid", xfer.load, p, { device = "vulkan:9" }).message:lower())
    assert.matches("an .npy file holds one array, not 2", h.raises("invalid", xfer.save, path("n.npy"), { a = sample("f32", { 1 }), b = sample("f32", { 1 }) }).message)
    assert.matches("safetensors' own key", h.raises("invalid", xfer.save, path("m.safetensors"), { __metadata__ = sample("f32", { 1 }) }).message)
    assert.matches("unknown format", h.raises("invalid", xfer.save, path("f.bin"), { a = sample("f32", { 1 }) }, { format = "pickle" }).message)
    local freed = sample("f32", { 2 })
    freed:free()
    local e = h.raises("freed", xfer.save, path("freed.safetensors"), { gone = freed })
    assert.are.equal("gone", e.tensor)
    e = h.raises("invalid", xfer.load, path("missing.safetensors"))
    assert.are.equal("ENOENT", e.native_name)
    assert.are.equal(path("missing.safetensors"), e.file)
    e = h.raises("invalid", xfer.open, dir)
    assert.matches("not a regular file", e.message)
  end)

  describe("files that lie", function()
    -- {what, bytes, code, tensor, message pattern}
    local data16 = string.rep("\1", 16)
    local cases = {
      { "an empty file", "", "invalid", nil, "not a tensor file" },
      { "a text file", "hello, this is not a tensor file", "invalid", nil, "not a tensor file" },
      { "a header length past the end", u64(1000) .. "{}", "invalid", nil, "truncated" },
      { "a header past safetensors' 100 MB", u64(200000000) .. "{", "invalid", nil, "100 MB" },
      { "a header that is not JSON", safetensors("{\"a\":{\"dtype\":\"F32\",}"), "invalid", nil, "not valid JSON" },
      { "a header with a trailing comma", safetensors("{\"a\":1,}"), "invalid", nil, "trailing comma" },
      { "a header naming a tensor twice",
        safetensors('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', data16),
        "invalid", nil, "duplicate key" },
      { "a header that is an array", safetensors("[1,2]"), "invalid", nil, "not a tensor file" },
      { "an unknown dtype", safetensors('{"a":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}}', "\0\0"),
        "unsupported", "a", "unknown dtype 'F8_E5M2'" },
      { "shape times dtype not the bytes", safetensors('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', data16),
        "invalid", "a", "shape and dtype make" },
      { "offsets past the data", safetensors('{"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}', data16),
        "invalid", "a", "reach past the data" },
      { "offsets that end before they begin", safetensors('{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}}', data16),
        "invalid", "a", "end before they begin" },
      { "overlapping tensors",
        safetensors('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', data16),
        "invalid", "b", "overlap those of 'a'" },
      { "a negative dimension", safetensors('{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', data16),
        "invalid", "a", "whole number >= 0" },
      { "offsets that are not whole", safetensors('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1.5]}}', data16),
        "invalid", "a", "two whole numbers" },
      { "metadata that is not strings", safetensors('{"__metadata__":{"a":1}}'), "invalid", nil, "not a string" },
      { "an .npy of a format version it does not know", "\147NUMPY\9\0" .. string.rep(" ", 20), "unsupported", nil, "version 9" },
      { "an .npy whose header is cut short", "\147NUMPY\1\0\200\0{'descr'", "invalid", nil, "truncated" },
      { "a big-endian .npy", "\147NUMPY\1\0" .. string.char(70, 0) .. "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }" .. string.rep(" ", 9) .. "\n" .. "\0\0\0\0",
        "unsupported", nil, "big%-endian" },
      { "an .npy whose data is cut short", "\147NUMPY\1\0" .. string.char(70, 0) .. "{'descr': '<f4', 'fortran_order': False, 'shape': (9,), }" .. string.rep(" ", 9) .. "\n" .. "\0\0\0\0",
        "invalid", nil, "truncated" },
    }
    for _, case in ipairs(cases) do
      it("refuses " .. case[1], function()
        local p = path("bad.safetensors")
        write_file(p, case[2])
        local e = h.raises(case[3], xfer.open, p)
        assert.matches(case[5], e.message)
        assert.are.equal(p, e.file)
        assert.are.equal(case[4], e.tensor)
        assert.is_number(e.offset)
        local e2 = h.raises(case[3], xfer.load, p)
        assert.are.equal(e.message, e2.message)
      end)
    end

    it("refuses a file cut short after its header, naming the byte", function()
      local p = path("cut.safetensors")
      xfer.save(p, { a = sample("f32", { 1000 }), b = sample("f32", { 1000 }) })
      local bytes = read_file(p)
      write_file(p, bytes:sub(1, #bytes - 100))
      local e = h.raises("invalid", xfer.open, p)
      assert.are.equal("b", e.tensor)
      assert.matches("reach past the data", e.message)
      assert.are.equal(#bytes - 4000, e.offset)
    end)
  end)

  describe("failures on the way", function()
    local function in_use_all()
      local out = {}
      for _, dev in ipairs(xfer.devices()) do out[dev.name] = h.in_use(dev) end
      return out
    end

    it("a failed read in any request fails the load, names the tensor, leaves nothing allocated", function()
      h.no_setaside()
      local t = { a = sample("u8", { 200000 }), b = sample("f32", { 50000 }), c = sample("i64", { 30000 }) }
      local p = path("faults.safetensors")
      xfer.save(p, t)
      for _, dev in ipairs(xfer.devices()) do
        for _, direct in ipairs({ true, false }) do
          local before = in_use_all()
          local requests = 0
          xfer.faults.clear()
          local f = xfer.open(p) -- the header read, before the faults
          for nth = 1, 20 do
            xfer.faults.clear()
            xfer.faults.inject({ runtime = "file", op = "read", nth = nth })
            local ok, e = pcall(f.load, f, { device = dev, chunk = 65536, depth = 3, direct = direct })
            if ok then requests = nth - 1; break end
            assert.are.equal("read", e.code)
            assert.is_true(e.injected)
            assert.are.equal(p, e.file)
            assert.is_truthy(({ a = 1, b = 1, c = 1 })[e.tensor], tostring(e))
            assert.is_number(e.offset)
            assert.are.equal("EIO", e.native_name)
            assert.are.same(before, in_use_all(), dev.name .. " after a failure at request " .. nth)
          end
          f:close()
          assert.is_true(requests >= 8, "the load read in " .. requests .. " requests")
        end
      end
    end)

    it("a failed write or sync leaves the file as it was and no temporary behind", function()
      local p = path("keep.safetensors")
      xfer.save(p, { old = sample("u8", { 10 }) })
      local old = read_file(p)
      local before = listing(dir)
      local t = { a = sample("u8", { 300000 }), b = sample("f32", { 70000 }) }
      for _, rule in ipairs({ "write", "sync" }) do
        for nth = 1, (rule == "write" and 6 or 1) do
          xfer.faults.clear()
          xfer.faults.inject({ runtime = "file", op = rule, nth = nth })
          local e = h.raises("write", xfer.save, p, t, { chunk = 65536 })
          assert.is_true(e.injected)
          assert.are.equal(p, e.file)
          assert.are.equal(old, read_file(p), rule .. " " .. nth)
          assert.are.equal(before, listing(dir), rule .. " " .. nth)
        end
      end
      xfer.faults.clear()
      xfer.save(p, t, { chunk = 65536 })
      assert.is_true(xfer.load(p).b:equals(t.b))
    end)

    it("a full disk (the file size limit) fails the save with the system's word, nothing left", function()
      local p = path("full.safetensors")
      -- one request (chunk 8 MiB), so one write past the limit: LLVM, which PoCL and lavapipe
      -- load, catches SIGXFSZ with SA_RESETHAND, sets the ignoring back and raises it again, and a
      -- second write's signal in that window killed the process (7 of 20 runs here with two
      -- requests in flight; 0 of 20 with one)
      write_file(path("full.lua"), ("local xfer = require 'xfer'; local ok, e = pcall(xfer.save, %q, " ..
                 "{a = xfer.zeros({4194304}, {dtype = 'u8'})}, {chunk = 8388608}); " ..
                 "print(e.code, e.native_name, e.file)"):format(p))
      local out = h.run("bash -c \"trap '' XFSZ; ulimit -f 1024; " .. h.xferlua() .. " " .. path("full.lua") .. "\"")
      os.remove(path("full.lua"))
      if out:match("File size limit exceeded") then
        return pending("a process here does not keep SIGXFSZ ignored (a library it loads catches " ..
                       "it and sets the default back, as LLVM's handler does for a moment), so a " ..
                       "write past the limit killed it; the tmpfs spec below fills a disk instead")
      end
      assert.matches("write%s+EFBIG%s+" .. p:gsub("%p", "%%%0"), out)
      assert.is_nil(read_file(p))
      assert.are.equal("", (listing(dir):gsub("[^ ]*%.safetensors", ""):gsub("[^ ]*%.np[yz]", ""):gsub("%s", "")))
    end)

    it("a full file system (a 1 MiB tmpfs, where mounting is allowed) fails with ENOSPC, the old file kept", function()
      local mnt = path("tiny")
      os.execute("mkdir -p " .. mnt)
      local _, code = h.run("mount -t tmpfs -o size=1m tmpfs " .. mnt)
      if code ~= 0 then return pending("mounting a tmpfs is not allowed here (not root, or no CAP_SYS_ADMIN)") end
      finally(function() h.run("umount " .. mnt) end)
      local p = mnt .. "/model.safetensors"
      xfer.save(p, { small = sample("u8", { 1000 }) })
      local old = read_file(p)
      local e = h.raises("write", xfer.save, p, { big = xfer.zeros({ 3 * 1048576 }, { dtype = "u8" }) })
      assert.are.equal("ENOSPC", e.native_name)
      assert.are.equal(p, e.file)
      assert.are.equal("big", e.tensor)
      assert.are.equal(old, read_file(p))
      assert.are.equal("model.safetensors", listing(mnt))
      assert.matches("page cache", xfer.file_route().reason) -- tmpfs refuses O_DIRECT
    end)

    it("a save into a directory that does not exist names it", function()
      local e = h.raises("write", xfer.save, dir .. "/no/such/x.safetensors", { a = sample("u8", { 1 }) })
      assert.are.equal("ENOENT", e.native_name)
      assert.matches("cannot create a file in", e.message)
    end)

    it("a file fault is one more rule: XFER_FAULTS=file:read:1", function()
      local p = path("env.safetensors")
      xfer.save(p, { a = sample("u8", { 4 }) })
      local out = h.run("XFER_FAULTS=file:read:1 " .. h.xferlua() ..
                        " -e \"local ok, e = pcall(require('xfer').load, '" .. p .. "'); print(e.code, e.injected, e.file)\"")
      assert.matches("read%s+true%s+" .. p:gsub("%p", "%%%0"), out)
    end)
  end)

  describe("with NumPy (python3-numpy)", function()
    it("numpy.load reads what xfer.save wrote: .npy and .npz, values and dtypes", function()
      if not has_numpy() then return pending("Debian's python3-numpy is not installed here") end
      local a = sample("f32", { 3, 4 })
      local b = sample("i64", { 5 })
      local c = sample("bool", { 2, 3 })
      xfer.save(path("np.npy"), a)
      xfer.save(path("np.npz"), { a = a, b = b, c = c })
      local check = [[
import numpy as np, sys
a = np.load(sys.argv[1] + '/np.npy')
assert a.dtype == np.float32 and a.shape == (3, 4) and (a.ravel() == np.arange(12)).all(), a
z = np.load(sys.argv[1] + '/np.npz')
assert sorted(z.files) == ['a', 'b', 'c'], z.files
assert (z['a'] == a).all() and z['b'].dtype == np.int64 and (z['b'] == np.arange(5)).all()
assert z['c'].dtype == np.bool_ and z['c'].ravel().tolist() == [i % 3 == 0 for i in range(1, 7)]
print('ok')
]]
      write_file(path("check.py"), check)
      local out, code = h.run(python .. " " .. path("check.py") .. " " .. dir)
      assert.are.equal(0, code, out)
      assert.matches("ok", out)
    end)

    it("reads what NumPy wrote: np.save (C and Fortran order), np.savez, np.savez_compressed", function()
      if not has_numpy() then return pending("Debian's python3-numpy is not installed here") end
      local make = [[
import numpy as np, sys
d = sys.argv[1]
np.save(d + '/c.npy', np.arange(24, dtype=np.float64).reshape(2, 3, 4))
np.save(d + '/f.npy', np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)))
np.savez(d + '/s.npz', x=np.arange(7, dtype=np.uint16), y=np.ones((2, 2), dtype=np.float16))
np.savez_compressed(d + '/z.npz', x=np.arange(1000, dtype=np.int8 if False else np.int16))
]]
      write_file(path("make.py"), make)
      local out, code = h.run(python .. " " .. path("make.py") .. " " .. dir)
      assert.are.equal(0, code, out)
      local c = xfer.load(path("c.npy"))
      assert.are.same({ 2, 3, 4 }, c.shape)
      assert.is_true(c:equals(xfer.arange(24, { dtype = "f64" }):reshape({ 2, 3, 4 })))
      local f = xfer.load(path("f.npy"))
      assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, f:totable())
      local s = xfer.load(path("s.npz"))
      assert.is_true(s.x:equals(xfer.arange(7, { dtype = "u16" })))
      assert.are.same({ { 1, 1 }, { 1, 1 } }, s.y:totable())
      local z = xfer.open(path("z.npz"))
      assert.is_true(z:info("x").deflated)
      assert.is_true(z:load("x"):equals(xfer.arange(1000, { dtype = "i16" })))
      z:close()
    end)

    it("a safetensors reader written from the format's description reads what xfer.save wrote, its sums too", function()
      if not has_numpy() then return pending("Debian's python3-numpy is not installed here") end
      xfer.save(path("ref.safetensors"), { w = sample("f32", { 4, 3 }), n = sample("u8", { 5 }) },
                { metadata = { format = "pt" } })
      local reader = [[
import json, struct, sys, numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop('__metadata__')
data = b[8 + n:]
def crc32c(bs):  # CRC32C from its definition, bit by bit (Castagnoli, reflected)
    c = 0xffffffff
    for x in bs:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    return c ^ 0xffffffff
assert crc32c(b'123456789') == 0xe3069283
for name, e in h.items():
    s, t = e['data_offsets']
    assert meta.pop('crc32c.' + name) == '%08x' % crc32c(data[s:t]), name
assert meta == {'format': 'pt'}
assert (8 + n) % 8 == 0
w = h['w']; s, e = w['data_offsets']
arr = np.frombuffer(data[s:e], dtype=np.float32).reshape(w['shape'])
assert (arr.ravel() == np.arange(12)).all()
assert h['n']['dtype'] == 'U8' and max(v['data_offsets'][1] for v in h.values()) == len(data)
print('ok')
]]
      write_file(path("reader.py"), reader)
      local out, code = h.run(python .. " " .. path("reader.py") .. " " .. path("ref.safetensors"))
      assert.are.equal(0, code, out)
    end)

    it("the safetensors package reads what xfer.save wrote, and xfer.load what it wrote", function()
      local site = os.getenv("XFER_SAFETENSORS_PATH")
      has_numpy()
      local _, code = h.run((site and ("PYTHONPATH=" .. site .. " ") or "") .. python ..
                            " -c 'import safetensors.numpy'")
      if code ~= 0 then
        return pending("the safetensors Python package is not installed here (not a Debian package; " ..
                       "XFER_SAFETENSORS_PATH names an unpacked wheel)")
      end
      xfer.save(path("st.safetensors"), { w = sample("bf16", { 2, 3 }), x = sample("i32", { 4 }) })
      local script = [[
import sys, numpy as np
from safetensors.numpy import load_file, save_file
from safetensors import safe_open
with safe_open(sys.argv[1] + '/st.safetensors', 'np') as f:
    assert sorted(f.keys()) == ['w', 'x']
    assert (f.get_tensor('x') == np.arange(4)).all()
save_file({'a': np.arange(10, dtype=np.float32), 'b': np.ones((3, 2), dtype=np.int64)}, sys.argv[1] + '/theirs.safetensors')
print('ok')
]]
      write_file(path("st.py"), script)
      local out, rc = h.run((site and ("PYTHONPATH=" .. site .. " ") or "") .. python .. " " ..
                            path("st.py") .. " " .. dir)
      assert.are.equal(0, rc, out)
      local theirs = xfer.load(path("theirs.safetensors"))
      assert.is_true(theirs.a:equals(xfer.arange(10, { dtype = "f32" })))
      assert.are.same({ { 1, 1 }, { 1, 1 }, { 1, 1 } }, theirs.b:totable())
    end)
  end)
end)

describe("xferlua --load", function()
  it("prints every name and shape, how the file was read, seconds and GB/s; --json the same", function()
    local p = os.tmpname() .. ".safetensors"
    xfer.save(p, { weight = xfer.zeros({ 64, 32 }, { dtype = "bf16" }), bias = xfer.zeros({ 32 }, { dtype = "f32" }) })
    local out, code = h.run(h.xferlua() .. " --load " .. p .. " --device host")
    assert.are.equal(0, code, out)
    assert.matches("safetensors, 2 tensors", out)
    assert.matches("weight%s+bf16%[64,32%]", out)
    assert.matches("bias%s+f32%[32%]", out)
    assert.matches("read by the page cache", out)
    assert.matches("loaded 2 tensors, [%d.]+ GB onto host in [%d.]+ s: [%d.]+ GB/s", out)
    out, code = h.run(h.xferlua() .. " --load " .. p .. " --json")
    assert.are.equal(0, code, out)
    assert.matches('"bytes":4224', out)
    assert.matches('"tensors":%[', out)
    out, code = h.run(h.xferlua() .. " --load " .. p .. ".missing")
    assert.are.equal(2, code) -- a mistake: one line, no traceback
    assert.matches("ENOENT", out)
    assert.is_falsy(out:find("traceback"), out)
    out, code = h.run(h.xferlua() .. " --device host")
    assert.are.equal(1, code)
    assert.matches("%-%-device with %-%-load", out)
    os.remove(p)
  end)
end)

describe("checkpoints in shards (model.safetensors.index.json)", function()
  local function setup()
    local d = os.tmpname()
    os.remove(d)
    os.execute("mkdir -p " .. d)
    local a = { ["layers.0.w"] = sample("f32", { 64, 8 }), ["layers.0.b"] = sample("f32", { 8 }) }
    local b = { ["layers.1.w"] = sample("bf16", { 64, 8 }), ["lm_head"] = sample("i32", { 100 }) }
    xfer.save(d .. "/model-00001-of-00002.safetensors", a)
    xfer.save(d .. "/model-00002-of-00002.safetensors", b)
    local map = {}
    for name in pairs(a) do map[#map + 1] = ('"%s": "model-00001-of-00002.safetensors"'):format(name) end
    for name in pairs(b) do map[#map + 1] = ('"%s": "model-00002-of-00002.safetensors"'):format(name) end
    write_file(d .. "/model.safetensors.index.json",
               '{"metadata": {"total_size": 1}, "weight_map": {' .. table.concat(map, ", ") .. "}}")
    local all = {}
    for k, v in pairs(a) do all[k] = v end
    for k, v in pairs(b) do all[k] = v end
    return d, all
  end

  it("loads every shard's tensors onto every device, or those names asks for", function()
    local d, all = setup()
    for _, dev in ipairs(xfer.devices()) do
      local got = xfer.load(d .. "/model.safetensors.index.json", { device = dev })
      local n = 0
      for name, t in pairs(all) do
        n = n + 1
        assert.are.equal(dev.name, got[name].device.name)
        assert.is_true(got[name]:to(host):equals(t), dev.name .. " " .. name)
      end
      assert.are.equal(4, n)
    end
    local some = xfer.load(d .. "/model.safetensors.index.json", { names = { "lm_head", "layers.0.b" } })
    assert.is_truthy(some.lm_head)
    assert.is_truthy(some["layers.0.b"])
    assert.is_nil(some["layers.1.w"])
    local e = h.raises("invalid", xfer.load, d .. "/model.safetensors.index.json", { names = { "nope" } })
    assert.matches("the index names no tensor 'nope'", e.message)
    os.execute("rm -rf " .. d)
  end)

  it("a missing shard, a tensor its shard lacks or a bad index fails the whole load, nothing kept", function()
    local d = setup()
    local index = d .. "/model.safetensors.index.json"
    local before = h.in_use(host)
    os.remove(d .. "/model-00002-of-00002.safetensors")
    local e = h.raises("invalid", xfer.load, index)
    assert.are.equal("ENOENT", e.native_name)
    assert.are.equal(d .. "/model-00002-of-00002.safetensors", e.file)
    assert.are.equal(before, h.in_use(host))
    write_file(index, '{"weight_map": {"layers.0.w": "model-00001-of-00002.safetensors", "ghost": "model-00001-of-00002.safetensors"}}')
    e = h.raises("invalid", xfer.load, index)
    assert.are.equal("ghost", e.tensor)
    assert.are.equal(before, h.in_use(host))
    write_file(index, '{"weight_map": {"a": "../../etc/passwd"}}')
    assert.matches("a file beside the index", h.raises("invalid", xfer.load, index).message)
    write_file(index, '{"weight_map": [1, 2]')
    assert.matches("not a JSON object", h.raises("invalid", xfer.load, index).message)
    write_file(index, '{"metadata": {}}')
    e = h.raises("invalid", xfer.load, index)
    assert.matches("no weight_map", e.message)
    assert.are.equal(index, e.file)
    os.execute("rm -rf " .. d)
  end)
end)

describe("files mutated at random", function()
  -- A bounded fuzz (CI runs it under ASan and UBSan too): valid files of each format with
  -- bytes flipped, runs overwritten, cut short or grown; every open and load either works or
  -- raises an xfer.Error naming the file, never anything else, and nothing stays allocated.
  it("survives 300 mutations of each format: an xfer.Error or a load, nothing else", function()
    math.randomseed(26)
    local d = os.tmpname()
    os.remove(d)
    os.execute("mkdir -p " .. d)
    local t = { a = sample("f32", { 7, 3 }), b = sample("u8", { 33 }), c = sample("i64", { 2, 2 }) }
    local seeds = {}
    for _, ext in ipairs({ "safetensors", "npz", "npy" }) do
      local p = d .. "/seed." .. ext
      xfer.save(p, ext == "npy" and t.a or t)
      seeds[ext] = read_file(p)
    end
    local before = h.in_use(host)
    local outcomes = { loaded = 0, refused = 0 }
    for ext, seed in pairs(seeds) do
      for _ = 1, 300 do
        local bytes = seed
        for _ = 1, math.random(1, 4) do
          local kind, at = math.random(1, 4), math.random(1, #bytes)
          if kind == 1 then -- one byte flipped
            bytes = bytes:sub(1, at - 1) .. string.char(math.random(0, 255)) .. bytes:sub(at + 1)
          elseif kind == 2 then -- a run overwritten with digits, quotes and brackets
            local run = {}
            for i = 1, math.random(1, 8) do run[i] = ("0123456789\"{}[],:-e. "):sub(math.random(1, 21), nil):sub(1, 1) end
            bytes = bytes:sub(1, at - 1) .. table.concat(run) .. bytes:sub(at + #run)
          elseif kind == 3 then -- cut short
            bytes = bytes:sub(1, at)
          else -- grown in the middle
            bytes = bytes:sub(1, at) .. h.random_bytes(math.random(1, 16)) .. bytes:sub(at + 1)
          end
        end
        local p = d .. "/m." .. ext
        write_file(p, bytes)
        local ok, e = pcall(xfer.load, p)
        if ok then
          outcomes.loaded = outcomes.loaded + 1
          if xfer.is_tensor(e) then e:free() else for _, x in pairs(e) do x:free() end end
        else
          assert.is_true(xfer.is_error(e), tostring(e))
          assert.are.equal(p, e.file, e.message)
          outcomes.refused = outcomes.refused + 1
        end
      end
    end
    assert.are.equal(before, h.in_use(host))
    assert.is_true(outcomes.refused > 100 and outcomes.loaded > 10,
                   ("refused %d, loaded %d"):format(outcomes.refused, outcomes.loaded))
    os.execute("rm -rf " .. d)
  end)
end)
