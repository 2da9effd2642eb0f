-- Torture scenario: every ordered pair of devices besides host, by the planner's path and by
-- each path forced that applies (host round-trip, staged through small chunks so that a
-- move is several), both to() and copy_from.
local xfer = require "xfer"

return {
  name = "cross",
  run = function(T)
    local saved = xfer.config()
    xfer.config({ staging_chunk = 65536, staging_depth = 3 })
    local n = 3 * 65536 + 11
    local bytes = T.bytes(n, 3)
    for _, a in ipairs(T.devices) do
      for _, b in ipairs(T.devices) do
        if a ~= b and a ~= T.host and b ~= T.host then
          local ok, src = T.try("make on " .. a.name, xfer.tensor, bytes, { dtype = "u8", device = a })
          if ok then
            T.source(src)
            for _, via in ipairs({ "auto", "host", "staged", "interop" }) do
              local what = ("%s -> %s via %s"):format(a.name, b.name, via)
              if via == "auto" or pcall(xfer.plan, src, b, { via = via }) then
                local moved_ok, there = T.move(a, b, what, src.to, src, b, { via = via })
                if moved_ok then T.expect(bytes, there, what) end
                local made, dst = T.try("empty on " .. b.name, xfer.empty, { n }, { dtype = "u8", device = b })
                if made and T.move(a, b, what .. " (copy_from)", dst.copy_from, dst, src, { via = via }) then
                  T.expect(bytes, dst, what .. " (copy_from)")
                end
              end
            end
          end
        end
      end
    end
    xfer.config(saved)
  end,
}
