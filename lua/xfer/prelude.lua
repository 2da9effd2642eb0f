-- prelude.lua -- the parts of the `xfer` module written in Lua. The binding runs this
-- file once per load, with the module table as its argument.
local xfer = ...

local format, concat = string.format, table.concat

--- The explicit fallback: read `t` into host memory, then write it to `dev`.
-- Same as t:to(dev, {via = "host"}); raises the same error objects.
function xfer.host_roundtrip(t, dev)
  return t:to(dev, { via = "host" })
end

local function gib(bytes)
  return format("%.1f GiB", bytes / 2^30)
end

--- A report of every runtime and its devices, as `xferlua --devices` prints it.
function xfer.describe()
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
