-- The Python package (src/python/xferlua: a C extension on CPython's stable ABI over libxfer.so,
-- NumPy and PyTorch through DLPack) as a Python user meets it: imported from the source tree by
-- the system python (the extension of this build), installed into fresh venvs offline by
-- `pip install .` (which builds it with CMake) and from the wheel scripts/wheel makes.
local h = require "support.helpers"

-- a python with NumPy: the one on PATH (the GPU machine's has PyTorch, CuPy and JAX too), else
-- the system's (Debian's python3-numpy)
local PYTHON = "/usr/bin/python3"
for _, p in ipairs({ "python3", "/usr/bin/python3" }) do
  if select(2, h.run(p .. " -c 'import numpy'")) == 0 then PYTHON = p break end
end

-- the build's directory, absolute (the venv's python runs from elsewhere)
local function build_dir()
  local dir = h.xferlua():match("^(.*)/[^/]+$") or "."
  if dir:sub(1, 1) ~= "/" then dir = io.popen("pwd"):read("*l") .. "/" .. dir end
  return dir
end

local function root() return io.popen("pwd"):read("*l") end

-- A sanitizer build's libraries need the sanitizers' runtimes loaded before Python: preloaded,
-- with Python's own allocations not counted as leaks (the interpreter keeps them for good).
local function sanitizer_env()
  if not h.sanitized() then return "" end
  local asan = h.run("gcc -print-file-name=libasan.so"):gsub("%s+$", "")
  local ubsan = h.run("gcc -print-file-name=libubsan.so"):gsub("%s+$", "")
  return ("LD_PRELOAD='%s %s' ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0 "):format(asan, ubsan)
end

-- why the package cannot be tried here, or nil
local function unusable()
  local out, code = h.run(PYTHON .. " -c 'import numpy; print(numpy.__version__)'")
  if code ~= 0 then return "no NumPy for " .. PYTHON .. ": " .. out end
  local f = io.open(os.getenv("XFERLUA_EXTENSION") or (build_dir() .. "/python/_xferlua.abi3.so"))
  if not f then return "the extension is not built (python3-dev not installed when cmake ran)" end
  f:close()
end

-- why PYTHON cannot build the package (pip install ., scripts/wheel), or nil
local function cannot_build()
  local out, code = h.run(PYTHON .. " -c 'import os, sysconfig, setuptools, wheel; " ..
                          "h = os.path.join(sysconfig.get_paths()[\"include\"], \"Python.h\"); " ..
                          "print(h); raise SystemExit(0 if os.path.exists(h) else 1)'")
  if code ~= 0 then
    return PYTHON .. " cannot build the extension (python3-dev, python3-setuptools, python3-wheel): " .. out
  end
end

-- a fresh venv (the system's packages visible: NumPy, setuptools, wheel), or nil and why not.
-- Where PYTHON is itself a venv's (the GPU machine's, /opt/torch/.venv), a venv made from it sees
-- the base interpreter's packages, not that venv's: a .pth file in the new one names PYTHON's.
local function venv()
  local dir = os.tmpname() .. "-venv"
  local out, code = h.run(("%s -m venv --system-site-packages %s"):format(PYTHON, dir))
  if code == 0 then
    -- (in parentheses: h.run sends the command's output to a file of its own)
    out, code = h.run(("(%s -c 'import site; print(chr(10).join(site.getsitepackages()))' > " ..
                       "\"$(%s/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')" ..
                       "/_parent_packages.pth\")"):format(PYTHON, dir))
  end
  if code ~= 0 then
    os.execute("rm -rf " .. dir)
    return nil, out
  end
  return dir
end

-- the checks, run by the venv's python from /tmp: its installed package, no source tree
local function run_checks_in(dir)
  local out, code = h.run(("cd /tmp && %s/bin/python -c 'import xferlua; print(xferlua.__file__, xferlua.library_path)'")
                          :format(dir))
  assert.are.equal(0, code, out)
  assert.is_truthy(out:find(dir, 1, true), out) -- the venv's package, and the library beside it
  assert.is_truthy(out:find("/site-packages/xferlua/libxfer.so", 1, true), out)
  out, code = h.run(("cd /tmp && %s/bin/python -m xferlua --devices"):format(dir))
  assert.are.equal(0, code, out)
  assert.is_truthy(out:find("host     available", 1, true), out)
  for _, check in ipairs({ "xferlua_check.py", "api_check.py" }) do
    out, code = h.run(("cd /tmp && %s/bin/python %s/spec/python/%s"):format(dir, root(), check))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("all checks passed", 1, true), out)
  end
end

-- A fresh venv, `install` run (VENV in it: the venv's folder), then the checks by its python:
-- true; false and why where no venv can be made (the venv removed either way).
local function install_and_check(install)
  local dir, err = venv()
  if not dir then return false, "python3-venv is not installed: " .. err end
  local out, code = h.run((install:gsub("VENV", dir)))
  local ok, failure = code == 0, out
  if ok then ok, failure = pcall(run_checks_in, dir) end
  os.execute("rm -rf " .. dir)
  assert(ok, failure)
  return true
end

describe("the Python package", function()
  local function lib() return build_dir() .. "/libxfer.so.0" end

  it("works from the source tree with the system python: NumPy in and out, every device, errors", function()
    local why = unusable()
    if why then return pending(why) end
    local out, code = h.run(("%sXFERLUA_LIBRARY=%s PYTHONPATH=src/python %s spec/python/xferlua_check.py")
                            :format(sanitizer_env(), lib(), PYTHON))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("xferlua python: all checks passed", 1, true), out)
    assert.is_truthy(out:find("ok: moves to every device and back hold the values", 1, true), out)
  end)

  it("offers the whole API: jobs, batches from NumPy tables, files, errors per code, faults, 8 threads", function()
    local why = unusable()
    if why then return pending(why) end
    local out, code = h.run(("%sXFERLUA_LIBRARY=%s PYTHONPATH=src/python %s spec/python/api_check.py")
                            :format(sanitizer_env(), lib(), PYTHON))
    assert.are.equal(0, code, out)
    for _, line in ipairs({ "ok: to_async: wait() gives the tensor", "ok: batches: copy_blocks",
                            "ok: files: save with metadata", "a corrupt read raises Corrupt naming file and tensor",
                            "ok: 8 threads moving and batching at once on one context",
                            "xferlua python api: all checks passed" }) do
      assert.is_truthy(out:find(line, 1, true), out)
    end
  end)

  it("runs examples/kv_offload.py: a paged KV cache offloaded and loaded back layer by layer", function()
    local why = unusable()
    if why then return pending(why) end
    for _, flags in ipairs({ "--verify", "" }) do
      local out, code = h.run(("%sXFERLUA_LIBRARY=%s PYTHONPATH=src/python %s examples/kv_offload.py --layers 4 " ..
                               "--blocks 64 --request 32 --block-kib 16 --rounds 2 %s")
                              :format(sanitizer_env(), lib(), PYTHON, flags))
      assert.are.equal(0, code, out)
      assert.is_truthy(out:find("kv_offload: offload [%d.]+ GB/s, load [%d.]+ GB/s"), out)
      assert.is_truthy(out:find("every layer's blocks came back bit-exact", 1, true), out)
      assert.is_truthy(out:find("nothing written after cancel returned", 1, true), out)
    end
  end)

  it("loads a transformers checkpoint (sharded, with its index) into a model on the meta device: the same logits", function()
    local why = unusable() or (h.sanitized() and "a sanitizer build: PyTorch is not run under the sanitizers' runtimes")
    if why then return pending(why) end
    local python = nil -- a python with torch and transformers: the one on PATH (the GPU machine's)
    for _, p in ipairs({ "python3", PYTHON }) do
      if select(2, h.run(p .. " -c 'import torch, transformers'")) == 0 then python = p break end
    end
    if not python then return pending("no python here has torch and transformers (the GPU machine's has)") end
    local out, code = h.run(("XFERLUA_LIBRARY=%s PYTHONPATH=src/python %s examples/hf_checkpoint.py --hidden 256 " ..
                             "--layers 2 --shard 10MB --rounds 1"):format(lib(), python))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("same logits as from_pretrained", 1, true), out)
    assert.is_truthy(out:find("in %d+ shards with an index"), out)
  end)

  it("installs into a fresh venv offline with `pip install .`, building libxfer and the extension", function()
    local why = unusable() or cannot_build() or
                (h.sanitized() and "a sanitizer build: pip builds a build of its own (the release run installs it)")
    if why then return pending(why) end
    -- from a copy of the tree: setuptools builds in the project's build/ otherwise
    local tree = os.tmpname() .. "-tree"
    local ok, why_not = install_and_check(("mkdir -p %s && tar -c --exclude='./build*' --exclude=./.git " ..
                                           "--exclude=./.gpu . | tar -x -C %s && cd %s && VENV/bin/pip install " ..
                                           "--quiet --no-index --no-build-isolation ."):format(tree, tree, tree))
    os.execute("rm -rf " .. tree)
    if not ok then return pending(why_not) end
  end)

  it("installs from the wheel scripts/wheel builds (cp310-abi3) into a fresh venv offline", function()
    local why = unusable() or cannot_build() or
                (h.sanitized() and "a sanitizer build: scripts/wheel builds a build of its own (the release run makes it)")
    if why then return pending(why) end
    local out_dir = os.tmpname() .. "-wheel"
    local out, code = h.run(("XFER_PYTHON=%s scripts/wheel %s"):format(PYTHON, out_dir))
    assert.are.equal(0, code, out)
    local wheel = out:match("(%S+%-cp310%-abi3%-linux_x86_64%.whl)%s*$")
    assert.is_truthy(wheel, out)
    local ok, why_not = install_and_check("VENV/bin/pip install --quiet --no-index " .. wheel)
    os.execute("rm -rf " .. out_dir)
    if not ok then return pending(why_not) end
  end)

  it("says where it looked when it cannot find libxfer.so", function()
    local out, code = h.run(("%sXFERLUA_LIBRARY=/nonexistent/libxfer.so.0 PYTHONPATH=src/python %s -c 'import xferlua'")
                            :format(sanitizer_env(), PYTHON))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:find("xferlua: cannot load libxfer.so (set XFERLUA_LIBRARY to its path); tried: " ..
                              "/nonexistent/libxfer.so.0 (no such file)", 1, true), out)
  end)
end)
