#!/usr/bin/env python3
"""The loaders users would otherwise pick, on the file scripts/bench_tables/files.lua wrote:
safetensors (safetensors.torch.load_file onto a device, or safetensors.numpy to the host where
PyTorch is absent) and fastsafetensors, cold (the file dropped from the page cache first with
posix_fadvise) and warm. Prints one line a measurement:
    files <tool> <cold|warm> <device> <GB/s> <seconds>
and "# files ..." lines saying what could not run and why. Usage: bench_files.py FILE DEVICE..."""
import os
import sys
import time


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 26):
            pass


def timed(path, mode, load):
    if mode == "cold":
        drop(path)
    else:
        warm(path)
    t0 = time.perf_counter()
    nbytes = load()
    return nbytes, time.perf_counter() - t0


def main():
    path, devices = sys.argv[1], sys.argv[2:]
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any failure to import means "not here"
        torch = None
        print(f"# files PyTorch: not importable ({e.__class__.__name__})")
    try:
        import safetensors
        import safetensors.numpy
    except Exception as e:  # noqa: BLE001
        safetensors = None
        print(f"# files safetensors: not importable ({e})")
    for dev in devices:
        tdev = "cpu" if dev == "host" else dev
        if safetensors and torch and (dev == "host" or torch.cuda.is_available()):
            import safetensors.torch

            def load_st():
                out = safetensors.torch.load_file(path, device=tdev)
                if tdev != "cpu":
                    torch.cuda.synchronize()
                n = sum(t.numel() * t.element_size() for t in out.values())
                del out
                return n
            for mode in ("cold", "warm"):
                n, s = timed(path, mode, load_st)
                print(f"files safetensors.torch {mode} {dev} {n / s / 1e9:.3f} {s:.3f}", flush=True)
        elif safetensors and dev == "host":
            def load_np():
                out = safetensors.numpy.load_file(path)
                return sum(a.nbytes for a in out.values())
            for mode in ("cold", "warm"):
                n, s = timed(path, mode, load_np)
                print(f"files safetensors.numpy {mode} {dev} {n / s / 1e9:.3f} {s:.3f}", flush=True)
        if torch and dev.startswith("cuda") and torch.cuda.is_available():
            try:
                from fastsafetensors import SafeTensorsFileLoader, SingleGroup
            except Exception as e:  # noqa: BLE001
                print(f"# files fastsafetensors: not importable ({e})")
                continue
            for nogds in (False, True):
                def load_fst():
                    loader = SafeTensorsFileLoader(SingleGroup(), device=tdev, nogds=nogds)
                    loader.add_filenames({0: [path]})
                    fb = loader.copy_files_to_device()
                    n = 0
                    for key in fb.key_to_rank_lidx.keys():
                        t = fb.get_tensor(key)
                        n += t.numel() * t.element_size()
                    torch.cuda.synchronize()
                    fb.close()
                    loader.close()
                    return n
                try:
                    for mode in ("cold", "warm"):
                        n, s = timed(path, mode, load_fst)
                        name = "fastsafetensors" + ("(nogds)" if nogds else "(gds)")
                        print(f"files {name} {mode} {dev} {n / s / 1e9:.3f} {s:.3f}", flush=True)
                except Exception as e:  # noqa: BLE001
                    print(f"# files fastsafetensors nogds={nogds}: {e.__class__.__name__}: {e}"[:300])


def nixl_posix(path, root):
    """NIXL's POSIX backend (file -> DRAM, 16 MiB descriptors), cold and warm, where the wheel
    is installed or unpacked at `root` (XFER_NIXL_DIR)."""
    if root:
        sys.path.insert(0, root)
        os.environ.setdefault("NIXL_PLUGIN_DIR", os.path.join(root, "nixl_cu13.libs", "nixl"))
    try:
        import numpy as np
        from nixl_cu13 import nixl_agent, nixl_agent_config
    except Exception as e:  # noqa: BLE001
        print(f"# files NIXL: not importable ({e.__class__.__name__}: {e})"[:200])
        return
    try:
        agent = nixl_agent("xferlua-files", nixl_agent_config(backends=["POSIX"]))
    except Exception as e:  # noqa: BLE001
        print(f"# files NIXL POSIX: no agent ({e.__class__.__name__}: {e})"[:200])
        return
    size = os.path.getsize(path)
    piece = 16 << 20
    buf = np.empty(size, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, size, 0, "")], "DRAM")  # a list: NIXL takes no ndarray
    for mode in ("cold", "warm"):
        fd = os.open(path, os.O_RDONLY)
        try:
            files = [(off, min(piece, size - off), fd, "") for off in range(0, size, piece)]
            reg = agent.register_memory(files, "FILE")
            local = [(buf.ctypes.data + off, min(piece, size - off), 0) for off in range(0, size, piece)]
            remote = [(off, min(piece, size - off), fd) for off in range(0, size, piece)]

            def load():
                h = agent.initialize_xfer("READ", agent.get_xfer_descs(local, "DRAM"),
                                          agent.get_xfer_descs(remote, "FILE"), "xferlua-files")
                state = agent.transfer(h)
                while state == "PROC":
                    state = agent.check_xfer_state(h)
                agent.release_xfer_handle(h)
                if state != "DONE":
                    raise RuntimeError("transfer state " + state)
                return size
            n, s = timed(path, mode, load)
            print(f"files NIXL-POSIX {mode} host {n / s / 1e9:.3f} {s:.3f}", flush=True)
            agent.deregister_memory(reg)
        except Exception as e:  # noqa: BLE001
            print(f"# files NIXL POSIX: {e.__class__.__name__}: {e}"[:300])
            break
        finally:
            os.close(fd)


if __name__ == "__main__":
    main()
    nixl_posix(sys.argv[1], os.environ.get("XFER_NIXL_DIR", ""))
