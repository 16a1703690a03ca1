package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// TestCommitTwentyVersions commits 20 versions of a generated ~100M-parameter model through
// the CLI, exports every version and checks every file's SHA-256 against the input, checks
// that versions 2-20 each store less than 5% of their logical size, and that verify is clean.
func TestCommitTwentyVersions(t *testing.T) {
	t.Parallel() // with TestCampaign (see there)
	params := int64(100_000_000)
	if testing.Short() {
		params = 2_000_000
	}
	storeDir := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", storeDir)

	m, err := gen.New(gen.ConfigForParams(params, 3e-6, 7))
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]map[string]string{}
	work := t.TempDir()
	for v := uint64(1); v <= 20; v++ {
		if v > 1 {
			m.Step()
		}
		src := filepath.Join(work, fmt.Sprintf("src%d", v))
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		want[v] = treeHashes(t, src)
		// Flags after the arguments, as users of git expect.
		mustCLI(t, "commit", storeDir, src, "--version", fmt.Sprint(v))
		os.RemoveAll(src)
	}

	st, err := store.Open(storeDir, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	infos := st.Versions()
	st.Close()
	if len(infos) != 20 {
		t.Fatalf("store lists %d versions, want 20", len(infos))
	}
	for _, info := range infos[1:] {
		frac := float64(info.StoredBytes) / float64(info.LogicalBytes)
		t.Logf("v%d: stored %d of %d bytes (%.3f%%), changed %.3f%% of elements", info.Number,
			info.StoredBytes, info.LogicalBytes, 100*frac, 100*float64(info.ChangedElems)/float64(info.TotalElems))
		if frac >= 0.05 {
			t.Errorf("v%d stores %.2f%% of its logical size, want < 5%%", info.Number, 100*frac)
		}
		if info.ChangedElems == 0 || info.ChangedElems > info.TotalElems/10 {
			t.Errorf("v%d: %d of %d elements changed: not an RL step", info.Number, info.ChangedElems, info.TotalElems)
		}
	}

	for v := uint64(1); v <= 20; v++ {
		out := filepath.Join(work, fmt.Sprintf("out%d", v))
		mustCLI(t, "export", storeDir, fmt.Sprint(v), out)
		sameHashes(t, fmt.Sprintf("export of v%d", v), treeHashes(t, out), want[v])
		os.RemoveAll(out)
	}
	r := mustCLI(t, "verify", storeDir)
	t.Log(r.stdout)
	log := mustCLI(t, "log", storeDir)
	t.Log(log.stdout)
}
