-- The xfer module: version, runtimes, devices, error objects.
local xfer = require "xfer"
local h = require "support.helpers"

describe("xfer module", function()
  it("has a version", function()
    assert.are.equal("0.1.0", xfer.version)
  end)

  it("can be opened twice in one state (busted reloads modules)", function()
    package.loaded.xfer = nil
    local again = require "xfer"
    local t = again.tensor({ 1, 2 })
    assert.are.equal(2, #t)
    assert.is_true(t:equals(xfer.tensor({ 1, 2 })))
  end)

  it("leaves the environment as it found it (PoCL sets variables that hid NVIDIA's OpenCL from children)", function()
    -- the environment a child of xferlua gets, after every runtime opened, against the one
    -- xferlua itself was given
    local given = h.run("env | sort")
    local inherited = h.run(h.xferlua() .. [[ -e 'require "xfer"; io.write(io.popen("env | sort"):read("*a"))']])
    local function set(text)
      local out = {}
      for line in text:gmatch("[^\n]+") do
        if not line:match("^_=") and not line:match("^SHLVL=") then out[line] = true end
      end
      return out
    end
    assert.are.same(set(given), set(inherited))
  end)

  describe("runtimes()", function()
    it("lists host, cuda, vulkan, opencl and remote in that order", function()
      local names = {}
      for i, r in ipairs(xfer.runtimes()) do names[i] = r.name end
      assert.are.same({ "host", "cuda", "vulkan", "opencl", "remote" }, names)
    end)

    it("says host is available with one device and no reason", function()
      local host = xfer.runtimes()[1]
      assert.is_true(host.available)
      assert.are.equal("", host.reason)
      assert.are.equal(1, host.devices)
    end)

    it("gives every unavailable runtime a reason", function()
      for _, r in ipairs(xfer.runtimes()) do
        assert.are.equal("boolean", type(r.available))
        if not r.available then
          assert.is_true(#r.reason > 0, r.name .. " has no reason")
          assert.are.equal(0, r.devices)
        end
      end
    end)
  end)

  describe("devices", function()
    it("lists host first", function()
      local devs = xfer.devices()
      assert.is_true(#devs >= 1)
      assert.are.equal("host", devs[1].name)
    end)

    it("describes the host device", function()
      local host = xfer.device("host")
      assert.are.equal("host", host.name)
      assert.are.equal("host", host.runtime)
      assert.are.equal(0, host.index)
      assert.is_true(host.unified)
      assert.is_nil(host.uuid)
      assert.is_true(host.total_memory > 0)
      assert.is_true(host.free_memory > 0 and host.free_memory <= host.total_memory)
      assert.is_true(#host.label > 0)
      assert.is_truthy(tostring(host):match("^xfer%.Device%(host: "))
    end)

    it("compares equal for the same device", function()
      assert.is_true(xfer.device("host") == xfer.devices()[1])
    end)

    it("raises invalid for an unknown name, naming the devices there are", function()
      local e = h.raises("invalid", xfer.device, "tpu:0")
      assert.are.equal("unknown device 'tpu:0' (devices here: " .. h.device_names() .. ")", e.message)
    end)

    it("raises unavailable for a runtime without devices", function()
      for _, r in ipairs(xfer.runtimes()) do
        if not r.available then
          local e = h.raises("unavailable", xfer.device, r.name)
          assert.are.equal("no " .. r.name .. " device: " .. r.reason, e.message)
        end
      end
    end)

    it("reports memory in use", function()
      local host = xfer.device("host")
      local before = h.in_use(host)
      local t = xfer.zeros({ 1024 }, { dtype = "f64" })
      assert.are.equal(before + 8192, xfer.memory(host).in_use)
      assert.are.equal(xfer.memory(host).in_use, host:memory().in_use)
      t:free()
      assert.are.equal(before, xfer.memory(host).in_use)
      assert.is_true(xfer.memory(host).peak >= before + 8192)
    end)
  end)

  describe("error objects", function()
    it("carry every field and print their message", function()
      local e = h.raises("invalid", xfer.device, "nope")
      for _, field in ipairs({ "code", "op", "from", "to", "native_name", "message" }) do
        assert.are.equal("string", type(e[field]), field)
      end
      assert.are.equal("number", type(e.native))
      assert.are.equal("boolean", type(e.retryable))
      assert.are.equal(e.message, tostring(e))
      assert.are.equal("device", e.op)
    end)

    it("are recognised by is_error, and nothing else is", function()
      local _, e = pcall(xfer.device, "nope")
      assert.is_true(xfer.is_error(e))
      assert.is_false(xfer.is_error("a string"))
      assert.is_false(xfer.is_error({ code = "read" }))
      assert.is_false(xfer.is_error(nil))
    end)

    it("lists the codes", function()
      assert.are.same({ "read", "write", "alloc", "freed", "closed", "invalid", "unsupported",
                        "unavailable", "device_lost", "in_use", "peer_lost", "timeout", "unreachable",
                        "unauthorized", "version_mismatch", "corrupt", "canceled", "stale" }, xfer.codes)
    end)

    it("carry their code's words from the error table, the core's own cause in them", function()
      local t = xfer.tensor({ 1, 2 })
      t:free()
      local _, e = pcall(t.to, t, "host")
      assert.are.equal("freed", e.code)
      assert.are.equal("attempt to use a freed tensor", e.what)
      assert.is_truthy(e.message:find(e.what, 1, true))
      local _, bad = pcall(xfer.device, "nope")
      assert.are.equal("invalid argument", bad.what)
      local made = xfer.error({ code = "alloc", op = "x", message = "m" })
      assert.are.equal("out of host memory", made.what)
    end)
  end)

  it("describe() reports every runtime", function()
    local text = xfer.describe()
    for _, r in ipairs(xfer.runtimes()) do
      assert.is_truthy(text:find(r.name, 1, true), r.name)
      if not r.available then assert.is_truthy(text:find(r.reason, 1, true)) end
    end
  end)
end)
