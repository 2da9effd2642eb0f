"""xferlua for Python: xferlua's tensors beside NumPy and PyTorch, through DLPack, no copy.

    import numpy, xferlua
    t = xferlua.from_numpy(numpy.arange(6, dtype=numpy.float32).reshape(2, 3))  # shares its memory
    g = t.to("cuda:0")                      # any device xferlua sees: cuda:0, vulkan:0, opencl:0
    back = xferlua.to_numpy(g.to("host"))   # a NumPy array over the host tensor's memory
    tt = xferlua.to_torch(g)                # a torch tensor over the CUDA memory (no copy)
    u = xferlua.from_torch(tt)              # and back

A failed call raises xferlua.Error with the fields xferlua's errors carry (code, op, from_,
to, native, native_name, message). The module is ctypes over libxfer.so (the core's C API,
include/xfer.h): it finds it in $XFERLUA_LIBRARY, beside this file, in the build tree it
sits in, or where the dynamic linker looks (an installed libxfer.so.0). NumPy and PyTorch
are imported only by the calls that need them.
"""
import ctypes
import ctypes.util
import os

__all__ = ["Error", "Tensor", "devices", "tensor", "from_numpy", "to_numpy", "from_torch", "to_torch",
           "library_path"]

_V = ctypes.c_void_p


class _Err(ctypes.Structure):
    """struct xfer_error, field for field (include/xfer.h)."""
    _fields_ = [("code", ctypes.c_int), ("op", ctypes.c_char * 16), ("op_id", ctypes.c_int),
                ("from_", ctypes.c_char * 32), ("to", ctypes.c_char * 32), ("device", ctypes.c_char * 32),
                ("native", ctypes.c_longlong), ("native_name", ctypes.c_char * 48),
                ("retryable", ctypes.c_int), ("injected", ctypes.c_int), ("element", ctypes.c_longlong),
                ("file", ctypes.c_char * 256), ("tensor", ctypes.c_char * 128), ("offset", ctypes.c_longlong),
                ("message", ctypes.c_char * 512)]


class _Shape(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int), ("dims", ctypes.c_int64 * 8)]


class _DeviceInfo(ctypes.Structure):
    """The head of struct xfer_device_info: the fields read here (name, runtime, index)."""
    _fields_ = [("name", ctypes.c_char_p), ("runtime", ctypes.c_char_p), ("index", ctypes.c_int),
                ("_rest", ctypes.c_char * 512)]


class Error(Exception):
    """A failed xferlua call: code ("read", "unavailable", ...), op, from_, to, device, native,
    native_name, retryable and message, as the Lua error has them."""

    def __init__(self, err, code_name):
        self.code = code_name
        self.op = err.op.decode(errors="replace")
        self.from_ = err.from_.decode(errors="replace")
        self.to = err.to.decode(errors="replace")
        self.device = err.device.decode(errors="replace")
        self.native = err.native
        self.native_name = err.native_name.decode(errors="replace")
        self.retryable = bool(err.retryable)
        self.message = err.message.decode(errors="replace")
        super().__init__(self.message)


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    named = os.environ.get("XFERLUA_LIBRARY")
    if named:
        return [named]
    found = [os.path.join(here, "libxfer.so.0"), os.path.join(here, "libxfer.so"),
             os.path.join(here, "..", "..", "build", "libxfer.so.0")]
    system = ctypes.util.find_library("xfer")
    return found + [system or "libxfer.so.0"]


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        return lib, path
    raise ImportError("xferlua: cannot load libxfer.so (set XFERLUA_LIBRARY to its path); tried: " +
                      "; ".join(tried))


_lib, library_path = _load()


def _sig(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype, f.argtypes = restype, list(argtypes)


_ERRP = ctypes.POINTER(_Err)
_sig("xfer_ctx_open", ctypes.c_int, _V, _ERRP)
_sig("xfer_device_find", ctypes.c_int, _V, ctypes.c_char_p, _V, _ERRP)
_sig("xfer_device_count", ctypes.c_size_t, _V)
_sig("xfer_device_at", _V, _V, ctypes.c_size_t)
_sig("xfer_device_get_info", ctypes.c_int, _V, ctypes.POINTER(_DeviceInfo), _ERRP)
_sig("xfer_tensor_from_bytes", ctypes.c_int, _V, ctypes.c_int, ctypes.POINTER(_Shape), _V, ctypes.c_size_t, _V, _ERRP)
_sig("xfer_tensor_to_dlpack", ctypes.c_int, _V, ctypes.c_int, _V, _ERRP)
_sig("xfer_tensor_from_dlpack", ctypes.c_int, _V, _V, ctypes.c_int, _V, _ERRP)
_sig("xfer_tensor_dlpack_device", None, _V, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
_sig("xfer_transfer_to", ctypes.c_int, _V, _V, _V, _V, _ERRP)
_sig("xfer_tensor_release", None, _V)
_sig("xfer_tensor_free", ctypes.c_int, _V, _ERRP)
_sig("xfer_tensor_dtype", ctypes.c_int, _V)
_sig("xfer_tensor_shape", ctypes.POINTER(_Shape), _V)
_sig("xfer_tensor_device", _V, _V)
_sig("xfer_tensor_is_freed", ctypes.c_int, _V)
_sig("xfer_dtype_name", ctypes.c_char_p, ctypes.c_int)
_sig("xfer_dtype_parse", ctypes.c_int, ctypes.c_char_p, _V)
_sig("xfer_code_name", ctypes.c_char_p, ctypes.c_int)
_sig("xfer_tensor_read", ctypes.c_int, _V, _V, ctypes.c_size_t, _ERRP)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [_V, ctypes.c_char_p, _V]
_api.PyCapsule_GetPointer.restype = _V
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
# a capsule's destructor gets the capsule as a raw PyObject * (its last reference is going:
# no Python object may be made of it), so these two take raw pointers
_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, _V, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(_V, _V, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_DELETER = ctypes.PYFUNCTYPE(None, _V)


def _check(rc, err):
    if rc:
        raise Error(err, _lib.xfer_code_name(rc).decode())


_ctx = None


def _context():
    global _ctx
    if _ctx is None:
        ctx, err = _V(), _Err()
        _check(_lib.xfer_ctx_open(ctypes.byref(ctx), ctypes.byref(err)), err)
        _ctx = ctx
    return _ctx


def _device(name):
    dev, err = _V(), _Err()
    _check(_lib.xfer_device_find(_context(), name.encode(), ctypes.byref(dev), ctypes.byref(err)), err)
    return dev


def _device_name(dev):
    info, err = _DeviceInfo(), _Err()
    _check(_lib.xfer_device_get_info(dev, ctypes.byref(info), ctypes.byref(err)), err)
    return info.name.decode()


def devices():
    """The names of the devices xferlua sees here: ["host", "cuda:0", "vulkan:0", ...]."""
    ctx = _context()
    return [_device_name(_lib.xfer_device_at(ctx, i)) for i in range(_lib.xfer_device_count(ctx))]


class Tensor:
    """An xferlua tensor (its reference is let go of when this object goes, or by free())."""

    def __init__(self, handle, keep=None):
        self._t = handle
        self._keep = keep  # what must outlive it (NumPy's array behind a from_numpy, ...)

    def _live(self):
        if not self._t or _lib.xfer_tensor_is_freed(self._t):
            err = _Err()
            err.code = 0
            err.message = b"attempt to use a freed tensor"
            raise Error(err, "freed")
        return self._t

    @property
    def shape(self):
        s = _lib.xfer_tensor_shape(self._live()).contents
        return tuple(s.dims[i] for i in range(s.ndim))

    @property
    def dtype(self):
        return _lib.xfer_dtype_name(_lib.xfer_tensor_dtype(self._live())).decode()

    @property
    def device(self):
        return _device_name(_lib.xfer_tensor_device(self._live()))

    def to(self, device):
        """A new tensor on `device` (a name: "host", "cuda:0", ...), the engine's path."""
        out, err = _V(), _Err()
        _check(_lib.xfer_transfer_to(self._live(), _device(device), None, ctypes.byref(out), ctypes.byref(err)), err)
        return Tensor(out)

    def numpy(self):
        return to_numpy(self)

    def free(self):
        """Gives the device memory back now; later uses raise Error (code "freed")."""
        if self._t:
            err = _Err()
            _check(_lib.xfer_tensor_free(self._t, ctypes.byref(err)), err)

    def __del__(self):
        if getattr(self, "_t", None):
            _lib.xfer_tensor_release(self._t)
            self._t = None

    def __repr__(self):
        if not self._t or _lib.xfer_tensor_is_freed(self._t):
            return "xferlua.Tensor(freed)"
        return "xferlua.Tensor(%s%s on %s)" % (self.dtype, list(self.shape), self.device)

    # a producer of DLPack for NumPy and PyTorch (host and CUDA tensors)
    def __dlpack__(self, stream=None, max_version=None, **_):
        managed, err = _V(), _Err()
        _check(_lib.xfer_tensor_to_dlpack(self._live(), 0, ctypes.byref(managed), ctypes.byref(err)), err)
        return _api.PyCapsule_New(managed, b"dltensor", ctypes.cast(_capsule_deleter, _V))

    def __dlpack_device__(self):
        """(1, 0) kDLCPU, (2, ordinal) kDLCUDA: the core says (-1: not lent, __dlpack__ says why)."""
        kind, ordinal = ctypes.c_int(), ctypes.c_int()
        _lib.xfer_tensor_dlpack_device(self._live(), ctypes.byref(kind), ctypes.byref(ordinal))
        return (kind.value, ordinal.value)


@_DELETER
def _capsule_deleter(capsule):
    """A capsule of ours no consumer took (its name is still "dltensor"): its deleter runs."""
    if _capsule_valid(capsule, b"dltensor"):
        managed = _capsule_pointer(capsule, b"dltensor")
        # DLManagedTensor: a DLTensor (48 bytes), manager_ctx, then the deleter
        deleter = ctypes.cast(ctypes.c_void_p.from_address(managed + 56).value, ctypes.CFUNCTYPE(None, _V))
        deleter(managed)


def _take(capsule, keep):
    """A producer's DLPack capsule (versioned or not) as a Tensor, no copy; the capsule is
    marked used, so that its producer's deleter runs once: when xferlua lets go."""
    tensor, err = _V(), _Err()
    versioned = _api.PyCapsule_IsValid(capsule, b"dltensor_versioned")
    name = b"dltensor_versioned" if versioned else b"dltensor"
    managed = _api.PyCapsule_GetPointer(capsule, name)
    _check(_lib.xfer_tensor_from_dlpack(_context(), managed, 1 if versioned else 0, ctypes.byref(tensor),
                                        ctypes.byref(err)), err)
    _api.PyCapsule_SetName(capsule, b"used_dltensor_versioned" if versioned else b"used_dltensor")
    return Tensor(tensor, keep)


def tensor(values, dtype="f32"):
    """A host tensor of a flat list of numbers (a copy); dtype as xferlua names it."""
    import array
    codes = {"f32": "f", "f64": "d", "i32": "i", "i64": "q", "u8": "B", "i8": "b", "i16": "h", "u16": "H",
             "u32": "I", "u64": "Q"}
    if dtype not in codes:
        raise ValueError("xferlua.tensor: dtype one of %s, not %r" % (", ".join(sorted(codes)), dtype))
    data = array.array(codes[dtype], values)
    code, shape, out, err = ctypes.c_int(), _Shape(1), _V(), _Err()
    shape.dims[0] = len(data)
    _lib.xfer_dtype_parse(dtype.encode(), ctypes.byref(code))
    address, _ = data.buffer_info()
    _check(_lib.xfer_tensor_from_bytes(_device("host"), code, ctypes.byref(shape), address,
                                       len(data) * data.itemsize, ctypes.byref(out), ctypes.byref(err)), err)
    return Tensor(out)


def _bytes_tensor(data, dtype, shape):
    """A host tensor holding a copy of `data` (bytes-like), of xferlua's dtype and shape."""
    code, dims, out, err = ctypes.c_int(), _Shape(len(shape)), _V(), _Err()
    for i, n in enumerate(shape):
        dims.dims[i] = n
    _lib.xfer_dtype_parse(dtype.encode(), ctypes.byref(code))
    buf = (ctypes.c_char * len(data)).from_buffer_copy(data)
    _check(_lib.xfer_tensor_from_bytes(_device("host"), code, ctypes.byref(dims), buf, len(data),
                                       ctypes.byref(out), ctypes.byref(err)), err)
    return Tensor(out)


def _numpy_lends_bool():
    """NumPy takes and gives bool through DLPack from 2.0 on."""
    import numpy
    return int(numpy.__version__.split(".")[0]) >= 2


def from_numpy(array):
    """A host tensor over a NumPy array's memory (strides kept), no copy: writes on either side
    show on the other; the array stays alive while the tensor does. A bool array, which NumPy
    before 2.0 does not lend through DLPack, is copied."""
    import numpy
    if array.dtype == numpy.bool_ and not _numpy_lends_bool():
        return _bytes_tensor(numpy.ascontiguousarray(array).tobytes(), "bool", array.shape)
    try:
        capsule = array.__dlpack__(max_version=(1, 0))
    except TypeError:  # NumPy before 2: the unversioned form only
        capsule = array.__dlpack__()
    return _take(capsule, array)


def to_numpy(t):
    """A NumPy array over a host tensor's memory, no copy (a device tensor is moved to the host
    first: that array is over the copy; a bool tensor is copied where NumPy takes no DLPack bool)."""
    import numpy
    if t.device != "host":
        t = t.to("host")
    if t.dtype != "bool" or _numpy_lends_bool():
        return numpy.from_dlpack(t)
    out, err = numpy.empty(t.shape, dtype=numpy.bool_), _Err()
    _check(_lib.xfer_tensor_read(t._live(), out.ctypes.data, out.nbytes, ctypes.byref(err)), err)
    return out


def from_torch(tt):
    """A tensor over a PyTorch tensor's memory (CPU or CUDA), no copy."""
    import torch.utils.dlpack
    return _take(torch.utils.dlpack.to_dlpack(tt), tt)


def to_torch(t):
    """A PyTorch tensor over a host or CUDA tensor's memory, no copy (another device's tensor is
    moved to the host first)."""
    import torch.utils.dlpack
    if t.__dlpack_device__()[0] < 0:  # a runtime DLPack does not lend
        t = t.to("host")
    return torch.utils.dlpack.from_dlpack(t)
