//go:build linux

package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// smallDisk mounts a tmpfs of size bytes at a fresh directory under t.TempDir() (root only:
// else the test is skipped) and unmounts it when the test ends. grow makes it larger.
func smallDisk(t *testing.T, size int64) (dir string, grow func(int64)) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, func(n int64) {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", n)); err != nil {
			t.Fatalf("grow the tmpfs: %v", err)
		}
	}
}

// TestSeedDiskFull: a seed whose disk fills up (ENOSPC from the asynchronous writer's
// completions, or from the plain writes) is given up: no seed is offered, its file is gone,
// every chunk comes back to the pool, and nothing hangs.
func TestSeedDiskFull(t *testing.T) {
	for _, async := range []bool{true, false} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			dir, _ := smallDisk(t, 1<<20)
			rng := rand.New(rand.NewPCG(3, 4))
			want := randomBytes(rng, 5<<20+777)
			w, pool := testSeedWriter(t, dir, async)
			for off := 0; off < len(want); {
				n := min(len(want)-off, 1+rng.IntN(700_000))
				c := pool.get(filePad(int64(off)))
				copy(c.buf, want[off:off+n])
				c.refs.Store(1)
				w.put(c, c.buf[:n])
				off += n
			}
			sd, entry := finishTestSeed(t, w, pool, int64(len(want)))
			if _, ok := sd.takePath(entry); ok {
				t.Error("a seed that hit a full disk was offered")
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("the full disk still holds %d files", len(left))
			}
		})
	}
}

// TestStreamCacheDiskFull: a writer whose cache directory (seeds, materialized copy) is on a
// full disk still seals every streamed version, and every version reads back exactly.
func TestStreamCacheDiskFull(t *testing.T) {
	for _, async := range []bool{true, false} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			old := seedAsync
			seedAsync = async
			t.Cleanup(func() { seedAsync = old })
			cache, _ := smallDisk(t, 3<<20)
			versions := streamSeries(t, 3, 11)
			s, _ := newStore(t, Options{CacheDir: filepath.Join(cache, "c")})
			rng := rand.New(rand.NewPCG(11, 12))
			for i, files := range versions {
				sealStreamed(t, s, uint64(i+1), files, rng)
			}
			for i, files := range versions {
				for p, want := range files {
					mustEqualBytes(t, fmt.Sprintf("v%d %s", i+1, p), readWhole(t, s, uint64(i+1), p), want)
				}
			}
		})
	}
}

// TestCommitStoreDiskFull: a commit into a store whose disk is full fails with ENOSPC, loses
// no version sealed before, leaves the store verifying, and once there is room the same
// commit succeeds.
func TestCommitStoreDiskFull(t *testing.T) {
	disk, grow := smallDisk(t, 6<<20)
	root := filepath.Join(disk, "store")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, root, Options{CacheDir: filepath.Join(t.TempDir(), "cache")})
	rng := rand.New(rand.NewPCG(5, 6))
	v1 := map[string][]byte{"a.bin": randomBytes(rng, 1<<20), "b.bin": randomBytes(rng, 512<<10)}
	commitTree(t, s, 1, v1)
	big := map[string][]byte{"a.bin": randomBytes(rng, 8<<20), "b.bin": v1["b.bin"]}
	dir := writeTree(t, t.TempDir(), big)
	_, err := s.Commit(dir, CommitOptions{Version: 2})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit onto a full disk: %v (want ENOSPC)", err)
	}
	t.Logf("commit onto a full disk: %v", err)
	for p, want := range v1 {
		mustEqualBytes(t, "v1 after the failed commit: "+p, readWhole(t, s, 1, p), want)
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatalf("verify after the failed commit: %v", err)
	}
	grow(64 << 20)
	if _, err := s.Commit(dir, CommitOptions{Version: 2}); err != nil {
		t.Fatalf("commit once there is room: %v", err)
	}
	for p, want := range big {
		mustEqualBytes(t, "v2: "+p, readWhole(t, s, 2, p), want)
	}
}

// TestGCStoreDiskFull: gc on a store whose disk is full (it cannot re-anchor, or write the
// gc record) fails with ENOSPC, not a report of damage, before it deletes a manifest: every version still reads back
// exact and the store verifies; once there is room, gc finishes.
func TestGCStoreDiskFull(t *testing.T) {
	disk, _ := smallDisk(t, 16<<20)
	root := filepath.Join(disk, "store")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, root, Options{CacheDir: filepath.Join(t.TempDir(), "cache")})
	versions := modelVersions(t, 5, 41)
	commitAll(t, s, versions)
	filler := filepath.Join(disk, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	// To the last byte: every write of gc fails, the first (where an object fits in one
	// chunk) in the object's finish.
	for _, n := range []int{64 << 10, 4 << 10, 1} {
		for err = nil; err == nil; {
			_, err = f.Write(make([]byte, n))
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill the disk: %v", err)
	}
	_, err = s.GC(1)
	t.Logf("gc on a full disk: %v", err)
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("gc on a full disk: %v, want ENOSPC, not damage", err)
	}
	if n := len(s.Versions()); n != 5 {
		t.Errorf("%d versions after a gc that failed, want 5", n)
	}
	for i, files := range versions {
		for p, want := range files {
			mustEqualBytes(t, fmt.Sprintf("v%d %s after the failed gc", i+1, p), readWhole(t, s, uint64(i+1), p), want)
		}
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatalf("verify after the failed gc: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(1); err != nil {
		t.Fatalf("gc once there is room: %v", err)
	}
	for p, want := range versions[4] {
		mustEqualBytes(t, "v5 after gc: "+p, readWhole(t, s, 5, p), want)
	}
}
