package store

import (
	"fmt"
	"testing"
)

// TestGCProgress: GCWith's progress hook sees the bytes re-anchored grow once per re-anchored
// object up to a fixed total, and the collected store keeps its kept versions.
func TestGCProgress(t *testing.T) {
	s, _ := newStore(t, Options{})
	want := map[uint64]map[string]string{}
	for i, files := range modelVersions(t, 4, 5) {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	var calls int
	var last, total int64
	st, err := s.GCWith(2, GCOptions{Progress: func(done, tot int64) {
		if calls > 0 && (done <= last || tot != total) {
			t.Errorf("progress went from %d/%d to %d/%d", last, total, done, tot)
		}
		calls++
		last, total = done, tot
	}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Reanchored == 0 || calls != st.Reanchored || last != total {
		t.Fatalf("gc %+v: %d progress calls, last %d of %d; want one per re-anchored object, ending at the total", st, calls, last, total)
	}
	for v := uint64(3); v <= 4; v++ {
		sameTree(t, fmt.Sprintf("v%d after gc", v), exportHashes(t, s, v), want[v])
	}
}
