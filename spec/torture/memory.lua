-- Torture scenario: the caching allocator -- tensors of several sizes made, freed and made
-- again on every device (reuse, splitting, joining), a cache limit that sends blocks back,
-- and a refused allocation with a cache to give back (the retry).
local xfer = require "xfer"

return {
  name = "memory",
  run = function(T)
    local saved = xfer.config()
    for _, dev in ipairs(T.devices) do
      local made = {}
      for i, n in ipairs({ 512, 4096, 65536 + 3, 1024 * 1024 + 1, 2 * 1024 * 1024 }) do
        local ok, t = T.try(("make %d on %s"):format(n, dev.name), xfer.full, { n }, i,
                            { dtype = "u8", device = dev })
        if ok then made[#made + 1] = { t = t, n = n, v = i } end
      end
      for j = 1, #made, 2 do made[j].t:free() end -- holes between live blocks
      for _, m in ipairs(made) do
        if not m.t.freed then T.expect(string.rep(string.char(m.v), m.n), m.t, "kept on " .. dev.name) end
      end
      local ok, again = T.try("make again on " .. dev.name, xfer.full, { 65536 }, 7, { dtype = "u8", device = dev })
      if ok then T.expect(string.rep("\7", 65536), again, "made again on " .. dev.name) end
      xfer.config({ cache_limit = 1 })
      for _, m in ipairs(made) do m.t:free() end
      xfer.config({ cache_limit = saved.cache_limit })
      -- a big tensor where a cached segment could be given back first: a refused allocation
      -- then empties the cache and is retried
      local held_ok, held = T.try("make 1.5 MiB on " .. dev.name, xfer.empty, { 1536 * 1024 },
                                  { dtype = "u8", device = dev })
      if held_ok then held:free() end
      local big_ok, big = T.try("make 24 MiB on " .. dev.name, xfer.empty, { 24 * 1024 * 1024 },
                                { dtype = "u8", device = dev })
      if big_ok then big:free() end
    end
  end,
}
