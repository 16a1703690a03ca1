package store

import (
	"fmt"
	"testing"
)

// TestGCStoppedInItsSweep stops gc after each number of object deletions in turn (as a
// `kill -9` of `weightfs gc` does, TestGCKill9): the store must verify at every point, before
// any later gc tidies up, and every version it lists must read back exact. Objects of the
// dropped versions are deltas on each other; a sweep that deleted a base before the objects
// coded against it left objects that Verify could not rebuild.
func TestGCStoppedInItsSweep(t *testing.T) {
	_, deleted := sweepCount(t)
	if deleted < 4 {
		t.Fatalf("gc deleted %d objects: too few to stop it between them", deleted)
	}
	for k := 1; k < deleted; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			root, want := gcCrashedAfterDeletes(t, k)
			s := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir()})
			if rep, err := s.Verify(nil); err != nil {
				t.Fatalf("verify after gc stopped at its deletion %d of %d: %v (%v)", k, deleted, err, rep.Damaged)
			}
			for _, info := range s.Versions() {
				sameTree(t, fmt.Sprintf("v%d after gc stopped at deletion %d", info.Number, k), exportHashes(t, s, info.Number), want[info.Number])
			}
		})
	}
}

// sweepCount runs the gc of gcCrashedAfterDeletes to its end and counts the objects it deletes.
func sweepCount(t *testing.T) (string, int) {
	t.Helper()
	s, root, _ := sweepStore(t)
	n := 0
	s.hook = func(p string) error {
		if p == "gc-object-deleted" {
			n++
		}
		return nil
	}
	if _, err := s.GC(2); err != nil {
		t.Fatal(err)
	}
	return root, n
}

// gcCrashedAfterDeletes runs GC(2) over sweepStore's versions and stops it, as a crash
// would, right after its k-th object deletion.
func gcCrashedAfterDeletes(t *testing.T, k int) (string, map[uint64]map[string]string) {
	t.Helper()
	s, root, want := sweepStore(t)
	n := 0
	gcStoppedWhere(t, s, func(p string) bool {
		if p == "gc-object-deleted" {
			n++
		}
		return n == k
	})
	return root, want
}

// sweepStore commits six versions, each a delta on the one before, so that the versions gc
// drops hold chains of deltas.
func sweepStore(t *testing.T) (*Store, string, map[uint64]map[string]string) {
	t.Helper()
	s, root := newStore(t, Options{})
	want := map[uint64]map[string]string{}
	for i, files := range modelVersions(t, 6, 12) {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	return s, root, want
}
