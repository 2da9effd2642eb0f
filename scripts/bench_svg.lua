-- bench_svg.lua -- the benchmark's figures as SVG (scripts/bench --svg DIR), written here:
-- a small writer of our own (two kinds of plot need no plotting package, and SVG is text).
--   bandwidth.svg  GB/s against size per device and direction, log axes
--   pairs.svg      the device-pair matrix at the pair size, a heat map of GB/s
local svg = {}

local format, concat = string.format, table.concat

local function escape(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function document(width, height, body)
  return concat({
    format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
           'font-family="sans-serif" font-size="12">', width, height, width, height),
    format('<rect width="%d" height="%d" fill="white"/>', width, height),
    concat(body, "\n"), "</svg>\n" }, "\n")
end

local function bytes_of(text) -- "4 KiB" -> 4096
  local n, unit = text:match("^([%d.]+) (%a+)$")
  local scale = { B = 1, KiB = 1024, MiB = 1048576, GiB = 1073741824 }
  return n and scale[unit] and tonumber(n) * scale[unit] or nil
end

local palette = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2" }

--- Lines of GB/s against size: series {name, points = {{bytes, gbps}, ...}}.
function svg.bandwidth(series, title)
  local W, H, L, R, T, B = 760, 440, 70, 200, 40, 50
  local xs, ys = {}, {}
  for _, s in ipairs(series) do
    for _, p in ipairs(s.points) do xs[#xs + 1], ys[#ys + 1] = p[1], p[2] end
  end
  if #xs == 0 then return document(W, H, { '<text x="20" y="30">no figures</text>' }) end
  local x0, x1 = math.log10(math.min(unpack(xs))), math.log10(math.max(unpack(xs)))
  local y0, y1 = math.floor(math.log10(math.max(math.min(unpack(ys)), 1e-3))), math.ceil(math.log10(math.max(unpack(ys))))
  if x1 == x0 then x1 = x0 + 1 end
  if y1 == y0 then y1 = y0 + 1 end
  local function px(b) return L + (math.log10(b) - x0) / (x1 - x0) * (W - L - R) end
  local function py(g) return H - B - (math.log10(math.max(g, 10 ^ y0)) - y0) / (y1 - y0) * (H - T - B) end
  local body = { format('<text x="%d" y="22" font-size="15">%s</text>', L, escape(title)) }
  for e = y0, y1 do -- decades of GB/s
    local y = py(10 ^ e)
    body[#body + 1] = format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>', L, y, W - R, y)
    body[#body + 1] = format('<text x="%d" y="%.1f" text-anchor="end">%s</text>', L - 6, y + 4, escape(format("%g", 10 ^ e)))
  end
  for e = math.ceil(x0), math.floor(x1) do -- decades of bytes
    local x = px(10 ^ e)
    body[#body + 1] = format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>', x, T, x, H - B)
    body[#body + 1] = format('<text x="%.1f" y="%d" text-anchor="middle">1e%d B</text>', x, H - B + 16, e)
  end
  body[#body + 1] = format('<text x="%d" y="%d" text-anchor="middle">size (bytes, log)</text>', math.floor((L + W - R) / 2), H - 12)
  body[#body + 1] = format('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">GB/s (log)</text>',
                           math.floor((T + H - B) / 2), math.floor((T + H - B) / 2))
  for i, s in ipairs(series) do
    local color = palette[(i - 1) % #palette + 1]
    table.sort(s.points, function(a, b) return a[1] < b[1] end)
    local pts = {}
    for _, p in ipairs(s.points) do pts[#pts + 1] = format("%.1f,%.1f", px(p[1]), py(p[2])) end
    body[#body + 1] = format('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>', color, concat(pts, " "))
    for _, p in ipairs(s.points) do
      body[#body + 1] = format('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s B, %.2f GB/s</title></circle>',
                               px(p[1]), py(p[2]), color, escape(s.name), escape(p[1]), p[2])
    end
    body[#body + 1] = format('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>', W - R + 16, T + (i - 1) * 18, color)
    body[#body + 1] = format('<text x="%d" y="%d">%s</text>', W - R + 34, T + (i - 1) * 18 + 11, escape(s.name))
  end
  return document(W, H, body)
end

--- A heat map: names (rows and columns), value(from, to) in GB/s or nil.
function svg.matrix(names, value, title)
  local cell, L, T = 90, 110, 70
  local W, H = L + cell * #names + 20, T + cell * #names + 30
  local top = 0
  for _, a in ipairs(names) do
    for _, b in ipairs(names) do top = math.max(top, value(a, b) or 0) end
  end
  local body = { format('<text x="10" y="22" font-size="15">%s</text>', escape(title)),
                 format('<text x="%d" y="%d">to</text>', L, T - 40), format('<text x="10" y="%d">from</text>', T - 10) }
  for j, b in ipairs(names) do
    body[#body + 1] = format('<text x="%d" y="%d" text-anchor="middle">%s</text>', L + (j - 1) * cell + math.floor(cell / 2), T - 8, escape(b))
  end
  for i, a in ipairs(names) do
    body[#body + 1] = format('<text x="%d" y="%d" text-anchor="end">%s</text>', L - 6, T + (i - 1) * cell + math.floor(cell / 2) + 4, escape(a))
    for j, b in ipairs(names) do
      local v = value(a, b)
      local shade = v and top > 0 and math.floor(255 - 200 * v / top) or 240
      local fill = v and format("#%02x%02xff", shade, shade) or "#eeeeee"
      local x, y = L + (j - 1) * cell, T + (i - 1) * cell
      body[#body + 1] = format('<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="white"/>', x, y, cell, cell, fill)
      body[#body + 1] = format('<text x="%d" y="%d" text-anchor="middle">%s</text>', x + math.floor(cell / 2), y + math.floor(cell / 2) + 4,
                               v and format("%.2f", v) or "-")
    end
  end
  return document(W, H, body)
end

--- The plots of a bench document ({tables = {{header, rows}}}) into dir; returns the file names.
function svg.write(doc, dir)
  local series, pair_names, pair_value, pair_title = {}, {}, {}, nil
  local by_name = {}
  for _, t in ipairs(doc.tables) do
    local h = t.header
    if h[2] == "size" and h[3] == "GB/s" then -- a device's host<->device table
      for _, row in ipairs(t.rows) do
        local bytes, gbps = bytes_of(row[2] or ""), tonumber(row[3])
        if bytes and gbps then
          local name = row[1] ~= "" and row[1] or h[1]
          if not by_name[name] then by_name[name] = { name = name, points = {} } series[#series + 1] = by_name[name] end
          local s = by_name[name]
          s.points[#s.points + 1] = { bytes, gbps }
        end
      end
    elseif h[1]:match("^device %-> device") and h[3] == "GB/s" then -- the pairs table
      pair_title = h[1]
      for _, row in ipairs(t.rows) do
        local a, b = row[1]:match("^(%S+) %-> (%S+)$")
        if a then
          for _, n in ipairs({ a, b }) do
            if not pair_value[n] then pair_value[n] = {} pair_names[#pair_names + 1] = n end
          end
          pair_value[a][b] = tonumber(row[3])
        end
      end
    end
  end
  local written = {}
  -- the folder is made if need be (mkdir -p: its parents too)
  assert(os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'") == 0, "cannot make the folder " .. dir)
  local function save(name, text)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
    written[#written + 1] = name
  end
  save("bandwidth.svg", svg.bandwidth(series, "copy_from bandwidth by size (" .. (doc.host or "this machine") .. ")"))
  if pair_title then
    table.sort(pair_names)
    save("pairs.svg", svg.matrix(pair_names, function(a, b) return pair_value[a] and pair_value[a][b] end,
                                 pair_title .. ": default path, GB/s"))
  end
  return written
end

return svg
