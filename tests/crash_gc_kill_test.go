package tests

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store"
)

// TestGCKill9 kills `weightfs gc` with SIGKILL at random points of its run (eight trials, each
// on a fresh copy of the same store). After each kill, every version the store lists reads
// back exact, the store verifies, every version gc was to keep is there, and a gc run to its
// end and the next commit work.
func TestGCKill9(t *testing.T) {
	const trials = 8
	work := t.TempDir()
	tmpl := filepath.Join(work, "tmpl")
	initStore(t, tmpl)
	want := genSeries(t, work, 1_000_000, 71, 7, func(v int, src string) {
		if v <= 6 {
			mustCLI(t, "commit", tmpl, src)
		}
	})
	// Time an undisturbed gc, so the kills land inside that window.
	undisturbed := filepath.Join(work, "undisturbed")
	run(t, "cp", "-a", tmpl, undisturbed)
	start := time.Now()
	mustCLI(t, "gc", "--keep-last", "2", undisturbed)
	window := max(time.Since(start), 20*time.Millisecond)
	t.Logf("an undisturbed gc takes %v", window)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	for trial := range trials {
		dir := filepath.Join(work, fmt.Sprintf("store%d", trial))
		run(t, "cp", "-a", tmpl, dir)
		cmd := weightfsCommand(weightfsBin(t), "gc", "--keep-last", "2", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(rng.Int64N(int64(window)))
		time.Sleep(delay)
		_ = cmd.Process.Kill()
		err := cmd.Wait()
		kept := checkStoreVersions(t, fmt.Sprintf("trial %d (killed after %v: %v)", trial, delay, err), dir, want)
		for v := 5; v <= 6; v++ {
			if !kept[v] {
				t.Errorf("trial %d: version %d, which gc keeps, is gone", trial, v)
			}
		}
		mustCLI(t, "gc", "--keep-last", "2", dir)
		mustCLI(t, "commit", dir, srcDir(work, 7))
		kept = checkStoreVersions(t, fmt.Sprintf("trial %d, after gc and a commit", trial), dir, want)
		if len(kept) != 3 || !kept[5] || !kept[6] || !kept[7] {
			t.Errorf("trial %d: versions %v after gc and a commit, want 5, 6, 7", trial, kept)
		}
	}
}

// checkStoreVersions opens dir read-only, verifies it, exports every version it lists and
// compares each with want; it returns the versions listed.
func checkStoreVersions(t *testing.T, what, dir string, want map[int]map[string]string) map[int]bool {
	t.Helper()
	st, err := store.Open(dir, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	defer st.Close()
	if rep, err := st.Verify(nil); err != nil {
		t.Fatalf("%s: verify: %v (%v)", what, err, rep.Damaged)
	}
	listed := map[int]bool{}
	for _, info := range st.Versions() {
		v := int(info.Number)
		listed[v] = true
		out := filepath.Join(t.TempDir(), "export")
		if err := st.Export(info.Number, out, nil); err != nil {
			t.Fatalf("%s: export v%d: %v", what, v, err)
		}
		sameHashes(t, fmt.Sprintf("%s: v%d", what, v), treeHashes(t, out), want[v])
	}
	t.Logf("%s: versions %v", what, listed)
	return listed
}
