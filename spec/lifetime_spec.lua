-- Device lifetime: dev:close() gives back everything the device holds; its tensors raise
-- closed from then on (and are harmless to free or collect); xfer.device(name) opens it
-- again. A lost device's tensors raise device_lost the same way (see the runtimes' specs).
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

local function objects(runtime)
  for _, r in ipairs(xfer.runtimes()) do
    if r.name == runtime then return r.objects end
  end
end

local function each_device(fn)
  local any = false
  for _, dev in ipairs(xfer.devices()) do
    if dev ~= host then
      any = true
      fn(dev)
    end
  end
  if not any then pending("no device besides host here") end
end

describe("device lifetime", function()
  it("close gives back the device's memory and driver objects; its tensors raise closed", function()
    each_device(function(dev)
      collectgarbage()
      collectgarbage()
      -- every cache: another device's segments may live in this one's memory (OpenCL on an
      -- NVIDIA GPU in CUDA's), and a closed device keeps what it holds for others
      xfer.empty_cache()
      local before_objects = objects(dev.runtime) - xfer.memory(dev).objects
      local before = xfer.memory(dev)
      local big = xfer.full({ 3 * 1024 * 1024 }, 5, { dtype = "u8", device = dev })
      local small = xfer.arange(10, { device = dev })
      local on_host = xfer.arange(10)
      assert.is_true(xfer.memory(dev).in_use > before.in_use)
      dev:close()
      assert.is_true(dev.closed)
      local after = xfer.memory(dev)
      assert.are.equal(0, after.in_use, dev.name)
      assert.are.equal(0, after.reserved, dev.name)
      -- every driver object it held, its pins of host memory and imports included (its
      -- runtime's other devices keep theirs)
      assert.are.equal(0, after.objects, dev.name)
      -- host memory the runtime registered on the way (a staging or result segment, kept in
      -- the host's cache) is its first device's: given back with the host's cache
      xfer.empty_cache()
      assert.are.equal(before_objects, objects(dev.runtime), dev.name)
      for _, t in ipairs({ big, small }) do
        for _, call in ipairs({
          function() return t:tobytes() end, function() return t:totable() end,
          function() return t:clone() end, function() return t:to(host) end,
          function() return on_host:copy_from(t) end, function() return t:copy_from(on_host) end,
          function() return t:equals(t) end, function() return #t end,
        }) do
          local e = h.raises("closed", call)
          assert.is_truthy(e.message:find(dev.name .. " closed", 1, true), e.message)
        end
      end
      -- moves to it, and tensors made on it, say it is closed
      local e = h.raises("closed", on_host.to, on_host, dev)
      assert.are.equal(("device %s is closed (xfer.device(\"%s\") opens it again)"):format(dev.name, dev.name),
                       e.message)
      h.raises("closed", xfer.zeros, { 2 }, { device = dev })
      -- freeing and collecting its tensors stays harmless
      small:free()
      small = nil
      big = nil
      collectgarbage()
      collectgarbage()
      assert.are.equal(0, xfer.memory(dev).in_use)
      -- opened again by name: usable as before, the old tensors stay closed
      local again = xfer.device(dev.name)
      assert.is_false(again.closed)
      local t = xfer.arange(10, { device = again })
      assert.are.same(on_host:totable(), t:to(host):totable())
      t:free()
      xfer.empty_cache(again)
    end)
  end)

  it("close waits for the moves that use the device", function()
    each_device(function(dev)
      local bytes = h.random_bytes(4 * 1024 * 1024)
      local src = xfer.tensor(bytes, { dtype = "u8" })
      local job = src:to_async(dev)
      dev:close()
      local ok, moved = pcall(job.wait, job)
      if ok then -- the move ran first: its tensor was made on the device, and is closed now
        h.raises("closed", moved.tobytes, moved)
      else
        assert.are.equal("closed", moved.code) -- the close came first
      end
      assert.are.equal(bytes, src:tobytes())
      xfer.device(dev.name)
    end)
  end)

  it("host memory cannot be closed", function()
    local e = h.raises("invalid", host.close, host)
    assert.are.equal("host memory cannot be closed", e.message)
    h.raises("invalid", host.close, host, 1)
  end)
end)
