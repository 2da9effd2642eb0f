"""DLPack with PyTorch and CuPy on a CUDA device (the GPU machine): an xferlua CUDA tensor
goes to torch.from_dlpack / cupy.from_dlpack and a torch/cupy CUDA tensor comes back, each
with the same device pointer (no copy). Usage: python3 frameworks_check.py path/to/libxfer.so
Prints "ok: ..." per check and "skipped: ..." for a framework that is not there."""
import ctypes
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from xferlib import ERR, V, api, check, load, Shape  # noqa: E402

lib = load(sys.argv[1])
ctx, cuda, f32 = V(), V(), ctypes.c_int()
check(lib.xfer_ctx_open(ctypes.byref(ctx), ERR), "xfer_ctx_open")
check(lib.xfer_device_find(ctx, b"cuda:0", ctypes.byref(cuda), ERR), "xfer_device_find cuda:0")
check(lib.xfer_dtype_parse(b"f32", ctypes.byref(f32)), "dtype")
values = (ctypes.c_float * 6)(0, 1, 2, 3, 4, 5)
shape = Shape(2, (ctypes.c_int64 * 8)(2, 3))
t = V()
check(lib.xfer_tensor_from_bytes(cuda, f32, ctypes.byref(shape), values, 24, ctypes.byref(t), ERR), "a CUDA tensor")


class Producer:
    def __init__(self):
        self.pointer = None

    def __dlpack__(self, stream=None, max_version=None, **_):
        # DLPack 1.x (a versioned capsule) when the consumer says it reads it, else 0.8's
        versioned = 1 if max_version is not None and max_version[0] >= 1 else 0
        managed = V()
        check(lib.xfer_tensor_to_dlpack(t, versioned, ctypes.byref(managed), ERR), "to_dlpack")
        self.versioned = versioned
        # dl_tensor.data: the first field of DLManagedTensor; after version (8 bytes),
        # manager_ctx, deleter and flags (8 each) in DLManagedTensorVersioned
        self.pointer = ctypes.c_void_p.from_address(managed.value + (32 if versioned else 0)).value
        return api.PyCapsule_New(managed, b"dltensor_versioned" if versioned else b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0


def take_back(capsule, pointer, what):
    name = api.PyCapsule_GetName(capsule)  # "dltensor" (0.8) or "dltensor_versioned" (1.x)
    versioned = 1 if name == b"dltensor_versioned" else 0
    assert name in (b"dltensor", b"dltensor_versioned"), name
    managed = api.PyCapsule_GetPointer(capsule, name)
    u = V()
    check(lib.xfer_tensor_from_dlpack(ctx, managed, versioned, ctypes.byref(u), ERR), what + " from_dlpack")
    api.PyCapsule_SetName(capsule, b"used_" + name)
    data = ctypes.c_void_p.from_address(managed + (32 if versioned else 0)).value
    assert data == pointer, (hex(data), hex(pointer))
    got = (ctypes.c_float * 6)()
    check(lib.xfer_tensor_read(u, got, 24, ERR), what + " read back")
    lib.xfer_tensor_release(u)
    return list(got)


for name in ("torch", "cupy"):
    try:
        module = __import__(name)
    except ImportError:
        print("skipped: %s is not installed" % name)
        continue
    producer = Producer()
    x = module.from_dlpack(producer)
    pointer = x.data_ptr() if name == "torch" else x.data.ptr
    assert pointer == producer.pointer, "%s copied the tensor" % name
    assert [float(v) for v in x.flatten().tolist()] == [0, 1, 2, 3, 4, 5]
    print("ok: %s.from_dlpack takes an xferlua CUDA tensor in place (device pointer %#x)" % (name, pointer))
    print("    (as DLPack %s)" % ("1.x, versioned" if producer.versioned else "0.8"))
    y = (x * 2).contiguous() if name == "torch" else module.ascontiguousarray(x * 2)
    ptr_y = y.data_ptr() if name == "torch" else y.data.ptr
    # x * 2 is queued on the framework's stream; xferlua's moves run on streams of their own
    # (non-blocking), so the producer's work is waited for before its memory is handed over --
    # what the C API asks of its caller and the xferlua package does (CuPy's unsynchronized
    # doubling was read half-done on an H100: 2026-12-07)
    (module.cuda.synchronize if name == "torch" else module.cuda.get_current_stream().synchronize)()
    capsules = [("0.8", y.__dlpack__())]
    try:  # the 1.x protocol: a consumer asks for the versioned capsule
        capsules.append(("1.x", y.__dlpack__(max_version=(1, 0))))
    except TypeError as e:
        print("    (%s.__dlpack__ takes no max_version here: %s; only 0.8 checked)" % (name, e))
    for version, capsule in capsules:
        assert take_back(capsule, ptr_y, name) == [0, 2, 4, 6, 8, 10]
        print("ok: xferlua takes a %s CUDA tensor through DLPack %s in place (device pointer %#x)"
              % (name, version, ptr_y))
lib.xfer_tensor_release(t)
print("dlpack frameworks: done")
