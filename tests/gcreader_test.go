package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// exists reports whether p can be stated.
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestReadOnlyMountAfterOtherProcessGC: a read-only mount that served the latest version as
// an inference node does, and brought its copy forward to two new versions (which loads
// their delta sections and, as their contexts, the sections before them), serves every version `weightfs gc` (another
// process) kept byte-exact after that gc re-anchored the oldest kept version's deltas and
// deleted their bases.
func TestReadOnlyMountAfterOtherProcessGC(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	ro := filepath.Join(work, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	var reader *mountDaemon
	want := map[int]map[string]string{}
	genSeries(t, work, 1_000_000, 53, 6, func(v int, src string) {
		want[v] = treeHashes(t, src)
		mustCLI(t, "commit", storeDir, src)
		switch {
		case v == 4:
			reader = startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "100ms")
		case v > 4:
			waitFor(t, fmt.Sprintf("version %d in the reader", v), func() bool { return exists(versionDir(ro, v)) }, reader.out.String)
		}
		if reader != nil {
			sameHashes(t, fmt.Sprintf("version %d, the latest, before gc", v), treeHashes(t, versionDir(ro, v)), want[v])
		}
	})
	out := mustCLI(t, "gc", "--keep-last", "3", storeDir).stdout
	if m := regexp.MustCompile(`re-anchored (\d+) objects`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Fatalf("gc re-anchored nothing: the test needs a rewritten delta\n%s", out)
	}
	waitFor(t, "version 3 gone from the reader", func() bool { return !exists(versionDir(ro, 3)) }, reader.out.String)
	for v := 6; v >= 4; v-- {
		sameHashes(t, fmt.Sprintf("version %d after gc", v), treeHashes(t, versionDir(ro, v)), want[v])
	}
	reader.stop()
	verifyStore(t, storeDir)
}
