-- The plan is the whole move: xfer.plan(t, dev, opts) names every step a move will take -- a
-- view packed (where) or its runs moved at once, a dtype converted on the host, the
-- contiguous move's path -- and its `moves` are what the ledger then records (xfer.stats),
-- for contiguous tensors, views on the host and on devices, and dtype changes, on every pair
-- of devices here.
local xfer = require "xfer"

-- xfer.stats() as "from>to:path[@runner]" -> count, or a plan's moves the same way (runner:
-- the runtime that ran a move where not the path's own, as a batch group in one submission).
local function counted(records, weight)
  local out = {}
  for _, r in ipairs(records) do
    local key = r.from .. ">" .. r.to .. ":" .. r.path .. (r.runner and ("@" .. r.runner) or "")
    out[key] = (out[key] or 0) + (weight and r[weight] or 1)
  end
  return out
end

-- A plan's moves: those it makes, and those it makes instead when a view's runs at once are
-- refused by the driver (marked fallback).
local function split(moves)
  local main, fallback = {}, {}
  for _, m in ipairs(moves) do table.insert(m.fallback and fallback or main, m) end
  return main, fallback
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
          local main, fallback = split(plan.moves)
          if #fallback == 0 or not pcall(assert.are.same, counted(fallback), stats) then
            assert.are.same(counted(main), stats, what .. " -> " .. b.name .. ": " ..
                            table.concat(plan.steps, "; "))
          end
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

  it("of a prepared batch say, group by group, what its runs then record", function()
    local devs = xfer.devices()
    local items = {}
    for _, a in ipairs(devs) do
      local t = xfer.arange(3000, { dtype = "f32", device = a })
      for _, b in ipairs(devs) do
        items[#items + 1] = { xfer.empty({ 3000 }, { dtype = "f32", device = b }), t }
        items[#items + 1] = { xfer.empty({ 100 }, { dtype = "f16", device = b }), t:narrow(1, 11, 100) }
        items[#items + 1] = { xfer.empty({ 2, 50 }, { dtype = "f32", device = b }), t:view({ 30, 100 }):narrow(1, 3, 2):narrow(2, 1, 50) }
      end
    end
    local b = xfer.batch(items)
    local planned = {} -- every move a group may record
    local groups = b:plan()
    assert.are.equal(b.groups, #groups)
    for _, g in ipairs(groups) do
      assert.is_true(#g.steps >= 1, g.reason)
      for key in pairs(counted(g.moves)) do planned[key] = true end
    end
    xfer.stats_reset()
    b:run()
    local recorded = counted(xfer.stats(), "count")
    for key in pairs(recorded) do assert.is_true(planned[key], key .. " was recorded but not planned") end
    -- each group records its own moves, or -- its way refused by a driver -- those of a way
    -- it lists next (a batch group at once is recorded under its runner)
    for _, g in ipairs(groups) do
      local main, fallback = split(g.moves)
      local took = true
      for key in pairs(counted(main)) do took = took and recorded[key] ~= nil end
      for key in pairs(counted(fallback)) do took = took or recorded[key] ~= nil end
      assert.is_true(took, g.reason .. ": none of its moves was recorded")
    end
    for i, it in ipairs(items) do
      assert.are.equal(it[2]:to(xfer.device("host"), { dtype = it[1].dtype }):tobytes(), it[1]:tobytes(), "element " .. i)
    end
  end)

  it("of a batch group say what runs when its way is refused, element by element last", function()
    local devs, items = xfer.devices(), {}
    for _, a in ipairs(devs) do
      local t = xfer.zeros({ 4096 }, { dtype = "u8", device = a })
      for _, b in ipairs(devs) do
        local d = xfer.empty({ 4096 }, { dtype = "u8", device = b })
        items[#items + 1] = { dst = d, src = t, dst_offset = 0, src_offset = 1024, nbytes = 1024 }
        items[#items + 1] = { dst = d, src = t, dst_offset = 2048, src_offset = 0, nbytes = 1024 }
      end
    end
    local at_once = 0
    for _, g in ipairs(xfer.batch(items):plan()) do
      local whole = g.reason:find("one submission", 1, true) or g.reason:find("through host chunks", 1, true)
      local last = g.steps[#g.steps]
      if whole then
        at_once = at_once + 1
        assert.are.equal("if refused: element by element on the group's route", last, g.reason)
      else
        for _, step in ipairs(g.steps) do assert.is_nil(step:find("if refused", 1, true), g.reason) end
      end
    end
    assert.is_true(at_once > 0, "no group here runs at once (host -> host does)")
  end)
end)

