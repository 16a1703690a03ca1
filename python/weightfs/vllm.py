"""The bridge to vLLM's sparse updates in checkpoint coordinates.

vLLM fuses and shards its parameters (``qkv_proj``, ``gate_up_proj``, tensor and expert
parallel ranks), so a patch's HF names and flat indices cannot be ``index_copy_``'d into its
parameters. vLLM takes sparse updates in *checkpoint* coordinates instead and lets each
model's own ``load_weights`` do the mapping; a weightfs patch already is in those coordinates
(HF name, flat ascending indices into the full checkpoint tensor, new values, and the full
shape). This module converts, and never maps names, shards or packs itself.

The definitions it targets (vLLM source, read for this module; see docs/engines.md):

- ``SparseWeightPatch`` (dataclass; ``vllm/backends/distributed/weight_transfer/
  sparse_nccl_engine.py``, formerly ``vllm/distributed/weight_transfer/sparse_nccl_engine.py``;
  PR #40096 added it with ``name, indices, values``; PR #53751 moved it to checkpoint
  coordinates and added ``full_shape``): ``name: str`` (checkpoint name), ``indices:
  torch.Tensor`` (1-D; ``SparseNCCLTrainerWeightTransferEngine._validate_patch`` requires
  ``torch.int32``), ``values: torch.Tensor`` (1-D, same length; its dtype goes on the wire as
  ``str(values.dtype).split(".")[-1]``), ``full_shape: tuple[int, ...]`` ("Full checkpoint
  shape"; required).
- ``SparseNCCLWeightTransferUpdateInfo`` (same file): ``names``, ``dtype_names``, ``shapes``
  (``list[list[int]]``), ``num_updates_list`` (entries per patch; must not be empty), built by
  ``_broadcast_chunk`` from a chunk of ``SparseWeightPatch``; ``send_weights(patches)`` is
  one-shot, ``send_weight_chunk(patches)`` sends one chunk inside a caller-owned
  ``start_weight_update``/``finish_weight_update``.
- ``CheckpointWeightPatch`` (NamedTuple; ``vllm/model_executor/model_loader/
  checkpoint_weight_patch.py``, PR #50723): ``name``, ``shape: tuple[int, ...]``, ``dtype:
  torch.dtype``, ``values`` (1-D), ``indices`` (1-D ``int32`` or ``int64``, or ``None`` for a
  dense patch), applied by ``load_checkpoint_weight_patches(model, patches, max_chunk_bytes=...)``
  through ``model.load_weights``. Sparse patches are staged as full checkpoint-shaped tensors
  filled with NaN, so **NaN marks an unchanged element**: sparse values must not be NaN and
  the dtype must be floating point.

So a patch converts when its changed tensors are floating point, carry no NaN value, and (for
the NCCL path) have fewer than 2^31 elements (int32 indices). Anything else raises
:class:`NotConvertible` naming the tensor: reload that version from a pinned mount instead.
Files the patch carries whole (a header that changed, ``config.json``) have no sparse form
either; by default they raise too (``whole_files="ignore"`` skips files that hold no tensors).

The engine applies the values, so the patch is checked before anything is converted: by
default (``verify=True``) every changed tensor of ``base`` (the base version's directory, e.g.
a pinned mount's ``weight_vK``, or a dict of its tensors) with the patch applied must hash to
the digest the patch records (:meth:`weightfs.Patch.check_against`); without ``base`` the
conversion raises :class:`weightfs.DigestUnavailable`. ``verify=False`` converts unchecked.
"""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .patch import DigestUnavailable, PatchError

__all__ = ["NotConvertible", "SparseWeightPatch", "sparse_weight_patch_class", "sparse_weight_patches",
           "iter_chunks", "update_info", "checkpoint_weight_patches", "wire_bytes"]

INT32_LIMIT = 1 << 31


class NotConvertible(PatchError):
    """A patch (or one of its tensors) has no form in vLLM's sparse update API."""


@dataclass
class SparseWeightPatch:
    """Stand-in with the fields of vLLM's ``SparseWeightPatch`` (sparse_nccl_engine.py, after
    PR #53751), used when vLLM is not importable."""
    name: str
    indices: Any
    values: Any
    full_shape: tuple


def sparse_weight_patch_class():
    """vLLM's SparseWeightPatch if vLLM is installed (the module path before and after vLLM's
    move to ``vllm.backends``), else the stand-in above."""
    for mod in ("vllm.distributed.weight_transfer.sparse_nccl_engine",
                "vllm.backends.distributed.weight_transfer.sparse_nccl_engine"):
        try:
            m = __import__(mod, fromlist=["SparseWeightPatch"])
            cls = getattr(m, "SparseWeightPatch")
            if "full_shape" in getattr(cls, "__dataclass_fields__", {}):
                return cls
        except Exception:  # vLLM absent, or one without checkpoint coordinates
            continue
    return SparseWeightPatch


def _full_shape(t, shapes):
    shape = t.shape
    if shape is None and shapes is not None:
        shape = shapes.get(t.name)
        if shape is not None:
            shape = tuple(int(d) for d in shape)
    if shape is None:
        raise NotConvertible(f"tensor {t.name!r}: the patch records no shape (docs/format.md Part III §2); pass "
                             "shapes=weightfs.checkpoint_shapes(BASE_VERSION_DIR)")
    if math.prod(shape) != t.elements:
        raise NotConvertible(f"tensor {t.name!r}: shape {list(shape)} does not hold the patch's {t.elements} elements")
    return shape


def _check_convertible(patch, whole_files, index_limit):
    for path in patch.whole_files:
        if whole_files != "ignore" or patch.whole_safetensors(path) is not None:
            raise NotConvertible(f"{patch.path}: file {path!r} is carried whole (its header or kind changed): "
                                 "no sparse form; reload this version")
    for t in patch.tensors.values():
        if not t.dtype.is_float:
            raise NotConvertible(f"tensor {t.name!r} is {t.dtype.name}: vLLM's sparse checkpoint patches need a "
                                 "floating dtype (NaN marks unchanged elements)")
        if t.elements >= index_limit:
            raise NotConvertible(f"tensor {t.name!r} has {t.elements} elements: sparse NCCL indices are int32")


def _torch_values(patch, t, lo, hi, device):
    import torch

    from ._torch import from_raw, torch_dtype
    if torch_dtype(t.dtype) is None:
        raise NotConvertible(f"tensor {t.name!r}: this torch has no {t.dtype.torch}")
    raw = patch.values(t.name)[lo:hi]
    v = from_raw(raw.view(np.uint8), t.dtype, (hi - lo,), device)
    if bool(torch.isnan(v).any()):
        raise NotConvertible(f"tensor {t.name!r} sets a NaN value: vLLM's sparse patches use NaN for "
                             "'unchanged'; reload this version")
    return v


def _torch_indices(patch, t, lo, hi, device, dtype):
    import torch
    idx = np.ascontiguousarray(patch.indices(t.name)[lo:hi]).astype(np.int64 if dtype == "int64" else np.int32)
    return torch.from_numpy(idx).to(device)


def wire_bytes(n, t):
    """Bytes of n entries of tensor t on the sparse NCCL wire: int32 index + value."""
    return n * (4 + t.dtype.width)


def _plan_chunks(patch, max_bytes, max_staging_bytes):
    """Split the patch's entries into chunks: lists of (tensor, lo, hi)."""
    if max_bytes is not None and max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    chunks, cur, used, staged = [], [], 0, 0
    for t in patch.tensors.values():
        lo, per = 0, 4 + t.dtype.width
        full = t.elements * t.dtype.width  # the receiver stages a full checkpoint-shaped tensor per part
        while lo < t.changed:
            if cur and max_staging_bytes is not None and staged + full > max_staging_bytes:
                chunks.append(cur)
                cur, used, staged = [], 0, 0
            room = t.changed - lo if max_bytes is None else (max_bytes - used) // per
            if room < 1:
                if cur:
                    chunks.append(cur)
                    cur, used, staged = [], 0, 0
                    continue
                room = 1  # a budget below one entry still moves one entry per chunk
            hi = min(t.changed, lo + room)
            cur.append((t, lo, hi))
            used += (hi - lo) * per
            staged += full
            lo = hi
    if cur:
        chunks.append(cur)
    return chunks


def _verify(patch, verify, base):
    if not verify:
        return
    if base is None:
        raise DigestUnavailable(f"{patch.path}: the engine applies these values unchecked, so the patch is checked "
                                "against its base first: pass base=DIR (the base version's directory, e.g. "
                                f"MNT/weight_v{patch.base_version:06d}), or verify=False to convert it unchecked")
    patch.check_against(base)


def iter_chunks(patch, max_bytes=None, *, shapes=None, device="cpu", rename=None, patch_class=None,
                max_staging_bytes=None, whole_files="error", verify=True, base=None):
    """Yield lists of vLLM ``SparseWeightPatch`` for ``send_weight_chunk``, in patch order.

    Each chunk carries at most max_bytes on the wire (int32 indices plus values; a tensor
    larger than that is split into several patches of the same name, which vLLM's loader
    applies in order, each on disjoint positions). max_staging_bytes also bounds the full
    checkpoint-shaped tensors the receiver stages per chunk (one part may exceed it, as in
    vLLM's own ``max_chunk_bytes``). Shapes come from the patch (the optional shape extension)
    or from shapes ({name: shape}, e.g. ``weightfs.checkpoint_shapes(base_dir)``). rename maps
    a patch's name to the checkpoint name vLLM's loader expects (default: the same name).
    patch_class defaults to :func:`sparse_weight_patch_class`. Tensors are built per chunk, so
    memory follows the chunk, not the patch. Before the first chunk the patch is checked
    against base (see the module's doc) unless verify=False.
    """
    _check_convertible(patch, whole_files, INT32_LIMIT)
    _verify(patch, verify, base)
    cls = patch_class or sparse_weight_patch_class()
    name_of = rename or (lambda n: n)
    full = {t.name: _full_shape(t, shapes) for t in patch.tensors.values()}
    for plan in _plan_chunks(patch, max_bytes, max_staging_bytes):
        yield [cls(name=name_of(t.name),
                   indices=_torch_indices(patch, t, lo, hi, device, "int32"),
                   values=_torch_values(patch, t, lo, hi, device),
                   full_shape=full[t.name]) for t, lo, hi in plan]


def sparse_weight_patches(patch, **kwargs):
    """Every changed tensor as one vLLM ``SparseWeightPatch`` (one chunk; see iter_chunks)."""
    out = []
    for chunk in iter_chunks(patch, None, **kwargs):
        out.extend(chunk)
    return out


def update_info(patches):
    """The fields of vLLM's ``SparseNCCLWeightTransferUpdateInfo`` for a chunk, as the trainer
    engine's ``_broadcast_chunk`` builds them (what crosses the control plane)."""
    return {
        "names": [p.name for p in patches],
        "dtype_names": [str(p.values.dtype).split(".")[-1] for p in patches],
        "shapes": [list(p.full_shape) for p in patches],
        "num_updates_list": [p.indices.numel() for p in patches],
    }


def checkpoint_weight_patches(patch, *, shapes=None, device="cpu", rename=None, patch_class=None,
                              whole_files="error", verify=True, base=None):
    """Every changed tensor as a vLLM ``CheckpointWeightPatch`` (PR #50723) for an in-process
    ``load_checkpoint_weight_patches(model, patches)``: indices int32, or int64 for tensors of
    2^31 elements or more (that API takes both). patch_class defaults to vLLM's
    CheckpointWeightPatch; without vLLM pass one (any callable taking the five fields). The patch
    is checked against base first unless verify=False (see the module's doc)."""
    import torch

    from ._torch import torch_dtype
    _check_convertible(patch, whole_files, float("inf"))
    _verify(patch, verify, base)
    if patch_class is None:
        from vllm.model_executor.model_loader.checkpoint_weight_patch import CheckpointWeightPatch as patch_class
    name_of = rename or (lambda n: n)
    out = []
    for t in patch.tensors.values():
        itype = "int64" if t.elements >= INT32_LIMIT else "int32"
        out.append(patch_class(name=name_of(t.name), shape=_full_shape(t, shapes), dtype=torch_dtype(t.dtype),
                               values=_torch_values(patch, t, 0, t.changed, device),
                               indices=_torch_indices(patch, t, 0, t.changed, device, itype)))
    assert all(isinstance(p.dtype, torch.dtype) for p in out)
    return out
