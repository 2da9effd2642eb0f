-- The self-test: every ordered pair of devices, the default path and every forced path that
-- applies, a known pattern checked byte for byte; its report, JSON and exit status.
local xfer = require "xfer"
local h = require "support.helpers"
local dkjson = require "dkjson"

describe("selftest", function()
  after_each(function() xfer.faults.clear() end)

  it("moves between every ordered pair by every path that applies, and says ok here", function()
    local r = xfer.selftest({ quick = true })
    assert.is_true(r.ok, xfer.selftest_report(r))
    local devices = xfer.devices()
    local seen = {}
    for _, e in ipairs(r.results) do
      assert.is_true(e.ok, e.from .. " -> " .. e.to .. " " .. tostring(e.path) .. ": " .. tostring(e.message))
      assert.is_true(e.gbps > 0)
      seen[e.from .. ">" .. e.to .. ">" .. (e.forced and e.path or "auto") .. ">" .. e.bytes] = true
    end
    for _, a in ipairs(devices) do
      for _, b in ipairs(devices) do
        for _, n in ipairs({ 4099, 256 * 1024 + 5 }) do
          assert.is_true(seen[a.name .. ">" .. b.name .. ">auto>" .. n], a.name .. " -> " .. b.name)
          -- each forced path that applies is there too
          local probe = xfer.zeros({ 1 }, { device = a })
          for _, p in ipairs({ "same_device", "same_runtime", "interop", "direct", "staged", "host" }) do
            local applies = pcall(xfer.plan, probe, b, { via = p })
            assert.are.equal(applies, seen[a.name .. ">" .. b.name .. ">" .. p .. ">" .. n] == true,
                             a.name .. " -> " .. b.name .. " via " .. p)
          end
        end
      end
    end
    local report = xfer.selftest_report(r)
    assert.is_truthy(report:match("\nselftest: ok %-%- %d+ moves, 0 default paths failed, 0 forced paths failed"), report)
  end)

  it("shows exactly the failures that were injected, by runtime", function()
    for _, rt in ipairs(xfer.runtimes()) do
      if rt.available and rt.devices > 0 and rt.name ~= "host" then -- (remote: none until a peer connects)
        xfer.faults.clear()
        xfer.faults.inject({ runtime = rt.name, op = "read", count = 100000 })
        local r = xfer.selftest({ quick = true, sizes = { 4099 } })
        xfer.faults.clear()
        assert.is_false(r.ok)
        for _, e in ipairs(r.results) do
          local from_rt = e.from:match("^[^:]+")
          if not e.ok then
            assert.are.equal("read", e.code, e.message)
            assert.is_truthy(e.message:find("[injected fault]", 1, true), e.message)
            assert.is_truthy(e.message:find(rt.name, 1, true) or from_rt == rt.name, e.message)
          end
        end
        assert.is_truthy(xfer.selftest_report(r):find("selftest: FAILED", 1, true))
      end
    end
  end)

  it("tells its progress per pair of devices, ending at the total", function()
    local calls = {}
    xfer.selftest({ quick = true, progress = function(done, total) calls[#calls + 1] = { done, total } end })
    local n = #xfer.devices() * #xfer.devices()
    assert.are.same({ 0, n }, calls[1])
    assert.are.same({ n, n }, calls[#calls])
    assert.are.equal(n + 1, #calls)
  end)

  it("keeps to its time limit and its lists", function()
    local host = xfer.device("host")
    local r = xfer.selftest({ devices = { host }, paths = { "auto" }, sizes = { 10 }, files = false })
    assert.are.equal(1, #r.results)
    assert.are.equal("same_device", r.results[1].path)
    local limited = xfer.selftest({ quick = true, time_limit = 1e-9 })
    local skipped = 0
    for _, e in ipairs(limited.results) do if e.skipped then skipped = skipped + 1 end end
    assert.is_true(skipped > 0)
    assert.is_true(limited.ok) -- what was not run did not fail
  end)

  h.each_invalid({
    { "an unknown option", function() return xfer.selftest({ fast = true }) end,
      "selftest: unknown option 'fast' (known: quick, sizes, devices, paths, time_limit, progress, costs, files)" },
    { "an unknown path", function() return xfer.selftest({ paths = { "teleport" } }) end,
      "selftest: unknown path 'teleport' (auto, same_device, same_runtime, interop, direct, staged, host)" },
    { "a bad size", function() return xfer.selftest({ sizes = { 0 } }) end, "selftest: sizes are whole numbers of bytes >= 1" },
    { "a bad time limit", function() return xfer.selftest({ time_limit = -1 }) end, "selftest: time_limit is a number of seconds > 0" },
    { "an unknown device", function() return xfer.selftest({ devices = { "gpu" } }) end,
      "selftest: unknown device 'gpu' (devices here: " .. table.concat((function()
        local names = {}
        for i, d in ipairs(xfer.devices()) do names[i] = d.name end
        return names
      end)(), ", ") .. ")" },
  })

  it("xferlua --selftest prints the table and exits 1 when a default path fails", function()
    local out, code = h.run(h.xferlua() .. " --selftest --quick")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("selftest: ok", 1, true), out)
    local bad, bad_code = h.run("XFER_FAULTS=host:write:1:100000 " .. h.xferlua() .. " --selftest --quick")
    assert.are.equal(1, bad_code, bad)
    assert.is_truthy(bad:find("selftest: FAILED", 1, true), bad)
    local json, json_code = h.run(h.xferlua() .. " --selftest --quick --json")
    assert.are.equal(0, json_code, json)
    local doc = dkjson.decode(json)
    assert.is_true(doc.ok)
    assert.is_true(#doc.results > 0)
    local _, quick_alone = h.run(h.xferlua() .. " --quick -e 1")
    assert.are.equal(1, quick_alone)
  end)

  it("runs when xfer loads with XFER_SELFTEST=1, its report on stderr", function()
    local out, code = h.run("XFER_SELFTEST=1 " .. h.xferlua() .. " -e 'require \"xfer\" print(\"after\")'")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("selftest: ok", 1, true), out)
    assert.is_truthy(out:find("after\n", 1, true), out)
    local odd = h.run("XFER_SELFTEST=yes " .. h.xferlua() .. " -e 'require \"xfer\"'")
    assert.are.equal("xferlua: XFER_SELFTEST takes 0 or 1, not 'yes': not run\n", odd)
  end)
end)

describe("the self-test's files", function()
  it("saves from every device to a file and loads onto every device, by the page cache and O_DIRECT", function()
    local r = xfer.selftest({ quick = true, paths = { "auto" } })
    local saves, loads = 0, 0
    for _, e in ipairs(r.results) do
      if e.to == "file" then saves = saves + 1; assert.is_true(e.ok, e.message) end
      if e.from == "file" then loads = loads + 1; assert.is_true(e.ok, e.message) end
    end
    local n = #xfer.devices()
    assert.are.equal(n, saves)
    assert.are.equal(2 * n * n, loads)
    local none = xfer.selftest({ quick = true, paths = { "auto" }, files = false })
    for _, e in ipairs(none.results) do assert.are_not.equal("file", e.to) end
  end)
end)
