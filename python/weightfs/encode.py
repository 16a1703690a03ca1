"""Bytes as weightfs and safetensors write them: headers, the patch's metadata, the index.

Two header layouts, both padded with spaces to a multiple of 8 (docs/format.md Part III §1):

- :func:`safetensors_header` is what safetensors' ``save_file`` (and so transformers'
  ``save_pretrained``) writes: ``__metadata__`` first, then the tensors sorted by dtype,
  widest first in safetensors' own order of dtypes, then by name, laid out in that order. A
  metadata of one key (``{"format": "pt"}``, what ``save_pretrained`` gives) is written as
  safetensors writes it; with several keys safetensors' order is a Rust ``HashMap``'s, so
  ours (sorted) may differ from a given run of theirs.
- :func:`patch_header` is ``delta.EncodeHeader`` of the patch (docs/format.md Part III §2):
  ``__metadata__`` first with sorted keys, then the entries in the given order.

Strings are JSON-escaped as Go's ``encoding/json`` without HTML escaping does (what the store
writes); names and metadata of real checkpoints are plain ASCII, where every writer agrees.
"""

import json
import struct

import numpy as np

__all__ = ["json_string", "safetensors_header", "patch_header", "index_json", "python_float", "leb128_gaps",
           "leb128_gaps_decode", "GapsError"]

# safetensors' Dtype enum order (safetensors/src/tensor.rs); save_file sorts widest (last) first.
_ST_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
             "F32", "F64", "I64", "U64"]
_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def json_string(s, go=True):
    """s as a JSON string: Go's encoding (go=True: U+2028/U+2029 escaped too) or serde_json's."""
    out = ['"']
    for ch in s:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ord(ch) < 0x20 or (go and ch in "\u2028\u2029"):
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _meta(meta, go):
    return '"__metadata__":{' + ",".join(json_string(k, go) + ":" + json_string(meta[k], go) for k in sorted(meta)) + "}"


def _entry(name, dtype, shape, begin, end, go):
    return (json_string(name, go) + ':{"dtype":"' + dtype + '","shape":[' + ",".join(str(int(d)) for d in shape)
            + '],"data_offsets":[' + str(begin) + "," + str(end) + "]}")


def _finish(parts):
    js = ("{" + ",".join(parts) + "}").encode("utf-8")
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js


def safetensors_order(tensors):
    """tensors (name, DType, shape) in the order save_file lays them out."""
    return sorted(tensors, key=lambda t: (-_ST_ORDER.index(t[1].name), t[0]))


def safetensors_header(tensors, metadata=None):
    """(header bytes, [(name, DType, shape, begin, end)] in data order) of a file save_file writes.

    tensors is [(name, DType, shape)] in any order.
    """
    parts = [] if metadata is None else [_meta(metadata, go=False)]
    laid, off = [], 0
    for name, dt, shape in safetensors_order(tensors):
        n = 1
        for d in shape:
            n *= int(d)
        laid.append((name, dt, tuple(int(d) for d in shape), off, off + n * dt.width))
        parts.append(_entry(name, dt.name, shape, off, off + n * dt.width, go=False))
        off += n * dt.width
    return _finish(parts), laid


def patch_header(meta, entries):
    """delta.EncodeHeader(meta, entries): entries is [(name, dtype name, length)], 1-D, in data
    order. Returns (header bytes, [(begin, end)])."""
    parts = [_meta(meta, go=True)]
    offs, off = [], 0
    for name, dtype, width, n in entries:
        parts.append(_entry(name, dtype, [n], off, off + n * width, go=True))
        offs.append((off, off + n * width))
        off += n * width
    return _finish(parts), offs


def go_json(v):
    """v (lists, dicts, str, int) as Go's json.Marshal writes it: compact, map keys sorted."""
    if isinstance(v, dict):
        return "{" + ",".join(json_string(k) + ":" + go_json(v[k]) for k in sorted(v)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    if isinstance(v, str):
        return json_string(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(int(v))


def python_float(v):
    """str(float): what the patch's sparsity is written as (Go's pythonFloat agrees)."""
    return str(float(v))


def index_json(weight_map, total_size):
    """model.safetensors.index.json as transformers' save_pretrained writes it."""
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8")


class GapsError(ValueError):
    """A leb128_gaps stream that is not one (patch.py raises it as MalformedPatch)."""


def leb128_gaps(idx):
    """The leb128_gaps stream (docs/format.md Part III §2, "Index encodings") of the strictly
    ascending non-negative indices idx: a uint8 numpy array holding, as unsigned LEB128 varints
    in their shortest form, the first index and then each idx[k]-idx[k-1]-1. Vectorized, no
    Python loop per index: at RL densities nearly every gap is below 128, a varint of one
    byte, so the stream is the gaps' low bytes with the few longer varints' further bytes
    slotted in (their places computed for them alone), one numpy pass per further byte of the
    longest. The gaps are taken in int32 when the indices are int32 (a third of int64's time)."""
    idx = np.asarray(idx).reshape(-1)
    n = idx.size
    if n == 0:
        return np.zeros(0, np.uint8)
    narrow = idx.dtype.kind == "i" and idx.dtype.itemsize <= 4
    gaps = np.empty(n, np.int32 if narrow else np.int64)
    gaps[0] = idx[0]
    np.subtract(idx[1:], idx[:-1], out=gaps[1:], casting="unsafe")
    gaps[1:] -= 1
    if gaps.min() < 0:
        raise ValueError("leb128_gaps: the indices are not strictly ascending and non-negative")
    long = np.flatnonzero(gaps >= 0x80)  # the varints of more than one byte
    first = gaps.astype(np.uint8)  # each varint's first byte: its low 7 bits, and 0x80 if more follow
    if long.size == 0:
        return first
    first &= 0x7F
    first[long] |= 0x80
    rest = gaps[long].astype(np.int64) >> 7  # what the long ones hold past their first byte
    more = np.zeros(long.size, np.int64)  # their bytes past the first
    r = rest
    while True:
        nz = r != 0
        if not nz.any():
            break
        more += nz
        r = r >> 7
    before = np.cumsum(more)
    out = np.empty(n + int(before[-1]), np.uint8)
    before -= more
    at = long + before  # where each long varint starts in the stream
    firsts = np.ones(out.size, bool)  # where the first bytes go
    k = 1
    while rest.size:
        p = at + k
        firsts[p] = False
        out[p] = (rest & 0x7F).astype(np.uint8) | ((more > k).view(np.uint8) << 7)
        go_on = np.flatnonzero(more > k)
        if go_on.size < rest.size:
            rest, at, more = rest[go_on], at[go_on], more[go_on]
        rest = rest >> 7
        k += 1
    out[firsts] = first
    return out


def leb128_gaps_decode(stream, n, elements, index_dtype=np.int64):
    """The n indices of a leb128_gaps stream (bytes or a uint8 array) of a tensor of elements
    elements, as index_dtype; raises GapsError on what ``delta.OpenPatch`` refuses: a varint not
    in its shortest form or of more than 9 bytes, a gap past the tensor's end, a stream that
    does not hold exactly n varints."""
    b = np.frombuffer(stream, np.uint8) if not isinstance(stream, np.ndarray) else stream.reshape(-1)
    if n == 0:
        if b.size:
            raise GapsError("the gaps hold more bytes than their 0 indices")
        return np.zeros(0, index_dtype)
    ends = np.flatnonzero(b < 0x80)  # the last byte of each varint
    if ends.size < n or (ends.size == n and ends[-1] != b.size - 1):
        raise GapsError(f"the gaps end after {min(ends.size, n - 1)} indices, the values say {n}")
    if ends.size > n or ends[-1] != b.size - 1:
        raise GapsError(f"the gaps hold more bytes than their {n} indices")
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lens = ends - starts + 1
    if lens.max() > 9 or bool(np.any((lens > 1) & (b[ends] == 0))):
        raise GapsError("a gap is an overlong varint")
    shift = (np.arange(b.size, dtype=np.int64) - np.repeat(starts, lens)) * 7
    gaps = np.add.reduceat((b & 0x7F).astype(np.uint64) << shift.astype(np.uint64), starts)
    if int(gaps.max()) >= elements:
        raise GapsError(f"a gap runs past the tensor's {elements} elements")
    idx = np.cumsum(gaps + np.uint64(1)) - np.uint64(1)  # each term < elements < 2^63: no wrap below 2^64
    if int(idx[-1]) >= elements:
        raise GapsError(f"the gaps run past the tensor's {elements} elements")
    return idx.astype(index_dtype)
