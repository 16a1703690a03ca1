"""The patch a writer writes: one file of docs/format.md Part III §2 from the parts of a version.

:func:`write_patch` merges the parts (:class:`weightfs.writer.Part`, one per writer of a group)
into one patch, in the store's own layout (the files by path; each file's changed tensors in
data order, their indices and ``.values``; the files carried whole after them;
``__metadata__`` with sorted keys, compact JSON as Go writes it), writes it as
``MNT/patches/weight_vNNNNNN.safetensors.tmp``, fsyncs it and ``os.replace``s it onto its name:
the mount seals the version or refuses it with EINVAL, and then :class:`PatchRejected` carries
the mount's reason (``.rejected``).

The indices are written in the ``leb128_gaps`` encoding by default (docs/format.md Part III §2,
"Index encodings": per tensor a U8 ``NAME.gaps`` of LEB128 varints of the gaps, ~1 byte an
index at RL rates instead of I32's 4: a bf16 patch is ~3 bytes per changed element instead
of 6), which the mount reads and stores like a raw patch; ``encoding="raw"`` writes TRL's raw
I32/I64 ``NAME.indices``, byte for byte the patch the store then serves for the version.
"""

import collections
import hashlib
import os
import time

from . import encode
from .safetensors import DTYPES
from .versions import version_name

__all__ = ["WriterError", "PatchRejected", "Written", "write_patch", "ENCODINGS", "DEFAULT_ENCODING"]

ENCODINGS = ("leb128_gaps", "raw")
DEFAULT_ENCODING = "leb128_gaps"


class WriterError(Exception):
    """The writer cannot write this state (a tensor missing from every file, an unknown dtype)."""


class PatchRejected(WriterError, OSError):
    """The mount refused the patch (EINVAL at os.replace). ``reason`` is the text of
    ``MNT/patches/weight_vNNNNNN.safetensors.rejected``; nothing was sealed."""

    def __init__(self, errno_, path, reason):
        OSError.__init__(self, errno_, f"patch refused: {reason}" if reason else os.strerror(errno_), path)
        self.reason = reason


Written = collections.namedtuple("Written", "path size sha256")


def write_patch(mnt, parts, version=None, timings=None, encoding=DEFAULT_ENCODING):
    """Merge the parts (one per writer of the group) into one patch and write it into
    MNT/patches/ (NAME.tmp, fsync, os.replace). Returns a :class:`Written`: its path, its size
    and its SHA-256. timings, a dict, gets the seconds of the patch's encoding (its header and
    the indices' varints), of the write (to fsync's return) and of the os.replace (the mount's
    seal) as "encode_s", "write_s" and "seal_s". encoding: the indices' encoding,
    "leb128_gaps" (the default) or "raw".

    Raises :class:`PatchRejected` with the mount's reason when the mount refuses it.
    """
    parts = list(parts)
    version = parts[0].version if version is None else version
    base = parts[0].base_version
    if any(p.version != version or p.base_version != base for p in parts):
        raise WriterError("the parts are not of one version and one base")
    files = sorted((f for p in parts for f in p.files), key=lambda f: f["name"].encode("utf-8"))
    total = sum(p.total_elements for p in parts)
    encoding_began = time.perf_counter()
    header, pieces = _patch_bytes(version, base, files, total, encoding)
    final = os.path.join(mnt, "patches", version_name(version) + ".safetensors")
    tmp = final + ".tmp"
    began = time.perf_counter()
    size, sha = len(header), hashlib.sha256(header)
    with open(tmp, "wb", buffering=0) as f:
        f.write(header)
        for b in pieces:
            f.write(b)
            sha.update(b)
            size += len(b)
        os.fsync(f.fileno())
    written = time.perf_counter()
    try:
        os.replace(tmp, final)
    except OSError as e:
        reason = None
        try:
            with open(final + ".rejected") as r:
                reason = r.read().strip()
        except OSError:
            pass
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise PatchRejected(e.errno, final, reason) from e
    if timings is not None:
        timings.update(encode_s=began - encoding_began, write_s=written - began, seal_s=time.perf_counter() - written)
    return Written(final, size, sha.hexdigest())


def _patch_bytes(version, base, files, total, encoding=DEFAULT_ENCODING):
    """The patch's header and its data pieces (docs/format.md Part III §2)."""
    if encoding not in ENCODINGS:
        raise WriterError(f"index encoding {encoding!r}: want one of {ENCODINGS}")
    meta = {"format": "sparse_weight_patch", "version": "1", "sparse": "True", "encoding": encoding,
            "model_version": str(version), "base_version": str(base)}
    names, entries, pieces, whole, changed = [], [], [], [], 0
    for f in files:
        n = f["name"]
        # Each kind of digest for the result, and for the base when there is one; a writer
        # may record xxh3-128 alone (docs/format.md Part III §2).
        if not f.get("result_sha256") and not f.get("result_xxh3"):
            raise WriterError(f"file {n!r} has neither a SHA-256 nor an xxh3-128")
        for kind in ("sha256", "xxh3"):
            if f.get("result_" + kind):
                if f.get("base_" + kind):
                    meta[f"base_{kind}:" + n] = f["base_" + kind]
                meta[f"result_{kind}:" + n] = f["result_" + kind]
        if f["whole"] is not None:
            whole.append(n)
            continue
        params = {}
        for t in f["tensors"]:
            p = {"dtype": t["dtype"], "elements": t["elements"]}
            if t["shape"] is not None:  # the optional shape extension: what the store's render writes
                p["shape"] = list(t["shape"])
            if t["xxh3"]:
                p["xxh3"] = t["xxh3"]
            params[t["name"]] = p
            names.append(t["name"])
            k = len(t["indices"])
            changed += k
            if encoding == "raw":
                iw = t["indices"].dtype.itemsize
                entries.append((t["name"] + ".indices", "I64" if iw == 8 else "I32", iw, k))
                pieces.append(memoryview(t["indices"]).cast("B"))
            else:
                gaps = encode.leb128_gaps(t["indices"])
                entries.append((t["name"] + ".gaps", "U8", 1, len(gaps)))
                pieces.append(memoryview(gaps).cast("B"))
            entries.append((t["name"] + ".values", t["dtype"], DTYPES[t["dtype"]].width, k))
            pieces.append(memoryview(t["values"]).cast("B"))
        meta["params:" + n] = encode.go_json(params)
    for f in files:
        if f["whole"] is not None:
            entries.append(("__file__:" + f["name"], "U8", 1, len(f["whole"])))
            pieces.append(f["whole"])
    meta.update({"num_changed_params": str(len(names)), "total_changed_elements": str(changed),
                 "total_elements": str(total), "sparsity": encode.python_float(1 - changed / max(total, 1)),
                 "changed_params": encode.go_json(names), "files": encode.go_json([f["name"] for f in files]),
                 "whole_files": encode.go_json(whole)})
    header, _ = encode.patch_header(meta, entries)
    return header, pieces
