package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// Retention's cost against what it frees, and seals beside gc's re-anchoring (issue 27,
// item 15).

func changingModel(t *testing.T, n int, frac float64) []map[string][]byte {
	rng := rand.New(rand.NewPCG(23, 1))
	w := bf16Like(rng, 1_400_000)
	var out []map[string][]byte
	for v := 0; v < n; v++ {
		if v > 0 {
			w = perturb(rng, w, 2, frac)
		}
		out = append(out, map[string][]byte{"model.safetensors": safetensorsFile(t,
			testTensor{"model.layers.0.mlp.weight", delta.DTypeBF16, []int64{1400, 1000}, w})})
	}
	return out
}

// TestRetentionCostsWhatItFrees: with --keep-last 1, a writer seals versions of a model whose
// tensor changes a little each time (chains of deltas: re-anchoring the kept version's delta
// on a dropped one writes a whole copy). Retention writes no more bytes of whole copies than
// it frees, as the store's stats count them, deferring the drops that would cost more; it
// does drop versions (behind the whole copies the ingest writes, or once the deltas behind
// the kept version outweigh a whole copy); and every kept version reads exact.
func TestRetentionCostsWhatItFrees(t *testing.T) {
	for _, tc := range []struct {
		name     string
		frac     float64
		maxChain int
	}{
		{"deltas of 10%, chains of 64", 0.10, 0},
		{"deltas of 1%, chains of 6", 0.01, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t, Options{Retention: Retention{KeepLast: 1}, MaxChain: tc.maxChain})
			versions := changingModel(t, 30, tc.frac)
			for i, files := range versions {
				commitTree(t, s, uint64(i+1), files)
				s.collector.ret.idle()
			}
			st := s.Stats()
			t.Logf("sealed %d bytes; retention: %d runs dropped %d versions, %d deferred; wrote %d bytes, freed %d; versions kept %v",
				st.SealedStoredBytes, st.RetentionRuns, st.RetentionDroppedVersions, st.RetentionDeferred, st.RetentionWrittenBytes, st.RetentionFreedBytes, numbers(s.Versions()))
			if st.RetentionDroppedVersions == 0 {
				t.Fatalf("retention dropped nothing over %d seals", len(versions))
			}
			if st.RetentionWrittenBytes > st.RetentionFreedBytes {
				t.Fatalf("retention wrote %d bytes of whole copies to free %d bytes", st.RetentionWrittenBytes, st.RetentionFreedBytes)
			}
			vs := numbers(s.Versions())
			if st.RetentionDroppedVersions+int64(len(vs)) != int64(len(versions)) || vs[len(vs)-1] != uint64(len(versions)) {
				t.Fatalf("retention dropped %d versions and keeps %v of %d", st.RetentionDroppedVersions, vs, len(versions))
			}
			for _, v := range vs {
				mustEqualBytes(t, fmt.Sprintf("v%d", v), readWhole(t, s, v, "model.safetensors"), versions[v-1]["model.safetensors"])
			}
		})
	}
}

// TestSealDuringGCReanchor: a gc that re-anchors (retention's runs in the background after a
// seal) does not hold up the next seal: a version committed from within gc's re-anchoring
// (its progress callback) is sealed while gc waits for it, and after gc the kept version and
// the new one read exact.
func TestSealDuringGCReanchor(t *testing.T) {
	s, _ := newStore(t, Options{})
	versions := changingModel(t, 6, 0.05)
	for i := range 5 {
		commitTree(t, s, uint64(i+1), versions[i])
	}
	dir := writeTree(t, t.TempDir(), versions[5])
	var once sync.Once
	var sealErr error
	sealedDuring := false
	st, err := s.GCWith(1, GCOptions{Progress: func(done, total int64) {
		once.Do(func() {
			sealed := make(chan error, 1)
			go func() {
				_, err := s.Commit(dir, CommitOptions{Version: 6})
				sealed <- err
			}()
			select {
			case sealErr = <-sealed:
				sealedDuring = true
			case <-time.After(2 * time.Minute):
				sealErr = errors.New("the seal still waits for gc's re-anchoring after 2 minutes")
			}
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Reanchored == 0 {
		t.Fatalf("gc re-anchored nothing (%+v): the test needs a re-anchoring", st)
	}
	if !sealedDuring || sealErr != nil {
		t.Fatalf("a seal during gc's re-anchoring: %v", sealErr)
	}
	if got := numbers(s.Versions()); !slices.Equal(got, []uint64{5, 6}) {
		t.Fatalf("after gc --keep-last 1 and a seal during it, the store lists %v, want [5 6]", got)
	}
	for _, v := range []uint64{5, 6} {
		mustEqualBytes(t, fmt.Sprintf("v%d", v), readWhole(t, s, v, "model.safetensors"), versions[v-1]["model.safetensors"])
	}
}
