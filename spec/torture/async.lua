-- Torture scenario: moves on threads -- to_async to every device, wait_all, and a source
-- freed right after its move started (free waits for the move).
local xfer = require "xfer"

return {
  name = "async",
  run = function(T)
    local n = 65536 + 7
    local bytes = T.bytes(n, 5)
    local jobs, expected = {}, {}
    for _, dev in ipairs(T.devices) do
      local ok, src = T.try("make on host", xfer.tensor, bytes, { dtype = "u8" })
      if ok then
        T.source(src)
        local started, job = T.try("to_async " .. dev.name, src.to_async, src, dev)
        if started then
          jobs[#jobs + 1], expected[#expected + 1] = job, dev.name
        end
      end
    end
    local waited, results = T.try("wait_all", xfer.wait_all, jobs)
    if waited then
      for i, t in ipairs(results) do T.expect(bytes, t, "to_async " .. expected[i]) end
    end
    -- the source freed at once: the move completes all the same
    for _, dev in ipairs(T.devices) do
      local ok, src = T.try("make on host", xfer.tensor, bytes, { dtype = "u8" })
      if ok then
        local started, job = T.try("to_async " .. dev.name, src.to_async, src, dev)
        src:free()
        if started then
          local done, moved = T.try("wait " .. dev.name, job.wait, job)
          if done then T.expect(bytes, moved, "to_async then free, " .. dev.name) end
        end
      end
    end
  end,
}
