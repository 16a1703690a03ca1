"""weightfs.PatchWriter against real read-write mounts: 10 versions written by the writer (the
first whole, then patches into patches/) and the same 10 written whole into a mount of another
store, compared byte for byte (every file read back, every patch the mounts serve) and manifest
by manifest (every tensor's object, base and changed count); a writer group of two (each its own
shard, the parts pickled as a gather would); a stale base refused with the mount's reason."""

import copy
import hashlib
import errno
import json
import os
import pickle
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

import numpy as np
import xxhash

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs
from weightfs import encode
from weightfs.safetensors import DTYPES

try:
    import torch
except ImportError:
    torch = None

VERSIONS = 10
SHARDS = {"model-00001-of-00002.safetensors": ["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
                                               "model.norm.weight"],
          "model-00002-of-00002.safetensors": ["lm_head.weight", "model.step", "model.mask", "model.q"]}
DT = {"model.embed_tokens.weight": "BF16", "model.layers.0.mlp.up_proj.weight": "F32", "model.norm.weight": "F16",
      "lm_head.weight": "BF16", "model.step": "I64", "model.mask": "BOOL", "model.q": "U8"}


def first_state(rng):
    """{name: (dtype name, shape, flat raw integers)}: NaN payloads, -0, every width."""
    shapes = {"model.embed_tokens.weight": (64, 32), "model.layers.0.mlp.up_proj.weight": (32, 16),
              "model.norm.weight": (32,), "lm_head.weight": (64, 32), "model.step": (), "model.mask": (6,),
              "model.q": (3, 3)}
    out = {}
    for n, shape in shapes.items():
        dt = DTYPES[DT[n]]
        size = int(np.prod(shape)) if shape else 1
        a = rng.integers(0, 1 << (8 * dt.width - 1), size, dtype=np.int64).astype(dt.raw)
        if DT[n] == "BOOL":
            a &= 1
        out[n] = (DT[n], shape, a)
    f32 = out["model.layers.0.mlp.up_proj.weight"][2]
    f32[3], f32[5] = 0x80000000, 0x7FC00123  # -0 and a NaN with a payload
    return out


def next_state(rng, prev, v):
    """Version v from v-1: ~2% of elements one bit off; v=4 leaves shard 2 alone, v=6 changes
    nothing, v=8 reshapes model.norm.weight (shard 1 is then carried whole)."""
    out = {}
    for n, (dt, shape, a) in prev.items():
        a = a.copy()
        if v == 6 or (v == 4 and n in SHARDS["model-00002-of-00002.safetensors"]):
            out[n] = (dt, shape, a)
            continue
        k = max(1, a.size // 50)
        pos = rng.choice(a.size, size=k, replace=False)
        a[pos] ^= 1
        if v == 8 and n == "model.norm.weight":
            shape = (4, 8)
        out[n] = (dt, shape, a)
    return out


def config(v):
    return b'{"v": %d}\n' % min(v, 5)  # changes up to 5: carried whole in patches 2..5


def as_torch(state):
    from weightfs import _torch
    return {n: _torch.from_raw(a.view(np.uint8), DTYPES[dt], shape) for n, (dt, shape, a) in state.items()}


def as_numpy(state):
    """numpy arrays of their own dtype where numpy has one; BF16 as raw integers (dtypes=)."""
    out = {}
    for n, (dt, shape, a) in state.items():
        d = DTYPES[dt]
        out[n] = (a.view(d.numpy) if d.numpy is not None else a).reshape(shape)
    return out


def full_save(mnt, v, state, extra):
    """The plain full save: every file written whole (save_file's layout), then DONE."""
    d = weightfs.version_dir(mnt, v)
    os.makedirs(d)
    wmap = {}
    total = 0
    for fname, names in SHARDS.items():
        header, laid = encode.safetensors_header([(n, DTYPES[state[n][0]], state[n][1]) for n in names], {"format": "pt"})
        with open(os.path.join(d, fname), "wb") as f:
            f.write(header)
            for n, _, _, b, e in laid:
                f.write(state[n][2].tobytes())
                total += e - b
        wmap.update({n: fname for n in names})
    extra = dict(extra)
    extra["model.safetensors.index.json"] = encode.index_json(wmap, total) if v == 1 else None
    for name, b in extra.items():
        if b is None:  # written once, as the writer does
            with open(os.path.join(weightfs.version_dir(mnt, 1), name), "rb") as f:
                b = f.read()
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)
    open(os.path.join(d, "DONE"), "wb").close()


class Mount:
    """A store of its own, mounted read-write by `weightfs mount` in the background."""

    def __init__(self, root, name):
        wfs, _ = fixtures.binaries()
        self.store, self.mnt = os.path.join(root, name + ".store"), os.path.join(root, name)
        os.makedirs(self.mnt)
        fixtures.run(wfs, "init", self.store)
        self.log = open(os.path.join(root, name + ".log"), "wb")
        self.proc = subprocess.Popen([wfs, "mount", self.store, self.mnt], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                raise unittest.SkipTest(f"weightfs mount did not mount (FUSE unavailable?): {self.tail()}")
            time.sleep(0.05)

    def tail(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def close(self):
        if os.path.ismount(self.mnt):
            for cmd in (["fusermount3", "-u", self.mnt], ["fusermount", "-u", self.mnt], ["umount", self.mnt]):
                if shutil.which(cmd[0]) and subprocess.run(cmd, capture_output=True).returncode == 0:
                    break
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def manifest(self, v):
        with open(os.path.join(self.store, "versions", "v%06d" % v), "rb") as f:
            b = f.read()
        assert b[:4] == b"WFSM", b[:4]
        (n,) = struct.unpack("<Q", b[8:16])
        return json.loads(b[16:16 + n])


def tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = fh.read()
    return out


def served_patch(mnt, v):
    """The bytes of MNT/patches/weight_vN.safetensors, or None when there is none (v's layout changed)."""
    try:
        with open(weightfs.patch_path(mnt, v), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class WriterTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists("/dev/fuse"):
            self.skipTest("no /dev/fuse")
        fixtures.binaries()
        self.root = tempfile.mkdtemp(dir=fixtures.tmpdir())
        self.mounts = []
        self.addCleanup(self._unmount)

    def _unmount(self):
        for m in self.mounts:
            m.close()

    def mount(self, name):
        m = Mount(self.root, name)
        self.mounts.append(m)
        return m

    def both_ways(self, save_patch, versions=VERSIONS):
        """Write versions 1..n with save_patch(mnt, v, state, extra) into one mount and with
        full_save into another, and compare them; returns the writer's mount."""
        a, b = self.mount("writer"), self.mount("full")
        rng = np.random.default_rng(31)
        state = first_state(rng)
        for v in range(1, versions + 1):
            if v > 1:
                state = next_state(rng, state, v)
            extra = {"config.json": config(v)}
            save_patch(a.mnt, v, state, extra)
            full_save(b.mnt, v, state, extra)
        for v in range(1, versions + 1):
            ta, tb = tree(weightfs.version_dir(a.mnt, v)), tree(weightfs.version_dir(b.mnt, v))
            self.assertEqual(sorted(ta), sorted(tb), f"v{v}: file lists")
            for name in tb:
                self.assertTrue(ta[name] == tb[name], f"v{v}: {name} differs")
            ma, mb = a.manifest(v), b.manifest(v)
            for k in ("files", "dirs", "previous", "stats"):
                self.assertEqual(ma.get(k), mb.get(k), f"v{v}: manifest {k}")
            if v > 1:
                pa, pb = served_patch(a.mnt, v), served_patch(b.mnt, v)
                self.assertEqual(pa, pb, f"v{v}: the served patches differ")
                self.assertEqual(pa is None, v == 8, f"v{v}: a patch is served exactly when the layout holds")
        return a

    def test_torch_writer(self):
        if torch is None:
            self.skipTest("torch is not installed")
        written = {}
        w = [None]

        def save(mnt, v, state, extra):
            if w[0] is None:
                w[0] = weightfs.PatchWriter(mnt, files=SHARDS)
            n = w[0].save(as_torch(state), extra_files=extra)
            self.assertEqual(w[0].version, v)
            if v > 1:
                written[v] = (n, w[0].last_patch)
                if v == 6:  # nothing changed: the patch changes nothing, and the mount takes it
                    p = weightfs.Patch.open(w[0].last_patch.path)
                    self.assertEqual((p.model_version, p.base_version, len(p.tensors)), (6, 5, 0))

        a = self.both_ways(save)
        self.assertEqual(w[0].encoding, "leb128_gaps")
        for v, (n, last) in written.items():
            # The writer wrote its indices gap-coded (the default): fewer bytes than the raw
            # patch the store serves for the version, the same otherwise (v6 changed nothing;
            # v8 changed a shape: the patch carried shard 1 whole, and the store serves none).
            served = served_patch(a.mnt, v)
            if v == 6:  # no tensor: the raw patch but for the value of "encoding"
                self.assertEqual(n, len(served) + len("leb128_gaps") - len("raw"), f"v{v}")
            elif v != 8:
                self.assertLess(n, len(served), f"v{v}")

        # A stale base: another save takes the mount to 11 behind the writer's back; the writer's
        # patch from 10 is refused at os.replace with the mount's reason, and nothing changes.
        rng = np.random.default_rng(7)
        state = next_state(rng, first_state(np.random.default_rng(31)), 2)
        other = weightfs.PatchWriter(a.mnt, files=SHARDS)
        other.save_whole(as_torch(state), version=11, extra_files={"config.json": b"{}"})
        before = copy.deepcopy(w[0]._files["model-00001-of-00002.safetensors"].tensors[0].host)
        with self.assertRaises(weightfs.PatchRejected) as cm:
            w[0].save(as_torch(next_state(rng, state, 3)), version=12)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("base_version is 10, the latest version is 11", cm.exception.reason)
        self.assertIn("base_version is 10", str(cm.exception))
        self.assertEqual(w[0].version, 10)
        self.assertTrue(np.array_equal(w[0]._files["model-00001-of-00002.safetensors"].tensors[0].host, before))
        self.assertFalse(os.path.exists(weightfs.version_dir(a.mnt, 12)))
        self.assertEqual(weightfs.latest(a.mnt), 11)

        # A writer made from the mount's latest version (read through it) goes on with patches.
        w2 = weightfs.PatchWriter.from_mount(a.mnt)
        self.assertEqual(w2.version, 11)
        state12 = next_state(rng, state, 3)
        n = w2.save(as_torch(state12))
        self.assertEqual((w2.version, weightfs.latest(a.mnt)), (12, 12))
        self.assertLess(n, 20000)  # a patch, not the checkpoint
        for fname, names in SHARDS.items():
            with open(os.path.join(weightfs.version_dir(a.mnt, 12), fname), "rb") as f:
                got = f.read()
            header, laid = encode.safetensors_header([(n, DTYPES[state12[n][0]], state12[n][1]) for n in names], {"format": "pt"})
            self.assertEqual(got, header + b"".join(state12[x][2].tobytes() for x, _, _, _, _ in laid), fname)

    def test_numpy_group(self):
        """Two writers, one shard each (a writer group of two ranks on one node), numpy arrays,
        the patches written with raw indices."""
        ranks = [None, None]
        dtypes = {n: "BF16" for n, d in DT.items() if d == "BF16"}

        def save(mnt, v, state, extra):
            arrs = as_numpy(state)
            if ranks[0] is None:
                # SHA-256 too: with raw indices, the store's own render of the patch, byte for byte.
                ranks[0] = weightfs.PatchWriter(mnt, files={k: SHARDS[k] for k in list(SHARDS)[:1]}, index=False, dtypes=dtypes,
                                                sha256=True)
                ranks[1] = weightfs.PatchWriter(mnt, files={k: SHARDS[k] for k in list(SHARDS)[1:]}, index=False, dtypes=dtypes,
                                                sha256=True)
            mine = [{n: arrs[n] for ns in r.files.values() for n in ns} for r in ranks]
            if v == 1:  # rank 0 writes the index of every rank's files, as save_pretrained's rank 0 does
                wmap = {n: f for f, ns in SHARDS.items() for n in ns}
                extra = dict(extra, **{"model.safetensors.index.json": encode.index_json(wmap, sum(a.nbytes for a in arrs.values()))})
                ranks[1].save_whole(mine[1], seal=False)
                ranks[0].save_whole(mine[0], extra_files=extra)  # the last one seals
                return
            parts = [ranks[0].prepare(mine[0], extra_files=extra), ranks[1].prepare(mine[1])]
            gathered = [pickle.loads(pickle.dumps(p)) for p in parts]  # what a gather_object carries
            written[v] = weightfs.write_patch(mnt, gathered, encoding="raw")
            for r, p in zip(ranks, parts):
                r.commit(p)

        written = {}
        a = self.both_ways(save)
        for v, last in written.items():
            # Raw indices: the bytes the writer wrote are the store's own render of the
            # version's patch (v8 changed a shape: the store serves none).
            served = served_patch(a.mnt, v)
            if v != 8:
                self.assertEqual((len(served), hashlib.sha256(served).hexdigest()), (last.size, last.sha256), f"v{v}")


class DiffPathsTest(unittest.TestCase):
    """The torch diff (on CUDA when there is one, else the CPU) against the numpy diff, without a
    mount (the first version goes into a plain directory): the same parts, byte for byte."""

    def test_torch_against_numpy(self):
        if torch is None:
            self.skipTest("torch is not installed")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        rng = np.random.default_rng(3)
        states = [first_state(rng)]
        for v in range(2, 5):
            states.append(next_state(rng, states[-1], v))
        dtypes = {n: "BF16" for n, d in DT.items() if d == "BF16"}
        for snap in (False, True):
            root = tempfile.mkdtemp(dir=fixtures.tmpdir())
            wt = weightfs.PatchWriter(os.path.join(root, "t"), files=SHARDS, device_snapshot=snap)
            wn = weightfs.PatchWriter(os.path.join(root, "n"), files=SHARDS, dtypes=dtypes)
            wt.save_whole({n: x.to(device) for n, x in as_torch(states[0]).items()})
            wn.save_whole(as_numpy(states[0]))
            for v, st in enumerate(states[1:], 2):
                pt = wt.prepare({n: x.to(device) for n, x in as_torch(st).items()})
                pn = wn.prepare(as_numpy(st))
                self.assertEqual(pickle.dumps(pt.files), pickle.dumps(pn.files), f"v{v}, device_snapshot={snap}")
                self.assertEqual(pt.total_elements, pn.total_elements)
                wt.commit(pt)
                wn.commit(pn)
            # A rollback puts the snapshot back: preparing the last state again gives nothing.
            p = wt.prepare({n: x.to(device) for n, x in as_torch(next_state(rng, states[-1], 5)).items()})
            self.assertTrue(p.files)
            wt.rollback(p)
            self.assertEqual(wt.prepare({n: x.to(device) for n, x in as_torch(states[-1]).items()}).files, [])


class DiffHostTest(unittest.TestCase):
    """The host diff (numpy, DIFF_CHUNK elements at a time into one mask) against a plain
    flatnonzero, with changes on every side of the chunks' edges; and prepare's hashes (the
    result's bytes hashed on a thread of their own while the diff runs) against the bytes."""

    def test_chunk_edges(self):
        from weightfs.writer import DIFF_CHUNK, diff_host
        rng = np.random.default_rng(7)
        for n in (0, 1, DIFF_CHUNK - 1, DIFF_CHUNK, DIFF_CHUNK + 1, 2 * DIFF_CHUNK + 5):
            old = rng.integers(-(1 << 15), 1 << 15, n, dtype=np.int64).astype(np.int16)
            for at in ([], [0], [n - 1], [DIFF_CHUNK - 1, DIFF_CHUNK], "all", "random"):
                new = old.copy()
                if at == "all":
                    new ^= 1
                elif at == "random":
                    new[rng.random(n) < 0.03] ^= 0x40
                else:
                    sel = [i for i in at if 0 <= i < n]
                    new[sel] ^= -0x8000  # the sign bit only: -0 against +0 in bf16
                want = np.flatnonzero(new != old)
                got = diff_host(old, new)
                self.assertEqual(got.dtype, np.int64)
                self.assertTrue(np.array_equal(got, want), f"n={n} at={at}")

    def test_diff_update_chunk_edges(self):
        """diff_update_host: diff_host's positions, the new and old values there, and old made
        equal to new, byte for byte, with changes on every side of the chunks' edges, in every
        width, NaN payloads and -0 among them (bf16 0x8000, f32 0x7FC00123)."""
        from weightfs.writer import DIFF_CHUNK, diff_host, diff_update_host
        rng = np.random.default_rng(11)
        mask = np.empty(DIFF_CHUNK, bool)
        for dt in (np.uint8, np.int16, np.int32, np.int64):
            bits = 8 * np.dtype(dt).itemsize
            for n in (0, 1, DIFF_CHUNK - 1, DIFF_CHUNK + 1, 2 * DIFF_CHUNK + 5):
                base = rng.integers(0, 1 << min(bits, 62), n, dtype=np.int64).astype(dt)
                for at in ([], [0], [n - 1], [DIFF_CHUNK - 1, DIFF_CHUNK], "all", "random"):
                    new = base.copy()
                    if at == "all":
                        new ^= 1
                    elif at == "random":
                        sel = np.flatnonzero(rng.random(n) < 0.03)
                        new[sel] = np.array([0x80, 0x8000, 0x7FC00123, -1], dtype=np.int64).astype(dt)[sel % 4]
                    else:
                        new[[i for i in at if 0 <= i < n]] ^= 1
                    old = base.copy()
                    want = diff_host(base, new)
                    pos, vals, undo = diff_update_host(old, new, mask if n % 2 else None)
                    self.assertEqual(pos.dtype, np.int64)
                    self.assertTrue(np.array_equal(pos, want), f"{dt} n={n} at={at}")
                    self.assertEqual((vals.dtype, undo.dtype), (new.dtype, base.dtype))
                    self.assertEqual(vals.tobytes(), new[want].tobytes())
                    self.assertEqual(undo.tobytes(), base[want].tobytes())
                    self.assertEqual(old.tobytes(), new.tobytes(), f"{dt} n={n} at={at}: the snapshot is not the new state")

    def test_diff_update_error_leaves_old(self):
        """An error in the third chunk's gather: diff_update_host raises it with old as it was
        (the two chunks already brought up put back)."""
        from weightfs.writer import DIFF_CHUNK, diff_update_host

        class Boom(np.ndarray):
            gathers = 0

            def __getitem__(self, key):
                if isinstance(key, np.ndarray):
                    Boom.gathers += 1
                    if Boom.gathers == 3:
                        raise MemoryError("boom")
                return super().__getitem__(key)

        base = np.arange(3 * DIFF_CHUNK, dtype=np.int16)
        new = base ^ 1
        old = base.copy()
        with self.assertRaises(MemoryError):
            diff_update_host(old, new.view(Boom))
        self.assertEqual(Boom.gathers, 3)
        self.assertEqual(old.tobytes(), base.tobytes())

    def test_prepare_hashes_the_result(self):
        rng = np.random.default_rng(8)
        st1 = first_state(rng)
        st2 = next_state(rng, st1, 2)
        dtypes = {n: "BF16" for n, d in DT.items() if d == "BF16"}
        root = tempfile.mkdtemp(dir=fixtures.tmpdir())
        states = [as_numpy(st1), as_numpy(st2)]
        if torch is not None:
            states.append(as_torch(st2))
        for state2, sha in [(s, sha) for s in states[1:] for sha in (False, True)]:
            # By default the file's xxh3-128 alone (the mount computes the SHA-256); SHA-256
            # too when asked.
            w = weightfs.PatchWriter(root, files=SHARDS, dtypes=dtypes, index=False, sha256=sha)
            w.save_whole(states[0], version=1)
            part = w.prepare(state2)
            for f in part.files:
                header, laid = encode.safetensors_header([(n, DTYPES[st2[n][0]], st2[n][1]) for n in SHARDS[f["name"]]],
                                                         {"format": "pt"})
                data = header + b"".join(st2[n][2].tobytes() for n, _, _, _, _ in laid)
                self.assertEqual(f["result_xxh3"], xxhash.xxh3_128_hexdigest(data), f["name"])
                self.assertEqual(f["result_sha256"], hashlib.sha256(data).hexdigest() if sha else None, f["name"])
                self.assertEqual(f["base_sha256"] is not None, sha, f["name"])
            w.rollback(part)
            shutil.rmtree(weightfs.version_dir(root, 1))


class EncodeTest(unittest.TestCase):
    def test_save_file_header(self):
        """The header safetensors' save_file writes for these tensors: sorted by dtype, widest
        first, then by name, metadata first, padded with spaces to 8."""
        h, laid = encode.safetensors_header([("b", DTYPES["BF16"], (2, 2)), ("a", DTYPES["F32"], (3,)),
                                             ("c", DTYPES["BF16"], ()), ("m", DTYPES["BOOL"], (1,))], {"format": "pt"})
        js = ('{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},'
              '"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[12,20]},"c":{"dtype":"BF16","shape":[],'
              '"data_offsets":[20,22]},"m":{"dtype":"BOOL","shape":[1],"data_offsets":[22,23]}}')
        pad = -len(js) % 8
        self.assertEqual(h, struct.pack("<Q", len(js) + pad) + js.encode() + b" " * pad)
        self.assertEqual([t[0] for t in laid], ["a", "b", "c", "m"])

    def test_worked_example(self):
        """docs/format.md Part III §2's worked example, written by write_patch's encoder."""
        from weightfs.patch_out import _patch_bytes
        f = {"name": "model.safetensors", "whole": None,
             "base_sha256": "255ac236ecd498c4133eb92e040adaa9839aa03b9bd525d2671da5e5963d8490",
             "base_xxh3": "a5e125f92ea14a6badca1f685f0d9042",
             "result_sha256": "f67a92b891169de3bd0ee1dfc29c1a3a2520cc3f78cf24904936516dfddde9d2",
             "result_xxh3": "984bb8aa4db2f7cc3071ded2969a55a1",
             "tensors": [{"name": "w", "dtype": "BF16", "elements": 4, "shape": None,
                          "xxh3": "69b81da6cd3f4d4da9a9caec21020684",
                          "indices": np.array([1, 3], dtype="<i4"), "values": np.array([0x4001, 0x4081], dtype="<i2")}]}
        header, pieces = _patch_bytes(2, 1, [f], 4, "raw")
        patch = header + b"".join(bytes(p) for p in pieces)
        self.assertEqual(len(patch), 908)
        self.assertEqual(patch[:8], bytes([0x78, 3, 0, 0, 0, 0, 0, 0]))
        self.assertEqual(patch[896:], bytes([1, 0, 0, 0, 3, 0, 0, 0, 0x01, 0x40, 0x81, 0x40]))
        # The same in the leb128_gaps encoding (Part III §2, "Index encodings"): 902 bytes.
        header, pieces = _patch_bytes(2, 1, [f], 4)
        patch = header + b"".join(bytes(p) for p in pieces)
        self.assertEqual(len(patch), 902)
        self.assertIn(b'"encoding":"leb128_gaps"', patch)
        self.assertIn(b'"w.gaps":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"w.values":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}}', patch)
        self.assertEqual(patch[:8], bytes([0x78, 3, 0, 0, 0, 0, 0, 0]))
        self.assertEqual(patch[896:], bytes([1, 1, 0x01, 0x40, 0x81, 0x40]))
        # By xxh3-128 alone, as the writer writes it by default (Part III §2): 708 bytes, and the
        # reader takes it (no SHA-256 of the file).
        fx = dict(f, base_sha256=None, result_sha256=None)
        header, pieces = _patch_bytes(2, 1, [fx], 4, "raw")
        patch = header + b"".join(bytes(p) for p in pieces)
        self.assertEqual(len(patch), 708)
        self.assertEqual(patch[:8], bytes([0xb0, 2, 0, 0, 0, 0, 0, 0]))
        self.assertEqual(patch[696:], bytes([1, 0, 0, 0, 3, 0, 0, 0, 0x01, 0x40, 0x81, 0x40]))
        self.assertNotIn(b"sha256", patch)
        path = os.path.join(tempfile.mkdtemp(dir=fixtures.tmpdir()), "p.safetensors")
        with open(path, "wb") as out:
            out.write(patch)
        p = weightfs.Patch.open(path)
        self.assertEqual(p.files["model.safetensors"]["result_sha256"], None)
        self.assertEqual(p.files["model.safetensors"]["base_xxh3"], f["base_xxh3"])
        with self.assertRaises(weightfs.WriterError):  # neither digest of the result
            _patch_bytes(2, 1, [dict(fx, result_xxh3=None)], 4, "raw")

    def test_gaps(self):
        """leb128_gaps: the varints of format.md's example, a round trip at RL density and
        with wide gaps, and every refusal of the decoder."""
        self.assertEqual(encode.leb128_gaps([0, 128, 257, 558, 16943]).tobytes().hex(" "), "00 7f 80 01 ac 02 80 80 01")
        rng = np.random.default_rng(5)
        for elements, idx in [(10 ** 6, np.flatnonzero(rng.random(10 ** 6) < 0.0247)),
                              (3 << 31, np.sort(rng.choice(3 << 31, 1000, replace=False))), (1, np.array([0]))]:
            g = encode.leb128_gaps(idx)
            self.assertTrue(np.array_equal(encode.leb128_gaps_decode(g.tobytes(), len(idx), elements), idx))
        for bad, n in [(b"\x81\x00\x01", 2), (b"\x81" + b"\x80" * 8 + b"\x00", 1), (b"\x01\x02", 2), (b"\x04", 1),
                       (b"\x01", 2), (b"\x01\x81", 2), (b"\x01\x01\x00", 2), (b"", 1)]:
            with self.assertRaises(encode.GapsError, msg=bad):
                encode.leb128_gaps_decode(bad, n, 4)

    def test_gaps_against_a_loop(self):
        """leb128_gaps against a plain loop of LEB128 varints, one index at a time: RL densities
        (nearly every varint one byte), gaps of every length up to 9 bytes, int32 and int64."""
        def loop(idx):
            out, prev = bytearray(), -1
            for i in idx:
                g = int(i) - prev - 1
                prev = int(i)
                while g >= 0x80:
                    out.append(g & 0x7F | 0x80)
                    g >>= 7
                out.append(g)
            return bytes(out)
        rng = np.random.default_rng(12)
        cases = [np.flatnonzero(rng.random(20000) < p).astype(dt) for p in (0.001, 0.025, 0.5) for dt in (np.int32, np.int64)]
        cases += [np.cumsum(rng.integers(1, 1 << b, 100, dtype=np.int64)) for b in (7, 8, 14, 15, 21, 28, 35, 42, 49, 56)]
        cases += [np.array([0, 127, 255, 256, 16639, (1 << 63) - 1]), np.array([128], np.int32), np.array([0, 1, 2], np.int32)]
        for idx in cases:
            self.assertEqual(encode.leb128_gaps(idx).tobytes(), loop(idx), idx[:8])

    def test_gaps_patch_reads_as_raw(self):
        """A writer's parts written both ways and opened by weightfs.Patch: the same indices
        and values, the same state after the apply; a damaged stream is refused."""
        from weightfs.patch_out import _patch_bytes
        rng = np.random.default_rng(3)
        s1 = first_state(rng)
        s2 = next_state(rng, s1, 2)
        root = tempfile.mkdtemp(dir=fixtures.tmpdir())
        dtypes = {n: "BF16" for n, d in DT.items() if d == "BF16"}
        w = weightfs.PatchWriter(os.path.join(root, "m"), files=SHARDS, dtypes=dtypes)
        w.save_whole(as_numpy(s1))
        part = w.prepare(as_numpy(s2))
        patches = {}
        for enc in ("raw", "leb128_gaps"):
            header, pieces = _patch_bytes(2, 1, sorted(part.files, key=lambda f: f["name"]), part.total_elements, enc)
            path = os.path.join(root, enc + ".safetensors")
            with open(path, "wb") as f:
                f.write(header + b"".join(bytes(p) for p in pieces))
            patches[enc] = weightfs.Patch.open(path)
        raw, gaps = patches["raw"], patches["leb128_gaps"]
        self.assertEqual((raw.encoding, gaps.encoding), ("raw", "leb128_gaps"))
        self.assertLess(os.path.getsize(gaps.path), os.path.getsize(raw.path))
        self.assertEqual(list(raw.tensors), list(gaps.tensors))
        for name in raw.tensors:
            self.assertTrue(np.array_equal(raw.indices(name), gaps.indices(name)), name)
            self.assertEqual(raw.indices(name).dtype, gaps.indices(name).dtype)
            self.assertTrue(np.array_equal(raw.values(name), gaps.values(name)), name)
        got = {}
        for enc, p in patches.items():
            state = {n: a.copy().reshape(shape) for n, (_, shape, a) in s1.items()}
            p.apply(state, strict=False)
            got[enc] = state
        for n, (_, _, want) in s2.items():
            self.assertTrue(np.array_equal(got["raw"][n].reshape(-1), want), n)
            self.assertTrue(np.array_equal(got["leb128_gaps"][n].reshape(-1), want), n)
        # One varint made overlong: refused at open, naming the tensor.
        with open(gaps.path, "rb") as f:
            b = bytearray(f.read())
        name = next(iter(gaps.tensors))
        t = gaps._file.tensors[name + ".gaps"]
        at = gaps._file.data_start + t.begin
        b[at] |= 0x80
        b[at + 1] = 0
        bad = os.path.join(root, "bad.safetensors")
        with open(bad, "wb") as f:
            f.write(bytes(b))
        with self.assertRaises(weightfs.MalformedPatch) as cm:
            weightfs.Patch.open(bad)
        self.assertIn(name, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
