-- Transfers on the host: the planner, forced paths, the explicit host round-trip.
local xfer = require "xfer"
local h = require "support.helpers"

local host = xfer.device("host")

describe("transfers", function()
  describe("plan", function()
    it("picks same_device for host to host", function()
      local t = xfer.tensor({ 1, 2, 3 })
      local plan = xfer.plan(t, host)
      assert.are.equal("same_device", plan.path)
      assert.are.equal("source and target are both host", plan.reason)
      assert.are.same({ "copy 12 bytes within host" }, plan.steps)
    end)

    it("describes a forced host round-trip", function()
      local plan = xfer.plan(xfer.zeros({ 4 }), "host", { via = "host" })
      assert.are.equal("host", plan.path)
      assert.are.equal("through host memory between host and host", plan.reason)
      assert.are.same({ "read 16 bytes off host straight into the target's memory on host" }, plan.steps)
    end)

    it("accepts via = 'auto'", function()
      assert.are.equal("same_device", xfer.plan(xfer.zeros({ 1 }), host, { via = "auto" }).path)
    end)

    it("refuses a path that does not apply, saying why (code unsupported)", function()
      local t = xfer.zeros({ 4 })
      local cases = {
        same_runtime = "same_runtime moves between two devices; host is both ends",
        interop = "interop needs two runtimes on one physical GPU (equal device UUIDs), or two GPUs that CUDA joins, each end CUDA's or exported to it; host and host are neither",
        direct = "direct moves between a remote device and local device memory; host and host are both local",
        staged = "staged moves between two devices; host is host memory, which the host path moves in one copy",
      }
      for via, message in pairs(cases) do
        local e = h.raises("unsupported", xfer.plan, t, host, { via = via })
        assert.are.equal(message, e.message)
        local e2 = h.raises("unsupported", t.to, t, host, { via = via })
        assert.are.equal(message, e2.message)
      end
    end)
  end)

  describe("to", function()
    it("returns a new tensor with the same dtype, shape and bytes", function()
      local t = xfer.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "i16" })
      for _, via in ipairs({ "auto", "same_device", "host" }) do
        local c = t:to(host, { via = via })
        assert.are.equal("i16", c.dtype)
        assert.are.same({ 2, 2 }, c.shape)
        assert.are.equal(t:tobytes(), c:tobytes())
      end
    end)

    it("host_roundtrip is the explicit fallback", function()
      local t = xfer.arange(10, { dtype = "f64" })
      assert.is_true(xfer.host_roundtrip(t, host):equals(t))
      assert.is_true(xfer.host_roundtrip(t, "host"):equals(t))
    end)

    it("moves zero-byte tensors", function()
      local t = xfer.zeros({ 0, 4 })
      assert.are.same({ 0, 4 }, t:to(host, { via = "host" }).shape)
    end)

    it("keeps memory accounting balanced", function()
      local before = h.in_use(host)
      local t = xfer.zeros({ 100000 })
      local moved = t:to(host, { via = "host" })
      assert.are.equal(before + 800000, xfer.memory(host).in_use)
      t:free()
      moved:free()
      assert.are.equal(before, xfer.memory(host).in_use)
    end)
  end)
end)
