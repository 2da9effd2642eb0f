-- A tensor split across devices as it loads (xfer.load's `shard`): each device receives its
-- part straight from the file's chunks, the file read once, the parts cut as
-- numpy.array_split cuts, `verify` checking the parts together against the file's one sum.
local xfer = require "xfer"
local h = require "support.helpers"

local path = os.tmpname() .. ".safetensors"

-- the elements [a, b) of dimension `dim` (from 0) of `whole`, on the host, packed
local function part_of(whole, dim, a, b)
  local idx = {}
  for d = 1, #whole.shape do idx[d] = (d == dim + 1) and { a + 1, b } or {} end
  return whole[idx]:to("host")
end

-- every part of `parts` (a list, in the devices' order) is its slice of `whole`
local function assert_parts(whole, parts, dim, devices, what)
  assert.are.equal(#devices, #parts, what)
  local at = 0
  for k, p in ipairs(parts) do
    local want_dev = type(devices[k]) == "string" and devices[k] or devices[k].name
    assert.are.equal(want_dev, p.device.name, what)
    local len = p.shape[dim + 1]
    for d = 1, #whole.shape do
      if d ~= dim + 1 then assert.are.equal(whole.shape[d], p.shape[d], what) end
    end
    if len > 0 then
      assert.is_true(p:to("host"):equals(part_of(whole, dim, at, at + len)), what .. " part " .. k)
    end
    at = at + len
  end
  assert.are.equal(whole.shape[dim + 1], at, what)
end

local function names(devs)
  local out = {}
  for i, d in ipairs(devs) do out[i] = d.name end
  return out
end

describe("xfer.load with shard", function()
  after_each(function()
    xfer.faults.clear()
    os.remove(path)
  end)

  local w = xfer.arange(37 * 300, { dtype = "f32" }):view({ 37, 300 })
  local x3 = xfer.arange(2 * 3 * 2, { dtype = "i64" }):view({ 2, 3, 2 })

  it("splits every tensor along a dimension across every device, the parts as numpy.array_split cuts", function()
    xfer.save(path, { w = w, x3 = x3 })
    local devs = names(xfer.devices())
    for _, dim in ipairs({ 0, 1 }) do
      for _, direct in ipairs({ false, true }) do
        for _, chunk in ipairs({ 4096, 65536 }) do -- pieces cut at a chunk's end, and not
          local what = ("dim %d, direct %s, chunk %d"):format(dim, tostring(direct), chunk)
          local got = xfer.load(path, { shard = { dim = dim, devices = devs }, verify = true,
                                        direct = direct, chunk = chunk })
          assert_parts(w, got.w, dim, devs, "w, " .. what)
          assert_parts(x3, got.x3, dim, devs, "x3, " .. what)
        end
      end
    end
    -- 5 rows over 3 devices: 2, 2, 1 (numpy.array_split's), and a part may be empty
    xfer.save(path, { v = xfer.arange(5, { dtype = "i32" }), one = xfer.arange(1, { dtype = "u8" }) })
    local got = xfer.load(path, { shard = { dim = 0, devices = { "host", "host", "host" } } })
    assert.are.same({ { 0, 1 }, { 2, 3 }, { 4 } }, { got.v[1]:totable(), got.v[2]:totable(), got.v[3]:totable() })
    assert.are.same({ { 1 }, { 0 }, { 0 } }, { got.one[1].shape, got.one[2].shape, got.one[3].shape })
  end)

  it("reads the file once whatever the parts: a load's bytes are the tensors' bytes", function()
    xfer.save(path, { w = w })
    local totals = {}
    for _, devs in ipairs({ { "host" }, names(xfer.devices()) }) do
      local total
      xfer.load(path, { shard = { dim = 1, devices = devs }, direct = false,
                        progress = function(_, t) total = t end })
      totals[#totals + 1] = total
    end
    assert.are.same({ w.nbytes, w.nbytes }, totals)
  end)

  it("takes a function naming each tensor's split (nil: loaded whole onto `device`), and a dtype", function()
    xfer.save(path, { w = w, b = xfer.arange(300, { dtype = "f32" }) })
    local devs = names(xfer.devices())
    local last = devs[#devs]
    local asked = {}
    local got = xfer.load(path, {
      device = last,
      dtype = "f64",
      shard = function(name, info)
        asked[name] = info.shape
        if name == "w" then return { dim = 1, devices = devs } end
      end,
    })
    assert.are.same({ w = { 37, 300 }, b = { 300 } }, asked)
    assert.are.equal(last, got.b.device.name)
    assert.are.equal("f64", got.b.dtype)
    assert.are.equal("f64", got.w[1].dtype)
    assert_parts(w:to("host", { dtype = "f64" }), got.w, 1, devs, "w as f64")
  end)

  it("splits in a load job and through a shard index", function()
    xfer.save(path, { w = w, x3 = x3 })
    local devs = names(xfer.devices())
    local got = xfer.load_async(path, { shard = { dim = 0, devices = devs } }):wait()
    assert_parts(w, got.w, 0, devs, "a job's w")
    assert_parts(x3, got.x3, 0, devs, "a job's x3")
    -- an index over two shard files
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0 or true)
    xfer.save(dir .. "/a.safetensors", { w = w })
    xfer.save(dir .. "/b.safetensors", { x3 = x3 })
    local f = assert(io.open(dir .. "/model.safetensors.index.json", "w"))
    f:write('{"metadata": {}, "weight_map": {"w": "a.safetensors", "x3": "b.safetensors"}}')
    f:close()
    got = xfer.load(dir .. "/model.safetensors.index.json", { shard = { dim = 1, devices = devs }, verify = true })
    assert_parts(w, got.w, 1, devs, "an index's w")
    assert_parts(x3, got.x3, 1, devs, "an index's x3")
    os.execute("rm -rf " .. dir)
  end)

  it("verify checks the parts together against the file's one sum, and names the tensor", function()
    h.no_setaside()
    xfer.save(path, { w = w })
    local devs = names(xfer.devices())
    for _, dim in ipairs({ 0, 1 }) do
      xfer.faults.inject({ runtime = "file", op = "corrupt", nth = 1 })
      local e = h.raises("corrupt", xfer.load, path, { shard = { dim = dim, devices = devs }, verify = true })
      xfer.faults.clear()
      assert.are.equal("verify", e.op)
      assert.are.equal("w", e.tensor)
      assert.is_truthy(tostring(e):find("'w' landed changed in its " .. #devs .. " parts", 1, true), tostring(e))
    end
    -- a file that records no sums: said so, as for a whole tensor
    local f = xfer.open(path)
    assert.is_truthy(f:metadata()["crc32c.w"])
    f:close()
  end)

  it("refuses what cannot be split, naming the tensor, and keeps nothing", function()
    xfer.save(path, { w = w, b = xfer.arange(4, { dtype = "f32" }) })
    local before = h.in_use_everywhere()
    local e = h.raises("invalid", xfer.load, path, { shard = { dim = 1, devices = { "host", "host" } } })
    assert.is_truthy(tostring(e):find("tensor 'b': it has 1 dimension: no dimension 1 to split", 1, true), tostring(e))
    assert.are.equal("b", e.tensor)
    e = h.raises("invalid", xfer.load, path, { shard = { dim = -1, devices = { "host" } } })
    assert.is_truthy(tostring(e):find("no dimension -1 to split", 1, true), tostring(e))
    e = h.raises("invalid", xfer.load, path, { shard = { dim = 0 } })
    assert.is_truthy(tostring(e):find("needs dim (a whole number) and devices", 1, true), tostring(e))
    e = h.raises("invalid", xfer.load, path, { shard = { dim = 0.5, devices = { "host" } } })
    e = h.raises("invalid", xfer.load, path, { shard = 3 })
    assert.is_truthy(tostring(e):find("shard of '", 1, true), tostring(e))
    h.raises("invalid", xfer.load, path, { shard = { dim = 0, devices = { "nowhere:7" } } })
    assert.are.equal(before, h.in_use_everywhere())
    -- an .npy in column-major order is not split in place
    local npy = os.tmpname() .. ".npy"
    local out = assert(io.open(npy, "wb"))
    local header = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }"
    header = header .. string.rep(" ", 127 - 10 - #header) .. "\n"
    out:write("\147NUMPY\1\0", string.char(#header % 256, math.floor(#header / 256)), header,
              string.rep("\0", 24))
    out:close()
    e = h.raises("unsupported", xfer.load, npy, { shard = { dim = 0, devices = { "host" } } })
    assert.is_truthy(tostring(e):find("column-major", 1, true), tostring(e))
    os.remove(npy)
  end)

  it("splits across two GPUs #two_gpus", function()
    local cuda = {}
    for _, d in ipairs(xfer.devices()) do
      if d.runtime == "cuda" then cuda[#cuda + 1] = d.name end
    end
    if #cuda < 2 then
      return pending(("two CUDA devices needed (here: %d): the nvidia-h200-x2 machine"):format(#cuda))
    end
    local big = xfer.arange(4096 * 1024, { dtype = "f32" }):view({ 4096, 1024 })
    xfer.save(path, { big = big })
    for _, dim in ipairs({ 0, 1 }) do
      local got = xfer.load(path, { shard = { dim = dim, devices = { cuda[1], cuda[2] } }, verify = true })
      assert_parts(big, got.big, dim, { cuda[1], cuda[2] }, "two GPUs, dim " .. dim)
    end
  end)
end)
