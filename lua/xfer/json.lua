-- json.lua -- machine-readable output: xfer.json(value [, {indent = n}]) encodes Lua values
-- as JSON (objects with their keys sorted, so the text is stable), and xfer.inventory()
-- gives the runtimes and devices as plain tables (what `xferlua --devices --json` prints).
-- The binding runs this file with the module table, like prelude.lua.
local xfer = ...

local format = string.format

local function fail(path, why)
  error(xfer.error({ code = "invalid", op = "json", message = format("json: %s%s", path ~= "" and path .. ": " or "", why) }), 0)
end

-- dkjson (Debian's lua-dkjson) writes the text; this file checks what it is given and says
-- where a value has no JSON form. Loaded at the first call: `require "xfer"` needs it not.
local dkjson

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

-- A string as valid UTF-8: each byte that begins no well-formed sequence (RFC 3629: no
-- overlongs, no surrogates, nothing past U+10FFFF) becomes U+FFFD. A JSON text is UTF-8, and
-- a driver's label or a file's metadata need not be.
local function utf8_clean(s)
  if not s:find("[\128-\255]") then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, lo, hi = 0, 0x80, 0xBF
    if c < 0x80 then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len = 2
    elseif c >= 0xE0 and c <= 0xEF then len = 3
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then len = 4
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    end
    local ok = len > 0 and i + len - 1 <= n
    for k = 1, len - 1 do
      if not ok then break end
      local b = s:byte(i + k)
      if k == 1 then ok = b >= lo and b <= hi else ok = b >= 0x80 and b <= 0xBF end
    end
    if ok then
      out[#out + 1] = s:sub(i, i + len - 1)
      i = i + len
    else
      out[#out + 1] = "\239\191\189" -- U+FFFD
      i = i + 1
    end
  end
  return table.concat(out)
end

-- numbers are written here, not by dkjson (its %.14g loses digits: 2^52 came back rounded):
-- whole ones exactly, others in the 17 digits that read back as the same double
local NUMBER = { __tojson = function(self)
  local v = self[1]
  return (v % 1 == 0 and math.abs(v) < 2 ^ 53) and format("%d", v) or format("%.17g", v)
end }

local OBJECT = { __jsontype = "object" }

--- xfer.json_null: a value written as null where nil cannot stand (in a list: a hole in a Lua
--- table would end it).
xfer.json_null = setmetatable({}, { __tojson = function() return "null" end })
local ARRAY = { __jsontype = "array" }

--- xfer.json_object(t): marks `t` as a JSON object, so that an empty one is written {} (an
--- empty Lua table is otherwise a list, []). Returns t.
function xfer.json_object(t)
  if type(t) ~= "table" then xfer.arg_error(1, "json_object", "table", t, 2) end
  return setmetatable(t, OBJECT)
end

-- A copy of `value` that dkjson writes as JSON, checked on the way; every object key into
-- `keys` (they are written sorted, so the text is stable).
local function checked(value, path, seen, keys)
  local kind = type(value)
  if kind == "nil" or kind == "boolean" then return value end
  if kind == "number" then
    if value ~= value or value == math.huge or value == -math.huge then
      fail(path, format("%s has no JSON form", tostring(value)))
    end
    return setmetatable({ value }, NUMBER)
  end
  if kind == "string" then return utf8_clean(value) end
  if value == xfer.json_null then return value end
  local mt = kind == "table" and getmetatable(value)
  if kind == "table" and (not mt or mt == OBJECT or xfer.is_error(value)) then
    if seen[value] then fail(path, "a table that contains itself") end
    seen[value] = true
    local n = mt ~= OBJECT and not xfer.is_error(value) and list_length(value)
    local copy = setmetatable({}, n and ARRAY or OBJECT)
    if n then
      for i = 1, n do copy[i] = checked(value[i], format("%s[%d]", path, i), seen, keys) end
    else
      for k, v in pairs(value) do
        if type(k) ~= "string" then fail(path, format("a %s key (JSON keys are strings)", type(k))) end
        local key = utf8_clean(k)
        keys[key] = true
        copy[key] = checked(v, path ~= "" and path .. "." .. k or k, seen, keys)
      end
    end
    seen[value] = nil
    return copy
  end
  fail(path, format("a %s has no JSON form", xfer.is_tensor(value) and "tensor" or
                    xfer.is_device(value) and "device" or kind))
end

--- xfer.json(value [, {indent = n}]): the JSON text of numbers, strings (as UTF-8: a byte
--- that is not becomes U+FFFD), booleans, nil (null), lists and string-keyed tables (keys
--- sorted; an empty table is [] unless xfer.json_object marks it); anything else is an
--- `invalid` error naming where. indent > 0: one value a line, indented.
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
  if not dkjson then
    local ok, lib = pcall(require, "dkjson")
    if not ok then
      error(xfer.error({ code = "unavailable", op = "json", message = "json: needs dkjson (Debian's lua-dkjson)" }), 2)
    end
    dkjson = lib
  end
  local keys = {}
  local ok, copy = pcall(checked, value, "", {}, keys)
  if not ok then error(copy, 2) end
  local order = {}
  for k in pairs(keys) do order[#order + 1] = k end
  table.sort(order)
  return dkjson.encode(copy, { indent = (indent or 0) > 0, keyorder = order })
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
