package store

import (
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/gen"
)

// TestGeneratedModelIsSmallAfterTheFirstVersion commits 20 versions of a generated RL run:
// versions 2-20 must each store less than 5% of their logical size, and all export exactly.
func TestGeneratedModelIsSmallAfterTheFirstVersion(t *testing.T) {
	params := int64(3_000_000)
	if testing.Short() {
		params = 600_000
	}
	m, err := gen.New(gen.ConfigForParams(params, 3e-6, 7))
	if err != nil {
		t.Fatal(err)
	}
	s, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	work := t.TempDir()
	want := map[uint64]map[string]string{}
	for v := uint64(1); v <= 20; v++ {
		if v > 1 {
			m.Step()
		}
		src := filepath.Join(work, fmt.Sprint(v))
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		want[v] = treeHashes(t, src)
		info, err := s.Commit(src, CommitOptions{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(src)
		if v == 1 {
			continue
		}
		frac := float64(info.StoredBytes) / float64(info.LogicalBytes)
		if frac >= 0.05 {
			t.Errorf("v%d stores %.2f%% of its logical size, want < 5%%", v, 100*frac)
		}
		if info.ChangedElems == 0 || info.ChangedElems > info.TotalElems/10 {
			t.Errorf("v%d: %d of %d elements changed", v, info.ChangedElems, info.TotalElems)
		}
		if v == 20 {
			t.Logf("v%d: stored %d of %d bytes (%.2f%%), %.2f%% of elements changed", v, info.StoredBytes, info.LogicalBytes,
				100*frac, 100*info.ChangedFraction())
		}
	}
	r := openStore(t, root, Options{ReadOnly: true})
	for _, v := range []uint64{1, 7, 19, 20} {
		sameTree(t, fmt.Sprintf("export of v%d", v), exportHashes(t, r, v), want[v])
	}
	if testing.Short() {
		return
	}
	if _, err := r.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
