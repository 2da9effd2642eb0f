-- The plan is the whole move: xfer.plan(t, dev, opts) names every step a move will take -- a
-- view packed (where) or its runs moved at once, a dtype converted on the host, the
-- contiguous move's path -- and its `moves` are what the ledger then records (xfer.stats),
-- for contiguous tensors, views on the host and on devices, and dtype changes, on every pair
-- of devices here.
local xfer = require "xfer"

-- xfer.stats() as "from>to:path" -> count, or a plan's moves the same way.
local function counted(records, weight)
  local out = {}
  for _, r in ipairs(records) do
    local key = r.from .. ">" .. r.to .. ":" .. r.path
    out[key] = (out[key] or 0) + (weight and r[weight] or 1)
  end
  return out
end

local function sources(dev)
  local t = xfer.arange(24, { dtype = "f32", device = dev }):view({ 4, 6 })
  return {
    { "contiguous on " .. dev.name, t },
    { "a view on " .. dev.name, t:narrow(2, 2, 3) },
    { "contiguous on " .. dev.name .. " to f16", t, { dtype = "f16" } },
    { "a view on " .. dev.name .. " to f16", t:transpose(), { dtype = "f16" } },
  }
end

local function step_matching(plan, pattern)
  for _, s in ipairs(plan.steps) do
    if s:match(pattern) then return s end
  end
  return nil
end

describe("plans", function()
  it("say every move the ledger then records, on every pair, for views and dtype changes", function()
    local checked = 0
    for _, a in ipairs(xfer.devices()) do
      for _, case in ipairs(sources(a)) do
        local what, src, opts = case[1], case[2], case[3]
        for _, b in ipairs(xfer.devices()) do
          local plan = xfer.plan(src, b, opts)
          xfer.stats_reset()
          local moved = src:to(b, opts)
          local stats = counted(xfer.stats(), "count") -- before anything else moves
          assert.are.same(counted(plan.moves), stats, what .. " -> " .. b.name .. ": " ..
                          table.concat(plan.steps, "; "))
          assert.are.equal(src:to(xfer.device("host"), opts):tobytes(), moved:tobytes(), what .. " -> " .. b.name)
          checked = checked + 1
        end
      end
    end
    assert.is_true(checked >= 4)
  end)

  it("name the pack, the conversion and the runs at once as steps", function()
    local host = xfer.device("host")
    local t = xfer.arange(24, { dtype = "f32" }):view({ 4, 6 })
    local converting = xfer.plan(t, host, { dtype = "f16" })
    assert.is_truthy(step_matching(converting, "^convert 24 elements from f32 to f16 on the host$"),
                     table.concat(converting.steps, "; "))
    assert.are.same({}, converting.moves) -- converted where it goes: nothing the ledger counts
    local view = t:narrow(2, 2, 3)
    local packed = xfer.plan(view, host)
    assert.is_truthy(step_matching(packed, "^pack the view's 48 bytes off host into host memory$"))
    assert.are.equal("a view of host: packed on host first", packed.reason)
    for _, dev in ipairs(xfer.devices()) do
      local p = xfer.plan(view, dev)
      -- a host view reaches a device packed first, or as one batch of its runs
      assert.is_truthy(step_matching(p, "^pack the view") or step_matching(p, "^the view's runs in one batch"),
                       dev.name .. ": " .. table.concat(p.steps, "; "))
      local c = xfer.plan(view, dev, { dtype = "f64" })
      assert.is_truthy(step_matching(c, "^convert 12 elements from f32 to f64 on the host$"), dev.name)
      assert.is_truthy(c.reason:match("^a dtype change is made on the host"), c.reason)
    end
  end)

  it("refuse a dtype change on a path that does not pass the host, naming both ends", function()
    for _, dev in ipairs(xfer.devices()) do
      if dev.name ~= "host" then
        local t = xfer.arange(8, { device = dev })
        local ok, e = pcall(xfer.plan, t, dev, { dtype = "f16", via = "same_device" })
        assert.is_false(ok)
        assert.are.equal("unsupported", e.code)
        assert.are.equal(dev.name, e.from)
        assert.are.equal(dev.name, e.to)
        assert.is_truthy(e.message:match("a dtype change is made on the host"), e.message)
        return
      end
    end
    pending("no device but the host here")
  end)
end)
