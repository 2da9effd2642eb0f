"""Finding libxfer.so.0 (xferlua's C API) and the extension built over it, wherever xferlua was
built or installed: $XFERLUA_LIBRARY, beside the package (pip install), the build tree the
package sits in (src/python of a checkout: build/), or where the dynamic linker looks."""
import ctypes
import ctypes.util
import os

_here = os.path.dirname(os.path.abspath(__file__))
_tree_build = os.path.join(_here, "..", "..", "..", "build")


def named():
    return os.environ.get("XFERLUA_LIBRARY")


def _candidates():
    named = os.environ.get("XFERLUA_LIBRARY")
    if named:
        return [named]
    found = [os.path.join(_here, "libxfer.so.0"), os.path.join(_tree_build, "libxfer.so.0")]
    return found + [ctypes.util.find_library("xfer") or "libxfer.so.0"]


def load():
    """Loads libxfer.so.0 for the process (RTLD_GLOBAL: the extension, which needs it by that
    name, then finds it loaded) and returns its path, or the places it looked (a list) when it
    found none there: the extension may still find it by its own run path (an installed tree)."""
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        return os.path.abspath(path) if os.sep in path else path
    return tried


def loaded_path(found):
    """Where libxfer.so.0 was loaded from: `found`, or the process's map of it."""
    if isinstance(found, str) and os.sep in found:
        return found
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/libxfer.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return "libxfer.so.0"


def not_found(tried, error):
    return ImportError("xferlua: cannot load libxfer.so (set XFERLUA_LIBRARY to its path); tried: " +
                       "; ".join(tried) + "; the extension's own run path: %s" % error)


def find_extension(path):
    """Adds the folder of the extension (_xferlua.abi3.so) to the package's __path__ where it is
    not beside this file: $XFERLUA_EXTENSION's folder, or build/python of the tree."""
    if any(f.startswith("_xferlua.") and f.endswith(".so") for f in os.listdir(_here)):
        return
    named = os.environ.get("XFERLUA_EXTENSION")
    folder = os.path.dirname(os.path.abspath(named)) if named else os.path.join(_tree_build, "python")
    if not os.path.isdir(folder) or not any(f.startswith("_xferlua.") for f in os.listdir(folder)):
        raise ImportError("xferlua: the extension _xferlua.abi3.so is not built (looked in %s and %s; "
                          "cmake builds it where python3-dev is installed, `pip install .` too)"
                          % (_here, folder))
    path.append(folder)
