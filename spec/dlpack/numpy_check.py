"""DLPack against a real consumer and producer: NumPy (Debian's python3-numpy), through
xferlua's C API loaded with ctypes. Usage: python3 numpy_check.py path/to/libxfer.so
Prints one line per check ("ok: ..."); exits non-zero on the first failure."""
import ctypes
import sys

import numpy

sys.path.insert(0, __import__("os").path.dirname(__file__))
from xferlib import ERR, Shape, api as pythonapi, check, load  # noqa: E402

lib = load(sys.argv[1])


def ok(what):
    print("ok: " + what)


ctx = ctypes.c_void_p()
check(lib.xfer_ctx_open(ctypes.byref(ctx), ERR), "xfer_ctx_open")
host = ctypes.c_void_p()
check(lib.xfer_device_find(ctx, b"host", ctypes.byref(host), ERR), "xfer_device_find")
f32 = ctypes.c_int()
check(lib.xfer_dtype_parse(b"f32", ctypes.byref(f32)), "xfer_dtype_parse")

# -- xferlua produces, NumPy consumes (the unversioned DLManagedTensor: NumPy 1.24's) --------
values = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
shape = Shape(2, (ctypes.c_int64 * 8)(2, 3))
t = ctypes.c_void_p()
check(lib.xfer_tensor_from_bytes(host, f32, ctypes.byref(shape), values.ctypes.data, values.nbytes,
                                 ctypes.byref(t), ERR), "xfer_tensor_from_bytes")
address = lib.xfer_tensor_host_data(t)


class Producer:
    def __init__(self, versioned):
        self.versioned = versioned

    def __dlpack__(self, stream=None):
        managed = ctypes.c_void_p()
        check(lib.xfer_tensor_to_dlpack(t, 0, ctypes.byref(managed), ERR), "xfer_tensor_to_dlpack")
        return pythonapi.PyCapsule_New(managed, b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


array = numpy.from_dlpack(Producer(False))
assert array.shape == (2, 3) and array.dtype == numpy.float32, (array.shape, array.dtype)
assert (array == values).all(), array
assert array.ctypes.data == address, "NumPy copied the tensor"
ok("numpy.from_dlpack reads an xferlua tensor in place (same address, f32[2,3])")
new = (ctypes.c_float * 6)(6, 5, 4, 3, 2, 42)
check(lib.xfer_tensor_write(t, new, 24, ERR), "xfer_tensor_write")
assert array[1, 2] == 42.0 and array[0, 0] == 6.0, array
ok("a write to the tensor shows in the NumPy array (NumPy 1.24 keeps DLPack arrays read-only)")
del array  # NumPy calls the deleter: xferlua's reference goes

# -- NumPy produces, xferlua consumes: a strided f64 view --------------------------------
base = numpy.arange(12, dtype=numpy.float64).reshape(3, 4)
view = base[:, ::2]  # strides (4, 2) in elements
refs_before = sys.getrefcount(view)
capsule = view.__dlpack__()
managed = pythonapi.PyCapsule_GetPointer(capsule, b"dltensor")
u = ctypes.c_void_p()
check(lib.xfer_tensor_from_dlpack(ctx, managed, 0, ctypes.byref(u), ERR), "xfer_tensor_from_dlpack")
pythonapi.PyCapsule_SetName(capsule, b"used_dltensor")  # consumed: NumPy's capsule must not delete it
del capsule
got = (ctypes.c_double * 6)()
check(lib.xfer_tensor_read(u, got, 48, ERR), "xfer_tensor_read of the NumPy view")
assert list(got) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0], list(got)
ok("xferlua reads a strided NumPy view through DLPack (f64[3,2], strides 4,2)")
base[0, 0] = -1.0
check(lib.xfer_tensor_read(u, got, 48, ERR), "xfer_tensor_read again")
assert got[0] == -1.0, "xferlua copied the NumPy array"
ok("no copy: a NumPy write shows in the xferlua tensor")
assert sys.getrefcount(view) > refs_before, "the deleter ran too early"
lib.xfer_tensor_release(u)
assert sys.getrefcount(view) == refs_before, (sys.getrefcount(view), refs_before)
ok("releasing the xferlua tensor calls NumPy's deleter once (the array's references are back)")
lib.xfer_tensor_release(t)
print("dlpack numpy: all checks passed")
