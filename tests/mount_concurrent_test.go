package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountTwoWritersOneVersion has two processes write the two shards of one open version
// at the same time, in small writes so they interleave; after the seal both read back exact
// through the read-write mount and through a read-only mount.
func TestMountTwoWritersOneVersion(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genCheckpoints(t, work, 2_000_000, 1)
	rw, ro := rwAndROMountPoints(t, work)
	startMount(t, storeDir, rw)
	ver := versionDir(rw, 1)
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	src := srcDir(work, 1)
	var shards, others []string
	for name := range want[1] {
		if strings.HasSuffix(name, ".safetensors") {
			shards = append(shards, name)
		} else {
			others = append(others, name)
		}
	}
	if len(shards) != 2 {
		t.Fatalf("generated %d shards, want 2: %v", len(shards), shards)
	}
	var writers []*exec.Cmd
	for _, name := range shards {
		w := exec.Command("dd", "if="+filepath.Join(src, name), "of="+filepath.Join(ver, name), "bs=4k", "status=none")
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		writers = append(writers, w)
	}
	for _, name := range others {
		run(t, "cp", filepath.Join(src, name), filepath.Join(ver, name))
	}
	for i, w := range writers {
		if err := w.Wait(); err != nil {
			t.Fatalf("writer of %s: %v", shards[i], err)
		}
	}
	run(t, "touch", filepath.Join(ver, "DONE"))
	sameHashes(t, "read-write mount", sha256sumTree(t, ver), want[1])
	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
	sameHashes(t, "read-only mount", sha256sumTree(t, versionDir(ro, 1)), want[1])
}
