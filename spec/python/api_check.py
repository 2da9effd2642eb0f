"""The Python API beyond NumPy's loans (spec/python_spec.lua runs it): async jobs and cancel,
batches from NumPy block tables, files (safetensors, .npy, shard indexes, verify, async), errors
with every field and a class per code, fault injection, and 8 threads moving at once on one
context. Prints "ok: ..." per check; exits non-zero at the first failure."""
import gc
import json
import os
import sys
import tempfile
import threading

import numpy

import xferlua


def ok(what):
    print("ok: " + what)


def expect(cls, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except cls as e:
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), cls.__name__))


devs = xferlua.devices()
other = devs[-1]  # a device that is not the host where there is one

# -- tensors ------------------------------------------------------------------------------------
a = numpy.arange(24, dtype=numpy.float32).reshape(4, 6)
t = xferlua.from_numpy(a)
assert isinstance(t, xferlua.Tensor) and t.shape == (4, 6) and t.ndim == 2 and t.numel == 24
assert t.nbytes == 96 and t.strides == (6, 1) and t.is_contiguous() and t.valid and not t.freed
assert "[[ 0.  1." in repr(t), repr(t)
for dtype in ("f64", "float64", numpy.float64, numpy.dtype("float64")):
    u = t.to(other, dtype=dtype)
    assert u.dtype == "f64" and (xferlua.to_numpy(u) == a).all(), (dtype, u)
assert t.to(other).to(other).equals(t.to(other)) and t.crc32c() == t.to(other).crc32c()
with xferlua.zeros((2, 2), "i32", other) as z:
    assert xferlua.to_numpy(z).sum() == 0
assert z.freed
assert xferlua.tensor([[1, 2], [3, 4]], "i64").shape == (2, 2)
ok("tensors: shape, strides, repr with values, dtypes by any name, crc32c, equals, `with` frees")

# -- views: no copy, any device ------------------------------------------------------------------
for dev in devs:
    m = t.to(dev)
    for key in [(1,), (slice(1, 3), slice(None, None, 2)), (-1, slice(2, None)), (slice(None), 3)]:
        assert (xferlua.to_numpy(m[key]) == a[key]).all(), (dev, key)
    assert (xferlua.to_numpy(m.transpose()) == a.T).all() and not m.transpose().is_contiguous()
    assert (xferlua.to_numpy(m.view(2, -1)) == a.reshape(2, -1)).all()
    assert m[2, 3].item() == 15.0 and m.transpose().reshape(24).tolist() == a.T.reshape(-1).tolist()
    assert xferlua.zeros((3,), "i32", dev).fill(7).tolist() == [7, 7, 7]
expect(IndexError, lambda: t[4])
expect(xferlua.Invalid, t.transpose().view, 24)
ok("views on every device: indexing and slices, view, reshape, transpose; item, tolist, fill")

# -- every move option ------------------------------------------------------------------------
d = xferlua.empty((4, 6), "f32", other)
assert d.copy_from(t, verify=True, timeout=30) is d and (xferlua.to_numpy(d) == a).all()
e = expect(xferlua.Invalid, t.to, other, via="nowhere")
assert e.code == "invalid" and isinstance(e, ValueError) and "via" in e.message
expect(TypeError, t.to, other, colour="red")
e = expect(xferlua.Invalid, t.copy_from, numpy.zeros(3))
assert "an xferlua tensor is needed" in e.message, e.message
ok("copy_from with verify and timeout; bad options raise Invalid (a ValueError) or TypeError")

# -- errors: every field, a class per code ---------------------------------------------------
e = expect(xferlua.Error, t.to, "nope:9")
assert type(e) is xferlua.Invalid and e.code == "invalid" and e.what == "invalid argument"
for field in ("op", "from_", "to", "device", "native", "native_name", "retryable", "injected",
              "element", "file", "tensor", "offset", "message"):
    assert hasattr(e, field), field
assert e.element is None and e.file is None and e.offset is None and str(e) == e.message
for code in ("timeout", "canceled", "corrupt", "freed", "peer_lost", "stale", "device_lost", "in_use"):
    cls = getattr(xferlua, "".join(p.capitalize() for p in code.split("_")))
    assert issubclass(cls, xferlua.Error) and cls.code == code
assert issubclass(xferlua.Timeout, TimeoutError) and issubclass(xferlua.AllocError, MemoryError)
ok("xferlua.Error has every field of the record; xferlua.Timeout, Canceled, Corrupt, ... per code")

# -- fault injection: a failed move is a value; the script falls back -------------------------
xferlua.faults.inject("host", "read", nth=1)
assert xferlua.faults.list()[0]["op"] == "read"
src = xferlua.from_numpy(numpy.arange(1 << 16, dtype=numpy.uint8))
try:
    moved = src.to(other)
except xferlua.Error as err:
    assert err.injected and err.code in ("read", "write"), (err.code, err.message)
    moved = src.to(other)  # the rule is used up: the retry moves
xferlua.faults.clear()
assert (xferlua.to_numpy(moved) == numpy.arange(1 << 16, dtype=numpy.uint8)).all()
ok("fault injection from Python: the injected failure is an Error with injected=True, a retry moves")

# -- the fall-back policy: a failed path, then an explicit host round-trip ---------------------
if len(devs) > 2:
    a_dev, b_dev = devs[1], devs[2]
    x = xferlua.tensor([1, 2, 3]).to(a_dev)
    first = x.plan(b_dev)["path"]
    assert first in xferlua.PATHS and x.plan(b_dev)["moves"]
    # a fault the planner's path meets: which runtime's call that is depends on the pair (a
    # staged move writes with the target's runtime; on one GPU CUDA copies over Vulkan's memory)
    rule, code = None, None
    for rt, op in ((b_dev.runtime, "write"), (a_dev.runtime, "read"), (a_dev.runtime, "copy"),
                   (b_dev.runtime, "copy")):
        xferlua.faults.inject(rt, op, nth=1)
        try:
            x.to(b_dev, via=first)
        except xferlua.Error as err:
            assert err.injected, (err.code, err.message)
            rule, code = (rt, op), err.code
        xferlua.faults.clear()
        if rule:
            break
    assert rule, "no fault of %s or %s stops the path %s" % (a_dev.runtime, b_dev.runtime, first)
    xferlua.faults.inject(*rule, nth=1)
    seen = []
    y, attempts = xferlua.transfer(x, b_dev, log=seen.append)
    xferlua.faults.clear()
    assert y.tolist() == [1, 2, 3] and y.device == b_dev
    assert [a["path"] for a in attempts] == [first] and seen == attempts and attempts[0]["code"] == code, attempts
    ok("xferlua.transfer: %s failed (injected %s:%s), the host round-trip moved it; plan() says why"
       % ((first,) + rule))
else:
    print("skip: transfer's fall-back: fewer than two devices besides the host")

# -- async jobs and cancel ----------------------------------------------------------------------
big = xferlua.from_numpy(numpy.arange(1 << 22, dtype=numpy.float32))
job = big.to_async(other)
r = job.wait()
assert job.done() and r.device == other and job.wait() is r and job.progress()[1] == big.nbytes
canceled = 0
for _ in range(20):
    job = big.to_async(other)
    job.cancel()  # returns once nothing more will be written
    try:
        job.wait()
    except xferlua.Canceled as err:
        assert err.code == "canceled"
        canceled += 1
ok("to_async: wait() gives the tensor; cancel() ends it (%d of 20 canceled before they ended)" % canceled)

# -- batches from NumPy block tables --------------------------------------------------------------
BLOCK, N = 4096, 64
pool_src = xferlua.from_numpy((numpy.arange(N * BLOCK) % 251).astype(numpy.uint8))
pool_dst = xferlua.zeros((N * BLOCK,), "u8", other)
sb = numpy.random.default_rng(7).permutation(N).astype(numpy.int32)
db = numpy.arange(N, dtype=numpy.int64)
pool_dst.copy_blocks(pool_src, sb, db, BLOCK)
got = xferlua.to_numpy(pool_dst).reshape(N, BLOCK)
want = (numpy.arange(N * BLOCK) % 251).astype(numpy.uint8).reshape(N, BLOCK)
assert (got == want[sb]).all()
b = xferlua.batch(dst=pool_dst, src=pool_src, src_blocks=db[::-1].copy(), dst_blocks=range(N),
                  block_bytes=BLOCK, parts=[N // 2, N], verify=True)
assert b.count == N and b.bytes == N * BLOCK and b.parts == 2 and b.plan()
b.run(0)
assert b.done()[0] and not b.done()[N - 1]
b.run(1)
assert (xferlua.to_numpy(pool_dst).reshape(N, BLOCK) == want[::-1]).all()
assert b.run_async().wait() is True
e = expect(xferlua.Invalid, pool_dst.copy_blocks, pool_src, [N], [0], BLOCK)
assert "out of range" in e.message, e.message
pairs = [(xferlua.zeros((8,), "f32", other), xferlua.tensor(list(range(8)))) for _ in range(4)]
xferlua.copy_many(pairs)
assert all((xferlua.to_numpy(dst) == numpy.arange(8)).all() for dst, _ in pairs)
moved = xferlua.move_many([s for _, s in pairs], other)
assert [m.device for m in moved] == [other] * 4
ok("batches: copy_blocks and prepared batches from NumPy tables, parts, verify, run_async, copy_many, move_many")

# -- files ------------------------------------------------------------------------------------------
folder = tempfile.mkdtemp()
w = {"w": xferlua.from_numpy(numpy.arange(12, dtype=numpy.float32).reshape(3, 4)),
     "b": xferlua.from_numpy(numpy.arange(4, dtype=numpy.int64)).to(other)}
path = os.path.join(folder, "m.safetensors")
xferlua.save(path, w, metadata={"format": "pt"}, verify=True)
f = xferlua.open(path)
assert f.format == "safetensors" and sorted(f.names()) == ["b", "w"] and f.metadata()["format"] == "pt"
assert "crc32c.w" in f.metadata()
back = xferlua.load(path, device=other, verify=True)
assert back["w"].device == other and (xferlua.to_numpy(back["w"]) == xferlua.to_numpy(w["w"])).all()
half = xferlua.load(path, dtype="f16", device=lambda name, info: "host" if name == "b" else other)
assert half["w"].dtype == "f16" and half["b"].dtype == "i64" and half["b"].device == "host"
xferlua.save(os.path.join(folder, "a.npy"), w["w"])
one = xferlua.load(os.path.join(folder, "a.npy"))
assert isinstance(one, xferlua.Tensor) and one.shape == (3, 4)
assert (numpy.load(os.path.join(folder, "a.npy")) == xferlua.to_numpy(w["w"])).all()
# a checkpoint in shards, as Hugging Face writes it
xferlua.save(os.path.join(folder, "s1.safetensors"), {"w": w["w"]})
xferlua.save(os.path.join(folder, "s2.safetensors"), {"b": w["b"]})
index = os.path.join(folder, "model.safetensors.index.json")
with open(index, "w") as out:
    json.dump({"metadata": {}, "weight_map": {"w": "s1.safetensors", "b": "s2.safetensors"}}, out)
sharded = xferlua.load(index, device=other)
assert sorted(sharded) == ["b", "w"] and sharded["b"].device == other
job = xferlua.load_async(path, device=other)
assert sorted(job.wait()) == ["b", "w"]
assert xferlua.save_async(os.path.join(folder, "c.safetensors"), w).wait() is True
# a bit flipped on the way from the disk: verify names the tensor
xferlua.faults.inject("file", "corrupt", nth=1)
e = expect(xferlua.Corrupt, xferlua.load, path, verify=True)
xferlua.faults.clear()
assert e.file and e.file.endswith("m.safetensors") and e.tensor in ("w", "b"), (e.file, e.tensor, e.message)
ok("files: save with metadata and verify, load onto devices (per-tensor device, dtype), .npy, "
   "a shard index, load_async, save_async, a corrupt read raises Corrupt naming file and tensor")
# a tensor split across devices as it loads: "w" along each dimension over every device
names = [d.name for d in devs]
for dim in (0, 1):
    split = xferlua.load(path, verify=True, shard=lambda n, i: {"dim": dim, "devices": names} if n == "w" else None)
    parts = split["w"]
    assert [str(p.device) for p in parts] == names and split["b"].device == "host"
    assert [p.shape[dim] for p in parts] == [xferlua.files.split_part(w["w"].shape[dim], len(names), k)[1] -
                                             xferlua.files.split_part(w["w"].shape[dim], len(names), k)[0]
                                             for k in range(len(names))]
    joined = numpy.concatenate([xferlua.to_numpy(p.to("host")) for p in parts], axis=dim)
    assert (joined == xferlua.to_numpy(w["w"])).all(), dim
assert len(xferlua.load_async(path, shard={"dim": 0, "devices": names}).wait()["b"]) == len(names)
e = expect(xferlua.Invalid, xferlua.load, path, shard={"dim": 1, "devices": names})
assert "no dimension 1 to split" in e.message and e.tensor == "b", e.message
ok("files: shard={'dim': d, 'devices': [...]} splits a tensor across every device as it loads, "
   "verify joins the parts' sums")

# -- remote devices: a server of this process's devices, and a client of it -------------------
remote = [r for r in xferlua.runtimes() if r["name"] == "remote"][0]
if "built without UCX" in remote["reason"]:
    print("skip: remote devices: " + remote["reason"])
else:
    server = xferlua.serve("ucx://127.0.0.1:0", name="nodeB")
    peer = xferlua.connect(server.url, timeout=10)
    assert peer.name == "nodeB" and peer.devices[0] == "nodeB/host" and not peer.lost
    x = numpy.arange(1 << 18, dtype=numpy.float32)
    there = xferlua.from_numpy(x).to(peer.devices[-1], verify=True)
    # (to host: a move from nodeB/D to D itself, the server being this process, waits for the
    # device its own move holds -- until the request times out)
    assert (xferlua.to_numpy(there.to("host")) == x).all() and server.stats()["served"] > 0
    peer.close()
    e = expect(xferlua.PeerLost, there.to, "host")
    assert isinstance(e, ConnectionError) and e.code == "peer_lost"
    server.close()
    ok("remote: serve() and connect() in Python; a remote tensor moves both ways; a closed peer raises PeerLost")

# -- threads: 8 at once on one context, the GIL released ---------------------------------------
failures = []


def worker(k):
    try:
        rng = numpy.random.default_rng(k)
        for i in range(40):
            x = rng.integers(0, 1 << 30, size=1024 + k * 7 + i, dtype=numpy.int64)
            there = xferlua.from_numpy(x).to(other, verify=(i % 2 == 0))
            if not (xferlua.to_numpy(there) == x).all():
                failures.append("thread %d: wrong bytes" % k)
            dst = xferlua.zeros((16 * 1024,), "u8", other)
            src = xferlua.from_numpy(rng.integers(0, 255, size=16 * 1024, dtype=numpy.uint8))
            order = rng.permutation(16)
            dst.copy_blocks(src, order, range(16), 1024)
            if not (xferlua.to_numpy(dst).reshape(16, 1024) == xferlua.to_numpy(src).reshape(16, 1024)[order]).all():
                failures.append("thread %d: a batch moved wrong bytes" % k)
    except Exception as err:  # noqa: BLE001  (reported, then the spec fails)
        failures.append("thread %d: %r" % (k, err))


threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join()
assert not failures, failures
ok("8 threads moving and batching at once on one context")

# -- closing a device: its tensors say so; opening it again gives a fresh one -----------------
if other != "host":
    kept = xferlua.tensor([1.0]).to(other)
    xferlua.device(other).close()
    e = expect(xferlua.Closed, kept.to, "host")
    assert e.code == "closed"
    assert xferlua.tensor([2.0]).to(xferlua.device(other)).tolist() == [2.0]
    ok("Device.close(): its tensors raise Closed; the device opens again")

gc.collect()
xferlua.synchronize()
print("xferlua python api: all checks passed")
sys.exit(0)
