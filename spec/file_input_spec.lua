-- Files from outside (issue 35): headers with many keys, archives and headers that lie,
-- names with NUL bytes, indexes nested deep, dtypes with junk after them; and what a save
-- leaves on the disk (the mode the umask says; no temporary of a writer that was killed).
local xfer = require "xfer"
local h = require "support.helpers"

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- a safetensors file of the given header text (padded to 8) and data bytes
local function safetensors(path, header, data)
  header = header .. (" "):rep((8 - #header % 8) % 8)
  local len = {}
  for i = 0, 7 do len[#len + 1] = string.char(math.floor(#header / 256 ^ i) % 256) end
  write(path, table.concat(len) .. header .. data)
end

describe("files from outside", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  -- keys were checked for duplicates pairwise: 80k keys took 11 s, 200k over 300 s
  it("opens a header of 200k tensors, and names a duplicate among them", function()
    local n = 200000
    local parts = {}
    for i = 1, n do parts[i] = ('"t%d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}'):format(i, i - 1, i) end
    safetensors(dir .. "/many.safetensors", "{" .. table.concat(parts, ",") .. "}", ("x"):rep(n))
    local f = xfer.open(dir .. "/many.safetensors")
    assert.are.equal(n, #f:entries())
    f:close()
    parts[n] = ('"t17":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}'):format(n - 1, n)
    safetensors(dir .. "/dup.safetensors", "{" .. table.concat(parts, ",") .. "}", ("x"):rep(n))
    local e = h.raises("invalid", xfer.open, dir .. "/dup.safetensors")
    assert.matches('duplicate key "t17"', e.message)
  end)

  it("refuses a tensor name or a dtype with a NUL byte (two names became one)", function()
    safetensors(dir .. "/nul.safetensors", '{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' ..
                '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', "xy")
    local e = h.raises("invalid", xfer.open, dir .. "/nul.safetensors")
    assert.matches("a tensor name holds a NUL byte", e.message)
    safetensors(dir .. "/nuldtype.safetensors", '{"a":{"dtype":"U8\\u0000junk","shape":[1],"data_offsets":[0,1]}}', "x")
    e = h.raises("invalid", xfer.open, dir .. "/nuldtype.safetensors")
    assert.matches("its dtype holds a NUL byte", e.message)
  end)

  it("refuses a shard index with a NUL in a name, or nested deeper than 64", function()
    xfer.save(dir .. "/s.safetensors", { a = xfer.zeros({ 2 }) })
    write(dir .. "/nul.safetensors.index.json", '{"weight_map": {"a\\u0000x": "s.safetensors"}}')
    local e = h.raises("invalid", xfer.load, dir .. "/nul.safetensors.index.json")
    assert.matches("a name with a NUL byte", e.message)
    write(dir .. "/deep.safetensors.index.json", '{"weight_map": {}, "x": ' .. ("["):rep(100000) .. ("]"):rep(100000) .. "}")
    e = h.raises("invalid", xfer.load, dir .. "/deep.safetensors.index.json")
    assert.matches("nested deeper than 64", e.message)
    assert.are.equal(dir .. "/deep.safetensors.index.json", e.file)
  end)

  it("refuses an .npy descr with junk after its size ('<f4junk' read as f32)", function()
    local dict = "{'descr': '<f4junk', 'fortran_order': False, 'shape': (2,), }"
    local header = dict .. (" "):rep(64 - 10 - #dict - 1) .. "\n"
    write(dir .. "/junk.npy", "\147NUMPY\1\0" .. string.char(#header, 0) .. header .. ("\0"):rep(8))
    local e = h.raises("unsupported", xfer.open, dir .. "/junk.npy")
    assert.matches("'<f4junk'", e.message)
  end)

  it("refuses a stored .npz member that says it holds more than it stores (the directory read as data)", function()
    xfer.save(dir .. "/a.npz", { a = xfer.arange(16, { dtype = "u8" }) })
    local f = assert(io.open(dir .. "/a.npz", "rb"))
    local bytes = f:read("*a")
    f:close()
    -- the central directory entry's compressed size made 8 bytes smaller, its uncompressed
    -- size left as it was (xfer.save writes zip64 sizes: the extra field's second number)
    local cd = bytes:find("PK\1\2", 1, true)
    local name_len = bytes:byte(cd + 28) + 256 * bytes:byte(cd + 29)
    local at = bytes:byte(cd + 20) == 255 and cd + 46 + name_len + 12 or cd + 20 -- 1-based
    local csize = bytes:byte(at) + 256 * bytes:byte(at + 1)
    local lie = bytes:sub(1, at - 1) .. string.char((csize - 8) % 256, math.floor((csize - 8) / 256)) .. bytes:sub(at + 2)
    write(dir .. "/lie.npz", lie)
    local e = h.raises("invalid", xfer.open, dir .. "/lie.npz")
    assert.matches("a stored member of %d+ bytes that says it holds %d+", e.message)
  end)

  it("a saved file has the mode the umask gives a new file (not always 0600)", function()
    for _, case in ipairs({ { "022", "644" }, { "027", "640" }, { "077", "600" } }) do
      local p = dir .. "/m" .. case[1] .. ".safetensors"
      local out, code = h.run(("umask %s && %s -e 'require(\"xfer\").save(\"%s\", {a = require(\"xfer\").zeros({2})})' && stat -c %%a %s")
                              :format(case[1], h.xferlua(), p, p))
      assert.are.equal(0, code, out)
      assert.are.equal(case[2], out:match("(%d+)%s*$"), out)
    end
  end)

  it("a save removes the temporaries of a writer that was killed, not a live one's", function()
    local p = dir .. "/model.safetensors"
    -- a writer killed mid-save: its pid is gone
    local out = h.run("sh -c 'echo $$'")
    local dead = tonumber(out:match("%d+"))
    local stale, live = dir .. "/.model.safetensors.xfer-" .. dead .. "-AbCdEf", dir .. "/.model.safetensors.xfer-1-AbCdEf"
    write(stale, "half a file")
    write(live, "pid 1 is alive")
    xfer.save(p, { a = xfer.zeros({ 4 }) })
    assert.is_nil(io.open(stale), "the dead writer's temporary is gone")
    local f = io.open(live)
    assert.is_truthy(f, "a live writer's temporary stays")
    f:close()
    local listing = h.run("ls -a " .. dir)
    local _, temporaries = listing:gsub("%.xfer%-", "")
    assert.are.equal(1, temporaries, listing) -- the live one alone: the save's own was renamed
  end)
end)
