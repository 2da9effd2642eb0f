-- A busted output handler: busted's plain terminal output, plus the counts written to
-- the file named by XFER_SPEC_SUMMARY ("passed failed errors pending"), which
-- scripts/test adds up into its last line.
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.plainTerminal"(options)
  local subscribe = handler.subscribe
  handler.subscribe = function(self, opts)
    subscribe(self, opts)
    busted.subscribe({ "suite", "end" }, function()
      local path = os.getenv("XFER_SPEC_SUMMARY")
      if path then
        local f = assert(io.open(path, "w"))
        f:write(string.format("%d %d %d %d\n", handler.successesCount, handler.failuresCount,
                              handler.errorsCount, handler.pendingsCount))
        f:close()
      end
      return nil, true
    end)
  end
  return handler
end
