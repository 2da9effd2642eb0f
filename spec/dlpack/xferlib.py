"""The C API of libxfer.so through ctypes, for the DLPack checks: the functions they call,
PyCapsule access, and the xfer_shape struct."""
import ctypes
import sys

V = ctypes.c_void_p
ERR = ctypes.create_string_buffer(8192)  # an xfer_error, larger than it is

api = ctypes.pythonapi
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [V, ctypes.c_char_p, V]
api.PyCapsule_GetPointer.restype = V
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetName.restype = ctypes.c_char_p
api.PyCapsule_GetName.argtypes = [ctypes.py_object]


class Shape(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int), ("dims", ctypes.c_int64 * 8)]


def load(path):
    lib = ctypes.CDLL(path)
    for name, args in {"xfer_ctx_open": [V, V], "xfer_device_find": [V, ctypes.c_char_p, V, V],
                       "xfer_tensor_from_bytes": [V, ctypes.c_int, V, V, ctypes.c_size_t, V, V],
                       "xfer_tensor_to_dlpack": [V, ctypes.c_int, V, V],
                       "xfer_tensor_from_dlpack": [V, V, ctypes.c_int, V, V],
                       "xfer_tensor_read": [V, V, ctypes.c_size_t, V],
                       "xfer_tensor_write": [V, V, ctypes.c_size_t, V],
                       "xfer_dtype_parse": [ctypes.c_char_p, V]}.items():
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = args
    lib.xfer_tensor_release.argtypes = [V]
    lib.xfer_tensor_host_data.restype = V
    lib.xfer_tensor_host_data.argtypes = [V]
    return lib


def check(rc, what):
    if rc != 0:
        sys.exit("FAILED: %s: xfer code %d" % (what, rc))
