#!/usr/bin/env python3
"""scripts/bench_python.py [BLOCKS]: the Python side of scripts/bench's "python" table -- the same
calls scripts/bench-calls.c times from C, made through the package xferlua (the extension): a
4 KiB copy_from from host memory and a prepared batch of BLOCKS blocks of 16 KiB (default 4096)
scattered from a host buffer (its block tables NumPy arrays), for every device but the host,
each the median of 7 rounds. Where PyTorch has CUDA, the same blocks moved host -> cuda:0 by a
loop of copy_ and by index_copy_ (PyTorch's ways), and the batch from 8 Python threads at once.
Prints lines "python DEVICE copy4k SECONDS", "python DEVICE batch SECONDS BYTES",
"torch cuda:0 copy_loop|index_copy SECONDS BYTES", or "# why" where something cannot run."""
import statistics
import sys
import time

import numpy

import xferlua

BLOCK = 16384


def copy_loop(dst, src, reps):
    """Seconds per dst.copy_from(src) as a user's loop makes it (no wrapper call between)."""
    for _ in range(20):
        dst.copy_from(src)
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            dst.copy_from(src)
        rounds.append((time.perf_counter() - t0) / reps)
    return statistics.median(rounds)


def median_of(call, reps):
    for _ in range(20):
        call()
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        rounds.append((time.perf_counter() - t0) / reps)
    return statistics.median(rounds)


def main(blocks):
    devs = xferlua.devices()
    targets = [d for d in devs if d != "host"] or devs
    order = (numpy.arange(blocks, dtype=numpy.int64) * 7919) % blocks
    for dev in targets:
        src, dst = xferlua.empty((4096,), "u8", "host"), xferlua.empty((4096,), "u8", dev)
        try:
            print("python %s copy4k %.9f" % (dev, copy_loop(dst, src, 2000)), flush=True)
        except xferlua.Error as e:
            print("# python %s copy4k: %s" % (dev, e.message))
        src, dst = xferlua.empty((blocks * BLOCK,), "u8", "host"), xferlua.empty((blocks * BLOCK,), "u8", dev)
        try:
            b = xferlua.batch(dst=dst, src=src, src_blocks=numpy.arange(blocks), dst_blocks=order,
                              block_bytes=BLOCK)
            print("python %s batch %.9f %d" % (dev, median_of(b.run, 10), blocks * BLOCK), flush=True)
        except xferlua.Error as e:
            print("# python %s batch: %s" % (dev, e.message))
        del src, dst
    torch_loops(blocks, order)


def torch_loops(blocks, order):
    try:
        import torch
    except ImportError:
        print("# torch: not installed here")
        return
    if not torch.cuda.is_available():
        print("# torch: no CUDA device")
        return
    src = torch.empty((blocks, BLOCK), dtype=torch.uint8).pin_memory()
    dst = torch.empty((blocks, BLOCK), dtype=torch.uint8, device="cuda:0")
    index = torch.from_numpy(order).to("cuda:0")

    def loop():
        for i in range(blocks):
            dst[order[i]].copy_(src[i], non_blocking=True)
        torch.cuda.synchronize()

    def index_copy():
        dst.index_copy_(0, index, src.to("cuda:0", non_blocking=True))
        torch.cuda.synchronize()

    print("torch cuda:0 copy_loop %.9f %d" % (median_of(loop, 1), blocks * BLOCK), flush=True)
    print("torch cuda:0 index_copy %.9f %d" % (median_of(index_copy, 3), blocks * BLOCK), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
