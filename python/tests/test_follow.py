"""weightfs.Follower against a directory laid out as a mount (latest, weight_vN/, patches/ with
the catch-up patches `weightfs patch --from` writes): updates by one catch-up patch, full
updates when no patch can exist, the recorded position, and a follower killed at random points
that still ends bit-identical at the latest version."""

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs
from weightfs.follow import catchup_patch_path


def fake_mount(store, root):
    """A directory shaped like a mount of store: weight_vN links, every catch-up patch."""
    wfs, _ = fixtures.binaries()
    mnt = os.path.join(root, "mnt")
    os.makedirs(os.path.join(mnt, "patches"))
    vs = sorted(store.versions)
    for v in vs:
        os.symlink(store.versions[v], weightfs.version_dir(mnt, v))
        for k in vs:
            if k < v:
                fixtures.run(wfs, "patch", store.store, str(v), "--from", str(k), "-o", catchup_patch_path(mnt, v, k))
    return mnt


def set_latest(mnt, v):
    tmp = os.path.join(mnt, "latest.tmp")
    os.symlink(weightfs.version_name(v), tmp)
    os.replace(tmp, os.path.join(mnt, "latest"))


class FollowerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.store = fixtures.rl_store()
        cls.root = tempfile.mkdtemp(dir=fixtures.tmpdir())
        cls.mnt = fake_mount(cls.store, cls.root)

    def same(self, state, v, what):
        want = self.store.raw_state(v)
        self.assertEqual(sorted(state), sorted(want), what)
        for n, b in want.items():
            self.assertEqual(np.ascontiguousarray(state[n]).tobytes(), b, f"{what}: tensor {n}")

    def test_catchup_and_full(self):
        d = tempfile.mkdtemp(dir=self.root)
        set_latest(self.mnt, 2)
        f = weightfs.Follower(self.mnt, d, interval=0.01)
        self.assertEqual(f.held, 0)
        state = self.store.numpy_state(1, raw=True)
        up = f.poll()
        self.assertTrue(up.full, up)
        self.assertIn("nothing is held", up.reason)
        up.apply(state)
        self.same(state, 2, "after the full update to 2")
        self.assertIsNone(f.poll())  # records 2; 2 is latest
        self.assertEqual(weightfs.Follower(self.mnt, d).held, 2)

        set_latest(self.mnt, 4)
        up = f.poll()
        self.assertFalse(up.full, up)
        self.assertEqual((up.base_version, up.version), (2, 4))
        self.assertEqual((up.patch.base_version, up.patch.model_version), (2, 4))
        up.apply(state)  # checked: the default
        self.same(state, 4, "after the catch-up patch from 2 to 4")
        f.done()
        self.assertEqual(weightfs.Follower(self.mnt, d).held, 4)
        with open(os.path.join(d, ".weightfs", "follower.json")) as fh:
            self.assertEqual(fh.read(), '{"format":"weightfs-dir-state","format_version":1,"version":4,"source":"%s"}\n' % self.mnt)

    def test_no_patch_falls_back_to_full(self):
        d = tempfile.mkdtemp(dir=self.root)
        mnt = os.path.join(self.root, "gc")
        os.makedirs(os.path.join(mnt, "patches"))
        for v in (1, 3):
            os.symlink(self.store.versions[v], weightfs.version_dir(mnt, v))
        set_latest(mnt, 3)  # no patches at all: as after gc removed the base
        f = weightfs.Follower(mnt, d)
        f._write_state(1)
        f.held = 1
        up = f.poll()
        self.assertTrue(up.full)
        self.assertIn("removed by gc", up.reason)
        state = self.store.numpy_state(1, raw=True)
        up.apply(state)
        self.same(state, 3, "after the fallback full update")

    def test_apply_to_until_latest(self):
        d = tempfile.mkdtemp(dir=self.root)
        set_latest(self.mnt, 3)
        state = self.store.numpy_state(1, raw=True)
        got = list(weightfs.Follower(self.mnt, d, interval=0.01).apply_to(state, until_latest=True))
        self.assertEqual(got, [3])
        self.same(state, 3, "apply_to")

    def test_failed_apply_is_given_again(self):
        """An update whose apply raised is not recorded as held when the caller comes back
        (issue 27, item 9: a refused apply must not move the recorded position): the next poll
        gives the same update again, and once applied it is recorded."""
        d = tempfile.mkdtemp(dir=self.root)
        set_latest(self.mnt, 2)
        f = weightfs.Follower(self.mnt, d, interval=0.01)
        state = self.store.numpy_state(1, raw=True)
        name = sorted(state)[0]
        missing = {n: a for n, a in state.items() if n != name}
        up = f.poll()
        with self.assertRaises(KeyError):
            up.apply(missing)  # strict: a tensor of the version is not in the state dict
        again = f.poll()
        self.assertEqual(f.held, 0, "a failed update was recorded as held")
        self.assertIsNotNone(again, "the failed update was not given again")
        self.assertEqual((again.version, again.base_version), (2, 0))
        again.apply(state)
        self.assertIsNone(f.poll())
        self.assertEqual(weightfs.Follower(self.mnt, d).held, 2)
        self.same(state, 2, "after the update given again")

    def test_dropped(self):
        """Update.dropped names the tensors of a state dict that the update's version does not
        have (read from its files' headers on the mount): a patch carries no deletions (issue
        27, item 10)."""
        d = tempfile.mkdtemp(dir=self.root)
        set_latest(self.mnt, 2)
        f = weightfs.Follower(self.mnt, d, interval=0.01)
        f._write_state(1)
        f.held = 1
        state = self.store.numpy_state(1, raw=True)
        state["gone.weight"] = np.zeros(4, dtype=np.uint16)
        up = f.poll()
        self.assertFalse(up.full, up)
        self.assertEqual(up.dropped(state), ["gone.weight"])
        up.apply(state, strict=False)
        del state["gone.weight"]
        self.same(state, 2, "after the patch, the dropped tensor removed")

    def test_killed_at_random_points(self):
        d = tempfile.mkdtemp(dir=self.root)
        out = os.path.join(d, "result.npz")
        script = os.path.join(self.root, "follow_once.py")
        with open(script, "w") as fh:
            fh.write(FOLLOW_SCRIPT)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        rng = random.Random(18)
        states = []
        for i, v in enumerate([1, 2, 2, 3, 3, 4, 4, 4]):
            set_latest(self.mnt, v)
            p = subprocess.Popen([sys.executable, script, self.mnt, d, out], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.1, 1.2))  # python and numpy take a few hundred ms to start
            p.send_signal(signal.SIGKILL)
            p.wait()
            states.append(weightfs.Follower(self.mnt, d).held)
        set_latest(self.mnt, 4)
        r = subprocess.run([sys.executable, script, self.mnt, d, out], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with np.load(out) as z:
            state = {n: z[n] for n in z.files}
        self.same(state, 4, f"after kills (held after each: {states})")
        print(f"\nfollower killed 8 times; version held after each kill: {states}", file=sys.stderr)


def fixtures_has_xxhash():
    try:
        import xxhash  # noqa: F401
        return True
    except ImportError:
        return False


# A consumer: reload the version it holds from the mount (as an engine does at start), follow
# to the latest, save the state.
FOLLOW_SCRIPT = r'''
import os, sys
import numpy as np
import weightfs
mnt, d, out = sys.argv[1:]
f = weightfs.Follower(mnt, d, interval=0.01)
src = weightfs.version_dir(mnt, f.held or 1)
state = {}
for name in sorted(os.listdir(src)):
    if name.endswith(".safetensors"):
        state.update(weightfs.SafetensorsFile(os.path.join(src, name)).numpy_dict(raw=True))
for v in f.apply_to(state, until_latest=True):
    pass
np.savez(out + ".tmp.npz", **state)
os.replace(out + ".tmp.npz", out)
'''

if __name__ == "__main__":
    unittest.main()
