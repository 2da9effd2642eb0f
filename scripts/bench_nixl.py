#!/usr/bin/env python3
"""scripts/bench_nixl.py BYTES [NIXL_DIR]: the batch table's blocks moved by NIXL (its UCX
backend), the same blocks (scatter) in a buffer of BYTES in pinned host memory and on cuda:0:
- loopback: one agent, DRAM <-> VRAM of cuda:0 in this process;
- two processes: this process's DRAM -> another process's VRAM and back (the other agent's
  metadata and descriptors passed over a pipe, as a serving engine's peers exchange them).
Each by a transfer made from descriptor lists each time (initialize_xfer) and by a prepared one
(prep_xfer_dlist once, make_prepped_xfer once, transfer timed). UCX_TLS is left as the caller
set it (unset: UCX picks; the table's note says which lanes). NIXL_DIR: an unpacked nixl-cu13
wheel (the GPU machine cannot install one). Prints "batch nixl-<how> <dir> <block> <GB/s>"
lines, or "# batch nixl: not measured (why)"."""
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_frameworks import scatter  # noqa: E402  (the batch table's blocks, one definition)

SHAPES = ((16384, 4096), (262144, 1024))


def use_wheel(root):
    if root:
        sys.path.insert(0, root)
        os.environ.setdefault("NIXL_PLUGIN_DIR", os.path.join(root, "nixl_cu13.libs", "nixl"))


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


def make_agent(name):
    from nixl_cu13 import nixl_agent, nixl_agent_config
    return nixl_agent(name, nixl_agent_config(backends=["UCX"]))


def measure(agent, peer, local, local_type, remote_addr, remote_type, label, direction):
    """The blocks of SHAPES between `local` (a tensor here) and `remote_addr` (the peer's buffer),
    WRITE for h2d (local DRAM -> peer VRAM) and READ for d2h (peer VRAM -> local DRAM)."""
    op = "WRITE" if direction == "h2d" else "READ"
    for block, count in SHAPES:
        slots = local.numel() // block
        count = min(count, slots)
        lb, rb = scatter(count, slots, 7), scatter(count, slots, 11)
        local_list = [(local.data_ptr() + b * block, block, 0) for b in lb]
        remote_list = [(remote_addr + b * block, block, 0) for b in rb]

        def made():
            h = agent.initialize_xfer(op, agent.get_xfer_descs(local_list, local_type),
                                      agent.get_xfer_descs(remote_list, remote_type), peer)
            wait(agent, h)
            agent.release_xfer_handle(h)

        here = agent.prep_xfer_dlist("NIXL_INIT_AGENT", local_list, local_type)
        there = agent.prep_xfer_dlist(peer, remote_list, remote_type)
        idx = list(range(count))
        prepared = agent.make_prepped_xfer(op, here, idx, there, idx)
        for how, fn in (("made", made), ("prepared", lambda: wait(agent, prepared))):
            seconds = timed(fn)
            print(f"batch nixl{label}-{how} {direction} {block} {block * count / seconds / 1e9:.2f} GB/s",
                  flush=True)
        agent.release_xfer_handle(prepared)


def loopback(buffer):
    import torch
    agent = make_agent("xferlua-bench")
    host = torch.zeros(buffer, dtype=torch.uint8).pin_memory()
    dev = torch.zeros(buffer, dtype=torch.uint8, device="cuda:0")
    agent.register_memory(host)  # one memory type a list
    agent.register_memory(dev)
    print(f"# batch nixl: NIXL (nixl-cu13, UCX backend, loopback in one agent; UCX_TLS="
          f"{os.environ.get('UCX_TLS', 'unset')}), blocks in {buffer} bytes", flush=True)
    for direction in ("h2d", "d2h"):
        measure(agent, agent.name, host, "DRAM", dev.data_ptr(), "VRAM", "", direction)
    # the bytes landed where the batch put them
    block, count = SHAPES[0]
    slots = buffer // block
    sb, db = scatter(count, slots, 7), scatter(count, slots, 11)
    host.view(slots, block)[sb[0]].fill_(7)
    src_one, dst_one = [(host.data_ptr() + sb[0] * block, block, 0)], [(dev.data_ptr() + db[0] * block, block, 0)]
    h = agent.initialize_xfer("WRITE", agent.get_xfer_descs(src_one, "DRAM"),
                              agent.get_xfer_descs(dst_one, "VRAM"), agent.name)
    wait(agent, h)
    agent.release_xfer_handle(h)
    torch.cuda.synchronize()
    assert int(dev.view(slots, block)[db[0]][0]) == 7, "NIXL moved the wrong bytes"


def serve(root, buffer, conn):
    """The other process: an agent with a VRAM buffer, its metadata sent, then waits."""
    use_wheel(root)
    import torch
    agent = make_agent("xferlua-bench-target")
    dev = torch.zeros(buffer, dtype=torch.uint8, device="cuda:0")
    agent.register_memory(dev)
    conn.send((agent.get_agent_metadata(), dev.data_ptr()))
    conn.recv()  # until the other side is done


def two_processes(root, buffer):
    import torch
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=serve, args=(root, buffer, there), daemon=True)
    child.start()
    try:
        if not here.poll(120):
            raise RuntimeError("the other process did not start its agent")
        metadata, remote_addr = here.recv()
        agent = make_agent("xferlua-bench-initiator")
        host = torch.zeros(buffer, dtype=torch.uint8).pin_memory()
        agent.register_memory(host)
        peer = agent.add_remote_agent(metadata)
        if isinstance(peer, bytes):
            peer = peer.decode()
        print("# batch nixl: two processes (this one's DRAM <-> the other's VRAM of cuda:0)", flush=True)
        for direction in ("h2d", "d2h"):
            measure(agent, peer, host, "DRAM", remote_addr, "VRAM", "-2proc", direction)
    finally:
        here.send("done")
        child.join(30)


def main():
    buffer = int(sys.argv[1])
    root = sys.argv[2] if len(sys.argv) > 2 else ""
    use_wheel(root)
    try:
        loopback(buffer)
    except Exception as e:  # NIXL missing or broken must not stop the table
        print(f"# batch nixl: not measured ({type(e).__name__}: {e})", flush=True)
        return
    try:
        two_processes(root, buffer)
    except Exception as e:
        print(f"# batch nixl two processes: not measured ({type(e).__name__}: {e})", flush=True)


if __name__ == "__main__":
    main()
