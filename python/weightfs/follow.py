"""Following a weightfs mount from Python: the semantics of ``weightfs follow``
(docs/format.md Part III §3) for an engine that holds its weights in memory.

A :class:`Follower` reads ``MNT/latest`` every ``interval`` seconds (one lookup and one
readlink: inotify sees nothing a FUSE daemon changes, and walking the tree would cost a request
per entry). When it names a version N newer than the one held, K, it yields one
:class:`Update`: the catch-up patch ``MNT/patches/weight_vN.from_vK.safetensors`` opened and
checked, or, when no patch can exist (nothing held yet; K removed by gc; the tensor layout
changed between K and N: the lookup is ENOENT), a full update that names the version's
directory and says why. The caller applies it (``update.apply(state)`` does both kinds for a
dict of numpy arrays or torch tensors, in place).

The version held is recorded in ``DIR/.weightfs/follower.json`` (the state file's format,
Part III §3: ``{"format":"weightfs-dir-state","format_version":1,"version":N}``, replaced
atomically) once the caller comes back for the next update, or calls :meth:`Follower.done`.
Delivery is at least once: a process killed after applying N but before recording it is given
N again from K when it starts again, having reloaded K (``Follower.held`` says which); a patch
applied to its result changes nothing, so that is harmless. An update whose ``apply`` raised
is never recorded: the next poll gives it again. A patch carries no deletions:
``Update.dropped`` names the tensors of a state dict that the new version no longer has. It is a different file from
``weightfs follow``'s ``state.json``, which records what the directory's *files* hold.
"""

import errno
import json
import os
import time

from .patch import Patch, _target
from .safetensors import SafetensorsFile
from .versions import latest, version_dir, version_name

__all__ = ["Follower", "Update", "catchup_patch_path"]

STATE_FILE = "follower.json"


def catchup_patch_path(mount, v, base):
    """MNT/patches/weight_vNNNNNN.from_vKKKKKK.safetensors: the patch from base to v."""
    return os.path.join(mount, "patches", f"{version_name(v)}.from_{version_name(base)[len('weight_'):]}.safetensors")


class Update:
    """One step of a follower: to ``version`` from ``base_version`` (0: nothing held).

    ``patch`` is the opened catch-up patch, or None for a full update; ``path`` is the
    version's directory in the mount, and for a full update ``reason`` says why no patch could
    be used. ``failed`` is set when :meth:`apply` raised: the follower then does not record
    the update as held, and gives it again."""

    def __init__(self, version, base_version, patch=None, path=None, reason=""):
        self.version, self.base_version = version, base_version
        self.patch, self.path, self.reason = patch, path, reason
        self.failed = False

    @property
    def full(self):
        return self.patch is None

    def apply(self, state, verify=True, strict=True):
        """Bring state (a dict of numpy arrays or torch tensors, keyed by HF name, holding
        base_version) to version, in place: the patch's ``apply`` (checked unless verify=False:
        see Patch.apply), or for a full update every tensor of the version's safetensors files
        copied into its array (bytes the mount checked as it served them). If it raises, the
        update is marked ``failed`` and is not recorded as held (see :meth:`Follower.poll`).
        Tensors the version no longer has stay in state: :meth:`dropped` names them."""
        try:
            return self._apply(state, verify, strict)
        except BaseException:
            self.failed = True
            raise

    def dropped(self, state):
        """The names in state (sorted) that no safetensors file of the version holds: tensors
        of a file or a tensor the version dropped. A patch carries no deletions, so they are
        read from the headers of the version's files in the mount (``path``); what to do with
        them (``del state[name]``, or keep them) is the caller's choice."""
        have = set()
        for root, _, files in os.walk(self.path):
            for name in files:
                if name.endswith(".safetensors"):
                    have.update(SafetensorsFile(os.path.join(root, name)).tensors)
        return sorted(n for n in state if n not in have)

    def _apply(self, state, verify, strict):
        if self.patch is not None:
            return self.patch.apply(state, verify=verify, strict=strict)
        for root, _, files in os.walk(self.path):
            for name in sorted(files):
                if not name.endswith(".safetensors"):
                    continue
                f = SafetensorsFile(os.path.join(root, name))
                for tname, info in f.tensors.items():
                    if tname not in state:
                        if strict:
                            raise KeyError(f"tensor {tname!r} of {name} is not in the state dict")
                        continue
                    _target(state[tname], tname, info.dtype, info.shape, info.elements).assign(f.raw(tname).view(info.dtype.raw))
        return None

    def __repr__(self):
        kind = f"full ({self.reason})" if self.full else "patch"
        return f"Update(version={self.version}, base_version={self.base_version}, {kind})"


class Follower:
    """Follows mount (a weightfs mount, read-only or not) for a consumer whose position is
    recorded in directory (created if needed). Iterate it to wait for and receive updates."""

    def __init__(self, mount, directory, interval=1.0, verify_patches=True):
        self.mount, self.dir = str(mount), str(directory)
        self.interval = interval
        self.verify_patches = verify_patches
        self._pending = None
        self.held = self._read_state()

    # -- the state file --

    def _state_path(self):
        return os.path.join(self.dir, ".weightfs", STATE_FILE)

    def _read_state(self):
        try:
            with open(self._state_path(), "rb") as f:
                st = json.loads(f.read())
        except FileNotFoundError:
            return 0
        if st.get("format") != "weightfs-dir-state" or st.get("format_version") != 1 or not isinstance(st.get("version"), int):
            raise ValueError(f"{self._state_path()}: not a weightfs state file")
        return st["version"]

    def _write_state(self, v):
        d = os.path.dirname(self._state_path())
        os.makedirs(d, exist_ok=True)
        tmp = self._state_path() + ".tmp"
        data = json.dumps({"format": "weightfs-dir-state", "format_version": 1, "version": v,
                           "source": self.mount}, separators=(",", ":")).encode() + b"\n"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_path())
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def done(self, update=None):
        """Record that the consumer holds update's version (default: the last one yielded)."""
        update = update or self._pending
        if update is not None:
            self._write_state(update.version)
            self.held = update.version
            self._pending = None

    # -- one round --

    def latest(self):
        """The version MNT/latest names, or None while the mount does not answer."""
        try:
            return latest(self.mount)
        except OSError:
            return None

    def poll(self):
        """One round: the update to the latest version, or None if the held one is latest.
        It first records the update the previous call returned as held (see done()), unless
        its apply raised (``failed``): then that update is given again."""
        if self._pending is not None and self._pending.failed:
            self._pending = None
        self.done()
        up = self._next()
        self._pending = up
        return up

    def _next(self):
        n = self.latest()
        if n is None or n == self.held:
            return None
        k = self.held
        if k == 0 or k > n:
            why = "nothing is held" if k == 0 else f"version {k} is newer than the mount's latest"
            return Update(n, 0, path=version_dir(self.mount, n), reason=why)
        p = catchup_patch_path(self.mount, n, k)
        try:
            patch = Patch.open(p, check_indices=self.verify_patches)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
            return Update(n, 0, path=version_dir(self.mount, n),
                          reason=f"no patch from version {k} to {n} can exist (version {k} was removed by gc, "
                                 "or the tensor layout changed)")
        if patch.base_version != k or patch.model_version != n:
            raise ValueError(f"{p}: a patch from {patch.base_version} to {patch.model_version}")
        return Update(n, k, patch=patch, path=version_dir(self.mount, n))

    def __iter__(self):
        return self.updates()

    def updates(self, until_latest=False):
        """Yield updates as versions appear, waiting interval seconds between rounds. The held
        version is recorded when the next update is asked for (or by done()). With
        until_latest, stop once the held version is the mount's latest."""
        while True:
            up = self.poll()
            if up is not None:
                yield up
                continue
            if until_latest and self.latest() is not None and self.latest() == self.held:
                return
            time.sleep(self.interval)

    def apply_to(self, state, until_latest=False, verify=True):
        """Keep state (a dict of arrays or tensors) at the latest version: apply each update in
        place (checked unless verify=False: see Patch.apply) and yield its version once recorded."""
        for up in self.updates(until_latest=until_latest):
            up.apply(state, verify=verify)
            self.done(up)
            yield up.version
