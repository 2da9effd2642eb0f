-- format.lua -- printing a tensor's values, numpy-style: t:format{max = 6}. Only the shown
-- elements are read (one small read each, t:get), so printing a 64 GiB tensor costs a few
-- dozen reads. The binding runs this file with the module table, like prelude.lua.
local xfer = ...

local format, concat, rep = string.format, table.concat, string.rep

local integer_dtypes = { u8 = true, i8 = true, u16 = true, i16 = true, u32 = true, i32 = true,
                         u64 = true, i64 = true }

local function show(value, dtype)
  if type(value) == "boolean" then return tostring(value) end
  if integer_dtypes[dtype] then return format("%d", value) end
  if value ~= value then return "nan" end
  if value == math.huge then return "inf" elseif value == -math.huge then return "-inf" end
  if value == math.floor(value) and math.abs(value) < 1e15 then return format("%.0f.", value) end
  return format("%.4g", value)
end

-- The indices shown along a dimension of `size`: all, or the first and last max/2 with a
-- gap (false) between.
local function shown(size, max)
  local list = {}
  if size <= max then
    for i = 1, size do list[#list + 1] = i end
  else
    local head = math.ceil(max / 2)
    for i = 1, head do list[#list + 1] = i end
    list[#list + 1] = false
    for i = size - (max - head) + 1, size do list[#list + 1] = i end
  end
  return list
end

--- t:format([{max = 6}]): the header, then the values (at most `max` per dimension, the
--- rest as "...").
function xfer.Tensor.format(t, opts)
  if not xfer.is_tensor(t) then xfer.arg_error(1, "format", "xfer.Tensor", t, 2) end
  if opts ~= nil and type(opts) ~= "table" then xfer.arg_error(2, "format", "options table", opts, 2) end
  for k in pairs(opts or {}) do
    if k ~= "max" then
      error(xfer.error({ code = "invalid", op = "format",
                         message = format("format: unknown option '%s' (known: max)", tostring(k)) }), 2)
    end
  end
  local max = (opts or {}).max or 6
  if type(max) ~= "number" or max < 2 or max % 1 ~= 0 then
    error(xfer.error({ code = "invalid", op = "format",
                       message = "format: option 'max' must be a whole number >= 2" }), 2)
  end
  local header = t:summary()
  if t.freed then return header end
  local shape, dtype = t.shape, t.dtype
  if #shape == 0 then return header .. "\n" .. show(t:item(), dtype) end
  for _, d in ipairs(shape) do
    if d == 0 then return header .. "\n[]" end
  end
  -- every shown value as text first, so that the columns line up
  local index, texts, width = {}, {}, 1
  local function collect(d)
    for _, i in ipairs(shown(shape[d], max)) do
      if i then
        index[d] = i
        if d == #shape then
          local text = show(t:get(unpack(index, 1, #shape)), dtype)
          texts[#texts + 1] = text
          if #text > width then width = #text end
        else
          collect(d + 1)
        end
      end
    end
  end
  collect(1)
  local next_text = 0
  local function render(d, indent)
    local parts = {}
    for _, i in ipairs(shown(shape[d], max)) do
      if d == #shape then
        if i then
          next_text = next_text + 1
          parts[#parts + 1] = rep(" ", width - #texts[next_text]) .. texts[next_text]
        else
          parts[#parts + 1] = rep(" ", width - 3) .. "..."
        end
      else
        parts[#parts + 1] = i and render(d + 1, indent .. " ") or "..."
      end
    end
    local sep = d == #shape and ", " or (",\n" .. rep("\n", #shape - d - 1) .. indent .. " ")
    return "[" .. concat(parts, sep) .. "]"
  end
  return header .. "\n" .. render(1, "")
end
