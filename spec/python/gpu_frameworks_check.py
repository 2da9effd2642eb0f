"""The Python extension with PyTorch, CuPy and JAX on a CUDA device (the GPU machine: gpu-check's
python part runs it). For each framework that is installed and sees a GPU:
- its CUDA array lent to xferlua.from_dlpack without a copy (the same device pointer comes back
  through the framework's from_dlpack of the xferlua tensor), and read right;
- the framework's queued work waited for: a large fill still running on the framework's own
  stream when from_dlpack is called must be seen whole by xferlua's move to the host;
- an xferlua CUDA tensor lent to the framework without a copy, and xferlua's write into it
  (copy_from) seen by the framework as soon as copy_from returns;
- a round trip cuda:0 -> vulkan:0 / opencl:0 -> cuda:0 of the framework's bytes, where those run;
- (PyTorch) host memory it pinned (pin_memory()) moved in place: a prepared batch of blocks
  between it and a CUDA tensor runs as one submission both ways, not block by block.
Prints "ok: ..." per check, "skipped: ..." for a framework or device that is not there and
"FAILED: ..." for a framework whose check failed (the others still run); exits non-zero on any. Usage: PYTHONPATH=src/python python3 gpu_frameworks_check.py"""
import sys

import numpy

import xferlua

N = 64 << 20  # floats: 256 MiB, long enough that a fill is still running when we ask for it


def ok(what):
    print("ok: " + what)


def cuda_device():
    names = [str(d) for d in xferlua.devices()]
    return "cuda:0" if "cuda:0" in names else None


def interop_ends():
    names = [str(d) for d in xferlua.devices()]
    return [d for d in ("vulkan:0", "opencl:0") if d in names]


def check_framework(name, make, fill, pointer_of, take, sync):
    """make(n, value): a CUDA array; fill(x, value): queue a fill of x on the framework's stream
    (returns the array holding the result: JAX's are immutable); pointer_of(x): its device
    pointer; take(t): the framework's array over an xferlua tensor; sync(): wait for the
    framework's queued work."""
    x = make(N, 1.0)
    sync()
    t = xferlua.from_dlpack(x)
    assert t.device == "cuda:0" and t.shape == (N,) and t.dtype == "f32", (t.device, t.shape, t.dtype)
    back = take(t)
    assert pointer_of(back) == pointer_of(x), "%s: xferlua copied the array (%#x, %#x)" % (
        name, pointer_of(back), pointer_of(x))
    ok("%s: a CUDA array lent to xferlua and back in place (device pointer %#x)" % (name, pointer_of(x)))

    # the producer's stream: a fill queued and not waited for, then lent and moved at once
    y = fill(x, 7.0)
    h = xferlua.from_dlpack(y).to("host")
    got = xferlua.to_numpy(h)
    bad = int(numpy.count_nonzero(got != 7.0))
    assert bad == 0, "%s: %d of %d floats moved before the framework's fill ended" % (name, bad, N)
    ok("%s: a fill still queued on the framework's stream is waited for (%d MiB all 7.0)" % (name, N * 4 >> 20))

    # xferlua's tensor lent to the framework; xferlua writes, the framework reads at once
    u = xferlua.zeros((4096,), "f32", "cuda:0")
    v = take(u)
    src = xferlua.from_numpy(numpy.arange(4096, dtype=numpy.float32))
    u.copy_from(src)
    seen = numpy.asarray(to_host(name, v))
    assert (seen == numpy.arange(4096, dtype=numpy.float32)).all(), "%s: read %s" % (name, seen[:8])
    ok("%s: xferlua's copy_from into a tensor the framework holds is seen when it returns" % name)

    for end in interop_ends():
        w = xferlua.from_dlpack(y).to(end).to("cuda:0")
        assert w.crc32c() == h.crc32c(), "%s: cuda:0 -> %s -> cuda:0 changed the bytes" % (name, end)
        ok("%s: its bytes through %s and back to cuda:0, the same CRC32C" % (name, end))


def to_host(name, v):
    if name == "torch":
        return v.cpu().numpy()
    if name == "cupy":
        import cupy
        return cupy.asnumpy(v)
    return numpy.asarray(v)


def torch_check():
    import torch
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    big = torch.randn(4096, 4096, device="cuda")

    def fill(x, value):
        for _ in range(8):  # work ahead of the fill, so that it is still queued when we ask
            big.matmul(big)
        x.fill_(value)
        return x
    check_framework("torch", lambda n, value: torch.full((n,), value, device="cuda"), fill,
                    lambda x: x.data_ptr(), lambda t: torch.from_dlpack(t), torch.cuda.synchronize)
    pinned_batch_check(torch)


def pinned_batch_check(torch):
    """A prepared batch between PyTorch's pinned host memory and a CUDA tensor: one kernel over
    memory the driver already has page-locked (no staging, no copy per block), bytes right."""
    blocks, block = 1024, 16 << 10
    host = torch.randint(0, 255, (blocks, block), dtype=torch.uint8).pin_memory()
    back = torch.zeros((blocks, block), dtype=torch.uint8).pin_memory()
    dev = torch.zeros((blocks, block), dtype=torch.uint8, device="cuda")
    order = numpy.random.default_rng(3).permutation(blocks).astype(numpy.int64)
    every = numpy.arange(blocks, dtype=numpy.int64)
    h, d, r = xferlua.from_torch(host), xferlua.from_torch(dev), xferlua.from_torch(back)
    out = xferlua.batch(dst=d, src=h, src_blocks=order, dst_blocks=every, block_bytes=block)
    out.run()
    assert out.at_once == out.groups == 1, "host -> cuda:0 from pinned memory: %d of %d groups at once" % (
        out.at_once, out.groups)
    assert torch.equal(dev.cpu(), host[torch.from_numpy(order)]), "host -> cuda:0: blocks differ"
    home = xferlua.batch(dst=r, src=d, src_blocks=every, dst_blocks=order, block_bytes=block)
    home.run()
    assert home.at_once == home.groups == 1, "cuda:0 -> host into pinned memory: %d of %d groups at once" % (
        home.at_once, home.groups)
    assert torch.equal(back, host), "cuda:0 -> host: blocks differ"
    ok("torch: a batch of %d blocks between pin_memory() host memory and cuda:0 ran at once, both ways"
       % blocks)


def cupy_check():
    import cupy
    if cupy.cuda.runtime.getDeviceCount() == 0:
        return "CuPy sees no CUDA device"
    big = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32)

    def fill(x, value):
        for _ in range(8):
            big.dot(big)
        x.fill(value)
        return x
    check_framework("cupy", lambda n, value: cupy.full((n,), value, dtype=cupy.float32), fill,
                    lambda x: x.data.ptr, lambda t: cupy.from_dlpack(t), cupy.cuda.runtime.deviceSynchronize)


def jax_check():
    import jax
    import jax.numpy as jnp
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        return "JAX sees no GPU"
    big = jax.device_put(jnp.ones((4096, 4096), jnp.float32), gpus[0])

    def fill(x, value):  # immutable: the result is a new array, made after the matmuls
        z = big
        for _ in range(8):
            z = z @ big
        return x * 0 + value + 0 * z[0, 0]

    def sync():
        big.block_until_ready()
    check_framework("jax", lambda n, value: jax.device_put(jnp.full((n,), value, jnp.float32), gpus[0]),
                    fill, lambda x: x.unsafe_buffer_pointer(), lambda t: jax.dlpack.from_dlpack(t), sync)


if cuda_device() is None:
    print("skipped: xferlua sees no cuda:0 here")
    sys.exit(0)
failed = []
for name, check in (("torch", torch_check), ("cupy", cupy_check), ("jax", jax_check)):
    try:
        __import__(name)
    except ImportError:
        print("skipped: %s is not installed" % name)
        continue
    try:  # each framework checked whatever the one before it did
        why = check()
    except Exception as e:  # noqa: BLE001 -- reported, and the run fails below
        print("FAILED: %s: %s: %s" % (name, type(e).__name__, e))
        failed.append(name)
        continue
    if why:
        print("skipped: %s: %s" % (name, why))
print("gpu frameworks: %s" % ("failed: " + ", ".join(failed) if failed else "done"))
sys.exit(1 if failed else 0)
