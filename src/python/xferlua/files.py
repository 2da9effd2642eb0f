"""Tensor files: safetensors, .npy and .npz, and Hugging Face's shard indexes
(model.safetensors.index.json), loaded straight onto devices and saved from any device. The
bytes move in the extension (the GIL released); this file chooses each tensor's device and
dtype, and reads indexes."""
import builtins
import json
import os
from typing import Any, Dict, Optional, Union

from . import _xferlua as _x

_IO = ("direct", "engine", "chunk", "depth", "verify", "timeout")


class File:
    """An opened tensor file: path, format ('safetensors', 'npy', 'npz'), size, names(),
    entries() (dicts: name, dtype, shape, offset, nbytes, deflated, fortran_order), metadata()
    (safetensors' __metadata__), load(). Only the header is read to open it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.format, self.size, rows, self._metadata = _x._file_info(self.path)
        self._entries = [{"name": r[0], "dtype": r[1], "shape": r[2], "offset": r[3], "nbytes": r[4],
                          "deflated": r[5], "fortran_order": r[6]} for r in rows]

    def names(self):
        return [e["name"] for e in self._entries]

    def entries(self):
        return [dict(e) for e in self._entries]

    def info(self, name):
        for e in self._entries:
            if e["name"] == name:
                return dict(e)
        raise _invalid("%s has no tensor '%s'" % (self.path, name))

    def metadata(self):
        return dict(self._metadata)

    def __len__(self):
        return len(self._entries)

    def __repr__(self):
        return "xferlua.File(%s: %s, %d tensors)" % (self.path, self.format, len(self._entries))

    def _items(self, device, dtype, names, shard=None):
        if names is None:
            chosen = self._entries
        else:
            chosen = [self.info(n) for n in names]
        items = []
        for e in chosen:
            want = dtype(e["name"], dict(e)) if callable(dtype) else dtype
            if want is not None:
                want = str(want).replace("torch.", "")
                floating = e["dtype"] in ("f16", "bf16", "f32", "f64")
                if not callable(dtype) and not floating:
                    want = None  # integers and bools stay
            split = shard(e["name"], dict(e)) if callable(shard) else shard
            if split is not None:
                items.extend(_parts(e, split, want))
                continue
            dev = device(e["name"], dict(e)) if callable(device) else device
            items.append((e["name"], "host" if dev is None else dev, want))
        return items

    def load(self, names=None, *, device="host", dtype=None, shard=None, asynchronous=False, **io):
        """{name: Tensor} of every tensor (or those of `names`); device, dtype and shard as
        load's."""
        _check_io(io)
        if isinstance(names, str):
            names = [names]
        return _x._load(self.path, self._items(device, dtype, names, shard), asynchronous=asynchronous, **io)


def split_part(n: int, parts: int, part: int) -> "tuple":
    """Elements [begin, end) of part `part` of `parts` of a dimension of n, as numpy.array_split
    and torch.tensor_split cut it (the first n % parts parts one longer); as the C core cuts."""
    each, longer = divmod(n, parts)
    begin = part * each + min(part, longer)
    return begin, begin + each + (1 if part < longer else 0)


def _parts(e, split, want):
    """The items of entry e split across devices: split is {"dim": d, "devices": [...]}."""
    if not isinstance(split, dict) or set(split) - {"dim", "devices"}:
        raise _invalid("shard of '%s' is {'dim': d, 'devices': [...]} (or a function (name, info) "
                       "giving one), not %r" % (e["name"], split))
    dim, devices = split.get("dim"), split.get("devices")
    if isinstance(dim, bool) or not isinstance(dim, int) or not isinstance(devices, (list, tuple)) or not devices:
        raise _invalid("shard of '%s' needs dim (a whole number) and devices (a list of one device "
                       "or more)" % e["name"])
    size = e["shape"][dim] if 0 <= dim < len(e["shape"]) else 0  # (the core names a bad dim)
    return [(e["name"], dev, want, dim) + split_part(size, len(devices), k) + (k, len(devices))
            for k, dev in enumerate(devices)]


def _invalid(message):
    from . import Invalid
    return Invalid(message)


def _check_io(io):
    for key in io:
        if key not in _IO:
            raise TypeError("unexpected keyword argument '%s' (I/O options: %s)" % (key, ", ".join(_IO)))


def open(path: Union[str, "os.PathLike[str]"]) -> File:  # noqa: A001  (xferlua.open, as xfer.open in Lua)
    """The file's header: an xferlua.File."""
    return File(path)


def _is_index(path):
    return os.fspath(path).endswith(".json")


def _read_index(path):
    with builtins.open(path, "rb") as f:
        index = json.load(f)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise _invalid("%s: a shard index has a 'weight_map' of tensor names to files" % path)
    folder = os.path.dirname(os.path.abspath(path))
    shards = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or "\0" in name or os.path.basename(shard) != shard:
            raise _invalid("%s: shard '%s' of '%s' is not a file beside the index" % (path, shard, name))
        shards.setdefault(os.path.join(folder, shard), []).append(name)
    return shards


def load(path: Union[str, "os.PathLike[str]"], *, device: Any = "host", dtype: Any = None,
         names: Optional[list] = None, shard: Any = None, **io: Any) -> Union[Dict[str, Any], Any]:
    """Every tensor of a safetensors or .npz file as {name: Tensor} (an .npy file: its one array
    as the Tensor itself), read straight onto `device` -- a name, a Device, or a function
    (name, info) -> device. dtype: every floating-point tensor converted to it (or a function
    (name, info) -> dtype or None). names: only these. shard: {"dim": d, "devices": [...]} (or a
    function (name, info) -> that or None): the tensor split along dimension d, a part on each
    device read straight out of the file's chunks, as numpy.array_split cuts it; its name then
    gives the list of the parts. A shard index
    (model.safetensors.index.json) loads every shard's tensors. verify=True checks each tensor
    against the CRC32C the file records; timeout (seconds); direct, engine, chunk, depth: the I/O.
    On failure nothing loaded stays."""
    _check_io(io)
    path = os.fspath(path)
    if _is_index(path):
        wanted = None if names is None else set(names)
        out = {}
        try:
            for shard_file, in_shard in _read_index(path).items():
                pick = in_shard if wanted is None else [n for n in in_shard if n in wanted]
                if pick:
                    out.update(File(shard_file).load(pick, device=device, dtype=dtype, shard=shard, **io))
        except BaseException:
            _free_all(out)
            raise
        if wanted is not None and len(out) != len(wanted):
            missing = sorted(wanted - set(out))
            _free_all(out)
            raise _invalid("%s: no tensor %s in its shards" % (path, ", ".join(missing)))
        return out
    f = File(path)
    got = f.load(names, device=device, dtype=dtype, shard=shard, **io)
    if f.format == "npy" and names is None:
        return got[""]
    return got


def _free_all(loaded):
    for t in loaded.values():
        for part in (t if isinstance(t, list) else [t]):
            part.free()


def load_async(path: Union[str, "os.PathLike[str]"], *, device: Any = "host", dtype: Any = None,
               names: Optional[list] = None, shard: Any = None, **io: Any) -> Any:
    """load() as a Job: wait() gives the dict; cancel() stops it between its requests and keeps
    nothing. Not for a shard index (load its shards' jobs)."""
    _check_io(io)
    if _is_index(path):
        raise _invalid("load_async: a shard index loads shard by shard (load_async each shard)")
    return File(path).load(names, device=device, dtype=dtype, shard=shard, asynchronous=True, **io)


def _pairs(tensors):
    from . import Tensor
    if isinstance(tensors, Tensor):
        return [""], [tensors]
    if not isinstance(tensors, dict):
        raise _invalid("save: tensors are a dict {name: tensor} (or one tensor for .npy)")
    names = sorted(tensors)
    return names, [tensors[n] for n in names]


def save(path: Union[str, "os.PathLike[str]"], tensors: Any, *, metadata: Optional[Dict[str, str]] = None,
         format: Optional[str] = None, sync: bool = True, **io: Any) -> None:  # noqa: A002
    """Writes tensors ({name: Tensor}, in name order; one Tensor for .npy) from any device to
    path, by way of a temporary file renamed over it once whole (a failed save leaves path as it
    was). Every safetensors file records each tensor's CRC32C in its __metadata__
    ('crc32c.NAME'). metadata: strings to strings; format: 'safetensors', 'npy' or 'npz' (default
    by the extension); verify=True reads the file back and compares before putting it in place."""
    _check_io(io)
    names, ts = _pairs(tensors)
    _x._save(os.fspath(path), names, ts, metadata, format=format, sync=sync, **io)


def save_async(path: Union[str, "os.PathLike[str]"], tensors: Any, *, metadata: Optional[Dict[str, str]] = None,
               format: Optional[str] = None, sync: bool = True, **io: Any) -> Any:  # noqa: A002
    """save() as a Job: wait() gives True once the file is in place; cancel() leaves no file."""
    _check_io(io)
    names, ts = _pairs(tensors)
    return _x._save(os.fspath(path), names, ts, metadata, format=format, sync=sync, asynchronous=True, **io)
