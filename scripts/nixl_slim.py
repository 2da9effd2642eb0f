#!/usr/bin/env python3
"""scripts/nixl_slim.py WHEEL OUT_TGZ: the part of a nixl-cu13 wheel that the benchmarks use
(its Python package, the UCX and POSIX plugins, UCX's CUDA and shared-memory transports, and
every library those need, found by their ELF NEEDED entries), packed as a tarball to unpack
anywhere and name in XFER_NIXL_DIR. Why: the whole wheel is 59 MB packed and 240 MB unpacked
(AWS, Azure, gRPC plugins, NIXL-EP for three PyTorch versions), more than the device tool
carries beside .gpu; this part is about 12 MB packed. Libraries are copied byte for byte (no
strip: auditwheel patched them, and their RPATHs must stay as built)."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

PLUGINS = ("libplugin_UCX.so", "libplugin_POSIX.so")
UCX_MODULES = ("libucm_cuda.so.0.0.0", "libuct_cma.so.0.0.0", "libuct_cuda.so.0.0.0")


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", out)


def closure(root, starts):
    """Every file under root that starts need, starts included (relative paths)."""
    by_name = {}
    for where, _, files in os.walk(root):
        for name in files:
            by_name.setdefault(name, os.path.relpath(os.path.join(where, name), root))
    seen, todo = set(), list(starts)
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        todo += [by_name[n] for n in needed(os.path.join(root, rel)) if n in by_name]
    return seen


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    wheel, out = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as whl:
            whl.extractall(tmp)
        package = "nixl_cu13"
        starts = [os.path.join(package, f) for f in os.listdir(os.path.join(tmp, package)) if f.endswith(".so")]
        starts += [os.path.join(package + ".libs", "nixl", p) for p in PLUGINS]
        starts += [os.path.join(package + ".libs", "ucx", m) for m in UCX_MODULES]
        keep = closure(tmp, starts)
        keep |= {os.path.join(package, f) for f in os.listdir(os.path.join(tmp, package))
                 if f.endswith(".py") or f == "py.typed"}
        with tarfile.open(out, "w:gz") as tar:
            for rel in sorted(keep):
                tar.add(os.path.join(tmp, rel), arcname=rel)
    print(f"scripts/nixl_slim.py: {len(keep)} files of {os.path.basename(wheel)} in {out} "
          f"({os.path.getsize(out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    shutil.which("readelf") or sys.exit("scripts/nixl_slim.py: readelf (binutils) is needed")
    main()
