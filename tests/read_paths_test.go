package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadPathsThroughMount reads a read-only mount's versions with real programs (cp, and a
// read-only map) along each read path: the latest, served from the materialized copy one
// checked read per request (store/copy_read_file.go), after a byte of the copy's file was changed
// under the running daemon (the copy was checked when it was built; the change is caught on
// read and the bytes come from the objects), and an older version, rebuilt from the objects,
// each tensor hashed against its identity before its first byte is served (store/read_check.go).
func TestReadPathsThroughMount(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	want := genCheckpoints(t, work, 3_000_000, 3)
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw := filepath.Join(work, "rw")
	if err := os.Mkdir(rw, 0o755); err != nil {
		t.Fatal(err)
	}
	w := startMount(t, storeDir, rw)
	for v := 1; v <= 3; v++ {
		run(t, "cp", "-r", srcDir(work, v), versionDir(rw, v))
		run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
	}
	w.stop()

	ro := filepath.Join(work, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(work, "reader-cache")
	d := startMount(t, storeDir, ro, "--read-only", "--cache-dir", cacheDir)

	// Change one byte in the middle of the first shard of the reader's copy, and drop the
	// copy from the page cache, so that the daemon reads it from the disk (O_DIRECT).
	shards, err := filepath.Glob(filepath.Join(cacheDir, "materialized", "*-00001-of-*.safetensors"))
	if err != nil || len(shards) != 1 {
		t.Fatalf("the reader's copy of the first shard: %v, %v", shards, err)
	}
	b, err := os.ReadFile(shards[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(shards[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	dropFromPageCache(t, shards[0])

	for _, v := range []int{3, 1} {
		dst := filepath.Join(work, "out", filepath.Base(versionDir(ro, v)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "cp", "-r", versionDir(ro, v), dst)
		got := treeHashes(t, dst)
		for name, sum := range want[v] {
			if got[name] != sum {
				t.Errorf("v%d %s copied with cp: sha256 %s, want %s", v, name, got[name], sum)
			}
			if strings.HasSuffix(name, ".safetensors") {
				if m := mmapSHA256(t, filepath.Join(versionDir(ro, v), name)); m != sum {
					t.Errorf("v%d %s through a map: sha256 %s, want %s", v, name, m, sum)
				}
			}
		}
	}
	if out := d.out.String(); !strings.Contains(out, "chunk") {
		t.Errorf("the changed byte of the copy is not logged:\n%s", out)
	}
}

// dropFromPageCache writes back and drops the kernel's cached pages of file p.
func dropFromPageCache(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
