"""The Python module as a user meets it (spec/python_spec.lua runs it, with the system python and
in a venv): NumPy in and out with no copy, moves to every device, errors as xferlua.Error, a loan
that keeps its memory, PyTorch where it is installed. Prints "ok: ..." a check; "skip: ..." for
what this machine lacks; exits non-zero at the first failure."""
import gc
import sys

import numpy

import xferlua


def ok(what):
    print("ok: " + what)


print("library: " + xferlua.library_path)
names = xferlua.devices()
assert names[0] == "host", names
ok("devices: " + " ".join(names))

a = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
t = xferlua.from_numpy(a)
assert t.shape == (3, 4) and t.dtype == "f32" and t.device == "host", repr(t)
back = xferlua.to_numpy(t)
assert back.ctypes.data == a.ctypes.data, "a copy was made"
a[0, 0] = 42
assert back[0, 0] == 42
ok("from_numpy and to_numpy share the memory (no copy, writes seen)")

for name in names:
    there = t.to(name)
    assert there.device == name, repr(there)
    got = xferlua.to_numpy(there)
    assert (got == a).all(), (name, got)
    assert (there.numpy() == a).all()
ok("moves to every device and back hold the values: " + ", ".join(names))

view = a[:, ::2]
tv = xferlua.from_numpy(view)
assert tv.shape == (3, 2)
assert (xferlua.to_numpy(tv.to(names[-1])) == view).all()
ok("a strided NumPy view moves as its elements")

for dtype in (numpy.int8, numpy.uint8, numpy.int32, numpy.int64, numpy.float16, numpy.float64, numpy.bool_):
    x = (numpy.arange(5) % 2 == 0) if dtype == numpy.bool_ else numpy.arange(5).astype(dtype)
    y = xferlua.to_numpy(xferlua.from_numpy(x).to(names[-1]))
    assert y.dtype == x.dtype and (y == x).all(), (dtype, y)
ok("dtypes i8 u8 i32 i64 f16 f64 bool round-trip")

try:
    t.to("nope:9")
    raise AssertionError("no error")
except xferlua.Error as e:
    assert e.code == "invalid" and "nope:9" in e.message, (e.code, e.message)
ok("a bad device is an xferlua.Error (code invalid) naming it")

lent = xferlua.tensor([1, 2, 3])
arr = xferlua.to_numpy(lent)
try:
    lent.free()
    raise AssertionError("freed while NumPy reads it")
except xferlua.Error as e:
    assert e.code == "in_use", e.code
del arr
gc.collect()
lent.free()
try:
    lent.to("host")
    raise AssertionError("a freed tensor moved")
except xferlua.Error as e:
    assert e.code == "freed" and e.message == "attempt to use a freed tensor", e.message
ok("memory lent to NumPy is not freed under it; a freed tensor says so")

unused = xferlua.tensor([1.0]).__dlpack__()
del unused
gc.collect()
ok("a capsule no one took gives its tensor back")

try:
    import torch
except ImportError:
    print("skip: PyTorch is not installed here")
else:
    tt = torch.arange(6, dtype=torch.float32)
    u = xferlua.from_torch(tt)
    tt[0] = 7
    assert xferlua.to_numpy(u)[0] == 7
    back = xferlua.to_torch(u)
    assert back.data_ptr() == tt.data_ptr()
    ok("from_torch and to_torch share a CPU tensor's memory")
    if torch.cuda.is_available() and "cuda:0" in names:
        g = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
        x = xferlua.from_torch(g)
        assert x.device == "cuda:0"
        assert (xferlua.to_numpy(x.to(names[-1])) == numpy.arange(1 << 20, dtype=numpy.float32)).all()
        y = xferlua.to_torch(x)
        assert y.data_ptr() == g.data_ptr() and y.device.type == "cuda"
        ok("from_torch and to_torch share a CUDA tensor's memory; it moves to " + names[-1])
    else:
        print("skip: no CUDA device for PyTorch here")
print("xferlua python: all checks passed")
