-- json.lua -- machine-readable output: xfer.json(value [, {indent = n}]) encodes Lua values
-- as JSON (objects with their keys sorted, so the text is stable), and xfer.inventory()
-- gives the runtimes and devices as plain tables (what `xferlua --devices --json` prints).
-- The binding runs this file with the module table, like prelude.lua.
local xfer = ...

local format, concat, rep = string.format, table.concat, string.rep

local function fail(path, why)
  error(xfer.error({ code = "invalid", op = "json", message = format("json: %s%s", path ~= "" and path .. ": " or "", why) }), 0)
end

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n",
                  ["\r"] = "\\r", ["\t"] = "\\t" }
local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return escapes[c] or format("\\u%04x", c:byte()) end) .. '"'
end

-- a table's keys, when it is a list (1..n and nothing else), else nil
local function list_length(t)
  local n = 0
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k % 1 ~= 0 then return nil end
    n = n + 1
  end
  for i = 1, n do if t[i] == nil then return nil end end
  return n
end

local function encode(value, path, indent, depth, seen, out)
  local kind = type(value)
  if kind == "nil" then out[#out + 1] = "null"
  elseif kind == "boolean" then out[#out + 1] = tostring(value)
  elseif kind == "number" then
    if value ~= value or value == math.huge or value == -math.huge then
      fail(path, format("%s has no JSON form", tostring(value)))
    end
    out[#out + 1] = (value % 1 == 0 and math.abs(value) < 2 ^ 53) and format("%d", value) or format("%.17g", value)
  elseif kind == "string" then out[#out + 1] = quote(value)
  elseif kind == "table" and not getmetatable(value) or (kind == "table" and xfer.is_error(value)) then
    if seen[value] then fail(path, "a table that contains itself") end
    seen[value] = true
    local pad = indent and "\n" .. rep(" ", indent * (depth + 1)) or ""
    local close = indent and "\n" .. rep(" ", indent * depth) or ""
    local n = list_length(value)
    local parts = {}
    if n then
      for i = 1, n do
        local sub = {}
        encode(value[i], format("%s[%d]", path, i), indent, depth + 1, seen, sub)
        parts[i] = concat(sub)
      end
      out[#out + 1] = n == 0 and "[]" or "[" .. pad .. concat(parts, "," .. pad) .. close .. "]"
    else
      local keys = {}
      for k in pairs(value) do
        if type(k) ~= "string" then fail(path, format("a %s key (JSON keys are strings)", type(k))) end
        keys[#keys + 1] = k
      end
      table.sort(keys)
      for i, k in ipairs(keys) do
        local sub = { quote(k), indent and ": " or ":" }
        encode(value[k], path ~= "" and path .. "." .. k or k, indent, depth + 1, seen, sub)
        parts[i] = concat(sub)
      end
      out[#out + 1] = "{" .. pad .. concat(parts, "," .. pad) .. close .. "}"
    end
    seen[value] = nil
  else
    fail(path, format("a %s has no JSON form", xfer.is_tensor(value) and "tensor" or
                      xfer.is_device(value) and "device" or kind))
  end
end

--- xfer.json(value [, {indent = n}]): the JSON text of numbers, strings, booleans, nil
--- (null), lists and string-keyed tables; anything else is an `invalid` error naming where.
function xfer.json(value, opts)
  if opts ~= nil and type(opts) ~= "table" then xfer.arg_error(2, "json", "options table", opts, 2) end
  for k in pairs(opts or {}) do
    if k ~= "indent" then
      error(xfer.error({ code = "invalid", op = "json", message = format("json: unknown option '%s' (known: indent)", tostring(k)) }), 2)
    end
  end
  local indent = (opts or {}).indent
  if indent ~= nil and (type(indent) ~= "number" or indent < 0 or indent % 1 ~= 0) then
    error(xfer.error({ code = "invalid", op = "json", message = "json: option 'indent' must be a whole number >= 0" }), 2)
  end
  local out = {}
  local ok, e = pcall(encode, value, "", indent, 0, {}, out)
  if not ok then error(e, 2) end
  return concat(out)
end

--- xfer.inventory(): {version, runtimes = {...}, devices = {...}} as plain tables.
function xfer.inventory(...)
  if select("#", ...) > 0 then
    error(xfer.error({ code = "invalid", op = "inventory",
                       message = format("inventory takes no arguments (got %d)", select("#", ...)) }), 2)
  end
  local runtimes, devices = {}, {}
  for i, rt in ipairs(xfer.runtimes()) do
    runtimes[i] = { name = rt.name, available = rt.available, reason = rt.reason, devices = rt.devices }
  end
  for i, dev in ipairs(xfer.devices()) do
    local ok, free = pcall(function() return dev.free_memory end)
    devices[i] = { name = dev.name, runtime = dev.runtime, index = dev.index, label = dev.label,
                   platform = dev.platform, vendor = dev.vendor, total_memory = dev.total_memory,
                   max_alloc = dev.max_alloc, max_import = dev.max_import, free_memory = ok and free or nil, unified = dev.unified,
                   uuid = dev.uuid, backing = dev.backing }
  end
  return { version = xfer.version, runtimes = runtimes, devices = devices }
end
