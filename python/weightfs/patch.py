"""The one-file sparse patch (docs/format.md Part III §2): open, check, apply in place.

A patch ``patches/weight_vNNNNNN.safetensors`` holds, for every changed tensor NAME,
``NAME.indices`` (I32, or I64 for tensors of 2^31 elements or more: ascending flat element
indices) and ``NAME.values`` (the tensor's dtype: the new values), and changed files it cannot
patch in place carried whole (``__file__:PATH``). Its metadata follows TRL's
``sparse_weight_patch``. A patch whose ``encoding`` is ``leb128_gaps`` (what a trainer's
:class:`weightfs.PatchWriter` writes into a mount) carries ``NAME.gaps`` (U8: LEB128 varints
of the gaps) instead of ``NAME.indices``; :meth:`Patch.indices` decodes them (vectorized, once)
into the same int32/int64 array. This module is the Python twin of ``delta.OpenPatch``: the same
checks, the same errors, and an apply that is ``param.view(-1).index_copy_(0, indices,
values)`` for torch tensors and fancy assignment for numpy arrays, moving values as integers
of the element's width (no arithmetic: bit-exact, NaN payloads and -0 included).

Checking is the default: ``apply`` checks every tensor it writes against the digest of its new
bytes the patch records, and every file carried whole against its SHA-256, and puts the old
values back on a mismatch; a bit flipped in a patch is refused, never applied silently.
``verify=False`` is the explicit way to go without.
"""

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass

import numpy as np

from . import encode
from .safetensors import DTYPES, MalformedFile, SafetensorsFile, parse_header

__all__ = ["Patch", "PatchTensor", "PatchError", "MalformedPatch", "UnsupportedPatch",
           "ApplyError", "DigestMismatch", "DigestUnavailable", "ApplyResult"]

FORMAT, VERSION = "sparse_weight_patch", "1"
WHOLE_PREFIX = "__file__:"
HEADER_PREFIX = "__header__:"  # + path: the new header of a file whose header changed in place
I64_THRESHOLD = 1 << 31  # tensors with this many elements or more get I64 indices
GAPS = "leb128_gaps"  # the dense index encoding a trainer may write in: NAME.gaps, U8 varints
_SHA256 = re.compile(r"[0-9a-f]{64}")
_XXH3 = re.compile(r"[0-9a-f]{32}")


class PatchError(Exception):
    """Base of every error of this module."""


class MalformedPatch(PatchError, MalformedFile):
    """The patch is not a valid patch (delta.ErrMalformed)."""


class UnsupportedPatch(PatchError):
    """An unknown format, version or index encoding (delta.ErrUnsupportedVersion)."""


class ApplyError(PatchError):
    """The tensors given do not fit the patch (a missing tensor, another dtype or shape)."""


class DigestMismatch(PatchError):
    """A check failed: after the apply a tensor's bytes are not the patch's result, or a file
    carried whole does not hash to its recorded SHA-256 (the patch is damaged, or the state
    was not its base)."""


class DigestUnavailable(PatchError):
    """A check was asked for (the default) but cannot be made: the patch records no per-tensor
    digests, the xxhash module is missing, or no base was given to check against. Pass
    verify=False to go on unchecked."""


@dataclass(frozen=True)
class PatchTensor:
    """One changed tensor of a patch."""
    name: str
    file: str  # the safetensors file of the version that holds it
    dtype: object  # a safetensors.DType
    elements: int  # elements of the whole tensor
    changed: int  # changed elements carried by the patch
    shape: tuple = None  # the full shape, when the patch records it (optional extension)
    xxh3: str = None  # xxh3-128 hex of the tensor's new full bytes (optional extension)


@dataclass
class ApplyResult:
    tensors: list  # names written sparsely
    elements: int  # changed elements written
    whole_tensors: list  # names copied whole from safetensors files carried whole
    skipped_files: list  # files carried whole that hold no tensors (config.json, ...)
    verified: bool


def _malformed(msg):
    return MalformedPatch(f"patch: {msg}")


def _uint(meta, key):
    v = meta.get(key)
    if v is None:
        raise _malformed(f"metadata has no {key!r}")
    if not re.fullmatch(r"[0-9]+", v) or int(v) >= 1 << 64:
        raise _malformed(f"{key!r} is {v!r}, not a non-negative integer")
    return int(v)


def _json_list(meta, key):
    v = meta.get(key)
    if v is None:
        raise _malformed(f"metadata has no {key!r}")
    try:
        lst = json.loads(v)
    except ValueError as e:
        raise _malformed(f"{key!r} is not a JSON list of strings: {e}") from None
    if not isinstance(lst, list) or not all(isinstance(s, str) for s in lst):
        raise _malformed(f"{key!r} is not a JSON list of strings")
    return lst


class Patch:
    """An opened and checked patch. Use :meth:`open`."""

    def __init__(self, path, check_indices=True):
        self.path = str(path)
        try:
            self._file = SafetensorsFile(self.path)
        except MalformedFile as e:
            raise MalformedPatch(f"patch: {e}") from None
        self.metadata = self._file.metadata
        self._checked = set()
        self._decoded = {}  # leb128_gaps: tensor name -> its decoded indices
        self._whole_checked = set()  # files carried whole whose SHA-256 was checked
        self._read_plan()
        if check_indices:
            for name in self.tensors:
                self.indices(name)

    @classmethod
    def open(cls, path, check_indices=True):
        """Open the patch at path and check it: the format and version, every key of the
        metadata and its consistency with the tensors (as ``delta.OpenPatch``), and unless
        check_indices is False, every tensor's indices (ascending, inside the tensor; as
        ``Patch.Verify``; otherwise each tensor's are checked when first read). Values are not
        read: the file is memory-mapped and read lazily."""
        return cls(path, check_indices=check_indices)

    # -- reading and checking the metadata (delta/patch_read.go) --

    def _read_plan(self):
        meta, entries = self.metadata, self._file.tensors
        fmt = meta.get("format")
        if fmt is None:
            raise _malformed("metadata has no 'format': not a sparse weight patch")
        if fmt != FORMAT:
            raise UnsupportedPatch(f"patch format {fmt!r} (want {FORMAT!r})")
        if "version" not in meta:
            raise _malformed("metadata has no 'version'")
        if meta["version"] != VERSION:
            raise UnsupportedPatch(f"patch version {meta['version']!r} (want {VERSION!r})")
        self.encoding = meta.get("encoding", "raw")
        if self.encoding not in ("raw", GAPS):
            raise UnsupportedPatch(f"patch index encoding {meta['encoding']!r} (want 'raw' or {GAPS!r})")
        if meta.get("sparse") != "True":
            raise _malformed(f"'sparse' is {meta.get('sparse')!r}, want 'True'")
        self.model_version = _uint(meta, "model_version")
        self.base_version = _uint(meta, "base_version")
        num_changed = _uint(meta, "num_changed_params")
        total_changed = _uint(meta, "total_changed_elements")
        self.total_elements = _uint(meta, "total_elements")
        if self.total_elements >= 1 << 63:
            raise _malformed(f"'total_elements' {self.total_elements} overflows int64")
        changed_names = _json_list(meta, "changed_params")
        file_names = _json_list(meta, "files")
        whole_names = _json_list(meta, "whole_files")
        if len(changed_names) != num_changed:
            raise _malformed(f"'num_changed_params' says {num_changed} but 'changed_params' lists {len(changed_names)}")
        self._read_files(file_names, whole_names)
        self._read_header_files(meta)
        self._read_tensors(changed_names)
        got = sum(t.changed for t in self.tensors.values())
        if got != total_changed:
            raise _malformed(f"'total_changed_elements' says {total_changed} but the tensors carry {got}")
        if self.total_elements < total_changed:
            raise _malformed(f"{total_changed} changed elements exceed the {self.total_elements} total elements")
        s = meta.get("sparsity")
        want = 1 - total_changed / max(self.total_elements, 1)
        try:
            ok = s is not None and abs(float(s) - want) <= 1e-9
        except ValueError:
            ok = False
        if not ok:
            raise _malformed(f"'sparsity' is {s!r}, want {want}")
        want = 2 * len(self.tensors) + len(self.whole_files) + len(self.header_files)
        if len(entries) != want:
            raise _malformed(f"file holds {len(entries)} tensors but its metadata accounts for {want}")

    def _read_header_files(self, meta):
        """The optional 'header_files' (docs/format.md Part III §2): files patched sparsely whose
        header changed in place; each has a U8 tensor HEADER_PREFIX+path with the new header.
        A dict in memory has no header: apply ignores them; header_bytes(path) gives them."""
        self.header_files = {}
        names = _json_list(meta, "header_files") if "header_files" in meta else []
        for name in names:
            if name not in self.files or self.files[name]["whole"] or name in self.header_files:
                raise _malformed(f"header file {name!r} is not a file patched sparsely, or is listed twice")
            t = self._file.tensors.get(HEADER_PREFIX + name)
            if t is None or t.dtype.name != "U8" or len(t.shape) != 1 or t.shape[0] < 8:
                raise _malformed(f"header file {name!r} has no 1-D U8 tensor {HEADER_PREFIX + name!r}")
            self.header_files[name] = t.shape[0]

    def header_bytes(self, path):
        """The new header bytes [0, 8+N) of a file whose header changed in place."""
        if path not in self.header_files:
            raise KeyError(f"the patch carries no new header of {path!r}")
        return self._file.raw(HEADER_PREFIX + path)

    def _read_files(self, file_names, whole_names):
        meta = self.metadata
        if len(set(file_names)) != len(file_names):
            raise _malformed("a file is listed twice in 'files'")
        if not set(whole_names) <= set(file_names):
            raise _malformed("a whole file is not in 'files'")
        self.files = {}  # path -> {"base_sha256", "result_sha256", "base_xxh3", "result_xxh3", "whole"}
        self.whole_files = {}  # path -> size
        for name in file_names:
            f = {"whole": name in whole_names}
            for kind, rx in (("sha256", _SHA256), ("xxh3", _XXH3)):
                for side in ("base", "result"):
                    v = meta.get(f"{side}_{kind}:{name}")
                    if v is not None and not rx.fullmatch(v):
                        raise _malformed(f"'{side}_{kind}:{name}' is {v!r}, not lowercase hex")
                    f[f"{side}_{kind}"] = v
            # Each kind is recorded for the result, and for the base exactly when the file has
            # one, or not at all; at least one kind (a patch written into a mount may record
            # xxh3-128 only: docs/format.md Part III §2).
            has_base = f["base_sha256"] is not None or f["base_xxh3"] is not None
            if f["result_sha256"] is None and f["result_xxh3"] is None:
                raise _malformed(f"file {name!r} lacks its 'result_sha256:' (or its 'result_xxh3:')")
            if not has_base and not f["whole"]:
                raise _malformed(f"file {name!r} lacks its 'base_sha256:' or 'base_xxh3:'")
            for kind in ("sha256", "xxh3"):
                if f[f"result_{kind}"] is None and f[f"base_{kind}"] is not None:
                    raise _malformed(f"file {name!r} has 'base_{kind}:' without 'result_{kind}:'")
                if f[f"result_{kind}"] is not None and has_base and f[f"base_{kind}"] is None:
                    raise _malformed(f"file {name!r} lacks its 'base_{kind}:' (an xxh3 key without its partner)")
            if f["whole"]:
                t = self._file.tensors.get(WHOLE_PREFIX + name)
                if t is None or t.dtype.name != "U8" or len(t.shape) != 1:
                    raise _malformed(f"whole file {name!r} has no 1-D U8 tensor {WHOLE_PREFIX + name!r}")
                self.whole_files[name] = t.shape[0]
            self.files[name] = f

    @property
    def _idx_suffix(self):
        return ".gaps" if self.encoding == GAPS else ".indices"

    def _read_tensors(self, changed_names):
        entries = self._file.tensors
        by_name = {}
        for fname, f in self.files.items():
            if f["whole"]:
                continue
            js = self.metadata.get("params:" + fname)
            if js is None:
                raise _malformed(f"file {fname!r} has no 'params:{fname}'")
            try:
                params = json.loads(js)
            except ValueError as e:
                raise _malformed(f"'params:{fname}' is not JSON: {e}") from None
            if not isinstance(params, dict):
                raise _malformed(f"'params:{fname}' is not a JSON object")
            digests = 0
            for name, p in params.items():
                if name in by_name:
                    raise _malformed(f"tensor {name!r} listed under two files")
                if not isinstance(p, dict) or p.get("dtype") not in DTYPES or not isinstance(p.get("elements"), int) \
                        or isinstance(p.get("elements"), bool):
                    raise _malformed(f"'params:{fname}' entry {name!r} is not {{dtype, elements}}: {p!r}")
                elements = p["elements"]
                shape, xxh3 = p.get("shape"), p.get("xxh3")
                if xxh3 is not None:
                    if not isinstance(xxh3, str) or not _XXH3.fullmatch(xxh3):
                        raise _malformed(f"tensor {name!r}: 'xxh3' is {xxh3!r}, not a lowercase hex xxh3-128")
                    digests += 1
                if shape is not None:
                    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                              for d in shape) or math.prod(shape) != elements:
                        raise _malformed(f"tensor {name!r}: shape {shape!r} does not hold {elements} elements")
                    shape = tuple(shape)
                by_name[name] = (fname, DTYPES[p["dtype"]], elements, shape, xxh3)
            if digests not in (0, len(params)):
                raise _malformed(f"{digests} of the {len(params)} tensors of file {fname!r} have an xxh3-128 digest")
        if len(by_name) != len(changed_names):
            raise _malformed(f"'changed_params' lists {len(changed_names)} tensors but the params of the files list {len(by_name)}")
        tensors = []
        for name in changed_names:
            if name not in by_name:
                raise _malformed(f"changed tensor {name!r} is not in any file's params (or is listed twice)")
            fname, dt, elements, shape, xxh3 = by_name.pop(name)
            if elements < 1:
                raise _malformed(f"tensor {name!r} has {elements} elements")
            idx, val = entries.get(name + self._idx_suffix), entries.get(name + ".values")
            if idx is None or val is None:
                raise _malformed(f"changed tensor {name!r} lacks {name + self._idx_suffix!r} or {name + '.values'!r}")
            if self.encoding == GAPS:  # the values give the count; indices() checks the stream holds that many
                if idx.dtype.name != "U8" or len(idx.shape) != 1 or val.dtype is not dt or len(val.shape) != 1:
                    raise _malformed(f"{idx.name!r} is {idx.dtype.name}{list(idx.shape)} and {val.name!r} "
                                     f"{val.dtype.name}{list(val.shape)}, want a 1-D U8 and a 1-D {dt.name}")
            else:
                want_idx = "I64" if elements >= I64_THRESHOLD else "I32"
                if idx.dtype.name != want_idx or len(idx.shape) != 1:
                    raise _malformed(f"{idx.name!r} is {idx.dtype.name}{list(idx.shape)}, want a 1-D {want_idx} for a tensor of {elements} elements")
                if val.dtype is not dt or len(val.shape) != 1 or val.shape[0] != idx.shape[0]:
                    raise _malformed(f"{val.name!r} is {val.dtype.name}{list(val.shape)}, want a 1-D {dt.name} of {idx.shape[0]} values")
            n = val.shape[0]
            if n < 1 or n > elements:
                raise _malformed(f"tensor {name!r} has {n} changes for {elements} elements")
            tensors.append(PatchTensor(name, fname, dt, elements, n, shape, xxh3))
        # Data order, as the writer laid them out.
        tensors.sort(key=lambda t: entries[t.name + self._idx_suffix].begin)
        self.tensors = {t.name: t for t in tensors}
        for fname, f in self.files.items():
            if not f["whole"] and not any(t.file == fname for t in tensors):
                raise _malformed(f"file {fname!r} is patched sparsely but has no changed tensor")

    # -- data --

    def indices(self, name):
        """The flat element indices of tensor name (a read-only int32/int64 numpy view),
        checked on first read: strictly ascending, inside the tensor."""
        t = self.tensors[name]
        if self.encoding == GAPS:  # decoded once (docs/format.md Part III §2, "Index encodings")
            idx = self._decoded.get(name)
            if idx is None:
                try:
                    idx = encode.leb128_gaps_decode(self._file.array(name + ".gaps"), t.changed, t.elements,
                                                    np.int64 if t.elements >= I64_THRESHOLD else np.int32)
                except encode.GapsError as e:
                    raise _malformed(f"tensor {name!r}: {e}") from None
                idx.flags.writeable = False
                self._decoded[name] = idx
            return idx
        idx = self._file.array(name + ".indices")
        if name not in self._checked:
            if idx[0] < 0 or idx[-1] >= t.elements or (len(idx) > 1 and not bool(np.all(idx[1:] > idx[:-1]))):
                raise _malformed(f"tensor {name!r}: the indices are not strictly ascending within {t.elements} elements")
            self._checked.add(name)
        return idx

    def values(self, name, raw=True):
        """The new values of tensor name, a read-only numpy view: unsigned integers of the
        element's width (raw=True, bit-exact), or the numpy dtype where numpy has one."""
        return self._file.array(name + ".values", raw=raw)

    def whole_file(self, path, verify=True):
        """The complete new bytes of a file carried whole (read-only numpy uint8 view), checked
        against the file's recorded ``result_sha256`` (its ``result_xxh3`` when the patch records
        it by xxh3-128 only; DigestMismatch) unless verify=False."""
        if path not in self.whole_files:
            raise KeyError(f"the patch carries no whole file {path!r}")
        raw = self._file.raw(WHOLE_PREFIX + path)
        if verify and path not in self._whole_checked:
            f = self.files[path]
            if f["result_sha256"] is not None:
                kind, want, got = "SHA-256", f["result_sha256"], hashlib.sha256(memoryview(raw)).hexdigest()
            else:  # recorded by xxh3-128 only
                kind, want, got = "xxh3-128", f["result_xxh3"], _xxh3_bytes(raw)
            if got != want:
                raise DigestMismatch(f"{self.path}: file {path!r}, carried whole, hashes to {kind} {got}, the patch "
                                     f"records {want}: the patch is damaged")
            self._whole_checked.add(path)
        return raw

    @property
    def has_digests(self):
        """Whether every changed tensor records the digest of its new bytes (the extension)."""
        return all(t.xxh3 is not None for t in self.tensors.values())

    def whole_safetensors(self, path, verify=True):
        """(metadata, tensors) of a safetensors file carried whole, checked as §1 says; None if
        the file is not safetensors. verify as in whole_file."""
        raw = self.whole_file(path, verify=verify)
        if len(raw) < 8:
            return None
        n = int(raw[:8].view("<u8")[0])
        if n > len(raw) - 8 or not raw[8:9].tobytes() == b"{":
            return None
        try:
            return parse_header(raw[8:8 + n].tobytes(), len(raw), where=f"{self.path}: {WHOLE_PREFIX}{path}")
        except MalformedFile:
            if path.endswith(".safetensors"):
                raise
            return None

    # -- apply --

    def apply(self, state, verify=True, strict=True, rename=None):
        """Apply the patch in place to state, a dict of numpy arrays or torch tensors (any
        device) keyed by checkpoint (HF) name, holding the base version.

        Each changed tensor gets ``flat.index_copy_(0, indices, values)`` (torch) or
        ``flat[indices] = values`` (numpy) on a same-width integer view: no arithmetic,
        bit-exact, idempotent (applying twice, or to the result, changes nothing). Tensors of a
        safetensors file carried whole are copied whole. Before anything is written, every
        tensor is checked: present (unless strict=False, which skips absent ones), C-contiguous,
        the patch's dtype (numpy: the dtype's numpy type, or unsigned integers of its width for
        BF16/F8 or any dtype; torch: the torch dtype, or the same-width integer where torch
        lacks it) and its shape (the recorded one, else the element count); ApplyError says
        which and why. rename maps a patch name to the key of state.

        By default (verify=True) the result is checked too: each file carried whole against its
        recorded SHA-256 before anything is written, and every written tensor against the
        xxh3-128 of its new bytes that the patch records; on a mismatch (a damaged patch, or a
        state that was not the base) the old values are put back and DigestMismatch is raised.
        A patch without per-tensor digests (written before the extension), or a missing xxhash
        module, raises DigestUnavailable before anything is written. verify=False applies
        unchecked: a damaged patch then silently gives wrong values.
        """
        key = rename or (lambda n: n)
        plan = []  # (name, target, kind) checked before any write
        for t in self.tensors.values():
            k = key(t.name)
            if k not in state:
                if strict:
                    raise ApplyError(f"tensor {t.name!r} (key {k!r}) is not in the state dict; strict=False skips it")
                continue
            plan.append((t, k, _target(state[k], t.name, t.dtype, t.shape, t.elements)))
        if verify and plan:
            self._need_digests()
        whole, skipped = [], []
        for path in self.whole_files:
            parsed = self.whole_safetensors(path, verify=verify)  # verify: its SHA-256, before any write
            if parsed is None:
                skipped.append(path)
                continue
            _, infos = parsed
            for info in infos.values():
                k = key(info.name)
                if k not in state:
                    if strict:
                        raise ApplyError(f"tensor {info.name!r} of {path!r} (carried whole) is not in the state dict")
                    continue
                whole.append((path, info, k, _target(state[k], info.name, info.dtype, info.shape, info.elements)))

        undo = []
        for t, k, tgt in plan:
            idx, vals = self.indices(t.name), self.values(t.name)
            if verify:
                undo.append((tgt, idx, tgt.gather(idx)))
            tgt.scatter(idx, vals)
        for path, info, k, tgt in whole:
            raw = self.whole_file(path, verify=verify)
            start = 8 + int(raw[:8].view("<u8")[0])
            data = raw[start + info.begin:start + info.end].view(info.dtype.raw)
            if verify:
                undo.append((tgt, None, tgt.copy_all()))
            tgt.assign(data)

        if verify:
            bad = [t.name for t, k, tgt in plan if tgt.xxh3() != t.xxh3]
            if bad:
                for tgt, idx, old in reversed(undo):
                    if idx is None:
                        tgt.assign(old)
                    else:
                        tgt.scatter(idx, old)
                raise DigestMismatch(f"{self.path}: after the apply, {len(bad)} tensor(s) are not the patch's result "
                                     f"(the state was not version {self.base_version}, or the patch is damaged): "
                                     f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}; the old values were put back")
        return ApplyResult([t.name for t, _, _ in plan], sum(t.changed for t, _, _ in plan),
                           [info.name for _, info, _, _ in whole], skipped, bool(verify))

    def _need_digests(self):
        """Raise DigestUnavailable unless the per-tensor check can be made."""
        if not self.has_digests:
            raise DigestUnavailable(f"{self.path}: the patch records no per-tensor digests (docs/format.md Part III §2, "
                                    "written by a weightfs before the extension), so the result cannot be checked; "
                                    "pass verify=False to apply it unchecked")
        try:
            import xxhash  # noqa: F401
        except ImportError:
            raise DigestUnavailable("checking a patch's result needs the xxhash module (Debian: python3-xxhash; "
                                    "pip install xxhash); install it, or pass verify=False to apply unchecked") from None

    def check_against(self, base):
        """Check, without changing anything, that the patch turns base into its result: for every
        changed tensor, base's tensor with the patch applied (in a copy) must hash to the
        xxh3-128 the patch records. base is the base version's directory (a pinned mount's
        ``weight_vK``, or a local copy; each tensor is read from the file the patch names) or a
        dict of numpy arrays / torch tensors by name. For consumers that hand the values on
        (vLLM) instead of applying them here. Raises DigestMismatch naming the tensors that
        differ, DigestUnavailable when no check can be made, ApplyError when base lacks one."""
        self._need_digests()
        files, bad = {}, []
        for t in self.tensors.values():
            if isinstance(base, (str, bytes, os.PathLike)):
                if t.file not in files:
                    files[t.file] = SafetensorsFile(os.path.join(base, t.file))
                f = files[t.file]
                info = f.tensors.get(t.name)
                if info is None or info.dtype is not t.dtype or info.elements != t.elements:
                    raise ApplyError(f"tensor {t.name!r}: {f.path} has no {t.dtype.name} tensor of {t.elements} "
                                     f"elements by that name")
                flat = f.raw(t.name).view(t.dtype.raw).copy()
            else:
                if t.name not in base:
                    raise ApplyError(f"tensor {t.name!r} is not in the base given")
                flat = _target(base[t.name], t.name, t.dtype, t.shape, t.elements).copy_all()
            flat[self.indices(t.name)] = self.values(t.name)
            if _xxh3_bytes(flat.view(np.uint8)) != t.xxh3:
                bad.append(t.name)
        if bad:
            raise DigestMismatch(f"{self.path}: applied to the base given, {len(bad)} tensor(s) are not the patch's "
                                 f"result (the base was not version {self.base_version}, or the patch is damaged): "
                                 f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}")


def _xxh3_bytes(b):
    import xxhash
    return xxhash.xxh3_128(memoryview(np.ascontiguousarray(b))).hexdigest()


def _target(x, name, dt, shape, elements):
    """Check that x can take tensor name's values, and wrap it."""
    if type(x).__module__.startswith("torch"):
        from ._torch import is_tensor
        if is_tensor(x):
            return _TorchTarget(x, name, dt, shape, elements)
    if isinstance(x, np.ndarray):
        return _NumpyTarget(x, name, dt, shape, elements)
    raise ApplyError(f"tensor {name!r}: {type(x).__name__} is neither a numpy array nor a torch tensor")


def _check_shape(name, have, numel, shape, elements):
    if shape is not None and tuple(have) != tuple(shape):
        raise ApplyError(f"tensor {name!r}: shape {list(have)}, the patch's is {list(shape)}")
    if numel != elements:
        raise ApplyError(f"tensor {name!r}: {numel} elements (shape {list(have)}), the patch's has {elements}")


class _NumpyTarget:
    def __init__(self, a, name, dt, shape, elements):
        _check_shape(name, a.shape, a.size, shape, elements)
        ok = a.dtype == dt.numpy if dt.numpy is not None else False
        ok = ok or (a.dtype.kind == "u" and a.dtype.itemsize == dt.width)  # raw views (BF16: uint16)
        ok = ok or (dt.name == "BF16" and a.dtype.name == "bfloat16")  # ml_dtypes
        if not ok:
            raise ApplyError(f"tensor {name!r}: numpy dtype {a.dtype}, the patch's is {dt.name} "
                             f"(numpy {dt.numpy if dt.numpy is not None else 'none'}; or uint{8 * dt.width} raw)")
        if a.dtype.byteorder == ">" or not a.flags.c_contiguous or not a.flags.writeable:
            raise ApplyError(f"tensor {name!r}: the array must be little-endian, C-contiguous and writable")
        self.a = a
        self.flat = a.reshape(-1).view(dt.raw)

    def gather(self, idx):
        return self.flat[idx].copy()

    def scatter(self, idx, vals):
        self.flat[idx] = vals  # the numpy form of flat.index_copy_(0, idx, vals)

    def copy_all(self):
        return self.flat.copy()

    def assign(self, data):
        self.flat[:] = data

    def xxh3(self):
        return _xxh3_bytes(self.flat.view(np.uint8))


class _TorchTarget:
    def __init__(self, t, name, dt, shape, elements):
        import torch
        from ._torch import int_dtype, torch_dtype
        _check_shape(name, t.shape, t.numel(), shape, elements)
        want = torch_dtype(dt)
        raw = int_dtype(dt.width)
        if t.dtype != want and not (want is None and t.dtype == raw):
            raise ApplyError(f"tensor {name!r}: torch dtype {t.dtype}, the patch's is {dt.name} "
                             f"({'torch.' + dt.torch if want is not None else f'{raw}, as this torch has no {dt.torch}'})")
        if not t.is_contiguous():
            raise ApplyError(f"tensor {name!r}: the tensor is not contiguous")
        self.t, self.torch, self.dt = t, torch, dt
        flat = t.data.view(-1)
        # A same-width integer view: index_copy_ then moves bits, never converts.
        self.flat = flat if flat.dtype in (raw, torch.bool) else flat.view(raw)
        self._np_int = np.dtype({1: "u1", 2: "<i2", 4: "<i4", 8: "<i8"}[dt.width])

    def _to(self, a):
        x = self.torch.from_numpy(np.ascontiguousarray(a).view(self._np_int).copy())
        if self.flat.dtype == self.torch.bool:
            x = x.view(self.torch.bool)
        return x.to(self.flat.device, non_blocking=True)

    def gather(self, idx):
        from ._torch import raw_bytes
        i = self.torch.from_numpy(np.asarray(idx, dtype=np.int64)).to(self.flat.device)
        return raw_bytes(self.flat.index_select(0, i)).view(self.dt.raw)

    def scatter(self, idx, vals):
        i = self.torch.from_numpy(np.asarray(idx, dtype=np.int64)).to(self.flat.device)
        self.flat.index_copy_(0, i, self._to(vals))  # param.view(-1).index_copy_(0, indices, values)

    def copy_all(self):
        from ._torch import raw_bytes
        return raw_bytes(self.flat).view(self.dt.raw).copy()

    def assign(self, data):
        self.flat.copy_(self._to(data))

    def xxh3(self):
        from ._torch import raw_bytes
        return _xxh3_bytes(raw_bytes(self.flat))
