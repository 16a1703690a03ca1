package fs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store"
)

func TestWriteSealRead(t *testing.T) {
	b := newFakeStore()
	staging := t.TempDir()
	mnt, _ := mountTest(t, b, Options{StagingDir: staging})
	if got := listDir(t, mnt); got != "deltas patches" {
		t.Fatalf("empty mount lists %q", got)
	}
	// Free space is that of the disk the staging files go to.
	var onMount, onStaging syscall.Statfs_t
	if err := syscall.Statfs(mnt, &onMount); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Statfs(staging, &onStaging); err != nil {
		t.Fatal(err)
	}
	if onMount.Blocks != onStaging.Blocks || onMount.Bsize != onStaging.Bsize {
		t.Errorf("statfs: %d blocks of %d, staging disk has %d of %d", onMount.Blocks, onMount.Bsize, onStaging.Blocks, onStaging.Bsize)
	}
	v1 := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	model := pattern(1, 3<<20+17)
	// Write the model out of order, in odd pieces, as a trainer with several writers might.
	f, err := os.Create(filepath.Join(v1, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range [][2]int{{2 << 20, len(model)}, {0, 1000}, {1000, 2 << 20}} {
		if _, err := f.WriteAt(model[cut[0]:cut[1]], int64(cut[0])); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	config := []byte(`{"model_type": "llama"}`)
	writeFile(t, filepath.Join(v1, "config.json"), config)
	if err := os.Mkdir(filepath.Join(v1, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, mnt); got != "deltas patches weight_v000001" {
		t.Fatalf("open version: root lists %q", got)
	}
	mustSeal(t, v1)

	for p, want := range map[string][]byte{"model.safetensors": model, "config.json": config} {
		got, ok := b.file(1, p)
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("store: %s has %d bytes (found %v), want %d", p, len(got), ok, len(want))
		}
		read, err := os.ReadFile(filepath.Join(v1, p))
		if err != nil || !bytes.Equal(read, want) {
			t.Errorf("mount: %s: %d bytes, %v; want %d bytes", p, len(read), err, len(want))
		}
	}
	if _, ok := b.file(1, doneName); ok {
		t.Error("DONE was stored as part of the version")
	}
	if got := listDir(t, v1); got != "config.json empty model.safetensors" {
		t.Errorf("sealed version lists %q", got)
	}
	if link, err := os.Readlink(filepath.Join(mnt, "latest")); err != nil || link != "weight_v000001" {
		t.Errorf("latest -> %q, %v", link, err)
	}
	if got := listDir(t, mnt); got != "deltas latest patches weight_v000001" {
		t.Errorf("root lists %q", got)
	}
	if st, err := os.Stat(filepath.Join(v1, "empty")); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Errorf("empty dir: %v, %v", st, err)
	}
	// Nothing of the version is left in the staging area.
	var left []string
	filepath.Walk(staging, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("staging files left after the seal: %v", left)
	}
}

func TestSealedVersionIsImmutable(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	v1 := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(v1, "a"), []byte("abc"))
	writeFile(t, filepath.Join(v1, "d/b"), []byte("def"))
	mustSeal(t, v1)

	a := filepath.Join(v1, "a")
	tests := []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"open for write", func() error { _, err := os.OpenFile(a, os.O_WRONLY, 0); return err }, syscall.EPERM},
		{"open append", func() error { _, err := os.OpenFile(a, os.O_APPEND|os.O_WRONLY, 0); return err }, syscall.EPERM},
		{"truncate", func() error { return os.Truncate(a, 1) }, syscall.EPERM},
		{"unlink", func() error { return os.Remove(a) }, syscall.EPERM},
		{"rename inside", func() error { return os.Rename(a, filepath.Join(v1, "z")) }, syscall.EPERM},
		{"create", func() error { _, err := os.Create(filepath.Join(v1, "new")); return err }, syscall.EPERM},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(v1, "nd"), 0o755) }, syscall.EPERM},
		{"rmdir subdir", func() error { return os.Remove(filepath.Join(v1, "d")) }, syscall.EPERM},
		{"chmod", func() error { return os.Chmod(a, 0o600) }, syscall.EPERM},
		{"utimes", func() error { return os.Chtimes(a, time.Now(), time.Now()) }, syscall.EPERM},
		{"symlink", func() error { return os.Symlink("a", filepath.Join(v1, "s")) }, syscall.EPERM},
		{"rmdir version", func() error { return syscall.Rmdir(v1) }, syscall.EPERM},
		{"rename version", func() error { return os.Rename(v1, filepath.Join(mnt, "x")) }, syscall.EPERM},
		{"mkdir same version", func() error { return os.Mkdir(v1, 0o755) }, syscall.EEXIST},
		{"mkdir lower version", func() error { return os.Mkdir(filepath.Join(mnt, "weight_v000000"), 0o755) }, syscall.EINVAL},
		{"mkdir short name", func() error { return os.Mkdir(filepath.Join(mnt, "weight_v2"), 0o755) }, syscall.EINVAL},
		{"mkdir latest", func() error { return os.Mkdir(filepath.Join(mnt, "latest"), 0o755) }, syscall.EEXIST},
		{"unlink latest", func() error { return os.Remove(filepath.Join(mnt, "latest")) }, syscall.EPERM},
		{"file at root", func() error { _, err := os.Create(filepath.Join(mnt, "f")); return err }, syscall.EPERM},
		{"create in patches", func() error { _, err := os.Create(filepath.Join(mnt, "patches/x")); return err }, syscall.EPERM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErrno(t, tc.name, tc.op(), tc.want)
		})
	}
	if data, err := os.ReadFile(a); err != nil || string(data) != "abc" {
		t.Errorf("after the refusals a = %q, %v", data, err)
	}
}

func TestVersionNumberRules(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	v := func(n int) string { return filepath.Join(mnt, VersionName(uint64(n))) }
	if err := os.Mkdir(v(5), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(v(5), "f"), []byte("5"))
	mustSeal(t, v(5))
	wantErrno(t, "mkdir v3 below sealed v5", os.Mkdir(v(3), 0o755), syscall.EINVAL)
	wantErrno(t, "mkdir v5 again", os.Mkdir(v(5), 0o755), syscall.EEXIST)
	if err := os.Mkdir(v(7), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "mkdir v6 below open v7", os.Mkdir(v(6), 0o755), syscall.EINVAL)
	wantErrno(t, "mkdir v7 twice", os.Mkdir(v(7), 0o755), syscall.EEXIST)
	if err := os.Mkdir(v(9), 0o755); err != nil {
		t.Fatalf("mkdir v9 above open v7: %v", err)
	}
	// Sealing v9 first makes v7 unsealable; it stays open, and rmdir drops it.
	writeFile(t, filepath.Join(v(9), "f"), []byte("9"))
	mustSeal(t, v(9))
	writeFile(t, filepath.Join(v(7), "f"), []byte("7"))
	wantErrno(t, "seal v7 after v9", seal(v(7)), syscall.EINVAL)
	for _, name := range []string{"f", doneName} {
		if err := os.Remove(filepath.Join(v(7), name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Rmdir(v(7)); err != nil {
		t.Fatalf("rmdir open v7: %v", err)
	}
	if got := listDir(t, mnt); got != "deltas latest patches weight_v000005 weight_v000009" {
		t.Errorf("root lists %q", got)
	}
	if n := b.openWriters(); n != 0 {
		t.Errorf("%d store writers left open", n)
	}
}

func TestSealFailureKeepsVersionOpen(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	v1 := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(v1, "a"), []byte("first"))
	b.mu.Lock()
	b.sealErr = fmt.Errorf("write object: %w", syscall.ENOSPC)
	b.mu.Unlock()
	wantErrno(t, "close DONE on a full disk", seal(v1), syscall.ENOSPC)
	if len(b.Versions()) != 0 {
		t.Fatal("a failed seal left a version")
	}
	// Still open and writable: fix the file and seal again.
	writeFile(t, filepath.Join(v1, "a"), []byte("second"))
	mustSeal(t, v1)
	if got, _ := b.file(1, "a"); string(got) != "second" {
		t.Errorf("sealed a = %q", got)
	}
}

func TestStagingDirRenameSeals(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	stage := filepath.Join(mnt, "tmp-save")
	if err := os.Mkdir(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(stage, "model.safetensors"), pattern(2, 100000))
	if err := os.Rename(stage, filepath.Join(mnt, "tmp-save2")); err != nil {
		t.Fatalf("rename staging to staging: %v", err)
	}
	stage = filepath.Join(mnt, "tmp-save2")
	v2 := filepath.Join(mnt, "weight_v000002")
	if err := os.Rename(stage, v2); err != nil {
		t.Fatalf("rename to a version: %v", err)
	}
	if got, _ := b.file(2, "model.safetensors"); !bytes.Equal(got, pattern(2, 100000)) {
		t.Fatalf("store holds %d bytes", len(got))
	}
	if got, err := os.ReadFile(filepath.Join(v2, "model.safetensors")); err != nil || !bytes.Equal(got, pattern(2, 100000)) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	wantErrno(t, "write into the renamed version", os.WriteFile(filepath.Join(v2, "x"), nil, 0o644), syscall.EPERM)
	// A staging directory renamed to a number that is too low stays a staging directory.
	low := filepath.Join(mnt, "low")
	if err := os.Mkdir(low, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(low, "f"), []byte("x"))
	wantErrno(t, "rename to v1 below v2", os.Rename(low, filepath.Join(mnt, "weight_v000001")), syscall.EPERM)
	if got := listDir(t, mnt); got != "deltas latest low patches weight_v000002" {
		t.Errorf("root lists %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(low, "f")); err != nil || string(data) != "x" {
		t.Errorf("low/f = %q, %v", data, err)
	}
}

func TestReadOnlyMount(t *testing.T) {
	b := newFakeStore()
	sealVersion(t, b, 1, map[string][]byte{"a": []byte("one")})
	mnt, _ := mountTest(t, newFakeReader(b), Options{ReadOnly: true})
	v1 := filepath.Join(mnt, "weight_v000001")
	tests := []struct {
		name string
		op   func() error
	}{
		{"mkdir version", func() error { return os.Mkdir(filepath.Join(mnt, "weight_v000002"), 0o755) }},
		{"mkdir staging", func() error { return os.Mkdir(filepath.Join(mnt, "s"), 0o755) }},
		{"write", func() error { return os.WriteFile(filepath.Join(v1, "a"), nil, 0o644) }},
		{"create", func() error { _, err := os.Create(filepath.Join(v1, "b")); return err }},
		{"unlink", func() error { return os.Remove(filepath.Join(v1, "a")) }},
		{"chmod", func() error { return os.Chmod(filepath.Join(v1, "a"), 0o600) }},
	}
	for _, tc := range tests {
		wantErrno(t, tc.name, tc.op(), syscall.EROFS)
	}
	// An open version of the writer is not visible; once sealed it appears within the poll.
	w, err := b.NewVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, mnt); got != "deltas latest patches weight_v000001" {
		t.Errorf("with v2 open elsewhere: root lists %q", got)
	}
	if err := w.AddFile("a", bytes.NewReader([]byte("two")), 3, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "v2 on the read-only mount", func() bool {
		return listDir(t, mnt) == "deltas latest patches weight_v000001 weight_v000002"
	})
	if data, err := os.ReadFile(filepath.Join(mnt, "latest", "a")); err != nil || string(data) != "two" {
		t.Errorf("latest/a = %q, %v", data, err)
	}
}

func TestPinnedVersionMount(t *testing.T) {
	b := newFakeStore()
	sealVersion(t, b, 3, map[string][]byte{"config.json": []byte("{}"), "sub/w": pattern(3, 5000)})
	sealVersion(t, b, 4, map[string][]byte{"config.json": []byte("{4}")})
	mnt, _ := mountTest(t, b, Options{ReadOnly: true, Version: 3})
	if got := listDir(t, mnt); got != "config.json sub" {
		t.Fatalf("pinned v3 lists %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(mnt, "sub/w")); err != nil || !bytes.Equal(data, pattern(3, 5000)) {
		t.Fatalf("sub/w: %d bytes, %v", len(data), err)
	}
	mnt2, _ := mountTest(t, b, Options{ReadOnly: true, Version: LatestVersion})
	if data, err := os.ReadFile(filepath.Join(mnt2, "config.json")); err != nil || string(data) != "{4}" {
		t.Fatalf("latest pin: config.json = %q, %v", data, err)
	}
	if _, err := MountVersionStore(b, t.TempDir(), Options{ReadOnly: true, Version: 9}); err == nil {
		t.Fatal("mounting a missing version succeeded")
	}
}

func TestCorruptReadIsEIO(t *testing.T) {
	b := newFakeStore()
	sealVersion(t, b, 1, map[string][]byte{"w": pattern(4, 10000)})
	mnt, _ := mountTest(t, b, Options{ReadOnly: true})
	b.mu.Lock()
	b.readErr = fmt.Errorf("object 1234: %w", store.ErrCorrupt)
	b.mu.Unlock()
	_, err := os.ReadFile(filepath.Join(mnt, "weight_v000001", "w"))
	wantErrno(t, "read of a corrupt object", err, syscall.EIO)
}

// TestDamagedVersionIsEIO: a version whose manifest is in the store but cannot be read is not
// listed, and a lookup of it is EIO (damage), never ENOENT (absence), in the fake as in the
// store (store.Store.VersionDamage).
func TestDamagedVersionIsEIO(t *testing.T) {
	b := newFakeStore()
	sealVersion(t, b, 1, map[string][]byte{"w": pattern(5, 1000)})
	sealVersion(t, b, 2, map[string][]byte{"w": pattern(6, 1000)})
	b.damage(2)
	mnt, _ := mountTest(t, b, Options{ReadOnly: true})
	if got := listDir(t, mnt); got != "deltas latest patches weight_v000001" {
		t.Errorf("ls: %q", got)
	}
	_, err := os.Stat(filepath.Join(mnt, VersionName(2)))
	wantErrno(t, "look up a damaged version", err, syscall.EIO)
	_, err = os.Stat(filepath.Join(mnt, VersionName(3)))
	wantErrno(t, "look up a version that is not there", err, syscall.ENOENT)
}

// sealVersion puts a version into the fake store directly, as another process would.
func sealVersion(t *testing.T, b *fakeStore, v uint64, files map[string][]byte) {
	t.Helper()
	w, err := b.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range files {
		if err := w.AddFile(p, bytes.NewReader(data), int64(len(data)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMountThroughFusermount mounts the way an ordinary user does, through fusermount3, and
// checks that read-only is enforced on that path too.
func TestMountThroughFusermount(t *testing.T) {
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("no fusermount3")
	}
	b := newFakeStore()
	sealVersion(t, b, 1, map[string][]byte{"a": []byte("one")})
	mnt, _ := mountTest(t, newFakeReader(b), Options{ReadOnly: true, helperOnly: true})
	if data, err := os.ReadFile(filepath.Join(mnt, "weight_v000001", "a")); err != nil || string(data) != "one" {
		t.Fatalf("read: %q, %v", data, err)
	}
	wantErrno(t, "mkdir on a read-only mount", os.Mkdir(filepath.Join(mnt, "weight_v000002"), 0o755), syscall.EROFS)
	mntRW, _ := mountTest(t, b, Options{helperOnly: true})
	if err := os.Mkdir(filepath.Join(mntRW, "weight_v000002"), 0o755); err != nil {
		t.Fatalf("mkdir on a read-write mount: %v", err)
	}
	writeFile(t, filepath.Join(mntRW, "weight_v000002", "a"), []byte("two"))
	mustSeal(t, filepath.Join(mntRW, "weight_v000002"))
}

// TestMountRaisesReadAhead: as root, a mount's kernel read-ahead is ReadAheadKiB, not the
// 128 KiB FUSE's INIT leaves it at.
func TestMountRaisesReadAhead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the read-ahead is set through sysfs, as root")
	}
	b := newFakeStore()
	sealVersion(t, b, 1, map[string][]byte{"a": []byte("one")})
	mnt, _ := mountTest(t, newFakeReader(b), Options{ReadOnly: true})
	path, err := readAheadPath(mnt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d\n", ReadAheadKiB); string(got) != want {
		t.Fatalf("%s = %q, want %q", path, got, want)
	}
}

// TestMountReadsLogNothing reads a file of several MiB with 1 MiB reads: a read is no event, and
// the log must stay quiet (go-fuse tried to splice every reply, failed above the system's pipe
// size, and logged a line per read).
func TestMountReadsLogNothing(t *testing.T) {
	b := newFakeStore()
	content := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16+5)
	sealVersion(t, b, 1, map[string][]byte{"w.bin": content})
	mnt, _ := mountTest(t, newFakeReader(b), Options{ReadOnly: true})
	f, err := os.Open(filepath.Join(mnt, "weight_v000001", "w.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, buf := []byte(nil), make([]byte, 1<<20)
	for {
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF || n == 0 {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(content))
	}
	lg, _ := mountLogs.Load(mnt)
	if lines := lg.(*testLog).logged(); len(lines) > 0 {
		t.Fatalf("%d log lines for a read, the first: %q", len(lines), lines[0])
	}
}
