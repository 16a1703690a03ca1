"""Proof that an engine holds version N: its own per-weight digests against digests weightfs
derives for N in the engine's coordinates.

vLLM's ``POST /weight_checker {"action": "checksum"}`` (dev mode; ``vllm/entrypoints/serve/
dev/rlhf/api_router.py``) answers ``{"checksums": {key: hex}}``: one SHA-256 per runtime
weight of every worker, over the tensor's bytes as they lie in memory (contiguous, flattened,
viewed as uint8: ``compute_weight_checksums`` in ``vllm/v1/worker/utils.py``), keyed
``dp{dp}:pp{pp}:pcp{pcp}:tp{tp}:ep{ep}:{parameter name}`` (the rank prefix of
``vllm/utils/weight_checksum_utils.py``). Those keys are *runtime* names: ``qkv_proj`` and
``gate_up_proj`` fused, every column- or row-parallel weight sliced per tensor-parallel rank.

:class:`FusedLayout` derives the same keys and bytes from a checkpoint in HF names, the way
vLLM's Llama-family loaders place them (``stacked_params_mapping`` in
``vllm/model_executor/models/llama.py``; ``QKVParallelLinear`` / ``MergedColumnParallelLinear``
/ ``RowParallelLinear`` / ``VocabParallelEmbedding`` weight loaders in
``vllm/model_executor/layers/linear.py`` and ``vocab_parallel_embedding.py``). It never
touches the engine: an independent derivation, so a wrong placement on either side shows as a
mismatch, never as a false match. Names it does not know are hashed replicated (norms, biases
of row-parallel layers). :class:`ExpectedDigests` keeps them for the version an engine should
hold and advances them with each patch, rehashing only the weights the patch touches.
"""

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["WeightMismatch", "FusedLayout", "ExpectedDigests", "sha256_bytes", "module_digests",
           "rank_prefix", "compare_digests"]


class WeightMismatch(Exception):
    """The engine's weights are not the version expected; ``.key`` names the first that
    differs (or is missing), ``.mismatches`` all of them."""

    def __init__(self, msg, key=None, mismatches=()):
        super().__init__(msg)
        self.key = key
        self.mismatches = list(mismatches)


def sha256_bytes(arr):
    """SHA-256 hex of an array's bytes as laid out in memory (C order), as vLLM hashes a
    runtime weight."""
    return hashlib.sha256(memoryview(np.ascontiguousarray(arr)).cast("B")).hexdigest()


def rank_prefix(tp=0, pp=0, dp=0, pcp=0, ep=0):
    """vLLM's checksum key prefix for one worker."""
    return f"dp{dp}:pp{pp}:pcp{pcp}:tp{tp}:ep{ep}:"


def module_digests(model, key_prefix=""):
    """SHA-256 per parameter of a torch module (plus persistent buffers), keyed
    key_prefix + name: the in-process twin of vLLM's ``compute_weight_checksums``."""
    from ._torch import raw_bytes
    out = {}
    for name, t in model.named_parameters():
        out[key_prefix + name] = hashlib.sha256(memoryview(raw_bytes(t.detach().contiguous()))).hexdigest()
    for mname, mod in model.named_modules():
        for bname, t in mod.named_buffers(recurse=False):
            if bname in mod._non_persistent_buffers_set:
                continue
            out[key_prefix + (f"{mname}.{bname}" if mname else bname)] = \
                hashlib.sha256(memoryview(raw_bytes(t.detach().contiguous()))).hexdigest()
    return out


# vLLM's Llama-family stacked_params_mapping: (runtime part, checkpoint part, shard id).
LLAMA_STACKED = ((".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
                 (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1))
# Sharding of the (fused) runtime weights: dim 0 = column parallel, 1 = row parallel.
LLAMA_COLUMN = re.compile(r"\.(qkv_proj|gate_up_proj)\.(weight|bias)$")
LLAMA_ROW = re.compile(r"\.(o_proj|down_proj)\.weight$")
LLAMA_VOCAB = re.compile(r"(^|\.)(embed_tokens|lm_head)\.weight$")


@dataclass
class FusedLayout:
    """How a vLLM Llama-family model holds a checkpoint: tensor-parallel size, attention heads
    (for the q/k/v split of ``qkv_proj``) and vocabulary padding (``VocabParallelEmbedding``
    pads the vocabulary to a multiple of ``vocab_pad`` and zero-fills the padding rows)."""
    tp: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_pad: int = 64
    pp: int = 0
    dp: int = 0
    stacked: tuple = LLAMA_STACKED
    tie_word_embeddings: bool = False

    def __post_init__(self):
        if self.num_heads % self.tp:
            raise ValueError(f"{self.num_heads} attention heads do not split over tp={self.tp}")
        if self.num_kv_heads % self.tp and self.tp % self.num_kv_heads:
            raise ValueError(f"{self.num_kv_heads} kv heads neither split over nor replicate to tp={self.tp}")

    @classmethod
    def from_config(cls, config, tp, **kw):
        """From a HF config.json dict."""
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        return cls(tp=tp, num_heads=heads, num_kv_heads=config.get("num_key_value_heads", heads), head_dim=head_dim,
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", False)), **kw)

    def runtime_name(self, name):
        """(runtime parameter name, shard id or None) of a checkpoint name."""
        for param, part, shard in self.stacked:
            if part in name:
                return name.replace(part, param), shard
        return name, None

    def _kv_rows(self, rank):
        """(first head, heads) of k/v on a rank: split when there are at least tp kv heads,
        replicated (rank // (tp / kv)) otherwise, as QKVParallelLinear does."""
        if self.num_kv_heads >= self.tp:
            per = self.num_kv_heads // self.tp
            return rank * per, per
        return rank // (self.tp // self.num_kv_heads), 1

    def _shard(self, name, shard, arr, rank):
        """The slice of checkpoint tensor arr that rank holds for shard id shard."""
        if shard in ("q",):
            per = self.num_heads // self.tp * self.head_dim
            return arr[rank * per:(rank + 1) * per]
        if shard in ("k", "v"):
            first, n = self._kv_rows(rank)
            return arr[first * self.head_dim:(first + n) * self.head_dim]
        if shard is not None:  # a merged column-parallel part: even split of dim 0
            per = arr.shape[0] // self.tp
            return arr[rank * per:(rank + 1) * per]
        if LLAMA_ROW.search(name):
            per = arr.shape[1] // self.tp
            return arr[:, rank * per:(rank + 1) * per]
        if LLAMA_VOCAB.search(name):
            padded = -(-arr.shape[0] // self.vocab_pad) * self.vocab_pad
            per = -(-padded // self.tp)
            rows = np.zeros((per,) + arr.shape[1:], dtype=arr.dtype)
            part = arr[rank * per:min((rank + 1) * per, arr.shape[0])]
            rows[:len(part)] = part
            return rows
        return arr  # replicated

    def groups(self, names):
        """{runtime name: [(shard id, checkpoint name)]} in the fused order of vLLM's loaders
        (q, k, v; gate, up)."""
        order = {s: i for i, (_, _, s) in enumerate(self.stacked)}
        out = {}
        for n in names:
            if self.tie_word_embeddings and n == "lm_head.weight":
                continue  # tied: vLLM skips it and shares embed_tokens
            r, shard = self.runtime_name(n)
            out.setdefault(r, []).append((shard, n))
        for r in out:
            out[r].sort(key=lambda p: order.get(p[0], -1))
        return out

    def digests(self, state, names=None):
        """{checksum key: sha256 hex} of the runtime weights built from state ({HF name: numpy
        array of the checkpoint's shape; raw unsigned integers for BF16/F8}), for every rank;
        names limits it to the runtime weights those checkpoint names feed."""
        groups = self.groups(state)
        if names is not None:
            wanted = {self.runtime_name(n)[0] for n in names}
            groups = {r: g for r, g in groups.items() if r in wanted}
        out = {}
        for rank in range(self.tp):
            prefix = rank_prefix(tp=rank, pp=self.pp, dp=self.dp)
            for r, parts in groups.items():
                if parts[0][0] is not None and len(parts) != len(self._expected_parts(r)):
                    raise ValueError(f"{r}: the checkpoint holds only {[n for _, n in parts]}; a fused weight "
                                     "needs all its parts")
                fused = [self._shard(n, shard, state[n], rank) for shard, n in parts]
                out[prefix + r] = sha256_bytes(np.concatenate(fused, axis=0) if len(fused) > 1 else fused[0])
        return out

    def _expected_parts(self, runtime):
        return [s for p, _, s in self.stacked if runtime.endswith(p + ".weight") or runtime.endswith(p + ".bias")]


def compare_digests(expected, actual, *, what="the engine"):
    """Raise WeightMismatch naming the first key (in expected's order) whose digest differs
    or that actual lacks; keys actual has beyond expected count too (a weight weightfs did not
    derive is not proven)."""
    bad = [k for k in expected if actual.get(k) != expected[k]]
    extra = [k for k in actual if k not in expected]
    if not bad and not extra:
        return
    if bad:
        k = bad[0]
        why = "is missing" if k not in actual else f"has sha256 {actual[k][:16]}…, expected {expected[k][:16]}…"
    else:
        k, why = extra[0], "is not derived from the checkpoint (an unexpected runtime weight)"
    raise WeightMismatch(f"{what}: weight {k!r} {why} ({len(bad)} differ, {len(extra)} unexpected, "
                         f"{len(expected)} expected)", key=k, mismatches=bad + extra)


@dataclass
class ExpectedDigests:
    """The digests an engine holding ``version`` must report, with the checkpoint's tensors
    (raw numpy) they come from: advance() applies the next patch to those tensors and
    rehashes only the runtime weights it touches. Memory: one copy of the checkpoint on the
    host. Built before the pause, so it costs the swap nothing."""
    layout: FusedLayout
    version: int
    state: dict
    digests: dict = field(default_factory=dict)

    @classmethod
    def from_version_dir(cls, layout, version, directory):
        """Version N read from a version directory (``MNT/weight_vN``, pinned: never ``latest``)."""
        import glob
        import os

        from .safetensors import SafetensorsFile
        state = {}
        for f in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
            state.update(SafetensorsFile(f).numpy_dict(raw=True))
        e = cls(layout, version, state)
        e.digests = layout.digests(state)
        return e

    def advance(self, patch, verify=True):
        """Apply patch (base = this version) to the tensors and return the digests of
        patch.model_version, rehashing only what it touched."""
        if patch.base_version != self.version:
            raise WeightMismatch(f"patch {patch.path} goes from version {patch.base_version}, the digests are of "
                                 f"version {self.version}")
        patch.apply(self.state, verify=verify and patch.has_digests)
        self.digests.update(self.layout.digests(self.state, names=list(patch.tensors)))
        self.version = patch.model_version
        return dict(self.digests)
