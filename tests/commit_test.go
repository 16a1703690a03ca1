package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// TestCommitTwentyVersions commits 20 versions of a generated model with the tensors of a
// ~100M-parameter model (5 of its 18 layers: ~55M parameters, 109 MB a version) through the
// CLI, exports every version and checks every file's SHA-256 against the input, checks that
// versions 2-20 each store less than 5% of their logical size, and that verify is clean.
func TestCommitTwentyVersions(t *testing.T) {
	t.Parallel() // with TestCampaign (see there)
	params := int64(100_000_000)
	if testing.Short() {
		params = 2_000_000
	}
	storeDir := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", storeDir)

	// The ~100M model's shapes (vocabulary 32000, width 576: every kind and size of tensor it
	// has) with fewer of its identical layers: the size bounds of the store it crosses are
	// still crossed (below), at about half the generation, commits and hashing (make test's
	// time: the whole 18 layers cost this test 2m24s of CI).
	cfg := gen.ConfigForParams(params, 3e-6, 7)
	if !testing.Short() {
		cfg.Layers = 5
		commitTwentyCoversBounds(t, cfg)
	}
	m, err := gen.New(cfg)
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

// commitTwentyCoversBounds fails unless the model of cfg crosses the store's size bounds the
// ~100M model of TestCommitTwentyVersions crossed: a tensor longer than the read caches'
// eighth (32 MiB of DefaultCacheBytes) and so than an own pack's 16 MiB and the ingest's 4 MiB
// chunks, and a version longer than their three eighths (96 MiB) and than a pack's 64 MiB.
func commitTwentyCoversBounds(t *testing.T, cfg gen.Config) {
	t.Helper()
	tensors, err := cfg.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	var largest, total int64
	for _, tn := range tensors {
		n := int64(2) // BF16
		for _, d := range tn.Shape {
			n *= d
		}
		largest = max(largest, n)
		total += n
	}
	if largest <= store.DefaultCacheBytes/8 || total <= 3*store.DefaultCacheBytes/8 {
		t.Fatalf("model %+v: largest tensor %d bytes, %d bytes a version: want more than %d and %d (the store's bounds the test crosses)",
			cfg, largest, total, store.DefaultCacheBytes/8, 3*store.DefaultCacheBytes/8)
	}
	t.Logf("model: %d layers, %d tensors, largest %d bytes, %d bytes a version", cfg.Layers, len(tensors), largest, total)
}
