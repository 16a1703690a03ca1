package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountLifecycle drives a read-write mount and a read-only mount (two daemon processes)
// of one store with real programs: cp -r of generated checkpoints into ten versions sealed by
// touch DONE, a staging directory published by mv, sha256sum and mmap of every version
// through both mounts, the refusals on sealed versions and on the read-only mount, and an
// open version that the read-only mount sees only once it is sealed.
func TestMountLifecycle(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	const versions = 12
	want := genCheckpoints(t, work, 2_000_000, versions)

	rw := filepath.Join(work, "rw")
	ro := filepath.Join(work, "ro")
	for _, d := range []string{rw, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	startMount(t, storeDir, rw)

	t.Run("cp and DONE, ten versions", func(t *testing.T) {
		for v := 1; v <= 10; v++ {
			dst := versionDir(rw, v)
			run(t, "cp", "-r", srcDir(work, v), dst) // cp makes the directory: an open version
			run(t, "touch", filepath.Join(dst, "DONE"))
			if link, err := os.Readlink(filepath.Join(rw, "latest")); err != nil || link != filepath.Base(dst) {
				t.Fatalf("after sealing v%d: latest -> %q, %v", v, link, err)
			}
		}
		var names []string
		for v := 1; v <= 10; v++ {
			names = append(names, filepath.Base(versionDir(rw, v)))
		}
		wantLS := "deltas latest patches " + strings.Join(names, " ")
		if got := rootListing(t, rw); got != wantLS {
			t.Fatalf("ls: %q, want %q", got, wantLS)
		}
	})

	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "200ms")

	t.Run("staging directory renamed to a version", func(t *testing.T) {
		stage := filepath.Join(rw, "save-in-progress")
		run(t, "cp", "-r", srcDir(work, 11), stage)
		run(t, "mv", stage, versionDir(rw, 11))
		sameHashes(t, "v11 after mv", sha256sumTree(t, versionDir(rw, 11)), want[11])
		if _, err := os.Stat(stage); !os.IsNotExist(err) {
			t.Errorf("staging directory still there: %v", err)
		}
	})

	t.Run("sha256 of every version through both mounts", func(t *testing.T) {
		waitForListing(t, ro, versionDir(ro, 11))
		for v := 1; v <= 11; v++ {
			sameHashes(t, fmt.Sprintf("rw v%d", v), sha256sumTree(t, versionDir(rw, v)), want[v])
			sameHashes(t, fmt.Sprintf("ro v%d", v), sha256sumTree(t, versionDir(ro, v)), want[v])
		}
		sameHashes(t, "ro latest", sha256sumTree(t, filepath.Join(ro, "latest")+"/"), want[11])
	})

	t.Run("mmap reads every byte", func(t *testing.T) {
		for _, v := range []int{1, 7, 11} {
			for name, sum := range want[v] {
				if !strings.HasSuffix(name, ".safetensors") {
					continue
				}
				for _, mnt := range []string{rw, ro} {
					if got := mmapSHA256(t, filepath.Join(versionDir(mnt, v), name)); got != sum {
						t.Errorf("mmap %s of v%d: sha256 %s, want %s", name, v, got, sum)
					}
				}
			}
		}
	})

	t.Run("sealed versions refuse changes", func(t *testing.T) {
		v3 := versionDir(rw, 3)
		f := filepath.Join(v3, "config.json")
		_, err := os.OpenFile(f, os.O_WRONLY, 0)
		expectErrno(t, "write", err, syscall.EPERM)
		expectErrno(t, "truncate", os.Truncate(f, 0), syscall.EPERM)
		expectErrno(t, "unlink", os.Remove(f), syscall.EPERM)
		expectErrno(t, "rename", os.Rename(f, filepath.Join(v3, "x.json")), syscall.EPERM)
		expectErrno(t, "create", os.WriteFile(filepath.Join(v3, "new"), nil, 0o644), syscall.EPERM)
		expectErrno(t, "mkdir weight_v000005 after v11", os.Mkdir(versionDir(rw, 5), 0o755), syscall.EEXIST)
		expectErrno(t, "mkdir weight_v5 (not six digits)", os.Mkdir(filepath.Join(rw, "weight_v5"), 0o755), syscall.EINVAL)
	})

	t.Run("read-only mount refuses everything", func(t *testing.T) {
		f := filepath.Join(versionDir(ro, 2), "config.json")
		_, err := os.OpenFile(f, os.O_WRONLY, 0)
		expectErrno(t, "write", err, syscall.EROFS)
		expectErrno(t, "truncate", os.Truncate(f, 0), syscall.EROFS)
		expectErrno(t, "unlink", os.Remove(f), syscall.EROFS)
		expectErrno(t, "mkdir", os.Mkdir(versionDir(ro, 99), 0o755), syscall.EROFS)
		expectErrno(t, "chmod", os.Chmod(f, 0o600), syscall.EROFS)
	})

	t.Run("open version is invisible until sealed", func(t *testing.T) {
		dst := versionDir(rw, 12)
		run(t, "cp", "-r", srcDir(work, 12), dst)
		if _, err := os.Stat(versionDir(ro, 12)); !os.IsNotExist(err) {
			t.Fatalf("open v12 on the read-only mount: %v", err)
		}
		if strings.Contains(rootListing(t, ro), "weight_v000012") {
			t.Fatal("open v12 listed on the read-only mount")
		}
		start := time.Now()
		run(t, "touch", filepath.Join(dst, "DONE"))
		waitForListing(t, ro, versionDir(ro, 12))
		t.Logf("v12 appeared on the read-only mount %v after its seal", time.Since(start).Round(time.Millisecond))
		sameHashes(t, "ro v12", sha256sumTree(t, versionDir(ro, 12)), want[12])
		if link, err := os.Readlink(filepath.Join(ro, "latest")); err != nil || link != "weight_v000012" {
			t.Errorf("read-only latest -> %q, %v", link, err)
		}
	})

	t.Run("--version 3 and latest serve that version at the mount root", func(t *testing.T) {
		pinned := filepath.Join(work, "pinned")
		if err := os.Mkdir(pinned, 0o755); err != nil {
			t.Fatal(err)
		}
		d := startMount(t, storeDir, pinned, "--read-only", "--version", "3", "--cache-dir", filepath.Join(work, "pin-cache"))
		sameHashes(t, "pinned v3", sha256sumTree(t, pinned), want[3])
		d.stop()
		d = startMount(t, storeDir, pinned, "--read-only", "--version", "latest", "--cache-dir", filepath.Join(work, "pin-cache2"))
		sameHashes(t, "pinned latest", sha256sumTree(t, pinned), want[12])
		d.stop()
	})

	verifyStore(t, storeDir)
}

// waitForListing waits until p exists on a read-only mount. New versions must appear within
// about two seconds; the generous deadline keeps a loaded machine from failing the test.
func waitForListing(t *testing.T, mnt, p string) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for {
		if strings.Contains(rootListing(t, mnt), filepath.Base(p)) {
			if _, err := os.Stat(p); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear on %s", filepath.Base(p), mnt)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
