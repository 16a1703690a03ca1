"""Patch.open and Patch.apply against patches written by `weightfs patch`."""

import json
import os
import struct
import unittest

import numpy as np

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs

try:
    import torch
except ImportError:
    torch = None
try:
    import xxhash
except ImportError:
    xxhash = None


def raw_of(x):
    """The bytes of a numpy array or torch tensor."""
    if torch is not None and isinstance(x, torch.Tensor):
        from weightfs._torch import raw_bytes
        return raw_bytes(x).tobytes()
    return np.ascontiguousarray(x).tobytes()


def rewrite(src, dst, edit_meta=None, edit_data=None):
    """Copy the patch src to dst, with its metadata or data section edited."""
    with open(src, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    data = bytearray(b[8 + n:])
    if edit_meta:
        edit_meta(header["__metadata__"])
    if edit_data:
        edit_data(header, data)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + bytes(data))
    return dst


class RoundTrip(unittest.TestCase):
    """Version N-1 in memory plus patch N is version N, bit for bit."""

    def check_equal(self, state, store, v):
        want = store.raw_state(v)
        self.assertEqual(set(state), set(want))
        for name, b in want.items():
            self.assertEqual(raw_of(state[name]), b, f"{name} differs from version {v}")

    def round_trip(self, store, versions, load):
        for v in versions:
            p = weightfs.Patch.open(store.patch(v))
            self.assertEqual((p.model_version, p.base_version), (v, v - 1))
            self.assertTrue(p.has_digests)
            state = load(store, v - 1)
            res = p.apply(state)  # checked: the default
            self.assertEqual(res.elements, sum(t.changed for t in p.tensors.values()))
            self.check_equal(state, store, v)
            p.apply(state)  # idempotent
            self.check_equal(state, store, v)

    def test_rl_numpy(self):
        self.round_trip(fixtures.rl_store(), [2, 3, 4], lambda s, v: s.numpy_state(v))

    def test_rl_numpy_raw(self):
        self.round_trip(fixtures.rl_store(), [2, 4], lambda s, v: s.numpy_state(v, raw=True))

    def test_mixed_dtypes_numpy(self):
        self.round_trip(fixtures.mixed_store(), [2, 3], lambda s, v: s.numpy_state(v))

    @unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
    def test_rl_torch(self):
        self.round_trip(fixtures.rl_store(), [2, 3, 4], lambda s, v: s.torch_state(v))

    @unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
    def test_mixed_dtypes_torch(self):
        self.round_trip(fixtures.mixed_store(), [2, 3], lambda s, v: s.torch_state(v))

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no CUDA device")
    def test_rl_torch_cuda(self):
        self.round_trip(fixtures.rl_store(), [2, 3], lambda s, v: s.torch_state(v, "cuda"))

    @unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
    def test_torch_module_state_dict(self):
        """A model's parameters (requires_grad leaves) are patched in place by name."""
        store = fixtures.rl_store()
        params = torch.nn.ParameterDict({n.replace(".", "_"): torch.nn.Parameter(t)
                                         for n, t in store.torch_state(2).items()})
        state = dict(params.items())
        p = weightfs.Patch.open(store.patch(3))
        p.apply(state, rename=lambda n: n.replace(".", "_"))
        want = store.raw_state(3)
        for name, b in want.items():
            self.assertEqual(raw_of(params[name.replace(".", "_")]), b)

    def test_whole_files_skipped(self):
        store = fixtures.mixed_store()
        p = weightfs.Patch.open(store.patch(2))
        self.assertEqual(list(p.whole_files), ["config.json"])
        self.assertEqual(p.whole_file("config.json").tobytes(), b'{"v": 2}\n')
        res = p.apply(store.numpy_state(1))
        self.assertEqual(res.skipped_files, ["config.json"])

    def test_reads_lazily(self):
        p = weightfs.Patch.open(fixtures.rl_store().patch(2), check_indices=False)
        self.assertEqual(p._checked, set())
        name = next(iter(p.tensors))
        self.assertEqual(len(p.indices(name)), p.tensors[name].changed)
        self.assertEqual(p._checked, {name})


class Refusals(unittest.TestCase):
    def setUp(self):
        self.store = fixtures.rl_store()
        self.path = self.store.patch(3)
        self.dir = os.path.join(fixtures.tmpdir(), "bad-" + self._testMethodName)
        os.makedirs(self.dir, exist_ok=True)

    def bad(self, **kw):
        return rewrite(self.path, os.path.join(self.dir, "p.safetensors"), **kw)

    def assertRefused(self, path, exc=weightfs.MalformedPatch):
        with self.assertRaises(exc):
            weightfs.Patch.open(path)

    def test_damaged_patches_refused(self):
        first = json.loads(weightfs.Patch.open(self.path).metadata["changed_params"])[0]

        def swap_indices(header, data):  # two indices out of order
            b, _ = header[first + ".indices"]["data_offsets"]
            data[b:b + 4], data[b + 4:b + 8] = data[b + 4:b + 8], data[b:b + 4]

        def out_of_range(header, data):
            b, e = header[first + ".indices"]["data_offsets"]
            data[e - 4:e] = struct.pack("<i", 1 << 30)

        def meta(key, value):
            def f(m):
                if value is None:
                    del m[key]
                else:
                    m[key] = value
            return f

        cases = {
            "indices not ascending": dict(edit_data=swap_indices),
            "index out of range": dict(edit_data=out_of_range),
            "count off": dict(edit_meta=meta("num_changed_params", "7")),
            "total off": dict(edit_meta=meta("total_changed_elements", "1")),
            "no sparsity": dict(edit_meta=meta("sparsity", None)),
            "bad sha256": dict(edit_meta=meta("result_sha256:model-00001-of-00002.safetensors", "00")),
            "bad digest": dict(edit_meta=lambda m: m.__setitem__(
                "params:model-00001-of-00002.safetensors",
                m["params:model-00001-of-00002.safetensors"].replace('"xxh3":"', '"xxh3":"X', 1))),
            "one digest missing": dict(edit_meta=lambda m: m.__setitem__(
                "params:model-00001-of-00002.safetensors",
                json.dumps({k: ({"dtype": v["dtype"], "elements": v["elements"]} if i == 0 else v) for i, (k, v) in
                            enumerate(json.loads(m["params:model-00001-of-00002.safetensors"]).items())}))),
            "bad shape": dict(edit_meta=lambda m: m.__setitem__(
                "params:model-00001-of-00002.safetensors",
                json.dumps({k: dict(v, shape=[3, 3]) for k, v in
                            json.loads(m["params:model-00001-of-00002.safetensors"]).items()}))),
            "values dtype": dict(edit_data=lambda h, d: h[first + ".values"].__setitem__("dtype", "F16")),
            "extra tensor": dict(edit_data=lambda h, d: (h.__setitem__("x", {"dtype": "U8", "shape": [0], "data_offsets": [len(d), len(d)]}))),
        }
        for what, kw in cases.items():
            with self.subTest(what):
                self.assertRefused(self.bad(**kw))
        for what, kw, exc in [("format", dict(edit_meta=meta("format", "other")), weightfs.UnsupportedPatch),
                              ("version", dict(edit_meta=meta("version", "2")), weightfs.UnsupportedPatch),
                              ("encoding", dict(edit_meta=meta("encoding", "gap_delta")), weightfs.UnsupportedPatch)]:
            with self.subTest(what):
                self.assertRefused(self.bad(**kw), exc)

    def test_damaged_files_refused(self):
        with open(self.path, "rb") as f:
            good = f.read()
        p = os.path.join(self.dir, "p.safetensors")
        for what, b in {"truncated": good[:-1], "grown": good + b"\0", "empty": b"",
                        "header length": struct.pack("<Q", len(good)) + good[8:],
                        "not JSON": good[:8] + b"[" + good[9:]}.items():
            with self.subTest(what):
                with open(p, "wb") as f:
                    f.write(b)
                self.assertRefused(p, weightfs.MalformedFile)

    def test_shape_extension_read(self):
        shapes = fixtures.weightfs.checkpoint_shapes(self.store.versions[2])

        def add_shapes(m):
            for k in [k for k in m if k.startswith("params:")]:
                m[k] = json.dumps({n: dict(v, shape=list(shapes[n])) for n, v in json.loads(m[k]).items()})
        p = weightfs.Patch.open(self.bad(edit_meta=add_shapes))
        for t in p.tensors.values():
            self.assertEqual(t.shape, shapes[t.name])
        state = self.store.numpy_state(2)
        state[t.name] = state[t.name].reshape(-1)  # right count, wrong shape
        with self.assertRaisesRegex(weightfs.ApplyError, "shape"):
            p.apply(state)

    def test_mismatched_state_refused_untouched(self):
        p = weightfs.Patch.open(self.path)
        name = next(iter(p.tensors))
        cases = {
            "dtype": lambda s: s.__setitem__(name, s[name].astype(np.float32)),
            "elements": lambda s: s.__setitem__(name, s[name][:-1].copy()),
            "missing": lambda s: s.pop(name),
            "not contiguous": lambda s: s.__setitem__(name, np.asfortranarray(s[name]) if s[name].ndim == 2 and s[name].shape[0] > 1 else s[name][::1].T),
            "read-only": lambda s: s[name].setflags(write=False),
        }
        for what, spoil in cases.items():
            with self.subTest(what):
                state = self.store.numpy_state(2)
                spoil(state)
                before = {k: v.tobytes() for k, v in state.items()}
                with self.assertRaises(weightfs.ApplyError):
                    p.apply(state)
                self.assertEqual({k: v.tobytes() for k, v in state.items()}, before, "a refused apply wrote")
        state = self.store.numpy_state(2)
        del state[name]
        res = p.apply(state, strict=False)
        self.assertNotIn(name, res.tensors)

    @unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
    def test_torch_dtype_refused(self):
        p = weightfs.Patch.open(self.path)
        state = self.store.torch_state(2)
        name = next(iter(p.tensors))
        state[name] = state[name].float()
        with self.assertRaisesRegex(weightfs.ApplyError, "torch dtype torch.float32"):
            p.apply(state)


@unittest.skipIf(xxhash is None, "xxhash is not installed (python3-xxhash)")
class Digests(unittest.TestCase):
    def test_digest_mismatch_raises_and_restores(self):
        store = fixtures.rl_store()
        p = weightfs.Patch.open(store.patch(4))
        for load in [store.numpy_state] + ([store.torch_state] if torch is not None else []):
            state = load(2)  # not the patch's base (version 3)
            before = {k: raw_of(v) for k, v in state.items()}
            with self.assertRaises(weightfs.DigestMismatch):
                p.apply(state, verify=True)
            self.assertEqual({k: raw_of(v) for k, v in state.items()}, before, "the old values were not put back")

    def test_wrong_recorded_digest_raises(self):
        store = fixtures.rl_store()
        src = store.patch(3)
        p0 = weightfs.Patch.open(src)
        victim = next(iter(p0.tensors))
        key = "params:" + p0.tensors[victim].file

        def flip(m):
            params = json.loads(m[key])
            d = params[victim]["xxh3"]
            params[victim]["xxh3"] = ("0" if d[0] != "0" else "1") + d[1:]
            m[key] = json.dumps(params)
        os.makedirs(os.path.join(fixtures.tmpdir(), "digest"), exist_ok=True)
        p = weightfs.Patch.open(rewrite(src, os.path.join(fixtures.tmpdir(), "digest", "p.safetensors"), edit_meta=flip))
        state = store.numpy_state(2)
        with self.assertRaisesRegex(weightfs.DigestMismatch, victim):
            p.apply(state, verify=True)
        p.apply(state, verify=False)  # unchecked, the same patch applies: only when asked for

    def test_no_digests(self):
        store = fixtures.rl_store()
        src = store.patch(3)

        def strip(m):
            for k in [k for k in m if k.startswith("params:")]:
                m[k] = json.dumps({n: {"dtype": v["dtype"], "elements": v["elements"]} for n, v in json.loads(m[k]).items()})
        os.makedirs(os.path.join(fixtures.tmpdir(), "nodigest"), exist_ok=True)
        p = weightfs.Patch.open(rewrite(src, os.path.join(fixtures.tmpdir(), "nodigest", "p.safetensors"), edit_meta=strip))
        self.assertFalse(p.has_digests)
        state = store.numpy_state(2)
        before = {k: v.tobytes() for k, v in state.items()}
        for kw in ({}, {"verify": True}):  # the default checks: no digests, no apply
            with self.assertRaisesRegex(weightfs.DigestUnavailable, "verify=False"):
                p.apply(state, **kw)
            self.assertEqual({k: v.tobytes() for k, v in state.items()}, before)
        p.apply(state, verify=False)  # a patch without the extension (older weightfs) applies when asked
        self.assertEqual({k: v.tobytes() for k, v in state.items()}, store.raw_state(3))


if __name__ == "__main__":
    unittest.main()


class HeaderOnly(unittest.TestCase):
    def test_header_change_in_place(self):
        """A header edited in place (same length, same tensors) is carried as 'header_files'
        and a __header__: tensor, not the whole file; the client reads it and applies the rest."""
        root = os.path.join(fixtures.tmpdir(), "header-only")
        rng = np.random.default_rng(9)
        a = rng.integers(0, 1 << 16, 64, dtype=np.uint16)
        b = a.copy()
        b[[3, 40]] ^= 1
        versions = {}
        for v, (fmt, data) in enumerate([("pt", a), ("tf", b)], start=1):
            d = os.path.join(root, f"weight_v{v:06d}")
            os.makedirs(d)
            fixtures.write_safetensors(os.path.join(d, "model.safetensors"), [("w", "BF16", (8, 8), data.tobytes())], {"format": fmt})
            versions[v] = d
        store = fixtures.Store("header-only", versions)
        p = weightfs.Patch.open(store.patch(2))
        self.assertEqual(p.whole_files, {})
        self.assertEqual(list(p.header_files), ["model.safetensors"])
        with open(os.path.join(versions[2], "model.safetensors"), "rb") as f:
            v2 = f.read()
        self.assertEqual(p.header_bytes("model.safetensors").tobytes(), v2[:p.header_files["model.safetensors"]])
        state = {"w": a.reshape(8, 8).copy()}
        p.apply(state)
        self.assertEqual(state["w"].tobytes(), b.tobytes())
