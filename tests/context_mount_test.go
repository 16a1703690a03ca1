package tests

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestMountContextSections: versions written through a read-write mount (the streaming
// ingest) are stored with version-2 delta sections where the previous version's delta is a
// context (docs/format.md Part I §5), and a read-only mount serves every version, its patch
// and its slime delta from them, every byte as written.
func TestMountContextSections(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	work, storeDir, rw, ro, rwMount := followMounts(t)
	const n = 5
	want := genSeries(t, work, 1_000_000, 41, n, func(v int, src string) { sealVersion(t, rw, v, src) })
	rwMount.stop()
	// Delta sections in the store, by body version (docs/format.md Part I §3.1).
	sections := map[byte]int{}
	err := filepath.WalkDir(filepath.Join(storeDir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 96 {
			return err
		}
		f, dl := binary.LittleEndian.Uint64(b[80:]), binary.LittleEndian.Uint64(b[88:])
		if dl > 0 {
			sections[b[96+f+4]]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("delta sections by body version: %v", sections)
	if sections[1] == 0 || sections[2] == 0 || sections[2] < 2*sections[1] {
		t.Errorf("delta sections by body version %v: want version 1 for version 2's deltas, version 2 for the three after", sections)
	}
	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
	for v := n; v >= 1; v-- { // the newest from the copy, the older ones walking back from it
		sameHashes(t, fmt.Sprintf("version %d", v), treeHashes(t, versionDir(ro, v)), want[v])
	}
	for v := 2; v <= n; v++ {
		run(t, "sha256sum", filepath.Join(ro, "patches", fmt.Sprintf("weight_v%06d.safetensors", v)))
		run(t, "cat", filepath.Join(ro, "deltas", fmt.Sprintf("weight_v%06d", v), "model.safetensors.index.json"))
	}
	verifyStore(t, storeDir)
}
