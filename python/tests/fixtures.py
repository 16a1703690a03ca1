"""Test fixtures: RL checkpoints from the Go generator, patches from the weightfs CLI.

The binaries come from $WEIGHTFS_BIN and $WEIGHTFS_GEN_BIN (the Go test python/client_test.go
builds them and sets both); otherwise they are built here with `go build` when go is on the
PATH, else the tests that need them are skipped.
"""

import atexit
import glob
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import sys

import numpy as np

try:
    import weightfs
except ImportError:  # not installed: the package next to these tests
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
    import weightfs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_tmp = None
_bins = None


def tmpdir():
    """One directory for the whole run (stores are shared by the test modules), removed at exit."""
    global _tmp
    if _tmp is None:
        _tmp = tempfile.mkdtemp(prefix="weightfs-pytest-")
        atexit.register(shutil.rmtree, _tmp, True)
    return _tmp


def binaries():
    """(weightfs, weightfs-gen) paths, or raise unittest.SkipTest."""
    global _bins
    if _bins is not None:
        return _bins
    wfs, gen = os.environ.get("WEIGHTFS_BIN"), os.environ.get("WEIGHTFS_GEN_BIN")
    if not (wfs and gen):
        go = shutil.which("go")
        if go is None or not os.path.exists(os.path.join(REPO, "go.mod")):
            raise unittest.SkipTest("no weightfs binaries ($WEIGHTFS_BIN, $WEIGHTFS_GEN_BIN) and no go to build them")
        out = os.path.join(tmpdir(), "bin")
        for cmd in ("weightfs", "weightfs-gen"):
            subprocess.run([go, "build", "-o", os.path.join(out, cmd), "./cmd/" + cmd], cwd=REPO, check=True)
        wfs, gen = os.path.join(out, "weightfs"), os.path.join(out, "weightfs-gen")
    _bins = (wfs, gen)
    return _bins


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def write_safetensors(path, tensors, metadata=None):
    """Write a safetensors file: tensors is a list of (name, dtype name, shape, raw bytes)."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(raw for _, _, _, raw in tensors))


class Store:
    """A store holding versions 1..n of a checkpoint, and their patches."""

    def __init__(self, name, versions):
        wfs, _ = binaries()
        self.dir = os.path.join(tmpdir(), name)
        self.store = os.path.join(self.dir, "store")
        self.versions = versions  # {v: directory}
        run(wfs, "init", self.store)
        for v in sorted(versions):
            run(wfs, "commit", self.store, versions[v])

    def patch(self, v):
        path = os.path.join(self.dir, f"weight_v{v:06d}.patch.safetensors")
        if not os.path.exists(path):
            run(binaries()[0], "patch", self.store, str(v), "-o", path)
        return path

    def files(self, v):
        return sorted(glob.glob(os.path.join(self.versions[v], "*.safetensors")))

    def numpy_state(self, v, raw=False):
        state = {}
        for f in self.files(v):
            state.update(weightfs.SafetensorsFile(f).numpy_dict(raw=raw))
        return state

    def torch_state(self, v, device="cpu"):
        state = {}
        for f in self.files(v):
            state.update(weightfs.SafetensorsFile(f).torch_dict(device))
        return state

    def raw_state(self, v):
        """{name: bytes} of version v: what a state dict must equal, bit for bit."""
        out = {}
        for f in self.files(v):
            s = weightfs.SafetensorsFile(f)
            out.update({n: s.raw(n).tobytes() for n in s.tensors})
        return out


_stores = {}


def rl_store():
    """Versions 1..4 of a generated RL model (Adam steps, bf16, two shards)."""
    if "rl" not in _stores:
        _, gen = binaries()
        out = os.path.join(tmpdir(), "gen")
        run(gen, "-params", "tiny", "-versions", "4", "-shards", "2", "-out", out)
        _stores["rl"] = Store("rl", {v: os.path.join(out, f"weight_v{v:06d}") for v in range(1, 5)})
    return _stores["rl"]


def _mixed_version(rng, base, v):
    """One version of a checkpoint of many dtypes; base is the previous version's arrays."""
    arrs = {}
    if base is None:
        arrs["model.embed_tokens.weight"] = ("BF16", (32, 8), rng.integers(0, 1 << 16, 256, dtype=np.uint16))
        f32 = rng.standard_normal(40).astype("<f4")
        f32[3] = -0.0
        f32.view("<u4")[5] = 0x7FC00123  # a NaN with a payload
        arrs["model.layers.0.mlp.up_proj.weight"] = ("F32", (5, 8), f32.view("<u4"))
        arrs["model.norm.weight"] = ("F16", (8,), rng.standard_normal(8).astype("<f2").view("<u2"))
        arrs["model.step"] = ("I64", (), np.array([7], dtype="<u8"))
        arrs["model.mask"] = ("BOOL", (6,), np.array([1, 0, 1, 0, 0, 1], dtype=np.uint8))
        arrs["model.fp8.weight"] = ("F8_E4M3", (3, 3), rng.integers(0, 0x7E, 9, dtype=np.uint8))
        arrs["model.wide"] = ("F64", (4,), rng.standard_normal(4).view("<u8"))
        return arrs
    for name, (dt, shape, a) in base.items():
        a = a.copy()
        n = max(1, a.size // 10)
        pos = rng.choice(a.size, size=n, replace=False)
        if dt == "BOOL":
            a[pos] ^= 1
        elif dt == "F8_E4M3":
            a[pos] = (a[pos] + 1) % 0x7E  # never the NaN codes 0x7f/0xff
        else:
            a[pos] ^= 1  # a low-bit change, as most RL changes are
        arrs[name] = (dt, shape, a)
    return arrs


def mixed_store():
    """Versions 1..3 of a one-file checkpoint holding tensors of seven dtypes (NaN payloads, -0)."""
    if "mixed" not in _stores:
        rng = np.random.default_rng(5)
        root = os.path.join(tmpdir(), "mixed")
        versions, prev = {}, None
        for v in range(1, 4):
            prev = _mixed_version(rng, prev, v)
            d = os.path.join(root, f"weight_v{v:06d}")
            os.makedirs(d)
            write_safetensors(os.path.join(d, "model.safetensors"),
                              [(n, dt, shape, a.tobytes()) for n, (dt, shape, a) in prev.items()], {"format": "pt"})
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write('{"v": %d}\n' % min(v, 2))  # changes from 1 to 2 only: carried whole in patch 2
            versions[v] = d
        _stores["mixed"] = Store("mixed", versions)
    return _stores["mixed"]
