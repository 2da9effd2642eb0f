"""Builds the Python package's binary parts with CMake (the project's one build definition):
libxfer.so.0, xferlua's C API, and the extension _xferlua.abi3.so (CPython's stable ABI, 3.10
and later), both copied into the package. XFERLUA_BUILD=folder: a CMake build made already
(its libxfer.so.0 and python/_xferlua.abi3.so) is taken instead of building."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        built = os.environ.get("XFERLUA_BUILD")
        if not built:
            built = os.path.join(os.path.abspath(self.build_temp), "cmake")
            subprocess.check_call(["cmake", "-S", ROOT, "-B", built, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DXFER_BUILD_TESTS=OFF", "-DPython3_EXECUTABLE=" + sys.executable])
            subprocess.check_call(["cmake", "--build", built, "--target", "xfer", "xfer_python",
                                   "-j", str(os.cpu_count() or 2)])
        extension = os.path.join(built, "python", "_xferlua.abi3.so")
        library = os.path.join(built, "libxfer.so.0")
        for f in (extension, library):
            if not os.path.exists(f):
                sys.exit("setup.py: %s is missing (is python3-dev installed? CMake builds the "
                         "extension only where Python's headers are)" % f)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(extension, target)
        # the real file under its soname: the extension needs it by that name
        shutil.copyfile(os.path.realpath(library), os.path.join(os.path.dirname(target), "libxfer.so.0"))


setup(ext_modules=[Extension("xferlua._xferlua", sources=[], py_limited_api=True)],
      cmdclass={"build_ext": CMakeBuild},
      options={"bdist_wheel": {"py_limited_api": "cp310"}})
