-- The Python module (src/python/xferlua.py: ctypes over libxfer.so, NumPy and PyTorch through
-- DLPack) as a Python user meets it: imported from the source tree by the system python, and
-- pip-installed into a venv (offline: --no-index, the system's setuptools).
local h = require "support.helpers"

local PYTHON = "/usr/bin/python3"

-- the build's directory, absolute (the venv's python runs from elsewhere)
local function build_dir()
  local dir = h.xferlua():match("^(.*)/[^/]+$") or "."
  if dir:sub(1, 1) ~= "/" then dir = io.popen("pwd"):read("*l") .. "/" .. dir end
  return dir
end

-- whether `python` has NumPy, and why not
local function numpy_in(python)
  local out, code = h.run(python .. " -c 'import numpy; print(numpy.__version__)'")
  return code == 0, out
end

describe("the Python module", function()
  local function lib() return build_dir() .. "/libxfer.so.0" end

  it("works from the source tree with the system python: NumPy in and out, every device, errors", function()
    if h.sanitized() then return pending("a sanitizer build: Python cannot load its library") end
    local has, why = numpy_in(PYTHON)
    if not has then return pending("no NumPy for " .. PYTHON .. ": " .. why) end
    local out, code = h.run(("XFERLUA_LIBRARY=%s PYTHONPATH=src/python %s spec/python/xferlua_check.py")
                            :format(lib(), PYTHON))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("xferlua python: all checks passed", 1, true), out)
    assert.is_truthy(out:find("ok: moves to every device and back", 1, true), out)
  end)

  it("installs into a venv with pip and works there", function()
    if h.sanitized() then return pending("a sanitizer build: Python cannot load its library") end
    local has, why = numpy_in(PYTHON)
    if not has then return pending("no NumPy for " .. PYTHON .. ": " .. why) end
    local venv = os.tmpname() .. "-venv"
    local out, code = h.run(("%s -m venv --system-site-packages %s && %s/bin/pip install --quiet --no-index " ..
                             "--no-build-isolation src/python"):format(PYTHON, venv, venv))
    if code ~= 0 and out:find("ensurepip", 1, true) then
      os.execute("rm -rf " .. venv)
      return pending("python3-venv is not installed: " .. out)
    end
    assert.are.equal(0, code, out)
    -- the venv's module, not the source tree's: run from elsewhere
    out, code = h.run(("cd /tmp && XFERLUA_LIBRARY=%s %s/bin/python -c 'import xferlua; print(xferlua.__file__)'")
                      :format(lib(), venv))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find(venv, 1, true), out)
    local check = io.popen("pwd"):read("*l") .. "/spec/python/xferlua_check.py"
    out, code = h.run(("cd /tmp && XFERLUA_LIBRARY=%s %s/bin/python %s"):format(lib(), venv, check))
    os.execute("rm -rf " .. venv)
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("xferlua python: all checks passed", 1, true), out)
  end)

  it("says where it looked when it cannot find libxfer.so", function()
    local out, code = h.run(("XFERLUA_LIBRARY=/nonexistent/libxfer.so.0 PYTHONPATH=src/python %s -c 'import xferlua'")
                            :format(PYTHON))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:find("xferlua: cannot load libxfer.so (set XFERLUA_LIBRARY to its path); tried: " ..
                              "/nonexistent/libxfer.so.0 (no such file)", 1, true), out)
  end)
end)
