#!/usr/bin/env python3
"""GPU check of issue 32 item 5: weightfs's Python client against a real vLLM on a small model,
10 versions through the sparse path and 10 through a disk reload, each verified in the engine.

STATUS: NOT YET RUN. Written in a session without a GPU; nothing here has met a real vLLM. The
vLLM calls it makes were read in vLLM's source (cited inline) and may need adjusting to the
installed build: the script says which step failed and why, and records what did run.

What it does, on one GPU (vLLM's sparse NCCL path needs the trainer on a second device, so one
GPU uses the in-process path of the same contract, ``load_checkpoint_weight_patches``):

1. weightfs-gen writes versions 1..11 of a dense Llama model (bf16); ``weightfs commit`` stores
   them; ``weightfs patch`` writes the one-step patches 2..11.
2. vLLM (offline ``LLM``, TP=1, eager, no tokenizer) loads version 1.
3. Sparse path, N = 2..11: ``weightfs.engine.stage`` (refusals, chunks on cuda, expected
   digests advanced from N-1), then ``weightfs.engine.swap`` with a CallbackEngine whose apply
   runs vLLM's ``load_checkpoint_weight_patches`` in the worker (``collective_rpc``) and whose
   digests are every runtime parameter's SHA-256 computed in the worker. The offline engine
   samples only when asked, so pause/resume are no-ops here; the pause measured is the
   swap's critical section.
4. Disk path, N = 11..2 (descending, so a reload that returns cached weights, vLLM #32718,
   cannot pass): reload version N from its directory, then ``weightfs.engine.prove``.
5. One generate() after each phase (the model still runs). Writes a JSON record.

Run (on the GPU machine, from the repository root; needs vllm, torch, numpy, xxhash, go):

    python3 -m pip install --no-build-isolation ./python
    python3 scripts/gpu_engine_check.py --out /tmp/gpu-engine-check [--params 60M]

and copy the JSON's figures into docs/engines.md ("What ran on a GPU").
"""

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import weightfs  # noqa: E402
from weightfs import engine as we  # noqa: E402
from weightfs import weightcheck as wc  # noqa: E402


def sh(*args):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def build(out):
    bins = os.path.join(out, "bin")
    for cmd in ("weightfs", "weightfs-gen"):
        sh("go", "build", "-o", os.path.join(bins, cmd), "./cmd/" + cmd)
    return os.path.join(bins, "weightfs"), os.path.join(bins, "weightfs-gen")


# --- functions run inside the vLLM worker (collective_rpc pickles them; needs
# VLLM_ALLOW_INSECURE_SERIALIZATION=1). `self` is the worker; its model is
# self.model_runner.model (vllm/v1/worker/gpu_worker.py). ---

def _worker_apply(self, patch_path, shapes, max_bytes):
    import weightfs
    import weightfs.vllm as wv
    from vllm.model_executor.model_loader.checkpoint_weight_patch import load_checkpoint_weight_patches
    p = weightfs.Patch.open(patch_path)
    cps = wv.checkpoint_weight_patches(p, shapes={k: tuple(v) for k, v in shapes.items()}, device="cuda")
    load_checkpoint_weight_patches(self.model_runner.model, cps, max_chunk_bytes=max_bytes)
    return len(cps)


def _worker_digests(self):
    from weightfs.weightcheck import module_digests, rank_prefix
    return module_digests(self.model_runner.model, rank_prefix())


def _worker_reload(self, directory):
    """A dense reload through the model's own load_weights (what a disk reload does), reading
    the version's safetensors with weightfs's reader."""
    import weightfs
    model = self.model_runner.model
    n = 0
    for f in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        s = weightfs.SafetensorsFile(f)
        model.load_weights((name, t.to("cuda")) for name, t in s.torch_dict("cpu").items())
        n += len(s.tensors)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="60M", help="weightfs-gen model size")
    ap.add_argument("--versions", type=int, default=10, help="versions through each path")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    rec = {"status": "started", "host": platform.node(), "steps": [], "sparse": [], "disk": []}
    path = os.path.join(args.out, "gpu_engine_check.json")

    def save():
        with open(path, "w") as f:
            json.dump(rec, f, indent=1)
    try:
        import torch
        import vllm
        rec["vllm"], rec["torch"] = vllm.__version__, torch.__version__
        rec["gpu"] = torch.cuda.get_device_name(0)
        wfs, gen = build(args.out)
        n_last = 1 + args.versions
        gen_dir, store = os.path.join(args.out, "gen"), os.path.join(args.out, "store")
        sh(gen, "-params", args.params, "-versions", str(n_last), "-out", gen_dir)
        vdir = {v: os.path.join(gen_dir, f"weight_v{v:06d}") for v in range(1, n_last + 1)}
        sh(wfs, "init", store)
        for v in range(1, n_last + 1):
            sh(wfs, "commit", store, vdir[v])
        patches = {}
        for v in range(2, n_last + 1):
            patches[v] = os.path.join(args.out, f"weight_v{v:06d}.patch.safetensors")
            sh(wfs, "patch", store, str(v), "-o", patches[v])
        with open(os.path.join(vdir[1], "config.json")) as f:
            cfg = json.load(f)
        rec["model"] = {k: cfg.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                 "num_key_value_heads", "head_dim", "vocab_size")}
        rec["steps"].append("generated and committed versions 1..%d" % n_last)
        save()

        from vllm import LLM, SamplingParams
        llm = LLM(model=vdir[1], skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
                  tensor_parallel_size=1, gpu_memory_utilization=0.5)
        we.refuse_config({"quantization": llm.llm_engine.vllm_config.model_config.quantization,
                          "pipeline_parallel_size": llm.llm_engine.vllm_config.parallel_config.pipeline_parallel_size})
        rec["steps"].append("vLLM loaded version 1")
        layout = wc.FusedLayout.from_config(cfg, tp=1)
        expected = wc.ExpectedDigests.from_version_dir(layout, 1, vdir[1])
        base_keys = set(expected.digests)

        def digests():
            d = llm.collective_rpc(_worker_digests)[0]
            extra = sorted(set(d) - base_keys)
            if extra:  # runtime tensors no checkpoint name feeds (recorded, not compared)
                rec.setdefault("extra_runtime_weights", extra[:20])
            return {k: d[k] for k in d if k in base_keys}

        wc.compare_digests(expected.digests, digests(), what="version 1 (dense load)")
        rec["steps"].append("version 1 verified: %d runtime weights" % len(expected.digests))
        save()

        shapes = weightfs.checkpoint_shapes(vdir[1])
        sampling = SamplingParams(max_tokens=4, temperature=0.0, detokenize=False)
        prompt = [{"prompt_token_ids": [1, 5, 9, 13]}]

        # --- sparse path ---
        for v in range(2, n_last + 1):
            p = weightfs.Patch.open(patches[v])
            # Staged on the CPU: the chunks are checked (refusals, NaN) and counted here, but one
            # in-worker call applies the whole patch, rebuilt from the file on cuda inside the
            # worker (tensors are not pickled across the RPC): the chunk loop is a no-op and the
            # work is in start().
            staged = we.stage(p, held=v - 1, shapes=shapes, device="cpu", expected=expected)
            eng = we.CallbackEngine(start=lambda v=v: llm.collective_rpc(_worker_apply, args=(patches[v], shapes, 256 << 20)),
                                    apply=lambda chunk: None, digests=digests)
            rep = we.swap(eng, staged)
            rec["sparse"].append({"version": v, "pause_ms": rep.pause_s * 1e3, "apply_ms": rep.apply_s * 1e3,
                                  "verify_ms": rep.verify_s * 1e3, "stage_ms": staged.stage_s * 1e3,
                                  "entries": staged.entries, "verified": rep.verified})
            save()
        out = llm.generate(prompt, sampling)
        rec["steps"].append(f"sparse path: versions 2..{n_last} verified; generate gave {list(out[0].outputs[0].token_ids)}")

        # --- disk path (descending) ---
        for v in range(n_last, 1, -1):
            e = wc.ExpectedDigests.from_version_dir(layout, v, vdir[v])
            t = time.perf_counter()
            llm.collective_rpc(_worker_reload, args=(vdir[v],))
            reload_s = time.perf_counter() - t
            t = time.perf_counter()
            wc.compare_digests(e.digests, digests(), what=f"version {v} (disk reload)")
            rec["disk"].append({"version": v, "reload_ms": reload_s * 1e3, "verify_ms": (time.perf_counter() - t) * 1e3,
                                "verified": len(e.digests)})
            save()
        out = llm.generate(prompt, sampling)
        rec["steps"].append(f"disk path: versions {n_last}..2 verified; generate gave {list(out[0].outputs[0].token_ids)}")
        rec["status"] = "ok"
    except Exception as e:
        rec["status"] = "failed"
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()
    save()
    print(json.dumps({k: rec[k] for k in rec if k != "traceback"}, indent=1))
    return 0 if rec["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
