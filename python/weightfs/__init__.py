"""weightfs: the Python client of weightfs's one-file sparse patches.

- :class:`Patch` opens and checks a ``patches/weight_vNNNNNN.safetensors`` patch
  (docs/format.md Part III §2) and applies it in place to a dict of numpy arrays or torch
  tensors (``index_copy_`` / fancy assignment, bit-exact), checking each tensor against the
  digest of its new bytes unless told not to (``verify=False``).
- :mod:`weightfs.vllm` turns a patch into vLLM's sparse checkpoint-coordinate updates
  (``SparseWeightPatch``, ``CheckpointWeightPatch``), chunked by a byte budget.
- :mod:`weightfs.engine` stages a version while the engine samples, then swaps it in under
  the shortest pause (pause, apply, finish with the version tag, verify, resume), refusing up
  front what vLLM's sparse contract does not cover; :mod:`weightfs.weightcheck` proves the
  engine holds the version (its per-weight SHA-256 against digests derived in its fused,
  sharded coordinates).
- :class:`Follower` follows a mount's latest version for an engine holding its weights in
  memory: one catch-up patch per update, a full update only when no patch can exist.
- :class:`PatchWriter` is the trainer's side: it writes the first version whole into a
  read-write mount and every later one as a patch into ``MNT/patches/``, diffing the
  ``state_dict`` against the last version bytewise on the tensors' own device.
- :mod:`weightfs.safetensors` reads safetensors strictly, without the safetensors package.

numpy and xxhash (every apply is checked unless verify=False) are required; torch and vLLM are
optional. See docs/engines.md for recipes per engine.
"""

from .patch import (ApplyError, ApplyResult, DigestMismatch, DigestUnavailable, MalformedPatch, Patch,
                    PatchError, PatchTensor, UnsupportedPatch)
from .follow import Follower, Update, catchup_patch_path
from .safetensors import MalformedFile, SafetensorsFile, checkpoint_shapes, read_header
from .writer import Part, PatchRejected, PatchWriter, WriterError, write_patch
from .versions import latest, patch_path, version_dir, version_name

__version__ = "0.1.0"

__all__ = ["Patch", "PatchTensor", "ApplyResult", "PatchError", "MalformedPatch", "UnsupportedPatch",
           "ApplyError", "DigestMismatch", "DigestUnavailable", "MalformedFile", "SafetensorsFile",
           "read_header", "checkpoint_shapes", "latest", "patch_path", "version_dir", "version_name",
           "Follower", "Update", "catchup_patch_path", "PatchWriter", "PatchRejected", "WriterError", "Part",
           "write_patch"]
