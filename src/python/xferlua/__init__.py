"""xferlua for Python: tensors on host, CUDA, Vulkan and OpenCL devices, moved between them by
one engine, and errors you can catch.

    import numpy, xferlua
    t = xferlua.from_numpy(numpy.arange(6, dtype=numpy.float32).reshape(2, 3))  # no copy
    g = t.to("cuda:0")                          # any device xferlua sees (xferlua.devices())
    h = g.to_async("vulkan:0").wait()           # on xferlua's threads, the GIL released
    state = xferlua.load("model.safetensors", device="cuda:0")   # {name: Tensor}
    try:
        g.to("opencl:0", timeout=0.5, verify=True)
    except xferlua.Timeout as e:                # every code is a class: Corrupt, Canceled, ...
        print(e.code, e.op, e.from_, e.to, e.message)

The classes are a C extension (xferlua._xferlua) over libxfer.so, xferlua's C API: a move costs
what it costs from C. It finds libxfer.so.0 in $XFERLUA_LIBRARY, beside this package, in the
build tree it sits in, or where the dynamic linker looks; NumPy and PyTorch are imported only
by the calls that need them. docs/python.md is the guide.
"""

from typing import Any, Dict, List, Optional, Union

from . import _library

_found = _library.load()  # libxfer.so.0, before the extension that links it
if isinstance(_found, list) and _library.named():  # the library the user named, and no other
    raise _library.not_found(_found, "not tried ($XFERLUA_LIBRARY names the library)")
_library.find_extension(__path__)
try:
    from . import _xferlua as _x
except ImportError as _e:
    if isinstance(_found, list):
        raise _library.not_found(_found, _e) from None
    raise
library_path = _library.loaded_path(_found)

__version__ = _x.version
__all__ = ["Error", "Tensor", "Job", "Batch", "Device", "devices", "device", "runtimes", "tensor",
           "empty", "zeros", "from_bytes", "from_numpy", "to_numpy", "from_torch", "to_torch",
           "from_dlpack", "batch", "copy_many", "move_many", "load", "save", "load_async",
           "save_async", "open", "faults", "transfer", "plan", "PATHS", "connect", "serve", "Peer", "Listener", "config", "memory", "synchronize", "empty_cache", "library_path"]

Batch = _x.Batch
Peer, Listener, connect, serve = _x.Peer, _x.Listener, _x.connect, _x.serve
runtimes = _x.runtimes
memory = _x.memory
synchronize = _x.synchronize
empty_cache = _x.empty_cache
config = _x.config
batch = _x.batch
copy_many = _x.copy_many
move_many = _x.move_many
from_bytes = _x.from_bytes
empty = _x.empty


# -- errors: xferlua.Error and a class per code ------------------------------------------------

class Error(Exception):
    """A failed xferlua call, as the Lua error has it: code ('read', 'timeout', ...), what (the
    code in words), op (the phase or call that failed), from_ and to (the move's ends), device
    (whose call failed), native and native_name (the driver's own code), retryable, injected
    (by fault injection), element (a batch's, from 1, or None), file, tensor and offset (a
    file's failure, else None) and message (the whole story)."""

    code = "invalid"

    def __init__(self, message=""):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return self.message


def _error_class(code, bases, doc):
    name = "".join(part.capitalize() for part in code.split("_"))
    return type(name, (Error,) + bases, {"__doc__": doc, "code": code, "__module__": __name__})


_BUILTIN = {"alloc": (MemoryError,), "invalid": (ValueError,), "timeout": (TimeoutError,),
            "unsupported": (NotImplementedError,), "unreachable": (ConnectionError,),
            "peer_lost": (ConnectionError,)}
_errors = {"": Error}
for _code in _x._codes():
    _cls = _error_class(_code, _BUILTIN.get(_code, ()), "xferlua's '%s' error." % _code)
    _errors[_code] = _cls
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)
# the names a reader looks for first
ReadError, WriteError, AllocError = _errors["read"], _errors["write"], _errors["alloc"]
__all__ += ["ReadError", "WriteError", "AllocError"]


# -- devices -----------------------------------------------------------------------------------

class Device(str):
    """A device: its name ('cuda:0') -- it is that string, so it goes wherever a name does -- and
    what it is: runtime, index, label, platform, vendor, total_memory, max_alloc, unified, uuid,
    pci_bus_id, compute_capability, backing, remote."""

    def __new__(cls, info):
        d = super().__new__(cls, info["name"])
        d.__dict__.update(info)
        return d

    def memory(self):
        """The device's caching allocator (xferlua.memory(device))."""
        return _x.memory(self)

    def close(self):
        """Gives back everything the device holds -- its tensors' memory (they raise
        xferlua.Closed from then on), its cache, its driver objects -- once the moves using it
        have ended; xferlua.device(name) opens it again. Not the host."""
        _x._device_close(self)

    def __repr__(self):
        return "xferlua.Device(%s: %s)" % (str(self), self.label)


def devices(runtime: Optional[str] = None) -> List["Device"]:
    """Every available device, host first (a list of Device, which are their names);
    devices('cuda') those of one runtime."""
    found = [Device(i) for i in _x._devices()]
    if runtime is None:
        return found
    want = "host" if runtime == "cpu" else runtime
    if want not in [r["name"] for r in _x.runtimes()]:
        raise _errors["invalid"]("devices: no runtime '%s'" % runtime)
    return [d for d in found if d.runtime == want]


def device(name: str) -> "Device":
    """The device named ('host', 'cuda:0'; 'cuda': its first); an unknown name raises
    xferlua.Invalid naming those there are."""
    return Device(_x._device_info(name))


# -- tensors -------------------------------------------------------------------------------------

_NUMPY_OF = {"f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "i16": "int16",
             "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
             "u64": "uint64", "bool": "bool"}


class Tensor(_x.Tensor):
    """A tensor on one of xferlua's devices: shape (a tuple), dtype ('f32', 'bf16', ...),
    device (its name), to(), copy_from(), to_async(), free(); lent to NumPy, PyTorch, CuPy and
    JAX through DLPack without a copy. `with` frees it at the block's end."""

    __slots__ = ()

    def copy_blocks(self, src, src_blocks, dst_blocks, block_bytes, **options):
        """Block src_blocks[i] of src into block dst_blocks[i] of this tensor (blocks of
        block_bytes numbered from 0; NumPy integer arrays, ranges or lists) as one batch."""
        return _x.copy_blocks(self, src, src_blocks, dst_blocks, block_bytes, **options)

    # -- views: the same memory, another shape (no copy; any device) --

    def view(self, *shape):
        """The same elements in another shape (one size may be -1); the tensor must be contiguous."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if not self._contiguous:
            raise _errors["invalid"]("view: the tensor is not contiguous (reshape() copies it)")
        shape = list(shape)
        if shape.count(-1) > 1:
            raise _errors["invalid"]("view: at most one size may be -1")
        if -1 in shape:
            known = 1
            for n in shape:
                known *= n if n != -1 else 1
            if known == 0 or self.numel % known:
                raise _errors["invalid"]("view: %d elements do not fill %s" % (self.numel, tuple(shape)))
            shape[shape.index(-1)] = self.numel // known
        strides, step = [0] * len(shape), 1
        for i in range(len(shape) - 1, -1, -1):
            strides[i], step = step, step * max(shape[i], 1)
        return self._view(tuple(shape), tuple(strides), self.offset)

    def reshape(self, *shape):
        """view() where the strides allow it, else a view of a packed copy."""
        return self.contiguous().view(*shape)

    def contiguous(self):
        """This tensor when its elements lie packed in row-major order, else a packed copy."""
        return self if self._contiguous else self.to(self.device)

    def is_contiguous(self):
        """True when the elements lie packed in row-major order (what moves need without packing)."""
        return self._contiguous

    def transpose(self, a=0, b=1):
        """Dimensions a and b swapped (a view)."""
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(*order)

    def permute(self, *order):
        """The dimensions in another order (a view)."""
        if sorted(order) != list(range(self.ndim)):
            raise _errors["invalid"]("permute: %s is not an order of %d dimensions" % (order, self.ndim))
        shape, strides = self.shape, self.strides
        return self._view(tuple(shape[i] for i in order), tuple(strides[i] for i in order), self.offset)

    def __getitem__(self, key):
        """Integers (negative from the end) and slices (steps above 0), as NumPy's basic
        indexing: a view, no copy, on any device."""
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > self.ndim:
            raise IndexError("%d indices for a tensor of %d dimensions" % (len(key), self.ndim))
        shape, strides, first = [], [], self.offset
        for dim, (n, stride) in enumerate(zip(self.shape, self.strides)):
            k = key[dim] if dim < len(key) else slice(None)
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise IndexError("slices step forward here (step %d)" % step)
                count = max(0, (stop - start + step - 1) // step)
                shape.append(count)
                strides.append(stride * step)
                first += start * stride if count else 0
            else:
                i = k.__index__()
                if not -n <= i < n:
                    raise IndexError("index %d is out of range for size %d (dimension %d)" % (i, n, dim))
                first += (i % n) * stride
        return self._view(tuple(shape), tuple(strides), first)

    def item(self):
        """The value of a one-element tensor."""
        if self.numel != 1:
            raise _errors["invalid"]("item: the tensor has %d elements" % self.numel)
        return self.tolist() if self.ndim == 0 else self.reshape(()).tolist()

    def tolist(self):
        """Nested lists of the values (NumPy's tolist)."""
        return to_numpy(self.contiguous()).tolist()

    def clone(self):
        """A copy on the same device."""
        return self.to(self.device)

    def numpy(self):
        """A NumPy array (over this tensor's memory for a host tensor; else over a host copy)."""
        return to_numpy(self)

    def torch(self):
        """A torch tensor over this tensor's memory (host or CUDA; other devices through a host copy)."""
        return to_torch(self)

    def __len__(self):
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.freed:
            try:
                self.free()
            except Error:  # lent to an array that still reads it: it goes with the array
                pass
        return False

    def __repr__(self):
        if self.freed:
            return "xferlua.Tensor(freed)"
        head = "xferlua.Tensor(%s%s on %s)" % (self.dtype, list(self.shape), self.device)
        if not self.valid:
            return head[:-1] + ", no valid bytes)"
        try:
            import numpy
        except ImportError:
            return head
        if self.dtype == "bf16" or self.numel > 1000:
            return head
        try:
            values = numpy.frombuffer(self.tobytes(), dtype=_NUMPY_OF[self.dtype]).reshape(self.shape)
        except Error as e:
            return "%s (unreadable: %s)" % (head, e.message)
        return "%s\n%s" % (head, numpy.array2string(values, threshold=100))


class Job(_x.Job):
    """An asynchronous move, batch run, load or save: wait(), done(), cancel(), progress()."""

    __slots__ = ()

    def __repr__(self):
        return "xferlua.Job(%s)" % ("done" if self.done() else "running")


_x._register(Tensor, Job, _errors)


def tensor(values: Any, dtype: Any = "f32", device: Any = "host") -> "Tensor":
    """A tensor of a (nested) list of numbers, a number, or a NumPy array (a copy), on device."""
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None:
        a = numpy.ascontiguousarray(numpy.asarray(values, dtype=_NUMPY_OF.get(dtype, dtype)))
        return _x.from_bytes(a.tobytes(), dtype, a.shape, device)
    import array
    codes = {"f32": "f", "f64": "d", "i32": "i", "i64": "q", "u8": "B", "i8": "b", "i16": "h",
             "u16": "H", "u32": "I", "u64": "Q"}
    if dtype not in codes:
        raise _errors["invalid"]("tensor: without NumPy, dtype is one of %s" % ", ".join(sorted(codes)))
    flat = values if isinstance(values, (list, tuple)) else [values]
    data = array.array(codes[dtype], flat)
    return _x.from_bytes(data.tobytes(), dtype, (len(data),), device)


def zeros(shape: Any, dtype: Any = "f32", device: Any = "host") -> "Tensor":
    """A tensor of zeros."""
    t = _x.empty(shape, dtype, device)
    t.write(bytes(t.nbytes))
    return t


# -- the fall-back policy: xfer.transfer ---------------------------------------------------------

PATHS = ("same_device", "same_runtime", "interop", "direct", "staged", "host")


def _log_attempt(attempt):
    import sys
    sys.stderr.write("xferlua.transfer: %s -> %s via %s failed (%s): %s\n"
                     % (attempt["from"], attempt["to"], attempt["path"], attempt["code"], attempt["message"]))


def transfer(t: "Tensor", device: Any, *, fallback: Optional[List[str]] = None, retries: int = 0,
             log: Any = None) -> "tuple":
    """Moves t to device trying the paths of `fallback` in order (default: the planner's choice,
    then 'host': an explicit host round-trip). A path that does not apply is skipped; a failure
    that says it is retryable is tried again up to `retries` times; every failed attempt goes to
    `log` (default: a line on stderr; False: silent). Returns (the new tensor, the failed
    attempts); raises the last error when every path failed, and a canceled move's at once."""
    paths = list(fallback) if fallback is not None else [t.plan(device)["path"], "host"]
    for p in paths:
        if p not in PATHS:
            raise _errors["invalid"]("transfer: %r is not a path (%s)" % (p, ", ".join(PATHS)))
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise _errors["invalid"]("transfer: retries must be a whole number >= 0")
    log = _log_attempt if log is None else (log or (lambda attempt: None))
    attempts, last = [], None
    for path in paths:
        try:
            t.plan(device, via=path)
        except Error as e:
            if e.code != "unsupported":
                raise
            continue
        for attempt_no in range(retries + 1):
            try:
                return t.to(device, via=path), attempts
            except Error as e:
                attempt = {"path": path, "try": attempt_no + 1, "code": e.code, "op": e.op, "from": e.from_,
                           "to": e.to, "message": e.message, "retryable": e.retryable}
                attempts.append(attempt)
                log(attempt)
                last = e
                if e.code == "canceled":  # whoever canceled wants it stopped, not moved another way
                    raise
                if not e.retryable:
                    break
    if last is not None:
        raise last
    raise _errors["unsupported"]("transfer: none of the paths %s applies to %s -> %s"
                                 % (", ".join(paths), t.device, device))


def plan(t: "Tensor", device: Any, **options: Any) -> Dict[str, Any]:
    """What t.to(device, **options) would do, and why: path, reason, steps, moves, estimates."""
    return t.plan(device, **options)


# -- DLPack: NumPy, PyTorch, CuPy, JAX ---------------------------------------------------------

def _producer_done(obj):
    """Waits for the work a CUDA producer queued on its own stream for obj: xferlua's moves run
    on a stream of their own (CU_STREAM_NON_BLOCKING), which no framework's stream orders."""
    if not hasattr(obj, "__dlpack_device__") or obj.__dlpack_device__()[0] != 2:
        return
    if hasattr(obj, "block_until_ready"):  # JAX
        obj.block_until_ready()
        return
    module = type(obj).__module__.split(".")[0]
    if module == "torch":
        import torch
        torch.cuda.current_stream(obj.device).synchronize()
    elif module == "cupy":
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def from_dlpack(obj: Any) -> "Tensor":
    """A tensor over the memory of any DLPack producer (NumPy, PyTorch, CuPy, JAX arrays: CPU or
    CUDA), no copy; the producer stays alive while the tensor does. A CUDA producer's queued work
    on the array is waited for first (PyTorch's, CuPy's current stream; JAX's block_until_ready)."""
    _producer_done(obj)
    try:
        capsule = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer before DLPack 1.0 takes no max_version
        capsule = obj.__dlpack__()
    return _x._from_capsule(capsule, obj)


def _numpy_lends_bool():
    import numpy
    return int(numpy.__version__.split(".")[0]) >= 2


def from_numpy(array: Any) -> "Tensor":
    """A host tensor over a NumPy array's memory (strides kept), no copy: writes show on both
    sides. A bool array, which NumPy before 2.0 does not lend through DLPack, is copied."""
    import numpy
    if array.dtype == numpy.bool_ and not _numpy_lends_bool():
        return _x.from_bytes(numpy.ascontiguousarray(array).tobytes(), "bool", array.shape)
    return from_dlpack(array)


def to_numpy(t: "Tensor") -> Any:
    """A NumPy array over a host tensor's memory, no copy (another device's tensor is moved to
    the host first: the array is over that copy)."""
    import numpy
    if t.device != "host":
        t = t.to("host")
    if t.dtype == "bf16":  # NumPy has no bfloat16: its bits as uint16
        return numpy.frombuffer(t.tobytes(), dtype=numpy.uint16).reshape(t.shape)
    if t.dtype != "bool" or _numpy_lends_bool():
        return numpy.from_dlpack(t)
    return numpy.frombuffer(t.tobytes(), dtype=numpy.bool_).reshape(t.shape).copy()


def from_torch(tt: Any) -> "Tensor":
    """A tensor over a PyTorch tensor's memory (CPU or CUDA), no copy; a CUDA tensor's queued
    work on PyTorch's current stream is waited for first."""
    import torch.utils.dlpack
    _producer_done(tt)
    return _x._from_capsule(torch.utils.dlpack.to_dlpack(tt), tt)


def to_torch(t: "Tensor") -> Any:
    """A PyTorch tensor over a host or CUDA tensor's memory, no copy (another device's tensor is
    moved to the host first)."""
    import torch.utils.dlpack
    if t.__dlpack_device__()[0] < 0:  # a runtime DLPack does not lend
        t = t.to("host")
    return torch.utils.dlpack.from_dlpack(t)


# -- fault injection -------------------------------------------------------------------------

class faults:  # noqa: N801  (a namespace, as xfer.faults in Lua)
    """Fault injection, for testing what a script does when a move fails: every driver call of
    every runtime passes one checked wrapper, which can be told to fail the same way a real
    failure does. inject(runtime, op, nth=1, count=1, native=0): the nth matching call from now
    fails, and the count-1 after it (op 'corrupt' flips a bit in the nth move into the runtime's
    memory; 'stall' makes the nth wait for a device never see its work done); list(); clear().
    Or from the environment before the first call: XFER_FAULTS=host:read:1."""

    inject = staticmethod(_x._fault_inject)
    clear = staticmethod(_x._fault_clear)
    list = staticmethod(_x._fault_list)


# -- files ---------------------------------------------------------------------------------------

from .files import File, load, load_async, open, save, save_async  # noqa: E402,F401
