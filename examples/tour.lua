-- tour.lua -- a walk through xferlua: runtimes, devices, tensors, transfers, and a failed
-- transfer caught with pcall and recovered with an explicit host round-trip.
--   scripts/xferlua examples/tour.lua
local xfer = require "xfer"

print(("xferlua %s\n"):format(xfer.version))

print("1. Runtimes (a missing one says why):")
for _, rt in ipairs(xfer.runtimes()) do
  print(("   %-7s %s"):format(rt.name, rt.available and ("available, " .. rt.devices .. " device(s)")
                                                    or ("unavailable: " .. rt.reason)))
end

print("\n2. Devices:")
local devices = xfer.devices()
for _, dev in ipairs(devices) do
  print(("   %-10s %s, %.1f GiB%s"):format(dev.name, dev.label, dev.total_memory / 2^30,
                                        dev.unified and ", shares host memory" or ""))
end

print("\n3. A tensor:")
local t = xfer.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "f32" })
print(("   %s: dtype %s, shape {%s}, %d elements, %d bytes"):format(
  t:summary(), t.dtype, table.concat(t.shape, ","), #t, t.nbytes))
print("   print(t) shows the values:\n      " .. (tostring(t):gsub("\n", "\n      ")))
print(("   t:sum() = %g, t:max() = %g, t:get(-1, -1) = %g, t == its f64 copy: %s"):format(
  t:sum(), t:max(), t:get(-1, -1), tostring(t == t:to("host", { dtype = "f64" }))))

print("\n4. Through every available device and back:")
local current = t
for _, dev in ipairs(devices) do
  local plan = xfer.plan(current, dev)
  current = current:to(dev)
  print(("   -> %-10s path %-12s %s"):format(dev.name, plan.path, plan.reason))
end
local back = current:to("host")
print(("   back on host, equal to the original: %s"):format(tostring(back:equals(t))))

-- The failure goes where the data lives: the last device of the tour (host if alone).
local dev = devices[#devices]
local src = t:to(dev)
print(("\n5. A transfer that fails (a read fault injected into %s's runtime, %s):"):format(
  dev.name, dev.runtime))
xfer.faults.inject({ runtime = dev.runtime, op = "read", nth = 1 })
local ok, err = pcall(src.to, src, "host", { via = "host" })
print(("   pcall returned %s"):format(tostring(ok)))
print(("   error: code=%s op=%s from=%s to=%s native=%s (%d) retryable=%s"):format(
  err.code, err.op, err.from, err.to, err.native_name, err.native, tostring(err.retryable)))
print(("   message: %s"):format(tostring(err)))
print(("   the source is intact: %s"):format(table.concat(src:totable({ flat = true }), " ")))

print("\n6. Recovery: the explicit host round-trip:")
local recovered = xfer.host_roundtrip(src, "host")
print(("   %s holds %s; equal to the original: %s"):format(
  recovered:summary(), table.concat(recovered:totable({ flat = true }), " "),
  tostring(recovered:equals(t))))

print("\n7. Freeing:")
t:free()
local ok2, err2 = pcall(t.clone, t)
print(("   using a freed tensor: %s, code %s: %s"):format(tostring(ok2), err2.code, tostring(err2)))
collectgarbage()
for _, d in ipairs(devices) do
  local m = xfer.memory(d)
  print(("   %s: %d bytes in use by live tensors, %d held from the driver for reuse"):format(
    d.name, m.in_use, m.cached))
end
-- a freed tensor's memory goes back to its device's cache: the next to() of the same size
-- asks the driver for nothing (xfer.empty_cache() gives the cache back)
local before = xfer.memory(dev).driver_allocs
for _ = 1, 3 do src:to(dev):free() end
print(("   three to(%s) in a row, driver allocations made: %d"):format(dev.name,
  xfer.memory(dev).driver_allocs - before))

print("\n8. What moved (xfer.stats()):")
for _, s in ipairs(xfer.stats()) do
  print(("   %-9s -> %-9s %-12s %d move(s), %d bytes"):format(s.from, s.to, s.path, s.count, s.bytes))
end

print("\n9. Views, elements and a dtype on the way:")
local m = xfer.arange(12, { device = dev }):view(3, 4) -- no copy: the same memory, shaped
print(m:format())
local column = m:select(2, 3) -- the third column: a strided view
print(("   column 3 moved to the host: %s"):format(table.concat(column:to("host"):totable(), " ")))
print(("   m[2][3] = %s, read alone (one small read)"):format(tostring(m[2][3])))
print(("   as f16 on %s: %s"):format(dev.name, m:transpose():to(dev, { dtype = "f16" }):summary()))

print("\n10. The self-test (xferlua --selftest): every pair, every path, checked:")
local report = xfer.selftest({ quick = true })
print("   " .. xfer.selftest_report(report):match("[^\n]+$"))

print("\n11. Files as endpoints (xfer.save, xfer.open, xfer.load):")
local file = os.tmpname() .. ".safetensors"
xfer.save(file, { weight = m:to(dev, { dtype = "f32" }), bias = xfer.arange(4, { dtype = "f32" }) },
          { metadata = { note = "the tour's" } })
local f = xfer.open(file) -- reads the header only
for _, e in ipairs(f:entries()) do
  print(("   %-6s %s[%s], %d bytes at byte %d"):format(e.name, e.dtype, table.concat(e.shape, ","), e.nbytes, e.offset))
end
f:close()
local loaded = xfer.load(file, { device = dev })
print(("   loaded onto %s: weight %s, equal to what was saved: %s"):format(dev.name,
  loaded.weight:summary(), tostring(loaded.weight:to("host"):equals(m:to("host", { dtype = "f32" })))))
print("   read by " .. xfer.file_route().reason)
local ok3, err3 = pcall(xfer.load, file .. ".missing")
print(("   a file that is not there: %s, %s (e.file = %s)"):format(tostring(ok3), err3.code, err3.file))
os.remove(file)
