"""The conversion of a patch to vLLM's sparse checkpoint-coordinate updates, checked field by
field against vLLM's definitions. vLLM cannot be installed here, so its definitions are
mirrored below, each with the file it comes from (vLLM main, read for this client):

- SparseWeightPatch, SparseNCCLWeightTransferUpdateInfo, and the trainer engine's
  _validate_patch / _broadcast_chunk: vllm/backends/distributed/weight_transfer/
  sparse_nccl_engine.py (PR #40096, checkpoint coordinates and send_weight_chunk: PR #53751).
- CheckpointWeightPatch, _validate_patch_structure and the sparse path of
  load_checkpoint_weight_patches: vllm/model_executor/model_loader/checkpoint_weight_patch.py
  (PR #50723).

The mirror of load_checkpoint_weight_patches stages each sparse patch as a NaN-filled full
checkpoint tensor and copies the non-NaN elements into the parameter of the same name, which is
what the model's native load_weights does for an unfused, unsharded parameter (TP=1). That is
the path tested here; vLLM's TP/packed mapping itself is not.
"""

import dataclasses
import json
import math
import os
import typing
import unittest

import numpy as np

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs
from test_patch import rewrite

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import weightfs.vllm as wv


# --- mirrors of vLLM's definitions (see the module docstring for the files) ---

@dataclasses.dataclass
class SparseWeightPatch:
    """A sparse patch in checkpoint coordinates."""
    name: str
    indices: "torch.Tensor"
    values: "torch.Tensor"
    full_shape: typing.Tuple[int, ...]
    """Full checkpoint shape."""


@dataclasses.dataclass
class SparseNCCLWeightTransferUpdateInfo:
    names: typing.List[str]
    dtype_names: typing.List[str]
    shapes: typing.List[typing.List[int]]
    num_updates_list: typing.List[int]

    def __post_init__(self):
        n = len(self.names)
        if len(self.dtype_names) != n or len(self.shapes) != n:
            raise ValueError("`dtype_names`/`shapes` should be of the same size as `names`")
        if len(self.num_updates_list) == 0:
            raise ValueError("`num_updates_list` cannot be empty for sparse updates")
        if len(self.num_updates_list) != n:
            raise ValueError("`num_updates_list` should be of the same size as `names`")
        if any(k < 0 for k in self.num_updates_list):
            raise ValueError("Sparse `num_updates_list` entries must be non-negative")


def validate_patch(patch):
    """SparseNCCLTrainerWeightTransferEngine._validate_patch."""
    if patch.full_shape is None:
        raise ValueError(f"Sparse patch requires full_shape: {patch.name}")
    if patch.indices.dtype != torch.int32:
        raise ValueError(f"Sparse weight updates require int32 indices: {patch.name}")
    if patch.indices.ndim != 1 or patch.values.ndim != 1:
        raise ValueError(f"Sparse weight patches must be 1D flattened updates: {patch.name}")
    if patch.indices.numel() != patch.values.numel():
        raise ValueError(f"`indices` and `values` must have matching lengths for {patch.name}")


class CheckpointWeightPatch(typing.NamedTuple):
    name: str
    shape: typing.Tuple[int, ...]
    dtype: "torch.dtype"
    values: "torch.Tensor"
    indices: typing.Optional["torch.Tensor"] = None


def validate_patch_structure(patch):
    """_validate_patch_structure, sparse branch, plus load_checkpoint_weight_patches' checks."""
    assert patch.name
    assert isinstance(patch.dtype, torch.dtype)
    assert all(d >= 0 for d in patch.shape)
    assert patch.values.ndim == 1
    numel = math.prod(patch.shape)
    assert patch.dtype.is_floating_point, "sparse patches need a floating dtype (NaN sentinel)"
    assert patch.indices.ndim == 1 and patch.indices.dtype in (torch.int32, torch.int64)
    assert patch.indices.numel() == patch.values.numel()
    assert not bool(torch.isnan(patch.values).any()), "NaN values"
    idx = patch.indices.long()
    assert not bool(((idx < 0) | (idx >= numel)).any()), "out-of-range indices"
    s = torch.sort(idx).values
    assert not bool((s[1:] == s[:-1]).any()), "duplicate indices"
    return numel


def load_sparse_patches(state, patches):
    """The sparse path of load_checkpoint_weight_patches for unfused, unsharded parameters:
    a NaN-filled checkpoint-shaped tensor, index_copy_ of the values, then the loader's final
    copy_ keeps the destination wherever the source is NaN."""
    for p in patches:
        numel = validate_patch_structure(p)
        flat = torch.full((numel,), float("nan"), dtype=p.dtype)
        flat.index_copy_(0, p.indices.to(torch.long), p.values.to(dtype=p.dtype))
        src = flat.view(p.shape)
        dst = state[p.name]
        assert dst.shape == src.shape and dst.is_floating_point()
        torch.where(torch.isnan(src), dst, src, out=dst)


# --- tests ---

@unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
class VLLMBridge(unittest.TestCase):
    def setUp(self):
        self.store = fixtures.rl_store()
        self.shapes = weightfs.checkpoint_shapes(self.store.versions[1])

    def test_fields_match_definition(self):
        # The local stand-in has exactly vLLM's fields, in vLLM's order.
        self.assertEqual([f.name for f in dataclasses.fields(wv.SparseWeightPatch)],
                         [f.name for f in dataclasses.fields(SparseWeightPatch)])
        p = weightfs.Patch.open(self.store.patch(3))
        patches = wv.sparse_weight_patches(p, shapes=self.shapes, patch_class=SparseWeightPatch, base=self.store.versions[2])
        self.assertEqual([x.name for x in patches], list(p.tensors))
        for x in patches:
            t = p.tensors[x.name]
            self.assertIsInstance(x, SparseWeightPatch)
            validate_patch(x)
            self.assertEqual(x.indices.dtype, torch.int32)
            self.assertTrue(x.indices.is_contiguous() and x.values.is_contiguous())  # vLLM #57130
            self.assertEqual(x.indices.tolist(), p.indices(x.name).tolist())
            self.assertEqual(x.values.dtype, torch.bfloat16)
            self.assertEqual(x.values.view(torch.int16).numpy().view(np.uint16).tolist(), p.values(x.name).tolist())
            self.assertIsInstance(x.full_shape, tuple)
            self.assertEqual(x.full_shape, self.shapes[x.name])
            self.assertEqual(math.prod(x.full_shape), t.elements)
        info = SparseNCCLWeightTransferUpdateInfo(**wv.update_info(patches))
        self.assertEqual(info.dtype_names, ["bfloat16"] * len(patches))
        self.assertEqual(info.shapes, [list(self.shapes[x.name]) for x in patches])
        self.assertEqual(info.num_updates_list, [p.tensors[x.name].changed for x in patches])
        for name in info.dtype_names:
            self.assertEqual(getattr(torch, name), torch.bfloat16)  # the receiver's getattr(torch, dtype_name)

    def test_apply_through_mirror_gives_next_version(self):
        for v in (2, 3, 4):
            p = weightfs.Patch.open(self.store.patch(v))
            state = self.store.torch_state(v - 1)
            for chunk in wv.iter_chunks(p, 700, shapes=self.shapes, patch_class=SparseWeightPatch,
                                        base=self.store.versions[v - 1]):
                load_sparse_patches(state, [CheckpointWeightPatch(x.name, x.full_shape, x.values.dtype, x.values, x.indices)
                                            for x in chunk])
            want = self.store.raw_state(v)
            for name, b in want.items():
                self.assertEqual(state[name].view(torch.int16).numpy().tobytes(), b, f"v{v} {name}")

    def test_checkpoint_weight_patches(self):
        p = weightfs.Patch.open(self.store.patch(2))
        state = self.store.torch_state(1)
        cps = wv.checkpoint_weight_patches(p, shapes=self.shapes, patch_class=CheckpointWeightPatch, base=state)
        load_sparse_patches(state, cps)
        for x in cps:
            self.assertEqual(x.shape, self.shapes[x.name])
            self.assertEqual(x.dtype, torch.bfloat16)
            self.assertEqual(x.indices.dtype, torch.int32)
        for name, b in self.store.raw_state(2).items():
            self.assertEqual(state[name].view(torch.int16).numpy().tobytes(), b)

    def test_chunks_respect_budget(self):
        p = weightfs.Patch.open(self.store.patch(4))
        total = sum(t.changed for t in p.tensors.values())
        for budget in (6, 100, 1000, 1 << 20):
            chunks = list(wv.iter_chunks(p, budget, shapes=self.shapes, patch_class=SparseWeightPatch, verify=False))
            got = {}
            for chunk in chunks:
                SparseNCCLWeightTransferUpdateInfo(**wv.update_info(chunk))
                size = sum(x.indices.numel() * (4 + x.values.element_size()) for x in chunk)
                self.assertLessEqual(size, budget)
                for x in chunk:
                    got.setdefault(x.name, []).extend(x.indices.tolist())
            self.assertEqual(sum(len(v) for v in got.values()), total)
            for name, idx in got.items():
                self.assertEqual(idx, p.indices(name).tolist(), f"budget {budget}: {name}")
            if budget == 1 << 20:
                self.assertEqual(len(chunks), 1)
        # The receiver's staging (full checkpoint tensors per chunk) bounded too.
        for chunk in wv.iter_chunks(p, 1 << 20, shapes=self.shapes, patch_class=SparseWeightPatch,
                                    max_staging_bytes=5000, verify=False):
            staged = sum(math.prod(x.full_shape) * 2 for x in chunk)
            self.assertTrue(staged <= 5000 or len(chunk) == 1)

    def test_shapes_needed(self):
        p = weightfs.Patch.open(self.store.patch(2))
        # Served patches carry each tensor's shape (the optional extension): no shapes needed.
        from_patch = wv.sparse_weight_patches(p, patch_class=SparseWeightPatch, base=self.store.versions[1])
        self.assertEqual([x.full_shape for x in from_patch], [self.shapes[x.name] for x in from_patch])

        def strip(meta):
            for k in [k for k in meta if k.startswith("params:")]:
                params = json.loads(meta[k])
                for v in params.values():
                    v.pop("shape", None)
                meta[k] = json.dumps(params, separators=(",", ":"))
        bare = rewrite(self.store.patch(2), os.path.join(fixtures.tmpdir(), "noshape.safetensors"), edit_meta=strip)
        p = weightfs.Patch.open(bare)
        with self.assertRaisesRegex(wv.NotConvertible, "records no shape"):
            wv.sparse_weight_patches(p, patch_class=SparseWeightPatch, base=self.store.versions[1])
        bad = dict(self.shapes)
        name = next(iter(p.tensors))
        bad[name] = (1, 2)
        with self.assertRaisesRegex(wv.NotConvertible, "does not hold"):
            wv.sparse_weight_patches(p, shapes=bad, patch_class=SparseWeightPatch, base=self.store.versions[1])

    def test_not_convertible(self):
        """Integer tensors, NaN values and files carried whole have no sparse form in vLLM."""
        store = fixtures.mixed_store()
        shapes = weightfs.checkpoint_shapes(store.versions[1])
        with self.assertRaisesRegex(wv.NotConvertible, "carried whole"):
            wv.sparse_weight_patches(weightfs.Patch.open(store.patch(2)), shapes=shapes, patch_class=SparseWeightPatch)
        p = weightfs.Patch.open(store.patch(3))  # config.json unchanged: no whole file
        with self.assertRaisesRegex(wv.NotConvertible, "floating dtype"):
            wv.sparse_weight_patches(p, shapes=shapes, patch_class=SparseWeightPatch)

    def test_nan_value_refused(self):
        p = weightfs.Patch.open(self.store.patch(2))
        name = next(iter(p.tensors))
        t = p.tensors[name]
        real = p.values
        p.values = lambda n, raw=True: (np.full(t.changed, 0x7FC1, dtype="<u2") if n == name else real(n, raw))
        with self.assertRaisesRegex(wv.NotConvertible, "NaN"):  # values replaced in memory: unchecked
            wv.sparse_weight_patches(p, shapes=self.shapes, patch_class=SparseWeightPatch, verify=False)

    def test_default_class_without_vllm(self):
        try:
            import vllm  # noqa: F401
            self.skipTest("vLLM is installed")
        except ImportError:
            pass
        self.assertIs(wv.sparse_weight_patch_class(), wv.SparseWeightPatch)


if __name__ == "__main__":
    unittest.main()
