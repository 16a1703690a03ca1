"""A trainer-side writer: the first version whole, every later one as a patch into ``MNT/patches/``.

:class:`PatchWriter` keeps a snapshot of the last version it wrote and, at each :meth:`save`,
diffs the trainer's ``state_dict`` against it bytewise on the tensors' own device (a GPU when
the tensors are there, the CPU otherwise): ``new.view(intN) != old.view(intN)`` on integers of
the element's width, no float arithmetic, so NaN payloads and -0 are exact. On the host the
diff is numpy's, in cache-sized chunks, each chunk's changes gathered and written into the
snapshot while it is in cache (:func:`diff_update_host`), and the result's hashes (the file's
and each tensor's, in one pass) run on a thread of their own over the state's bytes while the
diff runs. It writes the
changed elements as the one-file patch of docs/format.md Part III §2 (its indices gap-coded,
``leb128_gaps``, unless ``encoding="raw"``) into
``MNT/patches/weight_vNNNNNN.safetensors.tmp``, fsyncs it and ``os.replace``s it onto its name,
which seals version N on the read-write mount (Part III §5, "Writing a patch in"). Only the
patch's bytes cross into the mount.

The snapshot lives in host memory (pinned when torch has CUDA, so the changed elements come
back at full speed), and, when it fits (``device_snapshot="auto"``, the default: the tensors on
the GPU take at most a third of its free memory) or when asked (``True``), also on the
tensors' device, where the diff then reads it without a host-to-device copy. The host copy is the result's bytes: the
file's xxh3-128 the patch records is hashed from it, with each changed tensor's xxh3-128. The
patch names its files by xxh3-128 alone (docs/format.md Part III §2: the mount computes their
SHA-256 itself), which saves a SHA-256 pass over the checkpoint; ``sha256=True`` records
SHA-256 too. A refused patch changes nothing here: the snapshot keeps the base.

The files are bit-exact with what safetensors' ``save_file`` (``save_pretrained``) writes for
the same weights: the first version's headers are laid out as save_file lays them out
(:mod:`weightfs.encode`), and a later version whose tensors keep their names, dtypes and
shapes keeps its file's header bytes. A file whose layout changed is carried whole in the
patch with its new header.

Sharded checkpoints: ``files={"model-00001-of-00002.safetensors": [names], ...}``, and the
index ``model.safetensors.index.json`` is written with the first version as transformers
writes it. Writer groups (tensor parallel, one process per rank on the node that holds the
mount): each rank keeps a PatchWriter over its own files and calls :meth:`prepare`; the
parts (a few MB: only the changes) are gathered to one rank, which calls
:func:`write_patch`; then every rank calls :meth:`commit` (or :meth:`rollback` if the write
failed). See docs/engines.md, "Trainers that already diff".
"""

import concurrent.futures
import hashlib
import os
import queue
import threading
import time

import numpy as np

from . import encode
from .patch_out import DEFAULT_ENCODING, ENCODINGS, PatchRejected, Written, WriterError, write_patch
from .safetensors import DTYPES
from .versions import version_dir

__all__ = ["PatchWriter", "PatchRejected", "WriterError", "Part", "Written", "write_patch"]

try:
    import xxhash
except ImportError:  # the patch then records SHA-256 only (a valid patch, Part III §2)
    xxhash = None

I64_THRESHOLD = 1 << 31
_NP_INT = {1: np.dtype("u1"), 2: np.dtype("<i2"), 4: np.dtype("<i4"), 8: np.dtype("<i8")}
_NP_NAME = {np.dtype("bool"): "BOOL", np.dtype("u1"): "U8", np.dtype("i1"): "I8", np.dtype("<u2"): "U16",
            np.dtype("<i2"): "I16", np.dtype("<f2"): "F16", np.dtype("<u4"): "U32", np.dtype("<i4"): "I32",
            np.dtype("<f4"): "F32", np.dtype("<u8"): "U64", np.dtype("<i8"): "I64", np.dtype("<f8"): "F64"}


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _dtype_name(x, override):
    if override:
        return override
    if _is_torch(x):
        import torch
        for d in DTYPES.values():
            if d.torch and getattr(torch, d.torch, None) == x.dtype:
                return d.name
        raise WriterError(f"torch dtype {x.dtype} has no safetensors dtype")
    name = _NP_NAME.get(np.dtype(x.dtype).newbyteorder("<") if x.dtype.byteorder == ">" else np.dtype(x.dtype))
    if name is None:
        raise WriterError(f"numpy dtype {x.dtype} has no safetensors dtype (BF16 and F8: pass dtypes={{name: 'BF16'}})")
    return name


class _Tensor:
    """One tensor of the last version written: its place and its bytes (the host snapshot)."""

    def __init__(self, name, dt, shape, host):
        self.name, self.dt, self.shape, self.host = name, dt, tuple(shape), host  # host: flat numpy _NP_INT
        self.device = None  # the snapshot on the tensor's device (torch), or None


class _File:
    def __init__(self, name, header, tensors, sha256, xxh3):
        self.name, self.header, self.tensors, self.sha256, self.xxh3 = name, header, tensors, sha256, xxh3


class _Hasher:
    """A file's SHA-256 (unless sha=False) and xxh3-128 (when xxhash is installed)."""

    def __init__(self, sha=True):
        self.sha = hashlib.sha256() if sha else None
        self.xxh = xxhash.xxh3_128() if xxhash else None

    def update(self, b):
        if self.sha is not None:
            self.sha.update(b)
        if self.xxh is not None:
            self.xxh.update(b)

    def digests(self):
        return (self.sha.hexdigest() if self.sha is not None else None), (self.xxh.hexdigest() if self.xxh is not None else None)


def _want_sha256(sha256):
    """Whether a writer records SHA-256 digests: as asked, else only without xxhash (a patch
    records at least one kind of digest of each file)."""
    if sha256 is None:
        return xxhash is None
    if not sha256 and xxhash is None:
        raise WriterError("sha256=False needs xxhash (a patch records at least one digest of each file)")
    return bool(sha256)


def _xxh3(b):
    return xxhash.xxh3_128_hexdigest(b) if xxhash else None


DIFF_CHUNK = 1 << 18  # elements compared at once: the chunk of both arrays and its mask stay in cache


def diff_host(old, new, mask=None):
    """The positions (int64, ascending) where the numpy arrays old and new (of one integer
    dtype and size) differ, compared DIFF_CHUNK elements at a time into mask (a bool array of
    at least DIFF_CHUNK elements; a fresh one if None)."""
    if mask is None:
        mask = np.empty(DIFF_CHUNK, bool)
    parts = []
    for s in range(0, old.size, DIFF_CHUNK):
        e = min(s + DIFF_CHUNK, old.size)
        m = mask[:e - s]
        np.not_equal(new[s:e], old[s:e], out=m)
        w = np.flatnonzero(m)
        if w.size:
            if s:
                w += s
            parts.append(w)
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def diff_update_host(old, new, mask=None):
    """diff_host's positions, and old brought up to new: (positions (int64, ascending), the
    new values there, the old values there). One pass of DIFF_CHUNK elements at a time: each
    chunk is compared, its changed elements gathered from both sides and written into old
    while the chunk is still in cache (a gather or scatter over the whole tensor afterwards
    reads it from memory again, at ~20 ns an element on a 2 GiB checkpoint)."""
    if mask is None:
        mask = np.empty(DIFF_CHUNK, bool)
    pos, vals, undo = [], [], []
    try:
        for s in range(0, old.size, DIFF_CHUNK):
            e = min(s + DIFF_CHUNK, old.size)
            m = mask[:e - s]
            o, x = old[s:e], new[s:e]
            np.not_equal(x, o, out=m)
            w = np.flatnonzero(m)
            if w.size:
                v, u = x[w], o[w]
                o[w] = v
                if s:
                    w += s
                pos.append(w)
                vals.append(v)
                undo.append(u)
    except BaseException:  # old as it was: the chunks already brought up go back
        for p, u in zip(pos, undo):
            old[p] = u
        raise
    if not pos:
        return np.zeros(0, np.int64), new[:0].copy(), old[:0].copy()
    if len(pos) == 1:
        return pos[0], vals[0], undo[0]
    return np.concatenate(pos), np.concatenate(vals), np.concatenate(undo)


def _bytes_of(flat):
    """The bytes of a flat host tensor (numpy, or torch on the CPU), without a copy."""
    return memoryview(flat.numpy() if _is_torch(flat) else flat).cast("B")


HASH_PIECE = 1 << 20  # bytes a tensor's hashes take at a time: the tensor's own digest reads them from cache


class _FileHasher:
    """A file's SHA-256 and xxh3-128 on a thread of its own, fed the file's bytes in order
    (hashlib and xxhash let go of the GIL over large buffers): the hashes of a result overlap
    its diff. A piece fed with a key is a tensor's bytes: its own xxh3-128 is taken in the same
    pass, HASH_PIECE bytes at a time, so the tensor's bytes come from memory once for both.
    busy_s is the thread's time spent hashing."""

    def __init__(self, first, sha=True):
        self._h, self._q, self._err = _Hasher(sha), queue.SimpleQueue(), None
        self.tensors, self.busy_s = {}, 0.0  # key -> the tensor's xxh3-128 (None without xxhash)
        self._q.put((first, None))
        self._t = threading.Thread(target=self._run, name="weightfs-hash", daemon=True)
        self._t.start()

    def _run(self):
        while True:
            b, key = self._q.get()
            if b is None:
                return
            if self._err is None:
                began = time.perf_counter()
                try:
                    self._hash(b, key)
                except BaseException as e:  # raised by close
                    self._err = e
                self.busy_s += time.perf_counter() - began

    def _hash(self, b, key):
        if key is None or xxhash is None:
            self._h.update(b)
            if key is not None:
                self.tensors[key] = None
            return
        t = xxhash.xxh3_128()
        for s in range(0, len(b), HASH_PIECE):
            piece = b[s:s + HASH_PIECE]
            self._h.update(piece)
            t.update(piece)
        self.tensors[key] = t.hexdigest()

    def feed(self, b, key=None):
        """Hash b next; key: b is a tensor's bytes, whose own digest goes to tensors[key]."""
        self._q.put((b, key))

    def close(self):
        """The digests, once every byte fed is hashed."""
        self._q.put((None, None))
        self._t.join()
        if self._err is not None:
            raise self._err
        return self._h.digests()


class Part:
    """One writer's share of a version: what changed in its files, ready to be written.

    Picklable (numpy arrays and strings), so a writer group gathers the parts to one rank.
    """

    def __init__(self, version, base_version, files, total_elements):
        self.version, self.base_version = version, base_version
        self.files = files  # [dict]: name, whole (bytes or None), base_sha256, result_sha256, ..., tensors
        self.total_elements = total_elements
        self._undo = []  # (host array, idx, old values) to put back on rollback; not pickled
        self._apply = []  # (_Tensor, idx, values) for the device snapshots on commit
        self._new_files = {}  # file name -> _File to keep on commit
        self._new_extra = {}  # other files' new bytes
        self._timings = {}  # prepare's seconds (diff_s, hash_s, hash_wait_s); not pickled

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k in ("version", "base_version", "files", "total_elements")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._undo, self._apply, self._new_files, self._new_extra, self._timings = [], [], {}, {}, {}


class PatchWriter:
    """Writes a trainer's versions into a read-write mount: the first whole, then patches.

    mnt: the mount. files: {file name: [tensor names]} (default: every tensor in
    ``model.safetensors``). metadata: each safetensors file's ``__metadata__`` (default
    ``{"format": "pt"}``, what save_pretrained writes; None: none). index: write
    ``model.safetensors.index.json`` with the first version, as save_pretrained does (default:
    when the writer has several files; False: never; in a writer group the rank that writes it
    passes it in ``extra_files``, made by ``weightfs.encode.index_json(weight_map, total_size)``).
    dtypes: {name: safetensors dtype} for
    numpy arrays holding BF16 or F8 bits as integers. device_snapshot: keep a copy of the
    snapshot on the tensors' device too, so the diff reads no host memory: "auto" (when the
    device tensors take at most a third of the GPU's free memory at the first save), True or False.
    threads: how many files are diffed and hashed at once (default: as many as there are cores).
    encoding: the patches' index encoding, "leb128_gaps" (default: ~3 bytes per changed bf16
    element) or "raw" (TRL's I32/I64 indices, 6 bytes: with sha256=True, the patch the store
    serves, byte for byte). sha256: record each file's SHA-256 beside its xxh3-128 (default:
    only when xxhash is not installed). A patch written into a mount may name its files by
    xxh3-128 alone (docs/format.md Part III §2); the mount computes their SHA-256 itself, and
    the writer saves a SHA-256 pass over the checkpoint at every save.
    """

    def __init__(self, mnt, files=None, metadata={"format": "pt"}, index=None, dtypes=None, device_snapshot="auto",
                 threads=None, encoding=DEFAULT_ENCODING, sha256=None):
        self.mnt, self.metadata, self.dtypes = mnt, metadata, dict(dtypes or {})
        self.files = {k: list(v) for k, v in files.items()} if files else None
        self.index = index
        self.device_snapshot = device_snapshot
        self._on_device = False  # decided at the first save (_device_fits)
        self.threads = threads  # files diffed and hashed at once (default: one per core)
        if encoding not in ENCODINGS:
            raise WriterError(f"index encoding {encoding!r}: want one of {ENCODINGS}")
        self.encoding = encoding
        self._sha = _want_sha256(sha256)
        self.last_patch = None  # the Written of the last patch save wrote
        self.version = 0  # the last version written
        self._files = {}  # name -> _File
        self._extra = {}  # name -> bytes of the other files (config.json, ...)

    @classmethod
    def from_mount(cls, mnt, version=None, **kwargs):
        """A writer whose snapshot is the mount's latest sealed version (or version), read
        through the mount: a restarted trainer, or one whose patch was refused because another
        process sealed a version, goes on with patches instead of a full save. Every file of the
        version is read once and hashed; the files' layout (which tensors each holds) is the
        version's own, and files that are not safetensors are the extra files."""
        from .safetensors import SafetensorsFile
        from .versions import latest
        version = latest(mnt) if version is None else version
        sha = _want_sha256(kwargs.get("sha256"))
        d = version_dir(mnt, version)
        files, tensors, extra = {}, {}, {}
        for root, _, names in os.walk(d):
            for name in sorted(names):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, d)
                with open(path, "rb") as f:
                    data = f.read()
                if not name.endswith(".safetensors"):
                    extra[rel] = data
                    continue
                st = SafetensorsFile(path)
                buf = np.frombuffer(data, dtype=np.uint8)
                ts = []
                for t in st.tensors.values():  # data order
                    raw = buf[st.data_start + t.begin:st.data_start + t.end].view(_NP_INT[t.dtype.width]).copy()
                    ts.append(_Tensor(t.name, t.dtype, t.shape, raw))
                h = _Hasher(sha)
                h.update(data)
                tensors[rel] = _File(rel, data[:st.data_start], ts, *h.digests())
                files[rel] = [t.name for t in ts]
        w = cls(mnt, files=kwargs.pop("files", files), **kwargs)
        w._files, w._extra, w.version = tensors, extra, version
        return w

    # --- the layout of a state ---

    def _layout(self, state):
        files = self.files or {"model.safetensors": list(state)}
        owned = {n for names in files.values() for n in names}
        missing = [n for n in state if n not in owned]
        if missing:
            raise WriterError(f"tensors in no file of this writer: {missing[:5]}")
        return files

    def _describe(self, name, x):
        dt = DTYPES[_dtype_name(x, self.dtypes.get(name))]
        return name, dt, tuple(int(d) for d in x.shape)

    @staticmethod
    def _flat_int(x, dt):
        """x as a flat contiguous view on integers of its width (torch on its device, or numpy)."""
        if _is_torch(x):
            from . import _torch
            x = x.detach().contiguous().reshape(-1)
            want = _torch.int_dtype(dt.width)
            return x if x.dtype == want else x.view(want)
        return np.ascontiguousarray(x).reshape(-1).view(_NP_INT[dt.width])

    def _host_copy(self, flat):
        """A new host snapshot array holding flat (pinned when torch has CUDA)."""
        if _is_torch(flat):
            import torch
            h = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=torch.cuda.is_available())
            h.copy_(flat)
            return h.numpy()
        return flat.copy()

    # --- saving ---

    def save(self, state, version=None, extra_files=None):
        """Write state (name -> torch tensor or numpy array) as version N (default: the last
        one plus one). The first call writes the version whole; later calls write a patch.
        extra_files: {path: bytes} written beside the tensors (config.json); a changed one is
        carried whole in the patch. Returns the number of bytes written into the mount."""
        if not self._files:
            return self.save_whole(state, version, extra_files)
        part = self.prepare(state, version, extra_files)
        try:
            self.last_patch = write_patch(self.mnt, [part], encoding=self.encoding)
        except BaseException:
            self.rollback(part)
            raise
        self.commit(part)
        return self.last_patch.size

    def save_whole(self, state, version=None, extra_files=None, seal=True):
        """Write state whole into MNT/weight_vNNNNNN/ through the mount's normal write path (the
        files in order, then DONE's close seals it), as save_pretrained would write them.
        seal=False leaves DONE to another writer of the group (the last one to finish)."""
        version = self.version + 1 if version is None else version
        layout = self._layout(state)
        self._on_device = self._device_fits(state)
        d = version_dir(self.mnt, version)
        os.makedirs(d, exist_ok=True)
        written, files = 0, {}
        for fname in sorted(layout):
            header, laid = encode.safetensors_header([self._describe(n, state[n]) for n in layout[fname]], self.metadata)
            h = _Hasher(self._sha)
            tensors = []
            with open(os.path.join(d, fname), "wb", buffering=0) as f:
                f.write(header)
                h.update(header)
                for name, dt, shape, _, _ in laid:
                    t = _Tensor(name, dt, shape, self._host_copy(self._flat_int(state[name], dt)))
                    self._keep_on_device(t, state[name])
                    b = memoryview(t.host).cast("B")
                    f.write(b)
                    h.update(b)
                    tensors.append(t)
            written += os.path.getsize(os.path.join(d, fname))
            files[fname] = _File(fname, header, tensors, *h.digests())
        extra = dict(extra_files or {})
        if self.index is not False and (len(layout) > 1 or self.index):
            wmap = {n: f for f, ns in layout.items() for n in ns}
            total = sum(t.host.nbytes for f in files.values() for t in f.tensors)
            extra.setdefault("model.safetensors.index.json", encode.index_json(wmap, total))
        for name, b in sorted(extra.items()):
            os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
            with open(os.path.join(d, name), "wb") as f:
                f.write(b)
            written += len(b)
        if seal:
            with open(os.path.join(d, "DONE"), "wb"):
                pass  # its close seals the version
        self._files, self._extra, self.version = files, {k: bytes(v) for k, v in extra.items()}, version
        return written

    def _device_fits(self, state):
        """Whether the snapshot goes on the device too: device_snapshot, or for "auto" whether
        the state's device tensors take at most a third of the device's free memory (the copy,
        and room for the diff's masks and indices)."""
        if self.device_snapshot != "auto":
            return bool(self.device_snapshot)
        on = [x for x in state.values() if _is_torch(x) and x.device.type == "cuda"]
        if not on:
            return False
        import torch
        free, _ = torch.cuda.mem_get_info(on[0].device)
        return 3 * sum(x.numel() * x.element_size() for x in on) <= free

    def _keep_on_device(self, t, x):
        if self._on_device and _is_torch(x) and x.device.type != "cpu":
            t.device = self._flat_int(x, t.dt).clone()

    def prepare(self, state, version=None, extra_files=None, timings=None):
        """Diff state against the snapshot and hash the result: a :class:`Part` (nothing is
        written; the host snapshot holds the new values until :meth:`commit` or
        :meth:`rollback`). timings, a dict, gets the seconds of the steps, summed over the
        files (which run on several threads at once when there are several): "diff_s" (the
        diffs: compare, gather, the snapshot's update; the result's hashes run beside them on a
        thread of their own), "hash_s" (the hashes' own time on that thread) and
        "hash_wait_s" (what the hashes took after the diff was done)."""
        if not self._files:
            raise WriterError("nothing written yet: the first version is written whole (save)")
        version = self.version + 1 if version is None else version
        layout = self._layout(state)
        part = Part(version, self.version, [], 0)
        try:
            for sub in self._prepare_files(layout, state, version):
                part.files += sub.files
                part.total_elements += sub.total_elements
                part._undo += sub._undo
                part._apply += sub._apply
                part._new_files.update(sub._new_files)
                for k, v in sub._timings.items():
                    part._timings[k] = part._timings.get(k, 0.0) + v
            for name, b in sorted((extra_files or {}).items()):
                b = bytes(b)
                old = self._extra.get(name)
                if old == b:
                    continue
                h = _Hasher(self._sha)
                h.update(b)
                sha, xx = h.digests()
                part.files.append({"name": name, "whole": b, "tensors": [],
                                   "base_sha256": hashlib.sha256(old).hexdigest() if old is not None and self._sha else None,
                                   "base_xxh3": _xxh3(old) if old is not None else None,
                                   "result_sha256": sha, "result_xxh3": xx})
                part._new_extra[name] = b
        except BaseException:
            self.rollback(part)
            raise
        if timings is not None:
            timings.update({k: part._timings.get(k, 0.0) for k in ("diff_s", "hash_s", "hash_wait_s")})
        return part

    def _prepare_files(self, layout, state, version):
        """One Part per file, in file order, the files diffed and hashed by up to `threads`
        threads at once (hashlib, xxhash, numpy and torch release the GIL on large buffers)."""
        names = sorted(layout)

        def one(fname):
            sub = Part(version, self.version, [], 0)
            try:
                self._prepare_file(sub, fname, layout[fname], state)
            except BaseException:
                self.rollback(sub)
                raise
            return sub

        workers = min(len(names), self.threads or os.cpu_count() or 1)
        if workers <= 1:
            subs = []
            try:
                for f in names:
                    subs.append(one(f))
            except BaseException:
                for sub in subs:
                    self.rollback(sub)
                raise
            return subs
        with concurrent.futures.ThreadPoolExecutor(workers) as ex:
            futures = [ex.submit(one, f) for f in names]
            subs, err = [], None
            for fu in futures:
                try:
                    subs.append(fu.result())
                except BaseException as e:
                    err = err or e
        if err is not None:
            for sub in subs:
                self.rollback(sub)
            raise err
        return subs

    def _prepare_file(self, part, fname, names, state):
        old = self._files.get(fname)
        desc = [self._describe(n, state[n]) for n in names]
        for _, dt, shape in desc:
            n = 1
            for d in shape:
                n *= d
            part.total_elements += n
        same = old is not None and sorted(desc, key=lambda t: t[0]) == sorted(
            ((t.name, t.dt, t.shape) for t in old.tensors), key=lambda t: t[0])
        if not same:
            return self._prepare_whole(part, fname, desc, state, old)
        flats = []
        for t in old.tensors:
            flat = self._flat_int(state[t.name], t.dt)
            if flat.shape[0] != t.host.size:
                raise WriterError(f"tensor {t.name!r} has {flat.shape[0]} elements, the snapshot {t.host.size}")
            flats.append(flat)
        # The result's bytes are the state's own when it is on the host: the file and each
        # tensor are hashed from them on a thread of its own while this one diffs. A device
        # state's come to the host with its changes, so each tensor is hashed from the snapshot
        # once it is updated (the hashes of one tensor beside the diff of the next).
        on_host = all(not _is_torch(f) or f.device.type == "cpu" for f in flats)
        hasher = _FileHasher(old.header, self._sha)
        began = time.perf_counter()
        try:
            if on_host:
                for t, flat in zip(old.tensors, flats):
                    hasher.feed(_bytes_of(flat), t.name)
            entry = {"name": fname, "whole": None, "tensors": [], "base_sha256": old.sha256, "base_xxh3": old.xxh3}
            mask = np.empty(DIFF_CHUNK, bool)
            for t, flat in zip(old.tensors, flats):
                idx, vals = self._diff(t, flat, mask, part)
                if not on_host:
                    hasher.feed(memoryview(t.host).cast("B"), t.name)
                if len(idx):
                    part._apply.append((t, idx, vals))
                    entry["tensors"].append({"name": t.name, "dtype": t.dt.name, "elements": t.host.size,
                                             "shape": t.shape, "xxh3": None, "indices": idx, "values": vals})
        finally:
            diffed = time.perf_counter()
            digests = hasher.close()  # joined before a rollback may write the snapshot back
            part._timings["diff_s"] = part._timings.get("diff_s", 0.0) + diffed - began
            part._timings["hash_wait_s"] = part._timings.get("hash_wait_s", 0.0) + time.perf_counter() - diffed
            part._timings["hash_s"] = part._timings.get("hash_s", 0.0) + hasher.busy_s
        for e in entry["tensors"]:
            e["xxh3"] = hasher.tensors[e["name"]]
        entry["result_sha256"], entry["result_xxh3"] = digests
        if entry["tensors"]:
            part.files.append(entry)

    def _prepare_whole(self, part, fname, desc, state, old):
        """A file that is new or whose layout changed: carried whole with a save_file header."""
        header, laid = encode.safetensors_header(desc, self.metadata)
        h = _Hasher(self._sha)
        chunks = [header]
        tensors = []
        for name, dt, shape, _, _ in laid:
            t = _Tensor(name, dt, shape, self._host_copy(self._flat_int(state[name], dt)))
            self._keep_on_device(t, state[name])
            chunks.append(memoryview(t.host).cast("B"))
            tensors.append(t)
        whole = b"".join(chunks)
        h.update(whole)
        sha, xx = h.digests()
        part.files.append({"name": fname, "whole": whole, "tensors": [],
                           "base_sha256": old.sha256 if old else None, "base_xxh3": old.xxh3 if old else None,
                           "result_sha256": sha, "result_xxh3": xx})
        part._new_files[fname] = _File(fname, header, tensors, sha, xx)

    def _diff(self, t, flat, mask, part):
        """(indices, values) of the elements of flat (the tensor as _flat_int gives it) whose
        bytes differ from the snapshot, as host numpy arrays: I32 indices (I64 for 2^31
        elements or more), values as integers of the element's width; the host snapshot is
        brought up to flat, and what it held there goes to part's undo. The comparison runs
        where flat is: numpy's for a host tensor (a third of torch's CPU nonzero), in chunks of
        DIFF_CHUNK elements compared into mask, gathered and written into the snapshot while
        in cache (diff_update_host), so nothing of the tensor's size is allocated."""
        idx_dtype = np.int64 if t.host.size >= I64_THRESHOLD else np.int32
        if _is_torch(flat) and flat.device.type != "cpu":
            import torch
            old = t.device if t.device is not None else torch.from_numpy(t.host).to(flat.device, non_blocking=True)
            idx = torch.nonzero(flat != old).reshape(-1)
            vals = flat[idx]
            idx = idx.to(torch.int64 if idx_dtype == np.int64 else torch.int32)
            idx, vals = idx.cpu().numpy(), vals.cpu().numpy()
            if len(idx):
                part._undo.append((t.host, idx, t.host[idx]))
                t.host[idx] = vals
            return idx, vals
        new = flat.numpy() if _is_torch(flat) else flat
        pos, vals, undo = diff_update_host(t.host, new, mask)
        if len(pos):
            part._undo.append((t.host, pos, undo))
        return pos.astype(idx_dtype, copy=False), vals

    def commit(self, part):
        """The patch of part sealed: the snapshot is the new version."""
        for t, idx, vals in part._apply:
            if t.device is not None:
                import torch
                t.device[torch.from_numpy(idx.astype(np.int64)).to(t.device.device)] = torch.from_numpy(vals).to(t.device.device)
        self._files.update(part._new_files)
        for e in part.files:
            f = self._files.get(e["name"])
            if f is not None and e["name"] not in part._new_files:
                f.sha256, f.xxh3 = e["result_sha256"], e["result_xxh3"]
        self._extra.update(part._new_extra)
        self.version = part.version
        part._undo, part._apply = [], []

    def rollback(self, part):
        """The patch of part was not sealed: the snapshot goes back to the base."""
        for host, idx, old in reversed(part._undo):
            host[idx] = old
        part._undo, part._apply = [], []
