-- Torture scenario: device lifetime -- tensors made and moved on a device, the device closed
-- (its tensors raise closed, and give everything back), opened again by name, used again.
local xfer = require "xfer"

return {
  name = "lifetime",
  run = function(T)
    local bytes = T.bytes(65536 + 9, 4)
    for _, dev in ipairs(T.devices) do
      if dev ~= T.host then
        local ok, src = T.try("make on host", xfer.tensor, bytes, { dtype = "u8" })
        if ok then
          T.source(src)
          local moved_ok, there = T.try("host -> " .. dev.name, src.to, src, dev)
          dev:close()
          if moved_ok then
            local closed_ok, e = pcall(there.tobytes, there)
            if closed_ok or not xfer.is_error(e) or e.code ~= "closed" then
              T.problems[#T.problems + 1] = "a tensor of a closed device did not raise closed"
            end
          end
          local again = xfer.device(dev.name)
          local back_ok, back = T.try("host -> " .. dev.name .. " reopened", src.to, src, again)
          if back_ok then T.expect(bytes, back, "host -> " .. dev.name .. " reopened") end
        end
      end
    end
  end,
}
