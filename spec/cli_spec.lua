-- The xferlua executable: options, arg, exit codes, error reports.
local xfer = require "xfer"
local h = require "support.helpers"

local function xferlua(args, stdin)
  local cmd = h.xferlua() .. " " .. args
  if stdin then cmd = "printf '%b' '" .. stdin .. "' | " .. cmd end
  return h.run(cmd)
end

local function script(text)
  local path = os.tmpname() .. ".lua"
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

describe("xferlua", function()
  it("XFER_TRACE=1 traces each move, and what a verified one's check cost beside its copy", function()
    local path = script([[
      local xfer = require "xfer"
      local a = xfer.arange(4096, { dtype = "u32" })
      local b = xfer.zeros({ 4096 }, { dtype = "u32" })
      b:copy_from(a, { verify = true })
      xfer.batch({ dst = b, src = a, src_blocks = { 0, 2 }, dst_blocks = { 1, 3 }, block_bytes = 4096 },
                 { verify = true }):run()
    ]])
    local out, code = h.run("XFER_TRACE=1 " .. h.xferlua() .. " " .. path)
    os.remove(path)
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("xfer: host -> host  same_device  16384 bytes", 1, true), out)
    assert.is_truthy(out:match("xfer: host %-> host  verify  16384 bytes in 1 range, 1 submission  moved [%d.]+ ms, then sums [%d.]+ ms " ..
                               "%(waiting for the devices' [%d.]+ ms, the host pool's [%d.]+ ms%)\n"), out)
    assert.is_truthy(out:match("xfer: host %-> host  verify  8192 bytes in 2 ranges, %d+ submissions?  moved [%d.]+ ms, then sums [%d.]+ ms " ..
                               "%(waiting for the devices' [%d.]+ ms, the host pool's [%d.]+ ms%)\n"), out)
  end)

  it("-v prints the version and exits 0", function()
    local out, code = xferlua("-v")
    assert.are.equal(0, code)
    assert.is_truthy(out:match("^xferlua 0%.1%.0 %(LuaJIT 2%.1"), out)
  end)

  it("--help and -h tell the options and exit 0", function()
    for _, flag in ipairs({ "--help", "-h" }) do
      local out, code = xferlua(flag)
      assert.are.equal(0, code)
      assert.is_truthy(out:find("usage: xferlua [options] [script [args]]", 1, true))
      for _, opt in ipairs({ "-e chunk", "-l name", "-j cmd", "-O[opt]", "-i", "-v", "-E", "--devices", "--" }) do
        assert.is_truthy(out:find("  " .. opt, 1, true), opt)
      end
      -- every switch xferlua reads (context.c's env_flags), and the libraries it can be pointed at
      for _, var in ipairs({ "XFER_FAULTS", "XFER_TRACE", "XFER_CUDA_LIBRARY", "XFER_VULKAN_NO_MAP",
                             "XFER_CACHE", "XFER_SHARED_MEMORY", "XFER_UCX_REGISTER", "XFER_HUGE_PAGES",
                             "XFER_UCX_LIBRARY", "XFER_PLAN_CACHE", "XFER_SELFTEST" }) do
        assert.is_truthy(out:find(var, 1, true), var)
      end
    end
  end)

  it("--devices lists every runtime and the host device", function()
    local out, code = xferlua("--devices")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("host     available, 1 device", 1, true), out)
    assert.is_truthy(out:find("\n  host ", 1, true), out)
    for _, rt in ipairs({ "cuda", "vulkan", "opencl" }) do
      assert.is_truthy(out:find("\n" .. rt .. " ", 1, true), rt)
    end
  end)

  it("-e runs a chunk with xfer preloaded", function()
    local out, code = xferlua([[-e 'print(require("xfer").tensor({1,2}):totable()[2])']])
    assert.are.equal(0, code)
    assert.are.equal("2\n", out)
  end)

  it("runs -e and -l in order, then the script", function()
    local path = script("print('script', ...)")
    local out, code = xferlua("-e 'print(1)' -l string -e 'print(type(string))' " .. path .. " a b")
    assert.are.equal(0, code, out)
    assert.are.equal("1\ntable\nscript\ta\tb\n", out)
    os.remove(path)
  end)

  it("builds the arg table as lua.c does", function()
    local path = script("print(arg[-2], arg[-1], arg[0] == ..., arg[1], arg[2], #arg, select('#', ...))")
    local out, code = xferlua("-e 'x=1' " .. path .. " one two")
    assert.are.equal(0, code, out)
    assert.are.equal("-e\tx=1\tfalse\tone\ttwo\t2\t2\n", out)
    local out2 = xferlua("-e 'print(arg[0], arg[-1] ~= nil)' " .. path .. " z")
    assert.is_truthy(out2:find(path, 1, true))
    os.remove(path)
  end)

  it("reads the script from stdin with -", function()
    local out, code = xferlua("- x y", "print(#arg, ...)")
    assert.are.equal(0, code)
    assert.are.equal("2\tx\ty\n", out)
  end)

  it("reads stdin when given no script and stdin is not a terminal", function()
    local out, code = xferlua("", "print(40 + 2)")
    assert.are.equal(0, code)
    assert.are.equal("42\n", out)
  end)

  it("-- ends the options", function()
    local path = script("print(...)")
    local out, code = xferlua("-- " .. path .. " -v")
    assert.are.equal(0, code)
    assert.are.equal("-v\n", out)
    os.remove(path)
  end)

  it("-i runs an interactive session after the script", function()
    local out, code = xferlua("-i -e 'x = 20'", "=x + 1\\nfor i = 1, 2 do\\nprint(i)\\nend\\n")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("21\n", 1, true), out)
    assert.is_truthy(out:find("1\n", 1, true) and out:find("2\n", 1, true), out)
  end)

  it("an uncaught error prints xferlua: message and a traceback, and exits 1", function()
    local out, code = xferlua([[-e 'error("boom")']])
    assert.are.equal(1, code)
    assert.is_truthy(out:match("^xferlua: %(command line%):1: boom\nstack traceback:"), out)
  end)

  it("an uncaught xfer error prints its message, not a table address", function()
    local out, code = xferlua([[-e 'require("xfer").device("nope")']])
    assert.are.equal(1, code)
    -- the child lists its own devices: a GPU that this process holds in exclusive mode
    -- may be missing there
    assert.is_truthy(out:match("^xferlua: unknown device 'nope' %(devices here: host[^\n]*%)\nstack traceback:"), out)
    assert.is_falsy(out:find("table: 0x", 1, true))
  end)

  it("a syntax error exits 1", function()
    local path = script("print(")
    local out, code = xferlua(path)
    assert.are.equal(1, code)
    assert.is_truthy(out:find("^xferlua: "), out)
    os.remove(path)
  end)

  it("a missing script exits 1", function()
    local out, code = xferlua("/nonexistent/script.lua")
    assert.are.equal(1, code)
    assert.is_truthy(out:find("cannot open /nonexistent/script.lua", 1, true), out)
  end)

  it("an unknown option prints the usage and exits 1", function()
    local out, code = xferlua("--frobnicate")
    assert.are.equal(1, code)
    assert.is_truthy(out:find("xferlua: unrecognized option or missing argument: '--frobnicate'", 1, true))
    assert.is_truthy(out:find("usage: xferlua", 1, true))
  end)

  it("-e without its chunk is an error", function()
    local _, code = xferlua("-e")
    assert.are.equal(1, code)
  end)

  it("os.exit sets the exit code", function()
    local _, code = xferlua([[-e 'os.exit(3)']])
    assert.are.equal(3, code)
  end)

  -- a crash (in LuaJIT, a driver or the core) is a bug, but one that leaves something to go on
  describe("a fatal signal", function()
    local crashing = 'local ffi = require "ffi"\nlocal function crash()\n' ..
                     '  ffi.cast("int *", 16)[0] = 1\nend\ncrash()\n'

    it("is reported: the signal, the address, the C stack and the script's line", function()
      local path = script(crashing)
      local out, code = xferlua(path)
      os.remove(path)
      if out:find("AddressSanitizer", 1, true) then -- the sanitizer reports it there
        assert.truthy(out:find("SEGV", 1, true), out)
        return
      end
      assert.are.equal(128 + 11, code, out) -- then the default action: the signal's status
      assert.truthy(out:find("xferlua: fatal signal SIGSEGV (segmentation fault) at address 0x10\n",
                             1, true), out)
      assert.truthy(out:find("C stack:\n", 1, true), out)
      assert.truthy(out:find("lua_pcall", 1, true), out)
      assert.truthy(out:find("Lua stack (best effort):\n", 1, true), out)
      assert.truthy(out:find(path .. ":3\n", 1, true), out)
      assert.truthy(out:find(path .. ":5\n", 1, true), out)
    end)

    it("is left alone with XFER_NO_CRASH_REPORT=1", function()
      local path = script(crashing)
      local out, code = h.run("XFER_NO_CRASH_REPORT=1 " .. h.xferlua() .. " " .. path)
      os.remove(path)
      if out:find("AddressSanitizer", 1, true) then
        assert.truthy(out:find("SEGV", 1, true), out)
        return
      end
      assert.are.equal(128 + 11, code, out)
      assert.falsy(out:find("fatal signal", 1, true), out)
      -- a switch, as every XFER_ switch: 0 or 1
      out, code = h.run("XFER_NO_CRASH_REPORT=yes " .. h.xferlua() .. " -e 'print(1)'")
      assert.are.equal(1, code, out)
      assert.are.equal("xferlua: XFER_NO_CRASH_REPORT must be 0 or 1, not 'yes'\n", out)
    end)
  end)

  it("-E ignores LUA_INIT, which runs otherwise", function()
    local out = h.run("LUA_INIT='print(\"init\")' " .. h.xferlua() .. " -e 'print(2)'")
    assert.are.equal("init\n2\n", out)
    out = h.run("LUA_INIT='print(\"init\")' " .. h.xferlua() .. " -E -e 'print(2)'")
    assert.are.equal("2\n", out)
  end)

  it("-j and -O reach LuaJIT", function()
    local out, code = xferlua([[-joff -O3 -e 'print(jit.status())']])
    assert.are.equal(0, code, out)
    assert.are.equal("false\n", out:match("^(%a+)") .. "\n")
  end)
end)

describe("xferlua beside luajit", function()
  local function both(args, stdin, env)
    local pre = (env and env .. " " or "") .. (stdin and ("printf '%b' '" .. stdin .. "' | ") or "")
    local ours, our_code = h.run(pre .. h.xferlua() .. " " .. args)
    local theirs, their_code = h.run(pre .. "luajit " .. args)
    return ours, our_code, theirs, their_code
  end

  it("-b saves and lists bytecode as luajit -b does", function()
    local src = os.tmpname() .. ".lua"
    local f = assert(io.open(src, "w"))
    f:write("return 40 + 2\n")
    f:close()
    local ours, code, theirs = both("-bl " .. src)
    assert.are.equal(0, code, ours)
    assert.are.equal(theirs, ours)
    local out = os.tmpname() .. ".out"
    local _, save_code = h.run(h.xferlua() .. " -b " .. src .. " " .. out)
    assert.are.equal(0, save_code)
    assert.are.equal("42\n", (h.run("luajit -e 'print(dofile(\"" .. out .. "\"))'")))
    local _, usage_code = h.run(h.xferlua() .. " -b")
    assert.are.equal(1, usage_code)
    os.remove(src)
    os.remove(out)
  end)

  it("shows arg to LUA_INIT, as luajit does", function()
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write("")
    f:close()
    local ours, _, theirs = both(script .. " x y", nil, "LUA_INIT='print(arg and #arg, arg and arg[1])'")
    assert.are.equal(theirs, ours)
    assert.are.equal("2\tx\n", ours)
    os.remove(script)
  end)

  it("exits as luajit does on a syntax error in piped stdin", function()
    local ours, code, theirs, their_code = both("", "x=\\n")
    assert.are.equal(their_code, code)
    assert.are.equal(theirs:gsub("^luajit", "xferlua"), ours)
    local _, dash_code, _, their_dash = both("-", "x=\\n")
    assert.are.equal(their_dash, dash_code)
    assert.are.equal(1, dash_code)
  end)

  it("says -j with an unknown command in luajit's words", function()
    local ours, code, theirs, their_code = both("-j bogus -e 1")
    assert.are.equal(their_code, code)
    assert.are.equal(theirs:gsub("^luajit", "xferlua"), ours)
  end)

  it("-l requires into a global, as luajit -l", function()
    local ours, code, theirs = both("-l string -e 'print(string.rep(\"a\", 3))'")
    assert.are.equal(0, code)
    assert.are.equal(theirs, ours)
  end)
end)

describe("the examples", function()
  for _, example in ipairs({ "examples/tour.lua", "examples/fallback.lua", "examples/remote.lua" }) do
    it(example .. " runs to its end", function()
      local out, code = h.run(h.xferlua() .. " " .. example)
      assert.are.equal(0, code, out)
      assert.is_falsy(out:find("xferlua: ", 1, true), out)
    end)
  end

  it("the tour ends with the self-test's verdict", function()
    local out = h.run(h.xferlua() .. " examples/tour.lua")
    assert.is_truthy(out:match("selftest: ok %-%- %d+ moves, 0 default paths failed"), out)
  end)
end)

-- a user's mistake in a tool mode is one line and exit 2, never a traceback of our chunks
describe("the tool modes' mistakes", function()
  local function says(args, pattern)
    local out, code = h.run(h.xferlua() .. " " .. args)
    assert.are.equal(2, code, out)
    assert.is_falsy(out:find("traceback", 1, true), out)
    local _, lines = out:gsub("\n", "")
    assert.are.equal(1, lines, out)
    assert.matches(pattern, out)
  end

  it("--load of a missing file, a directory, a bad .npy, onto an unknown device", function()
    says("--load /nonexistent/model.safetensors", "^xferlua: ENOENT")
    says("--load /tmp", "not a regular file")
    local p = os.tmpname() .. ".npy"
    local f = assert(io.open(p, "wb"))
    f:write("\147NUMPY\1\0\22\0{'descr': '<f4junk'}   \n")
    f:close()
    says("--load " .. p, p:gsub("%p", "%%%0"))
    os.remove(p)
    local t = os.tmpname() .. ".safetensors"
    xfer.save(t, { a = xfer.zeros({ 2 }) })
    says("--load " .. t .. " --device nosuch:9", "nosuch:9")
    os.remove(t)
  end)

  it("--serve with a bad URL, a missing or an empty --token-file", function()
    if h.remote_missing() then return pending(h.remote_missing()) end
    says("--serve bogus://x", "is no ucx://host:port address")
    says("--serve ucx://127.0.0.1:0 --token-file /nonexistent/token", "%-%-token%-file: /nonexistent/token")
    local p = os.tmpname()
    says("--serve ucx://127.0.0.1:0 --token-file " .. p, "is empty: a token of 1 to 255 bytes is needed")
    os.remove(p)
  end)

  -- SIGINT goes once the server says it serves: a background process starts with SIGINT
  -- ignored until xferlua sets its handler, and a loaded machine (the GPU machine's parallel
  -- checks) took over a second to get there -- the signal was lost and the wait never ended.
  -- Never hangs: after 30 s unanswered it is killed (and fails).
  it("Ctrl-C on --serve: one line, exit 130, at once", function()
    if h.remote_missing() then return pending(h.remote_missing()) end
    local err = os.tmpname()
    local out, code = h.run("(" .. h.xferlua() .. " --serve ucx://127.0.0.1:0 2>" .. err .. " & p=$!; " ..
                            "for i in $(seq 300); do grep -q serving " .. err .. " && break; sleep 0.1; done; " ..
                            "kill -INT $p; s=$(date +%s%N); " ..
                            "(sleep 30; kill -9 $p 2>/dev/null) & w=$!; wait $p; c=$?; e=$(date +%s%N); " ..
                            "kill $w 2>/dev/null; cat " .. err .. "; echo \"ms $(( (e - s) / 1000000 ))\"; exit $c)")
    os.remove(err)
    assert.are.equal(130, code, out)
    assert.matches("xferlua: interrupted %(SIGINT%)", out)
    assert.is_falsy(out:find("traceback", 1, true), out)
    assert.is_true(tonumber(out:match("ms (%d+)")) < 1000, out)
  end)

  it("xfer.listen refuses an empty token (it read as none: anyone let in)", function()
    if h.remote_missing() then return pending(h.remote_missing()) end
    local e = h.raises("invalid", xfer.listen, "ucx://127.0.0.1:0", { token = "" })
    assert.matches("an empty token admits anyone", e.message)
  end)

  it("--load of a shard index, as xfer.load takes it", function()
    local d = os.tmpname()
    os.remove(d)
    assert(os.execute("mkdir -p " .. d) == 0)
    xfer.save(d .. "/model-00001-of-00002.safetensors", { a = xfer.arange(10) })
    xfer.save(d .. "/model-00002-of-00002.safetensors", { b = xfer.ones({ 3, 4 }, { dtype = "bf16" }) })
    local f = assert(io.open(d .. "/model.safetensors.index.json", "w"))
    f:write('{"metadata": {"total_size": 64}, "weight_map": {"a": "model-00001-of-00002.safetensors", ' ..
            '"b": "model-00002-of-00002.safetensors"}}')
    f:close()
    for _, dev in ipairs(xfer.devices()) do
      local out, code = h.run(h.xferlua() .. " --load " .. d .. "/model.safetensors.index.json --device " .. dev.name)
      assert.are.equal(0, code, out)
      assert.matches("safetensors index of 2 shards, 2 tensors", out)
      assert.matches("a%s+f32%[10%]", out)
      assert.matches("b%s+bf16%[3,4%]", out)
      assert.matches("loaded 2 tensors, [%d.]+ GB onto " .. dev.name:gsub("%p", "%%%0"), out)
    end
    os.execute("rm -rf " .. d)
  end)
end)
