-- Torture scenario: batches -- blocks of a buffer on every device copied into shuffled blocks
-- of a buffer on every device (copy_blocks), a prepared batch run twice, and copy_many of two
-- whole tensors of one pair; move_many of tensors of several sizes, empty ones first (a group's
-- route was made for its first element's size: issue 35); a batch run asynchronously, its
-- source freed at once (the free waits for the run). The expected bytes are cut from the
-- source's bytes in Lua.
local xfer = require "xfer"

local BLOCK, BLOCKS = 520, 6 -- bytes a block (not a multiple of 16: the byte path too)
local SRC_BLOCKS, DST_BLOCKS = { 5, 0, 3, 1 }, { 2, 4, 0, 5 }

-- the target's bytes after the copy: zeros but the blocks copied
local function after_blocks(bytes)
  local parts = {}
  for k = 0, BLOCKS - 1 do parts[k + 1] = string.rep("\0", BLOCK) end
  for i = 1, #SRC_BLOCKS do
    parts[DST_BLOCKS[i] + 1] = bytes:sub(SRC_BLOCKS[i] * BLOCK + 1, (SRC_BLOCKS[i] + 1) * BLOCK)
  end
  return table.concat(parts)
end

return {
  name = "batch",
  run = function(T)
    local bytes = T.bytes(BLOCK * BLOCKS, 5)
    local want = after_blocks(bytes)
    for _, a in ipairs(T.devices) do
      local ok, src = T.try("make on " .. a.name, xfer.tensor, bytes, { dtype = "u8", device = a })
      if ok then
        T.source(src)
        for _, b in ipairs(T.devices) do
          local what = "blocks " .. a.name .. " -> " .. b.name
          local dst_ok, dst = T.try("zeros on " .. b.name, xfer.zeros, { BLOCK * BLOCKS }, { dtype = "u8", device = b })
          if dst_ok then
            if T.move(a, b, what, dst.copy_blocks, dst, src, SRC_BLOCKS, DST_BLOCKS, BLOCK) then
              T.expect(want, dst, what)
            end
            local made, batch = T.try("prepare " .. what, xfer.batch,
                                      { dst = dst, src = src, src_blocks = SRC_BLOCKS, dst_blocks = DST_BLOCKS, block_bytes = BLOCK })
            if made then
              if T.move(a, b, what .. " prepared", batch.run, batch) and
                 T.move(a, b, what .. " prepared, again", batch.run, batch) then
                T.expect(want, dst, what .. " prepared")
              end
              batch:release()
            end
            dst:free()
          end
          local small_ok, small = T.try("make small on " .. a.name, xfer.tensor, bytes:sub(1, 40), { dtype = "u8", device = a })
          local d1_ok, d1 = T.try("zeros on " .. b.name, xfer.zeros, { 40 }, { dtype = "u8", device = b })
          local d2_ok, d2 = T.try("zeros on " .. b.name, xfer.zeros, { BLOCK * BLOCKS }, { dtype = "u8", device = b })
          if small_ok and d1_ok and d2_ok then
            if T.move(a, b, "copy_many " .. a.name .. " -> " .. b.name, xfer.copy_many, { { d1, small }, { d2, src } }) then
              T.expect(bytes:sub(1, 40), d1, "copy_many's first")
              T.expect(bytes, d2, "copy_many's second")
            end
            T.expect(bytes:sub(1, 40), small, "copy_many's first source, untouched")
          end
          if small_ok then small:free() end
          if d1_ok then d1:free() end
          if d2_ok then d2:free() end
          -- sizes of every kind in one group, empty ones first
          local list, wants = {}, {}
          for i, len in ipairs({ 0, 40, 0, 1001, BLOCK * BLOCKS }) do
            local made_ok, t = T.try("make on " .. a.name, xfer.tensor, bytes:sub(1, len), { dtype = "u8", device = a })
            if made_ok then list[#list + 1], wants[#wants + 1] = t, bytes:sub(1, len) end
          end
          local moved_ok, moved = T.move(a, b, "move_many " .. a.name .. " -> " .. b.name, xfer.move_many, list, b)
          if moved_ok then
            for i, t in ipairs(moved) do
              T.expect(wants[i], t, "move_many's element " .. i)
              t:free()
            end
          end
          for _, t in ipairs(list) do t:free() end
          -- asynchronous, the source freed at once
          local a_ok, asrc = T.try("make on " .. a.name, xfer.tensor, bytes, { dtype = "u8", device = a })
          local b_ok, adst = T.try("zeros on " .. b.name, xfer.zeros, { BLOCK * BLOCKS }, { dtype = "u8", device = b })
          if a_ok and b_ok then
            local prepared, ab = T.try("prepare async " .. a.name .. " -> " .. b.name, xfer.batch, { { adst, asrc } })
            if prepared then
              local started, job = T.move(a, b, "run_async " .. a.name .. " -> " .. b.name, ab.run_async, ab)
              asrc:free()
              if started and T.move(a, b, "wait " .. a.name .. " -> " .. b.name, job.wait, job) then
                T.expect(bytes, adst, "run_async, source freed")
              end
              ab:release()
            end
          end
          if a_ok then asrc:free() end
          if b_ok then adst:free() end
        end
      end
    end
  end,
}
