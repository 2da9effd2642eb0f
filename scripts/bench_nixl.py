#!/usr/bin/env python3
"""scripts/bench_nixl.py BYTES [NIXL_DIR]: the batch table's blocks moved by NIXL (its UCX
backend, one agent in loopback: DRAM <-> VRAM of cuda:0 in this process) -- by a transfer
made from descriptor lists each time (initialize_xfer) and by a prepared one (prep_xfer_dlist
once, make_prepped_xfer once, transfer timed), the same blocks (scatter) in a buffer of BYTES
in pinned host memory and on cuda:0. NIXL_DIR: an unpacked nixl-cu13 wheel (the GPU machine
cannot install one). Prints "batch nixl-<how> <dir> <block> <GB/s>" lines, or
"# batch nixl: not measured (why)"."""
import glob
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_frameworks import scatter  # noqa: E402  (the batch table's blocks, one definition)


def wait(agent, handle):
    state = agent.transfer(handle)
    while state == "PROC":
        state = agent.check_xfer_state(handle)
    if state != "DONE":
        raise RuntimeError("transfer state " + state)


def timed(fn, reps=5):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    buffer = int(sys.argv[1])
    if len(sys.argv) > 2:
        root = sys.argv[2]
        sys.path.insert(0, root)
        os.environ.setdefault("NIXL_PLUGIN_DIR", os.path.join(root, "nixl_cu13.libs", "nixl"))
    import torch
    from nixl_cu13 import nixl_agent, nixl_agent_config
    agent = nixl_agent("xferlua-bench", nixl_agent_config(backends=["UCX"]))
    host = torch.zeros(buffer, dtype=torch.uint8).pin_memory()
    dev = torch.zeros(buffer, dtype=torch.uint8, device="cuda:0")
    agent.register_memory(host)  # one memory type a list
    agent.register_memory(dev)
    print(f"# batch nixl: NIXL (nixl-cu13, UCX backend, loopback in one agent), blocks in {buffer} bytes")
    for block, count in ((16384, 4096), (262144, 1024)):
        slots = buffer // block
        count = min(count, slots)
        sb, db = scatter(count, slots, 7), scatter(count, slots, 11)
        for direction in ("h2d", "d2h"):
            src, dst = (host, dev) if direction == "h2d" else (dev, host)
            src_type, dst_type = ("DRAM", "VRAM") if direction == "h2d" else ("VRAM", "DRAM")
            src_id, dst_id = (0, 0)
            src_list = [(src.data_ptr() + b * block, block, src_id) for b in sb]
            dst_list = [(dst.data_ptr() + b * block, block, dst_id) for b in db]

            def made():
                h = agent.initialize_xfer("WRITE", agent.get_xfer_descs(src_list, src_type),
                                          agent.get_xfer_descs(dst_list, dst_type), agent.name)
                wait(agent, h)
                agent.release_xfer_handle(h)

            local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", src_list, src_type)
            remote = agent.prep_xfer_dlist(agent.name, dst_list, dst_type)
            idx = list(range(count))
            prepared_handle = agent.make_prepped_xfer("WRITE", local, idx, remote, idx)
            for name, fn in (("nixl-made", made), ("nixl-prepared", lambda: wait(agent, prepared_handle))):
                seconds = timed(fn)
                print(f"batch {name} {direction} {block} {block * count / seconds / 1e9:.2f} GB/s")
            # the bytes landed where the batch put them
            if direction == "h2d":
                host.view(slots, block)[sb[0]].fill_(7)
                wait(agent, prepared_handle)
                torch.cuda.synchronize()
                assert int(dev.view(slots, block)[db[0]][0]) == 7, "NIXL moved the wrong bytes"
            agent.release_xfer_handle(prepared_handle)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # NIXL missing or broken must not stop the table
        print(f"# batch nixl: not measured ({type(e).__name__}: {e})")
