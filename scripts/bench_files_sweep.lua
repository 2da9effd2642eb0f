-- scripts/bench_files_sweep.lua FILE DEVICE -- warm loads of FILE onto DEVICE at a few chunk
-- sizes and reader thread counts (XFER_FILE_THREADS is read per load): which shape the page
-- cache's path wants on this machine. A benchmark: it prints figures.
local xfer = require "xfer"
local file, device = ...
local f = xfer.open(file)
local bytes = 0
for _, e in ipairs(f:entries()) do bytes = bytes + e.nbytes end
f:close()
os.execute(("cat %q > /dev/null"):format(file))
for _, threads in ipairs({ "4", "8", "16" }) do
  for _, chunk in ipairs({ 4, 16, 64 }) do
    -- the thread count comes from the environment: a child process per setting
    local cmd = ("XFER_FILE_THREADS=%s %s -e \"local xfer = require 'xfer'; local best = 1e9; " ..
                 "for i = 1, 3 do local t0 = xfer.clock(); local l = xfer.load('%s', {device = '%s', chunk = %d}); " ..
                 "xfer.synchronize(); best = math.min(best, xfer.clock() - t0); for _, t in pairs(l) do t:free() end end; " ..
                 "print(('threads %%s chunk %%d MiB: %%.2f GB/s (%%s)'):format('%s', %d, %d / best / 1e9, xfer.file_route().reason))\""):format(
      threads, arg and arg[-1] or "xferlua", file, device, chunk * 1048576, threads, chunk, bytes)
    os.execute(cmd)
  end
end
