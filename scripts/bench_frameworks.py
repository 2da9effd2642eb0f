#!/usr/bin/env python3
"""scripts/bench_frameworks.py [--sizes 4K,256M]: the same moves as xferlua's to() table,
made with the tools users would otherwise pick (PyTorch, CuPy, JAX), timed the same way:
the median of several runs after a warm-up, each run ending when the copy has landed.
A framework that is not installed is said so and skipped. Runs where CUDA works."""
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


def main():
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
