-- Torture scenario: files as endpoints -- a safetensors file and an .npz saved from host and
-- device tensors and loaded onto every device, in requests of 64 KiB, through O_DIRECT and
-- the page cache; every failed read, write or sync (file:*) and every failed driver call on
-- the way surfaces as an xfer.Error naming the file or the device, leaves nothing allocated,
-- no fd open, and no file (nor temporary) where a save failed; a tensor split across the host and
-- a device as it loads (shard, verified) likewise.
local xfer = require "xfer"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

local function entries()
  local p = io.popen("ls -A " .. dir)
  local out = p:read("*a")
  p:close()
  return out
end

return {
  name = "files",
  run = function(T)
    local n = 150000 + 3 -- three requests of 64 KiB and a bit, off the 4096-byte blocks
    local a_bytes, b_bytes = T.bytes(n, 7), T.bytes(4099, 9)
    for i, dev in ipairs(T.devices) do
      local ok, a = T.try("make on host", xfer.tensor, a_bytes, { dtype = "u8" })
      local ok2, b = T.try("make on " .. dev.name, xfer.tensor, b_bytes, { dtype = "u8", device = dev })
      if ok and ok2 then
        T.source(a)
        T.source(b)
        for _, ext in ipairs({ "safetensors", "npz" }) do
          local p = ("%s/t%d.%s"):format(dir, i, ext)
          local before = entries()
          local saved = T.try("save " .. ext .. " from " .. dev.name, xfer.save, p, { a = a, b = b },
                              { chunk = 65536, direct = ext == "safetensors" })
          if not saved then
            if exists(p) or entries() ~= before then
              T.problems[#T.problems + 1] = "a failed save left a file behind: " .. entries()
            end
          else
            for _, direct in ipairs({ true, false }) do
              local loaded, got = T.try(("load %s onto %s direct=%s"):format(ext, dev.name, tostring(direct)),
                                        xfer.load, p, { device = dev, chunk = 65536, depth = 2, direct = direct })
              if loaded then
                T.expect(a_bytes, got.a, "a loaded onto " .. dev.name)
                T.expect(b_bytes, got.b, "b loaded onto " .. dev.name)
              end
            end
            if ext == "safetensors" then -- "a" split in two as it loads: the host's half and dev's
              local halves = { "host", dev.name }
              local split, parts = T.try(("load a split onto host and %s, verified"):format(dev.name), xfer.load, p,
                                         { names = { "a" }, shard = { dim = 0, devices = halves }, verify = true,
                                           chunk = 65536, depth = 2, direct = false })
              if split then
                local first = parts.a[1].nbytes
                T.expect(a_bytes:sub(1, first), parts.a[1], "a's first part on the host")
                T.expect(a_bytes:sub(first + 1), parts.a[2], "a's second part on " .. dev.name)
              end
            end
            os.remove(p)
          end
        end
      end
    end
  end,
  finish = function() os.execute("rm -rf " .. dir) end,
}
