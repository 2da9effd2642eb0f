-- Torture scenario: views -- every other row of a matrix on every device moved to every
-- device (to, copy_from into a contiguous tensor and into the same view of a zeroed one),
-- and a transposed view brought to the host. The expected bytes are cut from the source's
-- bytes in Lua, so no call of the checking itself can fail.
local xfer = require "xfer"

local ROWS, COLS = 16, 4099 -- u8 rows; odd, so that no run lines up with a page

-- rows 1, 3, 5, ... of a ROWS x COLS byte matrix
local function every_other_row(bytes)
  local parts = {}
  for r = 1, ROWS, 2 do parts[#parts + 1] = bytes:sub((r - 1) * COLS + 1, r * COLS) end
  return table.concat(parts)
end

-- the matrix with every other row zeroed but rows 1, 3, 5, ... as in `bytes`
local function scattered(bytes)
  local zero = string.rep("\0", COLS)
  local parts = {}
  for r = 1, ROWS do parts[r] = r % 2 == 1 and bytes:sub((r - 1) * COLS + 1, r * COLS) or zero end
  return table.concat(parts)
end

return {
  name = "views",
  run = function(T)
    local bytes = T.bytes(ROWS * COLS, 9)
    local want = every_other_row(bytes)
    for _, a in ipairs(T.devices) do
      local ok, src = T.try("make on " .. a.name, xfer.tensor, bytes, { dtype = "u8", shape = { ROWS, COLS }, device = a })
      if ok then
        T.source(src)
        local view = src:slice({ { 1, -1, 2 } })
        for _, b in ipairs(T.devices) do
          local what = "every other row " .. a.name .. " -> " .. b.name
          local moved_ok, moved = T.move(a, b, what, view.to, view, b)
          if moved_ok then T.expect(want, moved, what) end
          local dst_ok, dst = T.try("zeros on " .. b.name, xfer.zeros, { ROWS, COLS }, { dtype = "u8", device = b })
          if dst_ok then
            local into = dst:slice({ { 1, -1, 2 } })
            if T.move(a, b, what .. " into a view", into.copy_from, into, view) then
              T.expect(scattered(bytes), dst, what .. " into a view")
            end
            into:free()
          end
        end
        view:free()
      end
    end
  end,
}
