"""Figure 14's trainer (bench/fig_patchin.go): one process, one mount, one mode.

    python3 patchin_driver.py MODE MNT DAEMON_PID SRC_V1 SRC_V2 ... SRC_VN

Loads version 1 (gen's files) as a state_dict (torch tensors when torch is installed, numpy
arrays otherwise), writes it whole through the mount with weightfs.PatchWriter (not measured),
then saves versions 2 .. N in MODE, one step each, and measures the save of version N (a
trainer's steady state: the save after a save in the same mode, not the first after a whole
version): MODE "patch" is the writer's save (diff against its snapshot, the patch into
MNT/patches/, os.replace seals it); MODE "full" is a plain full save of the same weights (each
file's save_file header and every tensor's bytes written in order into MNT/weight_vNNNNNN/,
then DONE's close seals it). Prints one JSON object:
wall seconds of the save (to the seal's return), this process's CPU seconds and the bytes it
wrote (/proc/self/io wchar), the daemon's CPU seconds to the seal's return and until it is idle,
and for the patch the save's steps ("split"): prepare_s (the writer's prepare: diff_s, the diff's
wall on the main thread, with the result's hashes beside it on a thread of their own, hash_s their
own time, hash_wait_s what they took after the diff), encode_s, write_s and seal_s (write_patch's:
the patch's bytes, written and fsynced, os.replace) and commit_s.
Each save starts once the daemon is idle after the one before, on both sides.
"""

import json
import os
import sys
import time

import weightfs
from weightfs import encode
from weightfs.safetensors import SafetensorsFile

try:
    import torch
except ImportError:
    torch = None


def daemon_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid, last=None, limit=120):
    """The daemon's CPU seconds once it is idle (0.5 s without a clock tick), at most limit s."""
    last = daemon_cpu(pid) if last is None else last
    began = quiet = time.perf_counter()
    while time.perf_counter() - quiet < 0.5 and time.perf_counter() - began < limit:
        time.sleep(0.1)
        now = daemon_cpu(pid)
        if now - last > 0.011:
            last, quiet = now, time.perf_counter()
    return last


def wchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def load(src):
    """(files {name: [tensors]}, state, other files {name: bytes}, dtypes for numpy)."""
    files, state, extra, dtypes = {}, {}, {}, {}
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not name.endswith(".safetensors"):
            with open(path, "rb") as f:
                extra[name] = f.read()
            continue
        st = SafetensorsFile(path)
        files[name] = list(st.tensors)
        if torch is not None:
            state.update(st.torch_dict())
        else:
            state.update(st.numpy_dict())
            dtypes.update({n: t.dtype.name for n, t in st.tensors.items() if t.dtype.numpy is None})
    return files, state, extra, dtypes


def full_save(mnt, v, files, state, extra, metadata):
    """What save_pretrained does through the mount: every file whole, in save_file's layout."""
    d = weightfs.version_dir(mnt, v)
    os.makedirs(d)
    w = weightfs.PatchWriter(mnt, files=files)
    written = 0
    for fname, names in sorted(files.items()):
        header, laid = encode.safetensors_header([w._describe(n, state[n]) for n in names], metadata)
        with open(os.path.join(d, fname), "wb", buffering=0) as f:
            f.write(header)
            for n, dt, _, _, _ in laid:
                x = w._flat_int(state[n], dt)
                b = memoryview((x.numpy() if torch is not None and isinstance(x, torch.Tensor) else x)).cast("B")
                f.write(b)
                written += len(b)
            written += len(header)
    for name, b in extra.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)
        written += len(b)
    open(os.path.join(d, "DONE"), "wb").close()
    return written


def save(mode, writer, mnt, v, files, state, extra, split):
    """Saves state as version v in mode; returns the bytes written for it."""
    if mode == "patch":  # writer.save, in its steps: diff and hashes, encode, write, seal, commit
        t0 = time.perf_counter()
        part = writer.prepare(state, extra_files=extra, timings=split)
        split["prepare_s"] = time.perf_counter() - t0
        n = weightfs.write_patch(mnt, [part], timings=split).size
        began = time.perf_counter()
        writer.commit(part)
        split["commit_s"] = time.perf_counter() - began
        return n
    return full_save(mnt, v, files, state, extra, writer.metadata)


def main():
    mode, mnt, pid, srcs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    files, state, extra, dtypes = load(srcs[0])
    writer = weightfs.PatchWriter(mnt, files=files, dtypes=dtypes, index=False)
    writer.save(state, extra_files=extra)  # version 1, whole: sets the stage
    last_v = len(srcs)
    for v in range(2, last_v + 1):
        del state
        files_v, state, extra_v, _ = load(srcs[v - 1])
        assert files_v == files, f"versions 1 and {v} have other files"
        wait_idle(pid)  # what the version before left the daemon to do is not the save's
        measured = v == last_v
        if measured:
            t0, c0, w0, d0 = time.perf_counter(), time.process_time(), wchar(), daemon_cpu(pid)
        split = {}
        n = save(mode, writer, mnt, v, files, state, extra_v, split)
    t1, c1, w1, d1 = time.perf_counter(), time.process_time(), wchar(), daemon_cpu(pid)
    last = wait_idle(pid, d1)
    assert weightfs.latest(mnt) == last_v, f"latest is {weightfs.latest(mnt)} after the save of {last_v}"
    src = srcs[-1]
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
    print(json.dumps({"mode": mode, "torch": torch is not None, "version": last_v, "wall_s": t1 - t0, "trainer_cpu_s": c1 - c0,
                      "trainer_wchar": w1 - w0, "bytes_saved": n, "daemon_cpu_s": d1 - d0,
                      "daemon_cpu_idle_s": last - d0, "checkpoint_bytes": size, "split": split}))


if __name__ == "__main__":
    main()
