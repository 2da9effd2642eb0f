-- scripts/bench_ab.lua RUNS DIR: what scripts/bench-ab prints -- DIR holds base-R.json and
-- this-R.json for R = 1..RUNS (scripts/bench.lua --json); each table's rows with every figure
-- the median of the runs, the base's beside this tree's. A row is known by its first two cells
-- (label, size); a figure is a later cell that is a number or a cost ("+12%"); counts such as
-- "20/20" are left out.
local dkjson = require("dkjson")
local runs, dir = tonumber(arg[1]), arg[2]
if not runs or not dir then
  io.stderr:write("usage: bench_ab.lua RUNS DIR (scripts/bench-ab runs it)\n")
  os.exit(2)
end

local function load(path)
  local f = assert(io.open(path, "r"))
  local doc, _, err = dkjson.decode(f:read("*a"), 1, dkjson.null)
  f:close()
  if not doc then error(path .. ": " .. tostring(err)) end
  return doc
end

-- a cell's figure: a number, or the number of a cost such as "+12%" (nil: not a figure)
local function figure(cell)
  if type(cell) == "number" then return cell end
  if type(cell) == "string" then
    local n = cell:match("^([+-]?%d+%.?%d*)%%$")
    return n and tonumber(n)
  end
end

local function median(values)
  table.sort(values)
  local n = #values
  if n == 0 then return nil end
  if n % 2 == 1 then return values[(n + 1) / 2] end
  return (values[n / 2] + values[n / 2 + 1]) / 2
end

-- a row's first cells, which name it: a label, a size (in bytes in the JSON)
local function name_of(cell)
  if cell == nil or cell == dkjson.null then return "-" end
  if type(cell) ~= "number" then return tostring(cell) end
  for _, unit in ipairs({ { 2 ^ 30, "GiB" }, { 2 ^ 20, "MiB" }, { 2 ^ 10, "KiB" } }) do
    if cell >= unit[1] and cell % unit[1] == 0 then return string.format("%d %s", cell / unit[1], unit[2]) end
  end
  return tostring(cell)
end

-- tables[title] = {header, order = {key...}, rows = {key = {cells, figures = {col = {side = {...}}}}}}
local tables, titles = {}, {}
for _, side in ipairs({ "base", "this" }) do
  for r = 1, runs do
    for _, t in ipairs(load(dir .. "/" .. side .. "-" .. r .. ".json").tables) do
      local title = t.header[1]
      local into = tables[title]
      if not into then
        into = { header = t.header, order = {}, rows = {} }
        tables[title] = into
        titles[#titles + 1] = title
      end
      for _, row in ipairs(t.rows) do
        local key = name_of(row[1]) .. (#t.header > 2 and "  " .. name_of(row[2]) or "")
        local kept = into.rows[key]
        if not kept then
          kept = { cells = row, figures = {} }
          into.rows[key] = kept
          into.order[#into.order + 1] = key
        end
        for c, cell in ipairs(row) do
          local v = c > 2 and figure(cell)
          if v then
            kept.figures[c] = kept.figures[c] or { base = {}, this = {}, cost = type(cell) == "string" }
            table.insert(kept.figures[c][side], v)
          end
        end
      end
    end
  end
end

local function shown(v, cost)
  if not v then return "-" end
  if cost then return string.format("%+.0f%%", v) end
  return string.format(math.abs(v) >= 100 and "%.1f" or "%.3g", v)
end

print(string.format("medians of %d runs each, base then this tree", runs))
for _, title in ipairs(titles) do
  local t = tables[title]
  print("")
  print(title)
  for _, key in ipairs(t.order) do
    local row = t.rows[key]
    local parts = {}
    for c = 3, #t.header do
      local f = row.figures[c]
      if f then
        parts[#parts + 1] = string.format("%s %s | %s", t.header[c], shown(median(f.base), f.cost),
          shown(median(f.this), f.cost))
      end
    end
    print(string.format("  %-40s %s", key, table.concat(parts, "   ")))
  end
end
