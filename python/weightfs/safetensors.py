"""safetensors, as weightfs reads it (docs/format.md Part III §1), without the safetensors package.

A file is ``N`` (u64 little-endian) | a JSON header of ``N`` bytes | the data section. Every
check of §1 is made: the header length, valid UTF-8 JSON object starting with ``{``, no
duplicate keys, ``__metadata__`` a string-to-string object (or null), each tensor exactly
``dtype``/``shape``/``data_offsets``, a known dtype, non-negative dimensions whose product fits
in 63 bits, ``end - begin == elements * width``, and the tensors tiling the data section from 0
to the end of the file. Any violation raises :class:`MalformedFile` naming the tensor.

Data is read through a read-only memory map (numpy), so opening a file reads only its header.
"""

import json
import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np

__all__ = ["DTYPES", "MalformedFile", "TensorInfo", "SafetensorsFile", "read_header", "checkpoint_shapes"]

MAX_HEADER = 100 << 20  # MaxHeaderLen in delta/safetensors.go


class MalformedFile(ValueError):
    """A file is not valid safetensors as weightfs reads it (delta.ErrMalformed)."""


@dataclass(frozen=True)
class DType:
    name: str  # the safetensors name, "BF16"
    width: int  # bytes per element
    numpy: object  # the numpy dtype holding the values, or None (BF16, F8: no numpy type)
    torch: str  # the torch dtype's attribute name ("bfloat16"), "" when torch has none

    @property
    def raw(self):
        """The unsigned little-endian integer numpy dtype of the element's width: bit-exact moves."""
        return np.dtype({1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}[self.width])

    @property
    def is_float(self):
        return self.name.startswith("F") or self.name == "BF16"


DTYPES = {d.name: d for d in [
    DType("BOOL", 1, np.dtype("bool"), "bool"),
    DType("U8", 1, np.dtype("u1"), "uint8"),
    DType("I8", 1, np.dtype("i1"), "int8"),
    DType("F8_E4M3", 1, None, "float8_e4m3fn"),
    DType("F8_E5M2", 1, None, "float8_e5m2"),
    DType("U16", 2, np.dtype("<u2"), "uint16"),
    DType("I16", 2, np.dtype("<i2"), "int16"),
    DType("BF16", 2, None, "bfloat16"),
    DType("F16", 2, np.dtype("<f2"), "float16"),
    DType("U32", 4, np.dtype("<u4"), "uint32"),
    DType("I32", 4, np.dtype("<i4"), "int32"),
    DType("F32", 4, np.dtype("<f4"), "float32"),
    DType("U64", 8, np.dtype("<u8"), "uint64"),
    DType("I64", 8, np.dtype("<i8"), "int64"),
    DType("F64", 8, np.dtype("<f8"), "float64"),
]}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: DType
    shape: tuple
    begin: int  # relative to the data section
    end: int

    @property
    def elements(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise MalformedFile(f"duplicate key {k!r} in a JSON object")
        out[k] = v
    return out


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def parse_header(raw, file_size, where="file"):
    """Parse the JSON header bytes ``raw`` of a file of ``file_size`` bytes.

    Returns ``(metadata, tensors)``: metadata a dict of str (empty if absent), tensors a dict
    name -> TensorInfo in data order.
    """
    n = len(raw)
    if not raw.startswith(b"{"):
        raise MalformedFile(f"{where}: the header does not start with '{{'")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedFile(f"{where}: the header is not valid UTF-8: {e}") from None
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except MalformedFile as e:
        raise MalformedFile(f"{where}: {e}") from None
    except ValueError as e:
        raise MalformedFile(f"{where}: the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise MalformedFile(f"{where}: the header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise MalformedFile(f"{where}: __metadata__ is not an object of strings")
    data_size = file_size - 8 - n
    tensors = []
    for name, t in header.items():
        if not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}:
            raise MalformedFile(f"{where}: tensor {name!r} is not exactly {{dtype, shape, data_offsets}}")
        dt = DTYPES.get(t["dtype"]) if isinstance(t["dtype"], str) else None
        if dt is None:
            raise MalformedFile(f"{where}: tensor {name!r} has unknown dtype {t['dtype']!r}")
        shape, offs = t["shape"], t["data_offsets"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise MalformedFile(f"{where}: tensor {name!r} has shape {shape!r}")
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs):
            raise MalformedFile(f"{where}: tensor {name!r} has data_offsets {offs!r}")
        elements = 1
        for d in shape:
            elements *= d
        if elements >= 1 << 63 or elements * dt.width >= 1 << 63:
            raise MalformedFile(f"{where}: tensor {name!r}: shape {shape} overflows 63 bits")
        b, e = offs
        if b < 0 or e < b or e - b != elements * dt.width:
            raise MalformedFile(f"{where}: tensor {name!r}: data_offsets [{b}, {e}] do not hold {elements} x {dt.width} bytes")
        tensors.append(TensorInfo(name, dt, tuple(shape), b, e))
    tensors.sort(key=lambda t: (t.begin, t.end))
    at = 0
    for t in tensors:
        if t.begin != at:
            raise MalformedFile(f"{where}: tensor {t.name!r} starts at {t.begin}, not at {at} where the previous one ends")
        at = t.end
    if at != data_size:
        raise MalformedFile(f"{where}: the tensors end at {at}, the data section is {data_size} bytes")
    return meta, {t.name: t for t in tensors}


def read_header(path):
    """Read and check the header of the safetensors file at path: (metadata, tensors, data_start)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        first8 = f.read(8)
        if len(first8) != 8:
            raise MalformedFile(f"{path}: {size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", first8)
        if n > MAX_HEADER or 8 + n > size:
            raise MalformedFile(f"{path}: header length {n} is invalid for a {size}-byte file")
        raw = f.read(n)
    meta, tensors = parse_header(raw, size, where=str(path))
    return meta, tensors, 8 + n


class SafetensorsFile:
    """A checked safetensors file, memory-mapped read-only. Tensors come out as numpy views."""

    def __init__(self, path):
        self.path = str(path)
        self.metadata, self.tensors, self.data_start = read_header(self.path)
        self._map = None

    def _bytes(self):
        if self._map is None:
            if os.path.getsize(self.path) == 0:
                self._map = np.zeros(0, dtype=np.uint8)
            else:
                with open(self.path, "rb") as f:
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self._map = np.frombuffer(mm, dtype=np.uint8)
        return self._map

    def raw(self, name):
        """The tensor's bytes: a read-only uint8 view of the map."""
        t = self.tensors[name]
        return self._bytes()[self.data_start + t.begin:self.data_start + t.end]

    def array(self, name, raw=False):
        """The tensor as a read-only numpy view of its shape. raw=True, and always for BF16 and
        F8, gives the unsigned integers of the element's width (bit-exact, no numpy float type)."""
        t = self.tensors[name]
        dt = t.dtype.raw if raw or t.dtype.numpy is None else t.dtype.numpy
        return self.raw(name).view(dt).reshape(t.shape)

    def numpy_dict(self, raw=False):
        """Every tensor, as writable numpy copies (a state dict to apply patches to)."""
        return {name: self.array(name, raw=raw).copy() for name in self.tensors}

    def torch_dict(self, device="cpu"):
        """Every tensor, as torch tensors of their own dtype on device (copies)."""
        from . import _torch
        return {name: _torch.from_raw(self.raw(name), t.dtype, t.shape, device) for name, t in self.tensors.items()}


def checkpoint_shapes(directory):
    """{tensor name: full shape} of every safetensors file of a checkpoint directory (headers only).

    This is where the shapes come from when a patch does not record them (the optional shape
    extension of docs/format.md Part III §2): a pinned mount's version directory, or the
    engine's local copy of the base checkpoint.
    """
    shapes = {}
    for entry in sorted(os.listdir(directory)):
        if entry.endswith(".safetensors"):
            _, tensors, _ = read_header(os.path.join(directory, entry))
            for name, t in tensors.items():
                shapes[name] = t.shape
    return shapes
