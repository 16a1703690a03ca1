package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// smallTmpfs mounts a tmpfs of size bytes at dir (made here; root only, else the test is
// skipped) and unmounts it when the test ends.
func smallTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("mount a tmpfs (root only): %v", err)
		}
		t.Fatalf("mount a tmpfs as root: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// fillDisk writes a file into dir until its disk is full to the last byte, and returns its
// path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{1 << 20, 4 << 10, 1} {
		for err = nil; err == nil; {
			_, err = f.Write(make([]byte, n))
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill %s: %v", dir, err)
	}
	return p
}

// TestMountSaveDiskFull: a save through the read-write mount onto a full disk (the cache
// directory's, or the store's) fails: the writer gets ENOSPC ("No space left on device"),
// the daemon stays up, every sealed version reads back exact, and once there is room again
// the same save seals, and the store verifies.
func TestMountSaveDiskFull(t *testing.T) {
	skipWithoutFUSE(t)
	for _, c := range []struct{ full, how string }{{"cache", "cp"}, {"store", "cp"}, {"cache", "staged"}, {"store", "staged"}} {
		full := c.full
		t.Run(full+"/"+c.how, func(t *testing.T) {
			work := t.TempDir()
			disk := filepath.Join(work, "disk")
			smallTmpfs(t, disk, 96<<20)
			storeDir, cacheDir := filepath.Join(work, "store"), filepath.Join(work, "cache")
			if full == "store" {
				storeDir = filepath.Join(disk, "store")
			} else {
				cacheDir = filepath.Join(disk, "cache")
			}
			initStore(t, storeDir)
			want := genCheckpoints(t, work, 2_000_000, 2)
			mnt := filepath.Join(work, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			d := startMount(t, storeDir, mnt, "--cache-dir", cacheDir)
			// cp streams each file; staged writes every file's second half first (a writer
			// that seeks), so that it goes through a staging file in the cache directory.
			script := `cp -r "$1" "$2" && touch "$2/DONE"`
			if c.how == "staged" {
				script = `set -e; mkdir "$2"; for f in "$1"/*; do n=$(stat -c %s "$f"); h=$((n / 2)); o="$2/$(basename "$f")"
dd status=none if="$f" of="$o" bs=1 count=0 seek=0; dd status=none if="$f" of="$o" iflag=skip_bytes oflag=seek_bytes skip=$h seek=$h conv=notrunc
dd status=none if="$f" of="$o" iflag=count_bytes count=$h conv=notrunc; done; touch "$2/DONE"`
			}
			save := func(v int) (string, error) {
				out, err := exec.Command("sh", "-c", script, "sh", srcDir(work, v), versionDir(mnt, v)).CombinedOutput()
				return string(out), err
			}
			if out, err := save(1); err != nil {
				t.Fatalf("save v1: %v\n%s", err, out)
			}
			filler := fillDisk(t, disk)
			out, err := save(2)
			t.Logf("save v2 onto a full %s disk: %v: %s", full, err, out)
			switch {
			case err == nil && full == "cache":
				// The cache only speeds things up: a save may seal without it.
				sameHashes(t, "v2 saved with a full cache disk", sha256sumTree(t, versionDir(mnt, 2)), want[2])
			case err == nil:
				t.Fatalf("save v2 onto a full %s disk succeeded", full)
			case !strings.Contains(out, "No space left on device"):
				t.Errorf("save v2 onto a full %s disk: the writer did not get ENOSPC: %s", full, out)
			}
			if !isServing(mnt) {
				t.Fatalf("the daemon died on a full disk:\n%s", d.out.String())
			}
			sameHashes(t, "v1 after the failed save", sha256sumTree(t, versionDir(mnt, 1)), want[1])
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if err != nil {
				saveAgain(t, d, mnt, 2, save)
			}
			checkVersionsThenVerify(t, d, mnt, storeDir, want)
		})
	}
}

// TestMountDoneAfterDiskFull: a save whose writes failed on a full disk (the store's and the
// staging files' disk) cannot be sealed by closing DONE again once there is room: the files
// miss the bytes whose writes failed, so DONE's close fails (EIO) and the daemon's log names
// the files and says what to do, as does weight_v000002/.refused; only what was written
// again seals, exact.
func TestMountDoneAfterDiskFull(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	disk := filepath.Join(work, "disk")
	smallTmpfs(t, disk, 96<<20)
	storeDir, cacheDir := filepath.Join(disk, "store"), filepath.Join(disk, "cache")
	initStore(t, storeDir)
	// Version 2 is another model (another seed), not an RL step of version 1: every tensor
	// is stored whole, so the save's writes reach the disk while cp runs. (An RL step's
	// deltas are gathered in memory and written at the seal: its DONE fails instead,
	// TestMountSaveDiskFull.)
	want := genCheckpoints(t, work, 2_000_000, 1)
	other := t.TempDir()
	want[2] = genSeries(t, other, 2_000_000, 12, 1, nil)[1]
	if err := os.Rename(srcDir(other, 1), srcDir(work, 2)); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startMount(t, storeDir, mnt, "--cache-dir", cacheDir)
	cp := func(v int) (string, error) {
		out, err := exec.Command("cp", "-r", srcDir(work, v), versionDir(mnt, v)).CombinedOutput()
		return string(out), err
	}
	touchDone := func(v int) (string, error) {
		out, err := exec.Command("touch", filepath.Join(versionDir(mnt, v), "DONE")).CombinedOutput()
		return string(out), err
	}
	if out, err := cp(1); err != nil {
		t.Fatalf("cp v1: %v: %s", err, out)
	}
	if out, err := touchDone(1); err != nil {
		t.Fatalf("seal v1: %v: %s", err, out)
	}
	filler := fillDisk(t, disk)
	out, err := cp(2)
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("cp v2 onto a full disk: %v: %s (want ENOSPC)", err, out)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	out, err = touchDone(2)
	if err == nil {
		t.Fatalf("touch DONE after writes failed sealed v2 (with what happened to be written)")
	}
	if !strings.Contains(out, "Input/output error") {
		t.Errorf("touch DONE after writes failed: %v: %s (want EIO)", err, out)
	}
	// The daemon logs the refusal as the close returns, not before: wait for the line.
	waitFor(t, "the daemon's log to say what to do (write it again)", func() bool {
		return strings.Contains(d.out.String(), "write it again")
	}, d.out.String)
	// The trainer reads why without the daemon's log.
	note, err := os.ReadFile(filepath.Join(versionDir(mnt, 2), ".refused"))
	if err != nil || !strings.Contains(string(note), "write it again") || !strings.Contains(string(note), "ENOSPC") {
		t.Errorf("weight_v000002/.refused: %v: %q", err, note)
	}
	saveAgain(t, d, mnt, 2, func(v int) (string, error) {
		if out, err := cp(v); err != nil {
			return out, err
		}
		return touchDone(v)
	})
	checkVersionsThenVerify(t, d, mnt, storeDir, want)
}

// saveAgain removes version v's directory of the mount (a failed save's files are the
// writer's to remove and write again) and saves v again with save, which must seal it now
// that there is room.
func saveAgain(t *testing.T, d *mountDaemon, mnt string, v int, save func(int) (string, error)) {
	t.Helper()
	if out, err := exec.Command("rm", "-rf", versionDir(mnt, v)).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf v%d after the failed save: %v: %s", v, err, out)
	}
	if out, err := save(v); err != nil {
		t.Fatalf("save v%d once there is room: %v\n%s\ndaemon:\n%s", v, err, out, d.out.String())
	}
}

// checkVersionsThenVerify checks every version of want through the mount, byte for byte,
// stops the daemon and verifies the store.
func checkVersionsThenVerify(t *testing.T, d *mountDaemon, mnt, storeDir string, want map[int]map[string]string) {
	t.Helper()
	for v := 1; v <= len(want); v++ {
		sameHashes(t, fmt.Sprintf("v%d", v), sha256sumTree(t, versionDir(mnt, v)), want[v])
	}
	d.stop()
	verifyStore(t, storeDir)
}
