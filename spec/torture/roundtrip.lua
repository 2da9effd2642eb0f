-- Torture scenario: every device's own round-trip -- host to device and back by to() and
-- copy_from, a clone on the device -- at a small size and one large enough to be pinned or imported.
local xfer = require "xfer"
return {
  name = "roundtrip",
  run = function(T)
    for _, dev in ipairs(T.devices) do
      for _, n in ipairs({ 4096 + 3, 1024 * 1024 + 5 }) do
        local bytes = T.bytes(n, n % 7)
        local ok, src = T.try("make on host", xfer.tensor, bytes, { dtype = "u8" })
        if ok then
          T.source(src)
          local moved_ok, there = T.move(T.host, dev, "host -> " .. dev.name, src.to, src, dev)
          if moved_ok then
            T.expect(bytes, there, "host -> " .. dev.name)
            local back_ok, back = T.move(dev, T.host, dev.name .. " -> host", there.to, there, T.host)
            if back_ok then T.expect(bytes, back, dev.name .. " -> host") end
            local clone_ok, clone = T.move(dev, dev, "clone on " .. dev.name, there.clone, there)
            if clone_ok then T.expect(bytes, clone, "clone on " .. dev.name) end
            local empty_ok, dst = T.try("empty on " .. dev.name, xfer.empty, { n }, { dtype = "u8", device = dev })
            if empty_ok and T.move(T.host, dev, "copy_from on " .. dev.name, dst.copy_from, dst, src) then
              T.expect(bytes, dst, "copy_from host into " .. dev.name)
            end
            there:free()
          end
        end
      end
    end
  end,
}
