package store

import (
	"fmt"
	"testing"

	"github.com/weightfs/weightfs/internal/testfiles"
)

// TestReaderAfterOtherProcessGC: a long-lived reader (a separate read-only store, as another
// process opens it) that cached the headers, delta sections and decoded blocks of objects
// reads every version the writer's gc kept byte-exact after that gc re-anchored objects under
// it (rewrote them in place, deleted their bases), with version-1 sections and version-2 ones;
// Verify of the reader is clean (closeStore). "read": the reader read every version before the
// gc; "sections": it loaded the delta sections of the latest version's objects (as the
// contexts of the next version's sections are loaded), caching headers but no plan.
func TestReaderAfterOtherProcessGC(t *testing.T) {
	for _, chain := range []int{0, maxContextChain} {
		for _, how := range []string{"read", "sections"} {
			t.Run(fmt.Sprintf("chain%d-%s", chain, how), func(t *testing.T) {
				trees := testfiles.ShardedSeries(t, 6, 31)
				s, root := newStore(t, Options{})
				s.objects.contextChain = chain
				for k, files := range trees[:4] {
					commitTree(t, s, uint64(k+1), files)
				}
				r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
				for v := uint64(1); v <= 4; v++ {
					if how == "read" {
						for name, want := range trees[v-1] {
							mustEqualBytes(t, fmt.Sprintf("version %d %s before gc", v, name), readWhole(t, r, v, name), want)
						}
						continue
					}
					if v < 4 {
						continue
					}
					ver, err := r.versions.loadVersion(v)
					if err != nil {
						t.Fatal(err)
					}
					for i := range ver.m.Files {
						for _, tn := range ver.m.Files[i].Tensors {
							r.objects.loadDelta(tn.ID) // a full object without a link has none: errStale
						}
					}
				}
				for k := 4; k < len(trees); k++ {
					commitTree(t, s, uint64(k+1), trees[k])
				}
				st, err := s.GC(3) // keeps 4, 5, 6: version 4's deltas lose their bases
				if err != nil {
					t.Fatal(err)
				}
				if st.Reanchored == 0 {
					t.Fatalf("gc re-anchored nothing (%+v): the test needs a rewritten delta", st)
				}
				if err := r.Refresh(); err != nil {
					t.Fatal(err)
				}
				// Its pages and decoded blocks are pushed out (by other reads, in a long-lived
				// reader); what it cached of the objects stays.
				r.objects.pages.clear()
				r.objects.blocks.clear()
				for v := uint64(6); v >= 4; v-- {
					for name, want := range trees[v-1] {
						mustEqualBytes(t, fmt.Sprintf("version %d %s after gc", v, name), readWhole(t, r, v, name), want)
					}
				}
			})
		}
	}
}
