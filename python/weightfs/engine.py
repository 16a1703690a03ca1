"""Engines in production: refuse what the sparse contract does not cover, stage version N
while the engine still samples, then swap under the shortest pause and prove the engine holds N.

    staged = stage(patch, config=server_config, expected=digests)     # engine still sampling
    report = swap(engine, staged)      # pause -> start -> apply -> finish(N) -> verify -> resume

:func:`stage` does everything that does not need the engine stopped: the refusals, the patch's
conversion to vLLM's sparse checkpoint-coordinate chunks (on the device when given one: the
chunks are then resident there before the pause), and the digests version N must show
(:class:`weightfs.weightcheck.ExpectedDigests`). :func:`swap` pauses, sends the chunks, tags the
update with ``weight_version=N``, checks the engine's own digests against the expected ones and
only then resumes. A failure between pause and resume raises :class:`SwapFailed` and leaves
the engine **paused**: never resumed on a mix of versions. The error says which step failed,
what the engine holds (version N-1 untouched, a mix, or N's bytes untagged/unproven) and what
to do (a full reload of a pinned version, then resume).

Engines: :class:`VLLMHTTPEngine` speaks vLLM's dev-mode HTTP routes (``VLLM_SERVER_DEV_MODE=1``;
``vllm/entrypoints/serve/dev/rlhf/api_router.py``: ``/pause?mode=keep``, ``/resume``,
``/start_weight_update``, ``/update_weights``, ``/finish_weight_update {"weight_version"}``,
``/weight_info``, ``/weight_checker``, ``/get_world_size``); :class:`CallbackEngine` wraps an
in-process engine (a vLLM worker reached through ``collective_rpc``, a model under test) from
plain callables. Any object with the same methods works.
"""

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from .patch import PatchError
from .vllm import NotConvertible, iter_chunks, update_info
from .weightcheck import WeightMismatch, compare_digests

__all__ = ["EngineError", "EngineRefused", "SwapFailed", "Staged", "SwapReport", "refuse_config", "stage", "swap", "prove",
           "VLLMHTTPEngine", "CallbackEngine", "RELOAD_ADVICE"]

log = logging.getLogger("weightfs.engine")
log.addHandler(logging.NullHandler())  # a library: the application decides where logs go

RELOAD_ADVICE = ("reload that version whole from a pinned mount (`weightfs mount --read-only --version N`, or "
                 "MNT/weight_vNNNNNN; never MNT/latest), or keep a local copy with `weightfs follow MNT DIR` and "
                 "reload DIR")


class EngineError(PatchError):
    """Base of the errors of this module."""


class EngineRefused(EngineError):
    """The engine or the patch is outside vLLM's sparse contract; ``.reason`` says why and
    ``.alternative`` what to do instead. Raised before anything is paused or sent."""

    def __init__(self, reason, alternative=RELOAD_ADVICE):
        super().__init__(f"refused: {reason}; instead, {alternative}")
        self.reason, self.alternative = reason, alternative


class SwapFailed(EngineError):
    """A step between pause and resume failed. The engine is left paused (resume was not
    called). ``.step`` is the step that failed, ``.held`` the version the engine held before,
    ``.version`` the one being installed, ``.state`` what the engine's weights are now:
    ``"base"`` (nothing sent: still version held, resume is safe), ``"mixed"`` (some chunks
    applied: reload), ``"untagged"`` (every chunk sent but the tag failed), ``"unproven"``
    (tagged, digests differ or could not be read), ``"verified"`` (only the resume failed)."""

    def __init__(self, step, held, version, state, cause, paused=True):
        what = {"base": f"version {held} still (nothing was applied)",
                "mixed": f"a mix of versions {held} and {version}",
                "untagged": f"version {version}'s values, not tagged as such",
                "unproven": f"weights tagged {version} that are not proven to be version {version}",
                "verified": f"version {version}, verified"}[state]
        todo = (f"resume it as version {held}" if state == "base" else f"resume it" if state == "verified" else
                f"reload version {version} (or {held}) whole from a pinned mount, verify, then resume")
        super().__init__(f"swap to version {version} failed at {step}: {cause}. The engine is "
                         f"{'left paused' if paused else 'NOT paused'} and holds {what}; {todo}")
        self.step, self.held, self.version, self.state, self.cause, self.paused = step, held, version, state, cause, paused


# --- refusals -----------------------------------------------------------------------------

def _get(config, *keys):
    """A config value from a flat dict or vLLM's nested ones (server_info's vllm_config)."""
    for k in keys:
        cur = config
        for part in k.split("."):
            if not isinstance(cur, dict) or part not in cur:
                cur = None
                break
            cur = cur[part]
        if cur is not None:
            return cur
    return None


def refuse_config(config):
    """Raise EngineRefused when an engine configured as config (a dict: the engine args, or
    vLLM's ``/server_info`` ``vllm_config``) cannot take sparse checkpoint patches.

    - a quantized engine (``quantization`` set, e.g. ``fp8`` serving a bf16 checkpoint; or a
      ``quantization_config`` in the model's config): its runtime weights are not the
      checkpoint's values, and the quantizing loaders are not driven by sparse patches;
    - pipeline parallelism (``pipeline_parallel_size`` > 1): outside vLLM's sparse contract;
    - a weight transfer backend other than ``sparse_nccl`` when one is named.
    """
    q = _get(config, "quantization", "model_config.quantization", "quant_config")
    if q not in (None, "", "none", "None"):
        raise EngineRefused(f"the engine is quantized ({q!r}): its weights are not the checkpoint's values and "
                            "a sparse patch cannot be re-quantized in place")
    hfq = _get(config, "quantization_config", "hf_config.quantization_config", "model_config.hf_config.quantization_config")
    if hfq:
        method = hfq.get("quant_method", "?") if isinstance(hfq, dict) else hfq
        raise EngineRefused(f"the checkpoint is quantized ({method}): quantized loaders are outside the sparse contract")
    pp = _get(config, "pipeline_parallel_size", "parallel_config.pipeline_parallel_size")
    if pp is not None and int(pp) > 1:
        raise EngineRefused(f"pipeline_parallel_size={pp}: pipeline-parallel engines are outside vLLM's sparse "
                            "weight-update contract")
    backend = _get(config, "weight_transfer_config.backend")
    if backend is not None and backend != "sparse_nccl":
        raise EngineRefused(f"the engine's weight transfer backend is {backend!r}, not 'sparse_nccl' "
                            "(serve with --weight-transfer-config '{\"backend\":\"sparse_nccl\"}')",
                            "restart the engine with the sparse_nccl backend, or " + RELOAD_ADVICE)


# --- stage --------------------------------------------------------------------------------

@dataclass
class Staged:
    """Version N, ready to swap in: chunks of vLLM SparseWeightPatch (built, checked, resident
    on the device they were staged to) and the digests the engine must show afterwards."""
    base_version: int
    version: int
    chunks: list
    infos: list  # update_info(chunk) per chunk: what /update_weights carries
    expected: dict = None  # {checksum key: sha256 hex}, or None: verify only the tag
    entries: int = 0
    wire_bytes: int = 0
    stage_s: float = 0.0


def stage(patch, *, config=None, held=None, shapes=None, max_bytes=256 << 20, max_staging_bytes=None, device="cpu",
          patch_class=None, expected=None, whole_files="error", base=None, verify=True):
    """Prepare patch for a swap while the engine still samples. config: the engine's config
    (see refuse_config); held: the version the engine holds (must be patch.base_version);
    expected: an ExpectedDigests at the base version (advanced here to patch.model_version), a
    digest dict for version N, or None. Refusals raise EngineRefused before anything is built.
    An ExpectedDigests is advanced in place (it then describes N): after a failed swap, rebuild
    it with ExpectedDigests.from_version_dir for the version the engine is reloaded to.
    The engine applies the values unchecked, so the patch is first checked against its base
    (weightfs.vllm.iter_chunks): base is the base version's directory or tensors; without it,
    an ExpectedDigests at the base version serves, since it holds the base's tensors.
    verify=False skips that check, explicitly."""
    t0 = time.perf_counter()
    if config is not None:
        refuse_config(config)
    if held is not None and held != patch.base_version:
        raise EngineRefused(f"the patch goes from version {patch.base_version} but the engine holds version {held}",
                            "use the catch-up patch from the version held (MNT/patches/weight_vN.from_vK."
                            "safetensors), or " + RELOAD_ADVICE)
    if base is None and getattr(expected, "version", None) == patch.base_version:
        base = getattr(expected, "state", None)
    try:
        chunks = list(iter_chunks(patch, max_bytes, shapes=shapes, device=device, patch_class=patch_class,
                                  max_staging_bytes=max_staging_bytes, whole_files=whole_files,
                                  verify=verify, base=base))
    except NotConvertible as e:
        raise EngineRefused(str(e)) from e
    digests = expected
    if expected is not None and hasattr(expected, "advance"):
        digests = expected.advance(patch)
    entries = sum(p.indices.numel() for c in chunks for p in c)
    wire = sum(p.indices.numel() * (4 + p.values.element_size()) for c in chunks for p in c)
    return Staged(patch.base_version, patch.model_version, chunks, [update_info(c) for c in chunks], digests,
                  entries, wire, time.perf_counter() - t0)


# --- swap ---------------------------------------------------------------------------------

@dataclass
class SwapReport:
    """What a swap did and how long the engine was paused (seconds, perf_counter)."""
    version: int
    pause_s: float  # from the pause call's start to the resume call's end
    apply_s: float
    finish_s: float
    verify_s: float
    chunks: int
    entries: int
    verified: int  # weights whose digests were compared (0: only the tag was checked)
    steps: list = field(default_factory=list)

    def __str__(self):
        return (f"version {self.version}: paused {self.pause_s * 1e3:.1f} ms (apply {self.apply_s * 1e3:.1f}, finish "
                f"{self.finish_s * 1e3:.1f}, verify {self.verify_s * 1e3:.1f}), {self.chunks} chunks, "
                f"{self.entries} entries, {self.verified} weights verified")


def swap(engine, staged, *, verify=True):
    """pause -> start_update -> apply(chunk)... -> finish(weight_version=N) -> verify ->
    resume. verify compares engine.weight_digests() with staged.expected (and the engine's
    weight_version() with N when it has one). Any failure after the pause raises SwapFailed
    and leaves the engine paused; a failing pause raises SwapFailed(paused=False)."""
    t_pause = time.perf_counter()
    held, n = staged.base_version, staged.version
    try:
        engine.pause()
    except Exception as e:
        raise SwapFailed("pause", held, n, "base", e, paused=False) from e
    state, step, times = "base", "start_update", {}
    try:
        engine.start_update()
        step, t = "apply", time.perf_counter()
        for chunk, info in zip(staged.chunks, staged.infos):
            state = "mixed"  # from the first chunk on, a failure may have applied part of it
            engine.apply(chunk, info)
        times["apply"] = time.perf_counter() - t
        step, state, t = "finish", "untagged", time.perf_counter()
        engine.finish(str(n))
        times["finish"] = time.perf_counter() - t
        step, state, t = "verify", "unproven", time.perf_counter()
        verified = prove(engine, n, staged.expected) if verify else 0
        times["verify"] = time.perf_counter() - t
    except Exception as e:
        err = SwapFailed(step, held, n, state, e)
        log.error("%s", err)
        raise err from e
    try:
        engine.resume()
    except Exception as e:
        raise SwapFailed("resume", held, n, "verified" if verify else "unproven", e) from e
    report = SwapReport(n, time.perf_counter() - t_pause, times["apply"], times["finish"], times["verify"],
                        len(staged.chunks), staged.entries, verified)
    log.info("%s", report)
    return report


def prove(engine, version, expected=None):
    """Check that engine holds version: its weight_version() tag (when it has one) is
    str(version), and its weight_digests() equal expected ({key: sha256 hex}, e.g.
    ExpectedDigests(...).digests) when given. Returns the number of weights compared; raises
    WeightMismatch naming the first that differs. Use it after a disk reload too: vLLM #32718
    (open) reports reload_weights returning cached weights instead of re-reading the disk."""
    tag = getattr(engine, "weight_version", None)
    if tag is not None:
        got = tag()
        if str(got) != str(version):
            raise WeightMismatch(f"the engine reports weight_version {got!r}, expected {str(version)!r}")
    if expected is None:
        return 0
    compare_digests(expected, engine.weight_digests(), what=f"version {version}")
    return len(expected)


# --- engines ------------------------------------------------------------------------------

class CallbackEngine:
    """An in-process engine from callables: pause(), resume(), apply(chunk) (e.g. vLLM's
    ``load_checkpoint_weight_patches`` through ``collective_rpc``), digests() ({key: sha256
    hex}, e.g. weightcheck.module_digests per rank), and optional start()/finish(version). The
    version tag is kept here when the engine has none."""

    def __init__(self, *, apply, digests, pause=None, resume=None, start=None, finish=None):
        self._apply, self._digests, self._pause, self._resume = apply, digests, pause, resume
        self._start, self._finish = start, finish
        self.version = None

    def pause(self):
        if self._pause:
            self._pause()

    def resume(self):
        if self._resume:
            self._resume()

    def start_update(self):
        if self._start:
            self._start()

    def apply(self, chunk, info=None):
        self._apply(chunk)

    def finish(self, version):
        if self._finish:
            self._finish(version)
        self.version = version

    def weight_version(self):
        return self.version

    def weight_digests(self):
        return self._digests()


class HTTPError(EngineError):
    """An engine route answered with an error status (or not at all)."""


class VLLMHTTPEngine:
    """vLLM's dev-mode HTTP routes (``VLLM_SERVER_DEV_MODE=1``).

    The tensors cross on the data plane (an NCCL broadcast from the trainer, rank 0) while
    ``POST /update_weights`` (which returns when the workers have received and loaded the
    chunk) is in flight. Two ways to drive it:

    - ``send=fn``: this engine posts ``/update_weights`` in a thread and calls fn(chunk) for the
      broadcast;
    - :meth:`use_trainer`: vLLM's own ``SparseNCCLTrainerWeightTransferEngine`` (built with
      ``client=`` this object) posts ``/update_weights`` itself from ``_broadcast_chunk``
      through the client methods below, so this engine only calls its ``send_weight_chunk``.

    Without either only the control plane is exercised (tests).
    """

    def __init__(self, url, *, send=None, timeout=900.0, pause_mode="keep"):
        self.url, self.send, self.timeout, self.pause_mode = url.rstrip("/"), send, timeout, pause_mode
        self.post_update = True
        self.calls = []

    def use_trainer(self, trainer):
        """Send chunks with vLLM's trainer engine (``send_weight_chunk``), which posts
        ``/update_weights`` through this object's client methods."""
        self.send, self.post_update = trainer.send_weight_chunk, False

    # The client protocol of vLLM's trainer weight-transfer engines (what ``trainer_init(...,
    # client=)`` calls: init_weight_transfer_engine(dict), start_weight_update(),
    # update_weights(dict), finish_weight_update()).
    def init_weight_transfer_engine(self, init_info):
        return self._call("POST", "/init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self):
        return self._call("POST", "/start_weight_update", {"is_checkpoint_format": True})

    def update_weights(self, update_info):
        return self._call("POST", "/update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version=None):
        return self._call("POST", "/finish_weight_update", {"weight_version": weight_version})

    def _call(self, method, route, body=None, query=None):
        path = route + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        self.calls.append((method, path))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            hint = ""
            if e.code == 404:
                hint = " (is the server started with VLLM_SERVER_DEV_MODE=1, and is this vLLM new enough?)"
            elif e.code == 409 and route == "/weight_checker":
                hint = (" (this vLLM's /weight_checker refuses while paused: the swap cannot prove the version "
                        "before resuming; pass verify=False to swap and check with /weight_checker after resume)")
            raise HTTPError(f"{method} {path}: HTTP {e.code}: {detail}{hint}") from e
        except (urllib.error.URLError, OSError) as e:
            raise HTTPError(f"{method} {path}: {e}") from e
        return json.loads(raw) if raw else {}

    def world_size(self):
        """NCCL world size for init_weight_transfer_engine: the trainer (rank 0) plus every
        inference rank, TP x PP x DP (``/get_world_size`` includes DP by default)."""
        return 1 + int(self._call("GET", "/get_world_size")["world_size"])

    def pause(self):
        self._call("POST", "/pause", query={"mode": self.pause_mode})

    def resume(self):
        self._call("POST", "/resume")

    def is_paused(self):
        return bool(self._call("GET", "/is_paused")["is_paused"])

    def start_update(self):
        self.start_weight_update()

    def apply(self, chunk, info):
        if not self.post_update:
            self.send(chunk)
            return
        if self.send is None:
            self.update_weights(info)
            return
        errs = []

        def post():
            try:
                self.update_weights(info)
            except Exception as e:  # reported after send returns
                errs.append(e)
        th = threading.Thread(target=post, daemon=True)
        th.start()
        self.send(chunk)
        th.join(self.timeout)
        if th.is_alive():
            raise HTTPError(f"POST /update_weights did not return within {self.timeout} s")
        if errs:
            raise errs[0]

    def finish(self, version):
        self.finish_weight_update(version)

    def weight_version(self):
        return self._call("GET", "/weight_info").get("weight_version")

    def weight_digests(self):
        return self._call("POST", "/weight_checker", {"action": "checksum"})["checksums"]

