-- files.lua -- checkpoints in shards, as Hugging Face writes them: xfer.load of a
-- "*.safetensors.index.json" loads every shard its weight_map names (each tensor from its
-- shard, opts as for one file; opts.names picks tensors across shards). On a failure nothing
-- loaded stays: the tensors of the shards done are freed, the error raised is the shard's.
-- The binding runs this file with the module table, like prelude.lua.
local xfer = ...

local load_file = xfer.load

local function fail(path, why)
  error(xfer.error({ code = "invalid", op = "load", file = path, offset = -1,
                     message = ("%s: %s"):format(path, why) }), 0)
end

-- An index nested deeper than this is no index (dkjson recurses: a deep one overflowed
-- LuaJIT's C stack with a bare "stack overflow"); the header parser of the files has the same
-- limit (src/files/json.h).
local MAX_DEPTH = 64

local function too_deep(text)
  local depth, in_string, i, n = 0, false, 1, #text
  while i <= n do
    local c = text:byte(i)
    if in_string then
      if c == 92 then i = i + 1 elseif c == 34 then in_string = false end
    elseif c == 34 then in_string = true
    elseif c == 123 or c == 91 then
      depth = depth + 1
      if depth > MAX_DEPTH then return true end
    elseif c == 125 or c == 93 then depth = depth - 1 end
    i = i + 1
  end
  return false
end

local function read_index(path)
  local f, why = io.open(path, "rb")
  if not f then fail(path, why) end
  local text = f:read("*a")
  f:close()
  if not text then fail(path, "cannot be read (a directory?)") end
  local ok, json = pcall(require, "dkjson")
  if not ok then fail(path, "reading a shard index needs dkjson (Debian's lua-dkjson)") end
  if too_deep(text) then fail(path, ("not a shard index: nested deeper than %d"):format(MAX_DEPTH)) end
  local decoded, doc, _, err = pcall(json.decode, text, 1, json.null)
  if not decoded then fail(path, "not JSON: " .. tostring(doc)) end
  if type(doc) ~= "table" then fail(path, "not a JSON object: " .. tostring(err)) end
  if type(doc.weight_map) ~= "table" then fail(path, "no weight_map (tensor name -> shard file)") end
  for name, shard in pairs(doc.weight_map) do
    if type(name) ~= "string" or type(shard) ~= "string" or shard:find("/", 1, true) or shard == ".." or
       shard == "" or shard == "." then
      fail(path, ("weight_map maps %s to %s: a tensor name to a file beside the index"):format(tostring(name), tostring(shard)))
    end
    -- a NUL would end the name in C: two names could become one, a tensor be lost
    if name:find("\0", 1, true) or shard:find("\0", 1, true) then
      fail(path, ("weight_map maps %q to %q: a name with a NUL byte"):format(name, shard))
    end
  end
  return doc.weight_map
end

--- The weight_map of a shard index ("*.safetensors.index.json"): tensor name -> shard file
--- beside the index, checked as xfer.load checks it.
function xfer.read_index(path)
  if type(path) ~= "string" then xfer.arg_error(1, "read_index", "string", path, 2) end
  return read_index(path)
end

local function load_index(path, opts)
  local map = read_index(path)
  local dir = path:match("^(.*)/[^/]*$") or "."
  local wanted = nil
  if opts and opts.names ~= nil then
    if type(opts.names) ~= "table" then fail(path, "names is a list of tensor names") end
    wanted = {}
    for _, name in ipairs(opts.names) do
      if not map[name] then fail(path, ("the index names no tensor '%s'"):format(tostring(name))) end
      wanted[name] = true
    end
  end
  local by_shard, order = {}, {}
  for name, shard in pairs(map) do
    if not wanted or wanted[name] then
      if not by_shard[shard] then by_shard[shard] = {}; order[#order + 1] = shard end
      local list = by_shard[shard]
      list[#list + 1] = name
    end
  end
  table.sort(order)
  local result, made = {}, {}
  local ok, err = pcall(function()
    for _, shard in ipairs(order) do
      local o = {}
      for k, v in pairs(opts or {}) do o[k] = v end
      o.names = by_shard[shard]
      for name, t in pairs(load_file(dir .. "/" .. shard, o)) do
        result[name] = t
        -- a tensor split across devices (opts.shard) is the list of its parts
        for _, part in ipairs(type(t) == "table" and t or { t }) do made[#made + 1] = part end
      end
    end
  end)
  if not ok then
    for _, t in ipairs(made) do t:free() end
    error(err, 0)
  end
  return result
end

function xfer.load(path, opts)
  if type(path) == "string" and path:match("%.index%.json$") then return load_index(path, opts) end
  return load_file(path, opts)
end
