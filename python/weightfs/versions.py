"""Names in a weightfs mount (README.md, Layout of a mount): the seam for a follower.

A follower (:class:`weightfs.Follower`, follow.py) keeps a copy at the latest version: it
reads ``MNT/latest`` and takes the one catch-up patch from the version it holds
(``follow.catchup_patch_path``). These helpers give the names; they do not wait or poll.
"""

import os

__all__ = ["version_name", "version_dir", "patch_path", "latest"]


def version_name(v):
    """weight_vNNNNNN, six digits at least."""
    return f"weight_v{int(v):06d}"


def version_dir(mount, v):
    """MNT/weight_vNNNNNN: the version's files, read-only."""
    return os.path.join(mount, version_name(v))


def patch_path(mount, v):
    """MNT/patches/weight_vNNNNNN.safetensors: the patch from the sealed version before v to v."""
    return os.path.join(mount, "patches", version_name(v) + ".safetensors")


def latest(mount):
    """The number of the version MNT/latest names."""
    target = os.readlink(os.path.join(mount, "latest"))
    name = os.path.basename(target.rstrip("/"))
    if not name.startswith("weight_v") or not name[8:].isdigit():
        raise ValueError(f"{mount}/latest names {target!r}, not a version")
    return int(name[8:])
