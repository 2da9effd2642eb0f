-- The documentation tells the truth where a machine can check it: the README's example runs,
-- and every relative link of README.md and docs/*.md reaches a file and, with #anchor, a
-- heading of that file.
local h = require "support.helpers"

local function read(path)
  local f = assert(io.open(path))
  local text = f:read("*a")
  f:close()
  return text
end

-- GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -
local function anchor(heading)
  return (heading:lower():gsub("[^%w%- _]", ""):gsub(" ", "-"))
end

local function anchors_of(text)
  local set, fenced = {}, false
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:match("^```") then fenced = not fenced end
    local heading = not fenced and line:match("^#+%s+(.-)%s*$")
    if heading then set[anchor(heading)] = true end
  end
  return set
end

local function docs()
  local list = { "README.md" }
  local p = io.popen("ls docs/*.md")
  for path in p:lines() do list[#list + 1] = path end
  p:close()
  return list
end

describe("the documentation", function()
  -- the README's code block after `marker`, run by the shipped interpreter: its output
  local function run_readme_block(marker)
    local code = read("README.md"):match(marker .. ".-```lua\n(.-)```")
    assert.is_truthy(code, "README.md has a block after " .. marker)
    local path = os.tmpname() .. ".lua"
    local f = assert(io.open(path, "w"))
    f:write(code)
    f:close()
    local out, status = h.run(h.xferlua() .. " " .. path)
    os.remove(path)
    assert.are.equal(0, status, out)
    return out
  end

  it("README's example runs as written", function()
    local out = run_readme_block("## An example\n")
    assert.is_truthy(out:find("attempt to use a freed tensor", 1, true), out)
  end)

  -- docs/embedding.md's C program: compiled as written against this build, run, and run
  -- under valgrind with no block of its own lost (the drivers' dlopen keeps a few of ld.so's)
  it("docs/embedding.md's C program builds, runs and releases what it makes", function()
    local code = read("docs/embedding.md"):match("```c\n(.-)```")
    assert.is_truthy(code, "docs/embedding.md has a C block")
    local build = h.xferlua():match("^(.*)/[^/]+$") or "."
    if h.sanitized() then return pending("a sanitizer build: its library needs the sanitizer's runtime") end
    local src, exe = os.tmpname() .. ".c", os.tmpname()
    local f = assert(io.open(src, "w"))
    f:write(code)
    f:close()
    local out, status = h.run(("cc -std=c11 -Wall -Wextra -Werror -I%s/include %s -L%s -lxfer -Wl,-rpath,%s -o %s")
                              :format(build, src, build, build, exe))
    assert.are.equal(0, status, out)
    out, status = h.run(exe)
    assert.are.equal(0, status, out)
    local _, has = h.run("command -v valgrind")
    if has ~= 0 then
      os.remove(src); os.remove(exe)
      return pending("valgrind is not installed (scripts/valgrind installs it): the leak check did not run")
    end
    out, status = h.run("valgrind --leak-check=full --show-leak-kinds=definite --num-callers=30 " .. exe)
    os.remove(src); os.remove(exe)
    assert.are.equal(0, status, out)
    -- a definitely lost block with a frame in the program or in xferlua's library
    -- ours: the first frame past the allocator is in the program, in libxfer, or in one of
    -- xferlua's source files (ld.so's own blocks, made while a driver is opened, are not)
    local sources = {}
    local p = io.popen("find src -name '*.c' -printf '%f\\n'")
    for name in p:lines() do sources[name] = true end
    p:close()
    for block in (out .. "\n==0== \n"):gmatch("definitely lost in loss record.-\n==%d+== \n") do
      for frame in block:gmatch("by 0x%x+: ([^\n]+)") do
        if not frame:match("^m?c?re?alloc ") and not frame:match("^strn?dup ") then
          local file = frame:match("%(([%w_]+%.c):%d+%)")
          local ours = frame:find(exe:match("[^/]+$"), 1, true) or frame:find("libxfer", 1, true) or
                       (file and sources[file])
          assert.is_falsy(ours, block)
          break
        end
      end
    end
    assert.is_truthy(out:find("ERROR SUMMARY", 1, true), out)
  end)

  it("README's file example runs as written", function()
    local out = run_readme_block("Files are endpoints too")
    os.remove("/tmp/model.safetensors")
    assert.matches("1%s+bf16", out)
  end)

  it("every relative link reaches a file, and every #anchor a heading there", function()
    local checked = 0
    for _, doc in ipairs(docs()) do
      local dir = doc:match("^(.*)/[^/]*$") or "."
      local text = read(doc)
      for target in text:gmatch("%]%(([^)%s]+)%)") do
        if not target:match("^%a+://") and not target:match("^mailto:") then
          local file, frag = target:match("^([^#]*)#?(.*)$")
          local path = file == "" and doc or (dir .. "/" .. file)
          local fh = io.open(path)
          assert.is_truthy(fh, doc .. ": link to " .. target .. " (no " .. path .. ")")
          fh:close()
          if frag ~= "" then
            assert.is_truthy(anchors_of(read(path))[frag], doc .. ": link to " .. target .. " (no heading #" .. frag .. ")")
          end
          checked = checked + 1
        end
      end
    end
    assert.is_true(checked > 20, "links checked: " .. checked)
  end)

  it("links every page of docs/ from the README", function()
    local readme = read("README.md")
    for _, doc in ipairs(docs()) do
      if doc ~= "README.md" then
        assert.is_truthy(readme:find("](" .. doc .. ")", 1, true), "README.md does not link " .. doc)
      end
    end
  end)
end)
