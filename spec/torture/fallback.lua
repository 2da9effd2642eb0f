-- Torture scenario: the fallback policy -- xfer.transfer over every pair, falling back
-- through the paths that apply and retrying a retryable failure once. A failure the policy
-- recovers from is no error; one it cannot is raised as the last attempt's.
local xfer = require "xfer"

return {
  name = "fallback",
  run = function(T)
    local n = 4096 + 1
    local bytes = T.bytes(n, 9)
    for _, a in ipairs(T.devices) do
      local ok, src = T.try("make on " .. a.name, xfer.tensor, bytes, { dtype = "u8", device = a })
      if ok then
        T.source(src)
        for _, b in ipairs(T.devices) do
          local what = "transfer " .. a.name .. " -> " .. b.name
          local moved_ok, moved = T.try(what, xfer.transfer, src, b,
                                        { fallback = { "interop", "staged", "host" }, retries = 1,
                                          log = false })
          if moved_ok then T.expect(bytes, moved, what) end
        end
      end
    end
  end,
}
