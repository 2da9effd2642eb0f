-- A busted output handler: busted's plain terminal output, plus the counts written to
-- the file named by XFER_SPEC_SUMMARY ("passed failed errors pending"), which
-- scripts/test adds up into its last line, and each failure and error as a line appended to
-- XFER_SPEC_FAILURES ("LABEL: file:line: the spec's name"), which it prints above that line.
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
      local failures = os.getenv("XFER_SPEC_FAILURES")
      if failures then
        local f = assert(io.open(failures, "a"))
        for _, list in ipairs({ handler.failures, handler.errors }) do
          for _, e in ipairs(list or {}) do
            local where = e.trace and e.trace.short_src and (e.trace.short_src .. ":" .. tostring(e.trace.currentline))
                          or "?"
            f:write(("%s: %s: %s\n"):format(os.getenv("XFER_SPEC_LABEL") or "specs", where, tostring(e.name)))
          end
        end
        f:close()
      end
      return nil, true
    end)
  end
  return handler
end
