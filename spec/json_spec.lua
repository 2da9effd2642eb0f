-- Machine-readable output: xfer.json, xfer.inventory, `xferlua --devices --json`, --version,
-- `scripts/bench --json`. Checked by decoding with dkjson (busted's own JSON library).
local xfer = require "xfer"
local h = require "support.helpers"
local dkjson = require "dkjson"

local function decode(text)
  local value, _, err = dkjson.decode(text)
  assert(value ~= nil, "not JSON: " .. tostring(err) .. "\n" .. text)
  return value
end

describe("json", function()
  it("encodes values so that a JSON parser reads them back", function()
    local value = { name = "q\"uote\n\t\1", list = { 1, 2.5, -3, true, false, "x" }, empty = {},
                    nested = { a = { b = { c = 2 ^ 52 } } }, small = 1e-300 }
    local text = xfer.json(value)
    assert.are.same(value, decode(text))
    assert.are.equal('{"a":1,"b":[1,2],"c":"x"}', xfer.json({ c = "x", b = { 1, 2 }, a = 1 })) -- keys sorted
    assert.are.equal("null", xfer.json(nil))
    assert.are.same(value, decode(xfer.json(value, { indent = 2 })))
    assert.are.equal("[9007199254740991,0.10000000000000001]", xfer.json({ 2 ^ 53 - 1, 0.1 })) -- exact
  end)

  it("writes UTF-8 whatever the strings hold, and {} for an object marked so", function()
    -- a byte that begins no UTF-8 sequence becomes U+FFFD; well-formed text stays
    assert.are.equal("bad\239\191\189\239\191\189x \195\169", decode(xfer.json("bad\255\192x \195\169")))
    assert.are.equal("\237\159\191", decode(xfer.json("\237\159\191")))            -- U+D7FF
    assert.are.equal("\239\191\189\239\191\189\239\191\189", decode(xfer.json("\237\160\128"))) -- a surrogate
    assert.are.equal("[]", xfer.json({}))
    assert.are.equal("{}", xfer.json(xfer.json_object({})))
    assert.are.equal('{"m":{}}', xfer.json({ m = xfer.json_object({}) }))
    assert.are.equal("[1,null,3]", xfer.json({ 1, xfer.json_null, 3 }))
  end)

  it("turns stats and errors into JSON", function()
    xfer.stats_reset()
    xfer.arange(4):to("host", { via = "host" })
    local stats = decode(xfer.json(xfer.stats()))
    assert.are.equal("host", stats[1].from)
    assert.are.equal(16, stats[1].bytes)
    local _, e = pcall(xfer.arange(3).to, xfer.arange(3), "nope")
    assert.are.equal("invalid", decode(xfer.json(e)).code)
  end)

  it("refuses what JSON cannot hold, saying where", function()
    local cycle = {}
    cycle.self = cycle
    local cases = {
      { { x = { y = { math.huge } } }, "json: x.y[1]: inf has no JSON form" },
      { { 0 / 0 }, "json: [1]: nan has no JSON form" },
      { { dev = xfer.device("host") }, "json: dev: a device has no JSON form" },
      { { t = xfer.arange(2) }, "json: t: a tensor has no JSON form" },
      { { f = print }, "json: f: a function has no JSON form" },
      { { [true] = 1 }, "json: a boolean key (JSON keys are strings)" },
      { cycle, "json: self: a table that contains itself" },
    }
    for _, case in ipairs(cases) do
      local e = h.raises("invalid", xfer.json, case[1])
      assert.is_truthy(e.message == case[2] or e.message:find(case[2], 1, true), e.message)
    end
    assert.are.equal("json: unknown option 'pretty' (known: indent)", h.raises("invalid", xfer.json, 1, { pretty = true }).message)
  end)

  it("lists the inventory: every runtime and device as plain tables", function()
    local inv = decode(xfer.json(xfer.inventory()))
    assert.are.equal(xfer.version, inv.version)
    assert.are.equal(#xfer.runtimes(), #inv.runtimes)
    assert.are.equal(#xfer.devices(), #inv.devices)
    for i, dev in ipairs(xfer.devices()) do
      assert.are.equal(dev.name, inv.devices[i].name)
      assert.are.equal(dev.total_memory, inv.devices[i].total_memory)
      assert.are.equal(dev.unified, inv.devices[i].unified)
    end
  end)
end)

describe("xferlua's machine-readable flags", function()
  it("--devices --json prints the inventory as JSON", function()
    local out, code = h.run(h.xferlua() .. " --devices --json")
    assert.are.equal(0, code, out)
    local inv = decode(out)
    assert.are.equal("host", inv.devices[1].name)
    assert.are.equal(5, #inv.runtimes)
  end)

  it("--json without --devices, --selftest, --calibrate or --load is refused, and --sizes without --calibrate", function()
    local says = "xferlua: --json goes with --devices, --selftest, --calibrate or --load, --quick " ..
                 "with --selftest, --sizes with --calibrate, --device with --load\n"
    for _, args in ipairs({ "--json -e 'print(1)'", "--sizes 4K -e 'print(1)'", "--quick --devices" }) do
      local out, code = h.run(h.xferlua() .. " " .. args)
      assert.are.equal(1, code, args)
      assert.are.equal(says, out, args)
    end
  end)

  it("--calibrate --sizes LIST --json: the figures at those sizes, as JSON", function()
    local out, code = h.run("XFER_PLAN_CACHE=off " .. h.xferlua() .. " --calibrate --sizes 4K,8K --json")
    assert.are.equal(1, code, out) -- (the figures could not be saved: the cache is off)
    local doc = decode(out:match("^(.-\n})"))
    assert.is_true(#doc.results >= 1)
    for _, e in ipairs(doc.results) do
      if e.points then assert.are.same({ 4096, 8192 }, { e.points[1][1], e.points[2][1] }) end
    end
  end)

  it("--version prints the version as -v does", function()
    local out, code = h.run(h.xferlua() .. " --version")
    assert.are.equal(0, code)
    assert.are.equal(h.run(h.xferlua() .. " -v"), out)
    assert.is_truthy(out:match("^xferlua 0%.1%.0 "), out)
  end)

  it("scripts/bench --json prints one JSON document of its tables", function()
    local out, code = h.run(h.xferlua() .. " scripts/bench.lua --tables host --sizes 4K --json")
    assert.are.equal(0, code, out)
    local doc = decode(out)
    assert.are.equal(xfer.version, doc.version)
    assert.is_true(#doc.tables >= 1)
    assert.are.same({ "host->host (memcpy)", "size", "GB/s", "us" }, doc.tables[1].header)
    -- figures are numbers, sizes their bytes, a missing figure null: not display strings
    local row = doc.tables[1].rows[1]
    assert.are.equal(4096, row[2])
    assert.are.equal("number", type(row[3]))
    assert.are.equal("number", type(row[4]))
    assert.is_nil(row[1])
    assert.is_truthy(out:find('[\n%s]*null,[\n%s]*4096,'), out)
  end)

  it("scripts/bench --tables plan compares the default path with the best forced one per pair and size", function()
    local out, code = h.run(h.xferlua() .. " scripts/bench.lua --tables plan --plan-sizes 4K,8K --json")
    assert.are.equal(0, code, out)
    local doc = decode(out)
    local t = doc.tables[1]
    assert.are.same({ "pair", "size", "default", "us", "best forced", "us", "default / best" }, t.header)
    local n = #xfer.devices()
    assert.are.equal(2 * n * n, #t.rows)
    for _, row in ipairs(t.rows) do
      assert.are.equal("number", type(row[7]), tostring(row[7])) -- a ratio, not a failure
    end
  end)
end)

describe("scripts/bench's arguments", function()
  it("--help tells every option and every table, from the declarations that parse them", function()
    local out, code = h.run(h.xferlua() .. " scripts/bench.lua --help")
    assert.are.equal(0, code, out)
    assert.matches("^Usage: scripts/bench ", out)
    for _, flag in ipairs({ "--sizes LIST", "--tables LIST", "--json [FILE]", "--batch-buffer SIZE",
                            "--file-size SIZE", "--file-dir DIR", "--deadline-runs N", "--remote URL",
                            "--verify-devices LIST", "--cancel-devices LIST" }) do
      assert.is_truthy(out:find(flag, 1, true), flag)
    end
    for _, name in ipairs({ "host", "pairs", "staged", "to", "strided", "batch", "files", "plan", "remote",
                            "deadline", "guard", "selftest" }) do
      assert.is_truthy(out:find("\n  " .. name .. " ", 1, true), name)
    end
    assert.is_truthy(out:find("(default: 4K,1M,64M,1G)", 1, true), out)
  end)

  it("refuses an unknown table, an unknown flag, a flag without its value and a bad value, saying which", function()
    for _, case in ipairs({
      { "--tables host,nope", "bench: unknown table 'nope' (tables: host,pairs,staged,to,strided,batch,python,files,plan,remote,deadline,guard,selftest)" },
      { "--frobnicate", "bench: unknown option '--frobnicate'" },
      { "--tabels host", "bench: unknown option '--tabels'\nDid you mean '--tables'?" },
      { "--sizes", "bench: option '--sizes' requires an argument" },
      { "--pair-size --tables host", "bench: option '--pair-size' requires an argument" },
      { "--sizes 4K,4Q", "bench: bad size '4Q' (a whole number with K, M or G: 4K, 256M, 1G)" },
      { "--remote-depths 1,0", "bench: bad count '0' (whole numbers >= 1)" },
      { "--deadline-runs 2.5", "bench: --deadline-runs takes a whole number >= 1" },
      -- (a table's own options, known once the devices are: said the same way)
      { "--tables guard --guard nope", "bench: --guard: no part 'nope' (sums, verify, cancel)" },
      { "--tables guard --guard verify --cancels 0 --verify-devices host,nope", "bench: --verify-devices: no device 'nope'" },
    }) do
      local out, code = h.run(h.xferlua() .. " scripts/bench.lua " .. case[1])
      assert.are.equal(2, code, out)
      assert.is_truthy(out:find(case[2], 1, true), out)
      assert.is_truthy(out:find("(scripts/bench --help lists the options)", 1, true), out)
      assert.is_falsy(out:find("traceback", 1, true), out)
    end
  end)
end)

describe("scripts/bench's files", function()
  it("--json FILE writes the document beside the printed tables, and --svg DIR draws well-formed plots", function()
    local dir = os.tmpname() .. "-bench"
    assert.is_true(os.execute("mkdir -p '" .. dir .. "'") == 0)
    local out, code = h.run(("%s scripts/bench.lua --tables host,pairs --sizes 4K,64K --pair-size 64K " ..
                             "--json '%s/figures.json' --svg '%s/plots/h'"):format(h.xferlua(), dir, dir)) -- made
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("figures written to " .. dir .. "/figures.json", 1, true), out)
    local doc = decode(assert(io.open(dir .. "/figures.json")):read("*a"))
    assert.are.equal(xfer.config().staging_chunk, doc.settings.staging_chunk)
    assert.is_true(#doc.tables >= 2)
    for _, plot in ipairs({ "bandwidth.svg", "pairs.svg" }) do
      local text = assert(io.open(dir .. "/plots/h/" .. plot)):read("*a")
      assert.is_truthy(text:match("^<svg xmlns=\"http://www.w3.org/2000/svg\""), plot)
      local _, parsed = h.run(("/usr/bin/python3 -c 'import xml.dom.minidom; xml.dom.minidom.parse(\"%s/plots/h/%s\")'"):format(dir, plot))
      assert.are.equal(0, parsed, plot .. " is not well-formed XML")
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("scripts/bench-ab", function()
  it("prints each row's figures as the medians of the runs, the base's beside this tree's", function()
    local dir = os.tmpname() .. "-ab"
    assert.is_true(os.execute("mkdir -p '" .. dir .. "'") == 0)
    -- three runs each: a label, a size in bytes, a rate, a cost and a count (not a figure)
    local rates = { base = { 10, 30, 20 }, this = { 41, 40, 90 } }
    local costs = { base = { "+12%", "+8%", "+9%" }, this = { "-3%", "+5%", "+1%" } }
    for side, list in pairs(rates) do
      for r = 1, 3 do
        local doc = { tables = { { header = { "verify", "size", "GB/s", "cost", "canceled" },
                                   rows = { { "host -> cuda:0", 256 * 2 ^ 20, list[r], costs[side][r], "20/20" } } } } }
        local f = assert(io.open(("%s/%s-%d.json"):format(dir, side, r), "w"))
        f:write(xfer.json(doc))
        f:close()
      end
    end
    local out, code = h.run(("%s scripts/bench_ab.lua 3 '%s'"):format(h.xferlua(), dir))
    os.execute("rm -rf '" .. dir .. "'")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("medians of 3 runs each, base then this tree", 1, true), out)
    assert.is_truthy(out:find("host -> cuda:0  256 MiB", 1, true), out)
    assert.is_truthy(out:find("GB/s 20 | 41", 1, true), out)
    assert.is_truthy(out:find("cost +9% | +1%", 1, true), out)
    assert.is_falsy(out:find("canceled", 1, true), out)
  end)

  it("says what it needs when it is not told the base, and what --runs takes", function()
    local out, code = h.run("scripts/bench-ab -- --tables host")
    assert.are.equal(2, code, out)
    assert.is_truthy(out:find("name the base: --base REV or --base-tree DIR", 1, true), out)
    out, code = h.run("scripts/bench-ab --runs 0 --base HEAD")
    assert.are.equal(2, code, out)
    assert.is_truthy(out:find("--runs wants a count of 1 or more, not '0'", 1, true), out)
    out, code = h.run("scripts/bench-ab --help")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("^scripts/bench%-ab %[%-%-runs N%]"), out)
  end)
end)
