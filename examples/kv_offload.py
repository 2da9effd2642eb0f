#!/usr/bin/env python3
"""A paged KV cache offloaded to host memory and loaded back, block by block, layer by layer --
the shape of vLLM's KV connector (save_kv_layer, start_load_kv, wait_for_layer_load,
get_finished) on xferlua.

Each layer's cache is one tensor of num_blocks blocks on the device (PyTorch CUDA tensors where
PyTorch has CUDA, lent to xferlua without a copy; else xferlua tensors on the first device that
is not the host); the host pool is pinned host memory of the same layout (PyTorch or NumPy). A
request owns some device blocks (its block table) and gets as many host slots. Every layer has
one prepared batch each way, made once (xferlua.batch with the block tables as NumPy arrays);
offloading a layer is one run_async() of its batch, so layer k+1 is submitted while layer k
still moves, and get_finished() waits for them all. The loads go the same way back; a request
aborted mid-load is canceled: cancel() returns once nothing more is written into its blocks.

    python3 examples/kv_offload.py [--layers 16] [--blocks 512] [--block-kib 32] [--request 256]
                                   [--rounds 5] [--verify] [--device NAME]

Prints the GB/s of the offload and of the load, and checks the bytes came back."""
import argparse
import sys
import time

import numpy

import xferlua


class KVCacheConnector:
    """The offload side of a serving engine's KV cache, for one request's blocks."""

    def __init__(self, device_layers, host_layers, device_blocks, host_slots, block_bytes, verify):
        self.jobs = {}
        # one prepared batch per layer and way, planned once: block tables as NumPy arrays
        self.save_batches = [xferlua.batch(dst=h, src=d, src_blocks=device_blocks, dst_blocks=host_slots,
                                           block_bytes=block_bytes, verify=verify)
                             for d, h in zip(device_layers, host_layers)]
        self.load_batches = [xferlua.batch(dst=d, src=h, src_blocks=host_slots, dst_blocks=device_blocks,
                                           block_bytes=block_bytes, verify=verify)
                             for d, h in zip(device_layers, host_layers)]

    def save_kv_layer(self, layer):
        """Starts offloading one layer's blocks (called as the layer's forward pass ends)."""
        self.jobs[("save", layer)] = self.save_batches[layer].run_async()

    def start_load_kv(self):
        """Starts loading every layer's blocks back (before the forward pass)."""
        for layer, b in enumerate(self.load_batches):
            self.jobs[("load", layer)] = b.run_async()

    def wait_for_layer_load(self, layer):
        """Blocks until one layer's blocks are on the device (before that layer runs)."""
        self.jobs.pop(("load", layer)).wait()

    def get_finished(self):
        """Waits for every job still running; raises the first failure."""
        jobs, self.jobs = self.jobs, {}
        for job in jobs.values():
            job.wait()

    def abort(self):
        """A request aborted: its jobs canceled; each cancel returns once nothing more is written."""
        for job in self.jobs.values():
            job.cancel()
        self.jobs = {}


def make_layers(args, block_bytes):
    """(device layers, host layers, keep-alive, where): PyTorch CUDA where it can, else xferlua."""
    try:
        import torch
        use_torch = torch.cuda.is_available() and args.device in (None, "cuda:0")
    except ImportError:
        use_torch = False
    if use_torch:
        dev = [torch.randint(0, 255, (args.blocks, block_bytes), dtype=torch.uint8, device="cuda:0")
               for _ in range(args.layers)]
        host = [torch.empty((args.blocks, block_bytes), dtype=torch.uint8).pin_memory()
                for _ in range(args.layers)]
        return ([xferlua.from_torch(t) for t in dev], [xferlua.from_torch(t) for t in host], (dev, host),
                "PyTorch tensors on cuda:0, pinned host pool")
    name = args.device or next((d for d in xferlua.devices() if d != "host"), "host")
    rng = numpy.random.default_rng(1)
    dev = [xferlua.from_bytes(rng.integers(0, 255, args.blocks * block_bytes, dtype=numpy.uint8).tobytes(),
                              "u8", (args.blocks, block_bytes), name) for _ in range(args.layers)]
    host = [numpy.empty((args.blocks, block_bytes), dtype=numpy.uint8) for _ in range(args.layers)]
    return dev, [xferlua.from_numpy(h) for h in host], (dev, host), "xferlua tensors on %s, NumPy host pool" % name


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--blocks", type=int, default=512, help="blocks per layer on the device")
    p.add_argument("--block-kib", type=int, default=32, help="KiB per block (K and V of block_size tokens)")
    p.add_argument("--request", type=int, default=256, help="blocks the request owns")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--verify", action="store_true", help="CRC32C of every block at both ends")
    p.add_argument("--device", help="the device of the cache (default: cuda:0 with PyTorch, else the first)")
    args = p.parse_args()
    block_bytes = args.block_kib * 1024
    dev_layers, host_layers, _keep, where = make_layers(args, block_bytes)
    rng = numpy.random.default_rng(7)
    device_blocks = rng.choice(args.blocks, size=args.request, replace=False).astype(numpy.int64)
    host_slots = rng.permutation(args.request).astype(numpy.int64)
    kv = KVCacheConnector(dev_layers, host_layers, device_blocks, host_slots, block_bytes, args.verify)
    moved = args.layers * args.request * block_bytes
    print("kv_offload: %s; %d layers, a request of %d blocks of %d KiB (%.1f MiB a round)%s"
          % (where, args.layers, args.request, args.block_kib, moved / 2**20, ", verify" if args.verify else ""))
    before = [t.crc32c() for t in dev_layers]

    saves, loads = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for layer in range(args.layers):  # as each layer's forward pass ends
            kv.save_kv_layer(layer)
        kv.get_finished()
        saves.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        kv.start_load_kv()
        for layer in range(args.layers):  # before each layer runs
            kv.wait_for_layer_load(layer)
        kv.get_finished()
        loads.append(time.perf_counter() - t0)
    best = lambda times: moved / min(times) / 1e9  # noqa: E731
    print("kv_offload: offload %.2f GB/s, load %.2f GB/s (best of %d rounds, layer by layer)"
          % (best(saves), best(loads), args.rounds))

    # the blocks came back as they were: the request's blocks wiped on the device, then loaded
    for d in dev_layers:
        wipe = xferlua.zeros((args.request * block_bytes,), "u8")
        d.copy_blocks(wipe, numpy.arange(args.request), device_blocks, block_bytes)
    kv.start_load_kv()
    kv.get_finished()
    after = [t.crc32c() for t in dev_layers]
    assert after == before, "the loaded blocks differ from those offloaded"
    print("kv_offload: every layer's blocks came back bit-exact (CRC32C of each layer equal)")

    # a request aborted mid-load: cancel, and nothing lands afterwards
    kv.start_load_kv()
    kv.abort()
    settled = [t.crc32c() for t in dev_layers]
    time.sleep(0.1)
    assert [t.crc32c() for t in dev_layers] == settled, "a block changed after cancel returned"
    print("kv_offload: a load canceled mid-way: nothing written after cancel returned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
