-- prelude.lua -- the parts of the `xfer` module written in Lua. The binding runs this
-- file once per load, with the module table as its argument.
local xfer = ...

local format, concat = string.format, table.concat

--- Raises the xfer.Error the C side raises for a bad argument, `level` frames up.
function xfer.arg_error(arg, fname, expected, got, level)
  error(xfer.error({ code = "invalid", op = fname,
                     message = format("bad argument #%d to '%s' (%s expected, got %s)", arg, fname,
                                      expected, type(got)) }), (level or 1) + 1)
end

--- The device `dev` names (an xfer.Device or a name) for argument #arg of `fname`, or an
--- xfer.Error that names `fname`, raised `level` frames up.
function xfer.check_device(dev, arg, fname, level)
  if xfer.is_device(dev) then return dev end
  if type(dev) ~= "string" then xfer.arg_error(arg, fname, "xfer.Device or device name", dev, (level or 1) + 1) end
  local ok, found = pcall(xfer.device, dev)
  if ok then return found end
  local e = {}
  for k, v in pairs(found) do e[k] = v end
  -- xfer.device's words, said of this function's argument
  local msg = found.message:gsub("^device: ", "", 1)
  msg = msg:gsub("^bad argument #1 to 'device'", format("bad argument #%d to '%s'", arg, fname), 1)
  if not msg:find(fname, 1, true) then msg = fname .. ": " .. msg end
  e.op, e.message = fname, msg
  error(xfer.error(e), (level or 1) + 1)
end

--- The explicit fallback: read `t` into host memory, then write it to `dev`.
-- Same as t:to(dev, {via = "host"}); raises the same error objects.
function xfer.host_roundtrip(t, dev)
  if not xfer.is_tensor(t) then xfer.arg_error(1, "host_roundtrip", "xfer.Tensor", t, 2) end
  return t:to(xfer.check_device(dev, 2, "host_roundtrip", 2), { via = "host" })
end

--- Every tensor of a list moved to `dev` as one batch: a list of new tensors, in order. On
-- failure none of the new ones is kept (the error names the element), the sources untouched.
function xfer.move_many(tensors, dev, opts)
  if type(tensors) ~= "table" then xfer.arg_error(1, "move_many", "list of xfer.Tensor", tensors, 2) end
  dev = xfer.check_device(dev, 2, "move_many", 2)
  local made, items = {}, {}
  local ok, e = pcall(function()
    for i, t in ipairs(tensors) do
      if not xfer.is_tensor(t) then
        error(xfer.error({ code = "invalid", op = "move_many",
                           element = i,
                           message = format("move_many: element %d must be an xfer.Tensor, not a %s", i, type(t)) }))
      end
      if t.freed then
        error(xfer.error({ code = "freed", op = "move_many", element = i,
                           message = format("move_many: element %d of %d: attempt to use a freed tensor", i, #tensors) }))
      end
      local made_ok, made_or_e = pcall(xfer.empty, t.shape, { dtype = t.dtype, device = dev })
      if not made_ok then -- the element whose target could not be made, as a batch names it
        if xfer.is_error(made_or_e) then
          made_or_e.element = i
          made_or_e.from, made_or_e.to = t.device.name, dev.name -- the move it was made for
          made_or_e.message = format("move_many: element %d of %d: %s", i, #tensors, made_or_e.message)
        end
        error(made_or_e)
      end
      made[i] = made_or_e
      items[i] = { made[i], t }
    end
    xfer.copy_many(items, opts)
  end)
  if not ok then
    for _, t in ipairs(made) do t:free() end
    error(e, 2)
  end
  return made
end

local function gib(bytes)
  return format("%.1f GiB", bytes / 2^30)
end

--- A report of every runtime and its devices, as `xferlua --devices` prints it.
function xfer.describe(...)
  if select("#", ...) > 0 then
    error(xfer.error({ code = "invalid", op = "describe",
                       message = format("describe takes no arguments (got %d)", select("#", ...)) }), 2)
  end
  local lines, devices = {}, xfer.devices()
  for _, rt in ipairs(xfer.runtimes()) do
    if rt.available then
      lines[#lines + 1] = format("%-8s available, %d device%s%s", rt.name, rt.devices,
                                 rt.devices == 1 and "" or "s",
                                 rt.reason ~= "" and " (" .. rt.reason .. ")" or "")
      for _, dev in ipairs(devices) do
        if dev.runtime == rt.name then
          local traits = { gib(dev.total_memory) .. " total" }
          if dev.free_memory then traits[#traits + 1] = gib(dev.free_memory) .. " free" end
          if dev.max_alloc < dev.total_memory then
            traits[#traits + 1] = "largest buffer " .. gib(dev.max_alloc)
          end
          if dev.max_import then traits[#traits + 1] = format("shares buffers up to %d MiB", dev.max_import / 2^20) end
          if dev.platform ~= "" then traits[#traits + 1] = "platform " .. dev.platform end
          if dev.unified then traits[#traits + 1] = "shares host memory" end
          if dev.uuid then traits[#traits + 1] = "uuid " .. dev.uuid end
          lines[#lines + 1] = format("  %-10s %s (%s)", dev.name, dev.label, concat(traits, ", "))
        end
      end
    else
      lines[#lines + 1] = format("%-8s unavailable: %s", rt.name, rt.reason)
    end
  end
  return concat(lines, "\n")
end
