"""Engines in production: stage, pause, swap, and prove the engine holds version N
(weightfs.engine, weightfs.weightcheck), against a simulated two-rank vLLM model with fused
qkv_proj / gate_up_proj (vllm_tp_mirror.py: a test-only mirror of vLLM's loaders, sources
cited there), through a fake engine that records its calls and through a local HTTP server
that mimics vLLM's dev-mode routes."""

import json
import os
import unittest

import numpy as np

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import vllm_tp_mirror as mirror
    from weightfs import engine as we
    from weightfs import weightcheck as wc

TP = 2


def config_of(store):
    with open(os.path.join(store.versions[1], "config.json")) as f:
        return json.load(f)


class FakeEngine:
    """An engine holding the two-rank model; records every call; fails where told."""

    def __init__(self, model, fail=None, fail_after_chunks=0, flip=None):
        self.model, self.fail, self.fail_after_chunks, self.flip = model, fail, fail_after_chunks, flip
        self.calls, self.paused, self.tag, self.applied = [], False, None, 0

    def _maybe_fail(self, step):
        if self.fail == step:
            raise RuntimeError(f"injected failure in {step}")

    def pause(self):
        self.calls.append("pause")
        self._maybe_fail("pause")
        self.paused = True

    def resume(self):
        self.calls.append("resume")
        self._maybe_fail("resume")
        self.paused = False

    def start_update(self):
        self.calls.append("start_update")
        self._maybe_fail("start_update")

    def apply(self, chunk, info):
        self.calls.append("apply")
        if self.fail == "apply" and self.applied == self.fail_after_chunks:
            raise RuntimeError("injected failure in apply (NCCL timeout)")
        self.model.apply_chunk(chunk)
        self.applied += 1
        if self.flip is not None:
            self.flip(self.model)
            self.flip = None

    def finish(self, version):
        self.calls.append(f"finish({version})")
        self._maybe_fail("finish")
        self.tag = version

    def weight_version(self):
        self.calls.append("weight_version")
        return self.tag

    def weight_digests(self):
        self.calls.append("weight_digests")
        self._maybe_fail("verify")
        return self.model.checksums()


def flip_k_rank1(model):
    """Flip the low bit of one element of rank 1's k part of the fused qkv_proj."""
    r = model.ranks[1]
    p = r.params["model.layers.0.self_attn.qkv_proj.weight"]
    row = r.q_heads * r.hd  # the first k row
    p.view(torch.int16)[row, 3] ^= 1


QKV_RANK1 = "dp0:pp0:pcp0:tp1:ep0:model.layers.0.self_attn.qkv_proj.weight"


@unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
class EngineSwap(unittest.TestCase):
    def setUp(self):
        self.store = fixtures.rl_store()
        self.cfg = config_of(self.store)
        self.layout = wc.FusedLayout.from_config(self.cfg, tp=TP)

    def engine_at(self, v, **kw):
        model = mirror.TPModel(self.cfg, TP)
        model.load_dense(self.store.torch_state(v))
        return FakeEngine(model, **kw)

    def staged(self, v, expected=None):
        p = weightfs.Patch.open(self.store.patch(v))
        if expected is None:
            expected = wc.ExpectedDigests.from_version_dir(self.layout, v - 1, self.store.versions[v - 1])
        return we.stage(p, config={"quantization": None, "pipeline_parallel_size": 1}, held=v - 1,
                        max_bytes=600, expected=expected)

    def test_layout_matches_loader(self):
        """weightfs's own derivation of runtime digests equals the mirror's dense load, every
        weight of both ranks, for every version (the vllm-ascend check: each runtime
        parameter's hash against a dense load)."""
        for v in (1, 4):
            e = self.engine_at(v)
            want = e.model.checksums()
            got = wc.ExpectedDigests.from_version_dir(self.layout, v, self.store.versions[v]).digests
            self.assertEqual(list(sorted(got)), list(sorted(want)))
            self.assertEqual(len(got), 2 * 9)
            wc.compare_digests(got, want)

    def test_layout_gqa_replicated_kv_and_padded_vocab(self):
        """A config the generated model does not cover: one kv head replicated to both ranks,
        a vocabulary of 100 padded to 128 (zero rows), two layers, random bf16 bits."""
        cfg = {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 32,
               "num_hidden_layers": 2, "vocab_size": 100}
        rng = np.random.default_rng(7)
        shapes = {"model.embed_tokens.weight": (100, 16), "model.norm.weight": (16,), "lm_head.weight": (100, 16)}
        for i in range(2):
            pre = f"model.layers.{i}."
            shapes.update({pre + "self_attn.q_proj.weight": (16, 16), pre + "self_attn.k_proj.weight": (4, 16),
                           pre + "self_attn.v_proj.weight": (4, 16), pre + "self_attn.o_proj.weight": (16, 16),
                           pre + "mlp.gate_proj.weight": (32, 16), pre + "mlp.up_proj.weight": (32, 16),
                           pre + "mlp.down_proj.weight": (16, 32), pre + "input_layernorm.weight": (16,),
                           pre + "post_attention_layernorm.weight": (16,)})
        raw = {n: rng.integers(0, 0x7F00, size=sh, dtype=np.uint16) for n, sh in shapes.items()}
        model = mirror.TPModel(cfg, TP)
        model.load_dense({n: torch.from_numpy(a.astype(np.int16)).view(torch.bfloat16) for n, a in raw.items()})
        layout = wc.FusedLayout.from_config(cfg, tp=TP)
        wc.compare_digests(layout.digests(raw), model.checksums())
        # the padding rows are zeros on rank 1 (rows 100..127 of the padded vocabulary)
        self.assertEqual(int(model.ranks[1].params["model.embed_tokens.weight"][36:].view(torch.int16).abs().sum()), 0)

    def test_swap_order_versions_and_proof(self):
        e = self.engine_at(1)
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        for v in (2, 3, 4):
            s = self.staged(v, expected)
            self.assertEqual(e.calls[-1:] if e.calls else [], ["resume"] if v > 2 else [])
            e.calls.clear()
            rep = we.swap(e, s)
            k = len(s.chunks)
            self.assertGreater(k, 1)
            self.assertEqual(e.calls, ["pause", "start_update"] + ["apply"] * k +
                             [f"finish({v})", "weight_version", "weight_digests", "resume"])
            self.assertFalse(e.paused)
            self.assertEqual(e.tag, str(v))
            self.assertEqual(rep.version, v)
            self.assertEqual(rep.verified, 18)
            self.assertEqual(rep.chunks, k)
            self.assertGreaterEqual(rep.pause_s, rep.apply_s + rep.finish_s + rep.verify_s)
            self.assertIn(f"version {v}: paused", str(rep))
            # Bit for bit: the engine equals a dense load of version v on every rank.
            dense = self.engine_at(v)
            for a, b in zip(e.model.ranks, dense.model.ranks):
                for name in a.params:
                    self.assertTrue(torch.equal(a.params[name].view(torch.int16), b.params[name].view(torch.int16)),
                                    f"v{v} rank {a.rank} {name}")

    def test_failures_leave_engine_paused(self):
        cases = [("start_update", 0, "base"), ("apply", 0, "mixed"), ("apply", 1, "mixed"),
                 ("finish", 0, "untagged"), ("verify", 0, "unproven")]
        for step, after, state in cases:
            with self.subTest(step=step, after=after):
                e = self.engine_at(1, fail=step, fail_after_chunks=after)
                with self.assertRaises(we.SwapFailed) as cm:
                    we.swap(e, self.staged(2))
                err = cm.exception
                self.assertEqual(err.step, step)
                self.assertEqual((err.held, err.version, err.state, err.paused), (1, 2, state, True))
                self.assertTrue(e.paused)
                self.assertNotIn("resume", e.calls)
                self.assertIn("left paused", str(err))
                self.assertIn("injected failure", str(err))
                if state != "base":
                    self.assertIn("reload version 2", str(err))

    def test_pause_failure(self):
        e = self.engine_at(1, fail="pause")
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(e, self.staged(2))
        self.assertEqual((cm.exception.step, cm.exception.paused, cm.exception.state), ("pause", False, "base"))
        self.assertEqual(e.calls, ["pause"])

    def test_verifier_catches_one_flipped_element(self):
        e = self.engine_at(1, flip=flip_k_rank1)
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(e, self.staged(2))
        err = cm.exception
        self.assertEqual((err.step, err.state), ("verify", "unproven"))
        self.assertIsInstance(err.cause, wc.WeightMismatch)
        self.assertEqual(err.cause.key, QKV_RANK1)
        self.assertEqual(err.cause.mismatches, [QKV_RANK1])
        self.assertIn(QKV_RANK1, str(err))
        self.assertTrue(e.paused)
        self.assertNotIn("resume", e.calls)

    def test_compare_digests_names_first(self):
        want = self.engine_at(2).model.checksums()
        got = dict(want)
        with self.assertRaises(wc.WeightMismatch) as cm:
            wc.compare_digests(want, {k: v for k, v in got.items() if k != QKV_RANK1})
        self.assertIn("is missing", str(cm.exception))
        got["dp0:pp0:pcp0:tp2:ep0:model.norm.weight"] = "0" * 64
        with self.assertRaisesRegex(wc.WeightMismatch, "unexpected runtime weight"):
            wc.compare_digests(want, got)

    def test_wrong_tag_fails_verify(self):
        e = self.engine_at(1)
        e.finish = lambda version: e.calls.append("finish(lost)")
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(e, self.staged(2))
        self.assertIn("weight_version None", str(cm.exception))
        self.assertTrue(e.paused)


@unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
class Refusals(unittest.TestCase):
    def test_configs(self):
        cases = [({"quantization": "fp8"}, "quantized \\('fp8'\\)"),
                 ({"model_config": {"quantization": "fp8"}}, "quantized"),
                 ({"hf_config": {"quantization_config": {"quant_method": "fp8"}}}, "checkpoint is quantized \\(fp8\\)"),
                 ({"pipeline_parallel_size": 2}, "pipeline_parallel_size=2"),
                 ({"parallel_config": {"pipeline_parallel_size": 4}}, "pipeline_parallel_size=4"),
                 ({"weight_transfer_config": {"backend": "nccl"}}, "not 'sparse_nccl'")]
        for cfg, msg in cases:
            with self.subTest(cfg=cfg):
                with self.assertRaisesRegex(we.EngineRefused, msg) as cm:
                    we.refuse_config(cfg)
                self.assertIn("pinned mount", str(cm.exception))
        for ok in ({}, {"quantization": None, "pipeline_parallel_size": 1, "tensor_parallel_size": 8},
                   {"weight_transfer_config": {"backend": "sparse_nccl"}}):
            we.refuse_config(ok)

    def test_stage_refuses_before_building(self):
        store = fixtures.rl_store()
        p = weightfs.Patch.open(store.patch(2))
        with self.assertRaisesRegex(we.EngineRefused, "quantized"):
            we.stage(p, config={"quantization": "fp8"})
        with self.assertRaisesRegex(we.EngineRefused, "engine holds version 3"):
            we.stage(p, held=3)
        name = next(iter(p.tensors))
        t = p.tensors[name]
        real = p.values
        p.values = lambda n, raw=True: (np.full(t.changed, 0x7FC1, dtype="<u2") if n == name else real(n, raw))
        # Unchecked and without a base, checking is refused first: the values would reach the
        # engine unchecked. The NaN refusal is the converter's, so it is reached with verify=False.
        with self.assertRaisesRegex(weightfs.patch.DigestUnavailable, "pass base=DIR"):
            we.stage(p)
        with self.assertRaisesRegex(we.EngineRefused, "NaN") as cm:
            we.stage(p, verify=False)
        self.assertIn(name, str(cm.exception))
        self.assertIn("pinned mount", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
