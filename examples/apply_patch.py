#!/usr/bin/python3
"""Apply a weightfs one-file sparse patch to a local safetensors file, in place.

    apply_patch.py PATCH FILE [--name NAME] [--sha256]

PATCH is a ``patches/weight_vNNNNNN.safetensors`` file (format ``sparse_weight_patch``,
version ``1``; see docs/format.md (Part III)). FILE is the local copy of one file of the base
version; NAME is its path inside the version (default: the base name of FILE).

This is the reference reader: plain ``json`` + ``numpy`` over an ``np.memmap`` of the target,
no safetensors or torch package. Values are moved as unsigned integers of the dtype's width
(bf16 as uint16, f32 as uint32, ...), so the copy is bit-exact, NaN payloads and -0 included.

Steps: check that FILE's hash is the patch's base (or already its result: then nothing is
done), copy the new values in, check that the hash is now the recorded result (if not, the
old values are put back). Unlike ``weightfs apply`` it keeps no crash journal.

The hash is xxh3-128 (``base_xxh3:NAME`` / ``result_xxh3:NAME``, several times faster) when
the patch records it and the ``xxhash`` module is installed (Debian: python3-xxhash), else
SHA-256 (``base_sha256:NAME`` / ``result_sha256:NAME``); ``--sha256`` forces SHA-256.

In an engine the same patch is applied to live parameters with torch, per changed tensor::

    indices = patch.get_tensor(f"{name}.indices").long()
    values = patch.get_tensor(f"{name}.values")
    param.view(-1).index_copy_(0, indices, values)   # idempotent, no arithmetic

The weightfs Python client (``pip install --no-build-isolation ./python``) does that for a
whole state dict, numpy or torch, with the checks and an optional per-tensor digest check:
``weightfs.Patch.open(PATCH).apply(state_dict, verify=True)``; see docs/engines.md.

Exit status: 0 on success (or already applied), 1 on any error.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np

try:
    import xxhash
except ImportError:  # SHA-256 only
    xxhash = None

MAX_HEADER = 100 << 20
WIDTH = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2,
         "BF16": 2, "F16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}
UINT = {1: np.uint8, 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}
INDEX = {"I32": np.dtype("<i4"), "I64": np.dtype("<i8")}


class PatchError(Exception):
    pass


def read_header(path):
    """Return (header dict, data start offset) of a safetensors file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        first8 = f.read(8)
        if len(first8) != 8:
            raise PatchError(f"{path}: {size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", first8)
        if n > MAX_HEADER or 8 + n > size:
            raise PatchError(f"{path}: header length {n} is invalid for a {size}-byte file")
        header = json.loads(f.read(n).decode("utf-8"))
    if not isinstance(header, dict):
        raise PatchError(f"{path}: header is not a JSON object")
    return header, 8 + n


def hash_of(array, kind):
    """Hex digest of the bytes of array: kind is "xxh3-128" or "sha256"."""
    h = xxhash.xxh3_128() if kind == "xxh3-128" else hashlib.sha256()
    step = 16 << 20
    for off in range(0, len(array), step):
        h.update(array[off:off + step])
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("patch")
    ap.add_argument("file")
    ap.add_argument("--name", help="path of FILE inside the version (default: its base name)")
    ap.add_argument("--sha256", action="store_true", help="check by SHA-256 even when xxh3-128 is available")
    args = ap.parse_args()
    name = args.name or os.path.basename(args.file)

    header, pstart = read_header(args.patch)
    meta = header.get("__metadata__") or {}
    if meta.get("format") != "sparse_weight_patch" or meta.get("version") != "1":
        raise PatchError(f"unsupported patch format {meta.get('format')!r} version {meta.get('version')!r}")
    if meta.get("encoding", "raw") != "raw" or meta.get("sparse") != "True":
        raise PatchError("patch indices are not raw sparse indices")
    if name not in json.loads(meta["files"]):
        raise PatchError(f"the patch changes no file {name!r}")
    if name in json.loads(meta["whole_files"]):
        raise PatchError(f"{name!r} is carried whole: copy tensor '__file__:{name}' instead")
    kind, prefix = "sha256", "sha256"
    if xxhash is not None and not args.sha256 and "result_xxh3:" + name in meta:
        kind, prefix = "xxh3-128", "xxh3"
    want_base = meta[f"base_{prefix}:" + name]
    want_result = meta[f"result_{prefix}:" + name]
    params = json.loads(meta["params:" + name])

    patch = np.memmap(args.patch, dtype=np.uint8, mode="r")
    theader, tstart = read_header(args.file)
    target = np.memmap(args.file, dtype=np.uint8, mode="r+")

    have = hash_of(target, kind)
    if have == want_result:
        print(f"{name}: already the result ({kind} {have}); nothing to do")
        return 0
    if have != want_base:
        raise PatchError(f"{name}: {kind} {have} is not the patch's base {want_base}")

    undo = []
    for pname, info in params.items():
        t = theader.get(pname)
        dtype, elements = info["dtype"], int(info["elements"])
        if not t or t["dtype"] != dtype or int(np.prod(t["shape"], dtype=np.int64)) != elements:
            raise PatchError(f"{name}: tensor {pname!r} is not {dtype} with {elements} elements")
        width = WIDTH[dtype]
        ie, ve = header[pname + ".indices"], header[pname + ".values"]
        idx = patch[pstart + ie["data_offsets"][0]:pstart + ie["data_offsets"][1]].view(INDEX[ie["dtype"]])
        vals = patch[pstart + ve["data_offsets"][0]:pstart + ve["data_offsets"][1]].view(UINT[width])
        if len(idx) != len(vals) or len(idx) == 0:
            raise PatchError(f"{pname}: {len(idx)} indices for {len(vals)} values")
        if idx[0] < 0 or idx[-1] >= elements or np.any(np.diff(idx) <= 0):
            raise PatchError(f"{pname}: indices are not ascending within {elements} elements")
        begin, end = t["data_offsets"]
        flat = target[tstart + begin:tstart + end].view(UINT[width])
        undo.append((flat, idx, flat[idx].copy()))
        flat[idx] = vals  # the numpy form of param.view(-1).index_copy_(0, indices, values)

    have = hash_of(target, kind)
    if have != want_result:
        for flat, idx, old in undo:
            flat[idx] = old
        target.flush()
        raise PatchError(f"{name}: patched {kind} {have} is not the recorded result {want_result}; restored")
    target.flush()
    changed = sum(len(i) for _, i, _ in undo)
    print(f"{name}: applied {changed} changed elements in {len(undo)} tensors; {kind} {have}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (PatchError, KeyError, ValueError, OSError) as e:
        print(f"apply_patch: {e}", file=sys.stderr)
        sys.exit(1)
