#!/usr/bin/env python3
"""scripts/bench_frameworks.py [--sizes 4K,256M] | --ipc SIZE | --batch BYTES: the same moves as xferlua's to()
table, made with the tools users would otherwise pick (PyTorch, CuPy, JAX), timed the same way:
the median of several runs after a warm-up, each run ending when the copy has landed.
--ipc: the anchor of xferlua's direct path on one machine -- another process's GPU buffer of
SIZE bytes copied into this process's, the other process's memory opened through CUDA IPC
(PyTorch shares a tensor through torch.multiprocessing, CuPy through ipcGetMemHandle); JAX has
no way to share memory across processes. A framework that is not installed is said so and
skipped. --batch: the batch table's scattered blocks moved by PyTorch (bench_batch). Runs
where CUDA works."""
import statistics
import sys
import time


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def timed(fn, sync, reps):
    fn()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(name, n, seconds):
    print(f"{name:<44} {n:>10}  {n / seconds / 1e9:9.2f} GB/s  {seconds * 1e6:10.1f} us")


def bench_torch(sizes):
    import torch
    sync = torch.cuda.synchronize
    gpus = torch.cuda.device_count()
    print(f"# PyTorch {torch.__version__}, {gpus} GPU(s)")
    for n in sizes:
        reps = 200 if n <= 65536 else 7
        dev = torch.full((n,), 7, dtype=torch.uint8, device="cuda:0")
        pageable = torch.full((n,), 7, dtype=torch.uint8)
        pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
        row("torch .cpu() (cuda:0 -> new host tensor)", n, timed(lambda: dev.cpu(), sync, reps))
        row("torch .cuda() (pageable host -> new)", n, timed(lambda: pageable.cuda(), sync, reps))
        row("torch .cuda() (pinned host -> new)", n, timed(lambda: pinned.cuda(), sync, reps))
        row("torch pinned.copy_(cuda) (into existing)", n, timed(lambda: pinned.copy_(dev), sync, reps))
        row("torch cuda.copy_(pinned) (into existing)", n, timed(lambda: dev.copy_(pinned), sync, reps))
        row("torch .clone() on cuda:0", n, timed(lambda: dev.clone(), sync, reps))
        if gpus > 1:
            row("torch .to('cuda:1') (new)", n, timed(lambda: dev.to("cuda:1"), sync, reps))
        del dev, pageable, pinned
        torch.cuda.empty_cache()


def bench_cupy(sizes):
    import cupy
    import numpy
    sync = cupy.cuda.runtime.deviceSynchronize
    print(f"# CuPy {cupy.__version__}")
    for n in sizes:
        reps = 200 if n <= 65536 else 7
        host = numpy.full(n, 7, dtype=numpy.uint8)
        dev = cupy.asarray(host)
        row("cupy.asnumpy (cuda:0 -> new host array)", n, timed(lambda: cupy.asnumpy(dev), sync, reps))
        row("cupy.asarray (host -> new device array)", n, timed(lambda: cupy.asarray(host), sync, reps))


def bench_jax(sizes):
    import jax
    import numpy
    print(f"# JAX {jax.__version__}, devices {jax.devices()}")
    gpu = jax.devices()[0]
    for n in sizes:
        reps = 200 if n <= 65536 else 7
        host = numpy.full(n, 7, dtype=numpy.uint8)
        on = jax.device_put(host, gpu).block_until_ready()
        row("jax.device_put (host -> new device array)", n,
            timed(lambda: jax.device_put(host, gpu).block_until_ready(), lambda: None, reps))
        # numpy.asarray of a jax.Array caches the host copy: a fresh array each time
        row("numpy.asarray(jax array) (device -> host)", n,
            timed(lambda: numpy.asarray(on + 0), lambda: None, reps))


def ipc_owner(framework, n, queue, done):
    """The other process: a GPU buffer of n bytes of 7s, shared; kept until `done`."""
    if framework == "PyTorch":
        import torch
        t = torch.full((n,), 7, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        queue.put(t)  # torch.multiprocessing sends a CUDA tensor as an IPC handle
    else:
        import cupy as cp
        a = cp.full(n, 7, dtype=cp.uint8)
        cp.cuda.Device().synchronize()
        queue.put(cp.cuda.runtime.ipcGetMemHandle(a.data.ptr))
    done.wait()


def bench_ipc(n):
    import multiprocessing
    for framework in ("PyTorch", "CuPy"):
        try:
            if framework == "PyTorch":
                import torch.multiprocessing as mp
            else:
                import cupy  # noqa: F401 (missing: said so below)
                mp = multiprocessing
            ctx = mp.get_context("spawn")
            queue, done = ctx.Queue(), ctx.Event()
            owner = ctx.Process(target=ipc_owner, args=(framework, n, queue, done))
            owner.start()
            got = queue.get(timeout=120)
            if framework == "PyTorch":
                import torch
                dst = torch.empty(n, dtype=torch.uint8, device="cuda:0")
                seconds = timed(lambda: dst.copy_(got), torch.cuda.synchronize, 9)
                ok = bool((dst == 7).all())
                del got
            else:
                import cupy as cp
                ptr = cp.cuda.runtime.ipcOpenMemHandle(got)
                src = cp.ndarray((n,), dtype=cp.uint8,
                                 memptr=cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr, n, None), 0))
                dst = cp.empty(n, dtype=cp.uint8)
                seconds = timed(lambda: dst.__setitem__(Ellipsis, src), cp.cuda.Device().synchronize, 9)
                ok = bool((dst == 7).all())
                del src
                cp.cuda.runtime.ipcCloseMemHandle(ptr)
            done.set()
            owner.join(60)
            if not ok:
                raise RuntimeError("the bytes came over wrong")
            row(f"ipc {framework}: another process's GPU buffer", n, seconds)
        except Exception as e:
            print(f"# ipc {framework}: not measured ({type(e).__name__}: {e})")
    print("# ipc JAX: not measured (JAX shares no memory across processes)")


def scatter(count, slots, seed):
    """the block numbers scripts/bench_tables/batch.lua scatters: the same LCG shuffle"""
    perm = list(range(slots))
    state = seed
    for i in range(slots, 1, -1):
        state = (state * 48271) % 2147483647
        j = state % i
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm[:count]


def bench_batch(buffer):
    """--batch BYTES: the batch table's blocks moved by PyTorch between pinned host memory and
    cuda:0, by a loop of copy_ (non_blocking, one synchronize) and by indexing (gather on one
    side, index_copy_ on the other, as a user without a batch call writes it)."""
    import torch
    print(f"# batch: PyTorch {torch.__version__}, blocks in {buffer} bytes, pinned host memory")
    host = torch.zeros(buffer, dtype=torch.uint8).pin_memory()
    dev = torch.zeros(buffer, dtype=torch.uint8, device="cuda:0")
    sync = torch.cuda.synchronize
    for block, count in ((16384, 4096), (262144, 1024)):
        slots = buffer // block
        count = min(count, slots)
        sb, db = scatter(count, slots, 7), scatter(count, slots, 11)
        hv, dv = host.view(slots, block), dev.view(slots, block)
        for direction, src, dst in (("h2d", hv, dv), ("d2h", dv, hv)):
            def loop():
                for k in range(count):
                    dst[db[k]].copy_(src[sb[k]], non_blocking=True)
            si = torch.tensor(sb, device=src.device)
            di = torch.tensor(db, device=dst.device)
            def index():
                dst.index_copy_(0, di, src.index_select(0, si).to(dst.device, non_blocking=True))
            for name, fn in (("loop", loop), ("index", index)):
                seconds = timed(fn, sync, 3)
                print(f"batch {name} {direction} {block} {block * count / seconds / 1e9:.2f} GB/s")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--batch":
        bench_batch(parse_size(sys.argv[2]))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--ipc":
        bench_ipc(parse_size(sys.argv[2]))
        return
    sizes = [4096, 256 << 20]
    if len(sys.argv) > 2 and sys.argv[1] == "--sizes":
        sizes = [parse_size(s) for s in sys.argv[2].split(",")]
    for name, fn in (("PyTorch", bench_torch), ("CuPy", bench_cupy), ("JAX", bench_jax)):
        try:
            fn(sizes)
        except Exception as e:  # one framework missing or broken must not hide the others
            print(f"# {name}: not measured ({type(e).__name__}: {e})")


if __name__ == "__main__":
    main()
