"""A test-only mirror of how vLLM holds a Llama-family checkpoint on two tensor-parallel ranks,
and of how its sparse checkpoint patches reach those fused, sharded parameters. vLLM cannot be
installed here; what is mirrored, and from where (vLLM main, read for these tests; no code
copied):

- ``LlamaModel.load_weights`` (vllm/model_executor/models/llama.py): the
  ``stacked_params_mapping`` (q/k/v_proj -> qkv_proj with shard ids "q", "k", "v";
  gate/up_proj -> gate_up_proj with shard ids 0, 1), other names to their own parameter.
- ``QKVParallelLinear.weight_loader`` (vllm/model_executor/layers/linear.py): q rows
  ``[0, q)``, k rows ``[q, q+kv)``, v rows after, per rank; the checkpoint slice of rank r is
  heads ``r * heads_per_rank`` on, for k/v ``r // kv_replicas``.
- ``MergedColumnParallelLinear.weight_loader`` (same file): part i at offset
  ``sum(sizes[:i]) / tp``, the checkpoint's rows ``[r * size/tp, (r+1) * size/tp)``.
- ``RowParallelLinear.weight_loader`` (same file): columns ``[r * n/tp, (r+1) * n/tp)``.
- ``VocabParallelEmbedding.weight_loader`` (vllm/model_executor/layers/
  vocab_parallel_embedding.py): the vocabulary padded to a multiple of 64, rows of rank r,
  padding rows zero.
- ``load_checkpoint_weight_patches`` (vllm/model_executor/model_loader/
  checkpoint_weight_patch.py, PR #50723): a sparse patch is staged as a checkpoint-shaped
  tensor filled with NaN, its values ``index_copy_``'d in, then fed through the model's own
  ``load_weights``; the loaders' copy keeps the destination wherever the source is NaN.
- ``compute_weight_checksums`` (vllm/v1/worker/utils.py): SHA-256 of each parameter's bytes,
  keyed ``dp0:pp0:pcp0:tp{rank}:ep0:{name}``.
"""

import hashlib

import torch


def dense_copy(dst, src):
    dst.copy_(src)


def nan_keeping_copy(dst, src):
    """The sparse path's copy: NaN in the staged source means 'unchanged'."""
    torch.where(torch.isnan(src), dst, src, out=dst)


class TPRank:
    """One tensor-parallel rank's parameters of a Llama model."""

    STACKED = ((".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
               (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1))

    def __init__(self, cfg, rank, tp, dtype=torch.bfloat16):
        self.rank, self.tp, self.cfg = rank, tp, cfg
        h, hd = cfg["hidden_size"], cfg["hidden_size"] // cfg["num_attention_heads"]
        self.hd = hd
        self.q_heads = cfg["num_attention_heads"] // tp
        kv = cfg["num_key_value_heads"]
        self.kv_heads = max(1, kv // tp)
        self.kv_replicas = max(1, tp // kv)
        inter = cfg["intermediate_size"]
        self.inter = inter
        vocab = cfg["vocab_size"]
        self.vocab_per = -(-(-(-vocab // 64) * 64) // tp)
        p = {}
        for i in range(cfg["num_hidden_layers"]):
            pre = f"model.layers.{i}."
            p[pre + "self_attn.qkv_proj.weight"] = torch.zeros(((self.q_heads + 2 * self.kv_heads) * hd, h), dtype=dtype)
            p[pre + "self_attn.o_proj.weight"] = torch.zeros((h, self.q_heads * hd), dtype=dtype)
            p[pre + "mlp.gate_up_proj.weight"] = torch.zeros((2 * inter // tp, h), dtype=dtype)
            p[pre + "mlp.down_proj.weight"] = torch.zeros((h, inter // tp), dtype=dtype)
            p[pre + "input_layernorm.weight"] = torch.zeros((h,), dtype=dtype)
            p[pre + "post_attention_layernorm.weight"] = torch.zeros((h,), dtype=dtype)
        p["model.embed_tokens.weight"] = torch.zeros((self.vocab_per, h), dtype=dtype)
        p["model.norm.weight"] = torch.zeros((h,), dtype=dtype)
        p["lm_head.weight"] = torch.zeros((self.vocab_per, h), dtype=dtype)
        self.params = p

    # --- the weight loaders ---
    def _qkv(self, param, loaded, shard, copy):
        q, kv = self.q_heads * self.hd, self.kv_heads * self.hd
        off, size = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[shard]
        start = (self.rank if shard == "q" else self.rank // self.kv_replicas) * size
        copy(param.narrow(0, off, size), loaded.narrow(0, start, size))

    def _merged(self, param, loaded, shard, copy):
        size = self.inter // self.tp
        copy(param.narrow(0, shard * size, size), loaded.narrow(0, self.rank * size, size))

    def _row(self, param, loaded, copy):
        size = param.shape[1]
        copy(param, loaded.narrow(1, self.rank * size, size))

    def _vocab(self, param, loaded, copy):
        start = self.rank * self.vocab_per
        n = max(0, min(self.vocab_per, loaded.shape[0] - start))
        copy(param[:n], loaded.narrow(0, start, n))
        if copy is dense_copy:
            param[n:].fill_(0)

    def load_weights(self, weights, copy=dense_copy):
        for name, loaded in weights:
            for param_name, part, shard in self.STACKED:
                if part in name:
                    param = self.params[name.replace(part, param_name)]
                    (self._qkv if isinstance(shard, str) else self._merged)(param, loaded, shard, copy)
                    break
            else:
                param = self.params[name]
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    self._row(param, loaded, copy)
                elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
                    self._vocab(param, loaded, copy)
                else:
                    copy(param, loaded)

    def load_checkpoint_weight_patches(self, patches):
        """The sparse path: (name, shape, dtype, values, indices) patches in checkpoint coordinates."""
        staged = []
        for p in patches:
            n = 1
            for d in p.full_shape:
                n *= d
            flat = torch.full((n,), float("nan"), dtype=p.values.dtype)
            flat.index_copy_(0, p.indices.to(torch.long), p.values)
            staged.append((p.name, flat.view(tuple(p.full_shape))))
        self.load_weights(staged, copy=nan_keeping_copy)

    def checksums(self):
        out = {}
        for name, t in self.params.items():
            raw = t.contiguous().view(-1).view(torch.int16).numpy().tobytes()
            out[f"dp0:pp0:pcp0:tp{self.rank}:ep0:{name}"] = hashlib.sha256(raw).hexdigest()
        return out


class TPModel:
    """Every rank of a tensor-parallel Llama model."""

    def __init__(self, cfg, tp=2):
        self.ranks = [TPRank(cfg, r, tp) for r in range(tp)]

    def load_dense(self, state):
        for r in self.ranks:
            r.load_weights(list(state.items()))

    def apply_chunk(self, chunk):
        for r in self.ranks:
            r.load_checkpoint_weight_patches(chunk)

    def checksums(self):
        out = {}
        for r in self.ranks:
            out.update(r.checksums())
        return out
