"""Damaged patches applied with the defaults: every entry point checks unless told not to.

Forty copies of one patch, each with one bit flipped (in the header, in the values, in the
indices), go through Patch.apply, Update.apply and the vLLM conversion with their default
arguments. Each one either is refused with an error, leaving the state as it was, or (a flip in
bytes that do not matter for the result, such as a version number) gives exactly the next
version. A wrong result without an error fails the test.
"""

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

FLIPS = 40


def flipped_patches(src, outdir, seed=27):
    """[(where, path)]: FLIPS copies of the patch src, each with one bit flipped: a third in
    the header's JSON, a third in the values, a third in the indices of its changed tensors."""
    p = weightfs.Patch.open(src)
    with open(src, "rb") as f:
        good = f.read()
    (n,) = struct.unpack("<Q", good[:8])
    start = 8 + n
    values, indices = [], []
    for name in p.tensors:
        for suffix, into in ((".values", values), (".indices", indices)):
            t = p._file.tensors[name + suffix]
            into.append((start + t.begin, start + t.end))
    rng = np.random.default_rng(seed)

    def pick(ranges):
        b, e = ranges[rng.integers(len(ranges))]
        return int(rng.integers(b, e))

    out = []
    os.makedirs(outdir, exist_ok=True)
    for i in range(FLIPS):
        where = ("header", "values", "indices")[i % 3]
        off = int(rng.integers(0, start)) if where == "header" else pick(values if where == "values" else indices)
        bit = int(rng.integers(8))
        b = bytearray(good)
        b[off] ^= 1 << bit
        path = os.path.join(outdir, f"flip{i:02d}.safetensors")
        with open(path, "wb") as f:
            f.write(b)
        out.append((f"flip {i} ({where}, byte {off}, bit {bit})", path))
    return out


class BitFlips(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = fixtures.rl_store()
        cls.flips = flipped_patches(cls.store.patch(3), os.path.join(fixtures.tmpdir(), "bitflips"))
        cls.base, cls.want = cls.store.raw_state(2), cls.store.raw_state(3)

    def outcome(self, what, state, run):
        """run() applies a damaged patch to state (version 2) with the defaults: 'refused' (an
        error, state untouched) or 'exact' (state is version 3); anything else fails."""
        try:
            run()
        except (weightfs.PatchError, weightfs.MalformedFile, ValueError) as e:
            got = {k: np.ascontiguousarray(v).tobytes() if not _is_torch(v) else _torch_raw(v) for k, v in state.items()}
            self.assertEqual(got, self.base, f"{what}: refused ({e}) but the state was changed")
            return "refused"
        got = {k: np.ascontiguousarray(v).tobytes() if not _is_torch(v) else _torch_raw(v) for k, v in state.items()}
        wrong = [k for k in self.want if got[k] != self.want[k]]
        self.assertEqual(wrong, [], f"{what}: applied with the defaults and no error, but {len(wrong)} tensor(s) "
                                    f"are not version 3: a wrong result, silently")
        return "exact"

    def test_patch_apply_defaults(self):
        seen = {"refused": 0, "exact": 0}
        for what, path in self.flips:
            with self.subTest(what):
                state = self.store.numpy_state(2, raw=True)
                seen[self.outcome(what, state, lambda: weightfs.Patch.open(path).apply(state))] += 1
        self.assertGreater(seen["refused"], FLIPS // 2, seen)

    def test_update_apply_defaults(self):
        for what, path in self.flips:
            with self.subTest(what):
                state = self.store.numpy_state(2, raw=True)
                self.outcome(what, state, lambda: weightfs.Update(3, 2, patch=weightfs.Patch.open(path)).apply(state))

    @unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
    def test_vllm_defaults(self):
        import weightfs.vllm as wv
        from test_vllm import CheckpointWeightPatch, SparseWeightPatch, load_sparse_patches
        base_dir = self.store.versions[2]
        for what, path in self.flips:
            with self.subTest(what):
                state = self.store.torch_state(2)

                def run():
                    chunks = list(wv.iter_chunks(weightfs.Patch.open(path), 700, base=base_dir,
                                                 patch_class=SparseWeightPatch))
                    for chunk in chunks:  # what the engine applies, after the conversion accepted it
                        load_sparse_patches(state, [CheckpointWeightPatch(x.name, x.full_shape, x.values.dtype,
                                                                          x.values, x.indices) for x in chunk])
                self.outcome(what, state, run)

    @unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
    def test_vllm_needs_a_base_or_an_explicit_no(self):
        import weightfs.vllm as wv
        from test_vllm import SparseWeightPatch
        p = weightfs.Patch.open(self.store.patch(3))
        with self.assertRaisesRegex(weightfs.DigestUnavailable, "verify=False"):
            wv.sparse_weight_patches(p, patch_class=SparseWeightPatch)
        self.assertEqual(len(wv.sparse_weight_patches(p, patch_class=SparseWeightPatch, verify=False)), len(p.tensors))
        with self.assertRaises(weightfs.DigestMismatch):  # a base directory of another version
            wv.sparse_weight_patches(p, patch_class=SparseWeightPatch, base=self.store.versions[1])

    def test_whole_file_checked(self):
        """A file carried whole (config.json) with a flipped bit is refused when read."""
        store = fixtures.mixed_store()
        src = store.patch(2)
        p = weightfs.Patch.open(src)
        with open(src, "rb") as f:
            b = bytearray(f.read())
        t = p._file.tensors[weightfs.patch.WHOLE_PREFIX + "config.json"]
        b[p._file.data_start + t.begin] ^= 4
        bad = os.path.join(fixtures.tmpdir(), "bitflips", "whole.safetensors")
        with open(bad, "wb") as f:
            f.write(b)
        q = weightfs.Patch.open(bad)
        with self.assertRaisesRegex(weightfs.DigestMismatch, "config.json"):
            q.whole_file("config.json")
        self.assertNotEqual(q.whole_file("config.json", verify=False).tobytes(), p.whole_file("config.json").tobytes())


def _is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_raw(x):
    from weightfs._torch import raw_bytes
    return raw_bytes(x).tobytes()


if __name__ == "__main__":
    unittest.main()
