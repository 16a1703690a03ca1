package store

import (
	"errors"
	"fmt"
	"testing"
)

func TestGCKeepsKeptVersionsReadable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxChain int
		keep     int
	}{
		{"long chains", 64, 3},
		{"anchors inside", 3, 4},
		{"keep one", 64, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newStore(t, Options{MaxChain: tc.maxChain})
			versions := modelVersions(t, 8, 9)
			want := map[uint64]map[string]string{}
			for i, files := range versions {
				_, dir := commitTree(t, s, uint64(i+1), files)
				want[uint64(i+1)] = treeHashes(t, dir)
			}
			before := storeBytes(t, s)
			st, err := s.GC(tc.keep)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("gc: %+v; %d -> %d bytes", st, before, storeBytes(t, s))
			if st.DroppedVersions != 8-tc.keep || len(st.Dropped) != 8-tc.keep || len(s.Versions()) != tc.keep {
				t.Fatalf("dropped %v, %d versions left", st.Dropped, len(s.Versions()))
			}
			if st.DeletedObjects == 0 || storeBytes(t, s) >= before {
				t.Fatalf("gc freed nothing: %+v", st)
			}
			first := s.Versions()[0]
			if !first.Anchor {
				t.Fatalf("the oldest kept version is not an anchor: %+v", first)
			}
			for v, w := range want {
				_, err := s.Version(v)
				if v <= uint64(8-tc.keep) {
					if !errors.Is(err, ErrNoSuchVersion) {
						t.Fatalf("dropped version %d: %v", v, err)
					}
					continue
				}
				sameTree(t, fmt.Sprintf("v%d after gc", v), exportHashes(t, s, v), w)
			}
			if _, err := s.Verify(nil); err != nil {
				t.Fatal(err)
			}
			// A fresh reader and the next commit work on the collected store.
			r := openStore(t, root, Options{ReadOnly: true})
			for v := uint64(9 - tc.keep); v <= 8; v++ {
				sameTree(t, fmt.Sprintf("reader v%d after gc", v), exportHashes(t, r, v), want[v])
			}
			commitTree(t, s, 9, modelVersions(t, 9, 9)[8])
		})
	}
}

// gcCrashedAt commits five versions of modelVersions(seed), runs GC(2) with a failure
// injected at the failpoint point and crashes the store there. It returns the store's root
// and each version's file hashes.
func gcCrashedAt(t *testing.T, point string, seed uint64) (string, map[uint64]map[string]string) {
	t.Helper()
	s, root := newStore(t, Options{})
	want := map[uint64]map[string]string{}
	for i, files := range modelVersions(t, 5, seed) {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	gcStoppedWhere(t, s, func(p string) bool { return p == point })
	return root, want
}

// gcStoppedWhere runs GC(2) with a failure injected at the first failpoint stop says yes to,
// and crashes the store there.
func gcStoppedWhere(t *testing.T, s *Store, stop func(point string) bool) {
	t.Helper()
	var at string
	s.hook = func(p string) error {
		if stop(p) {
			at = p
			return errInjected
		}
		return nil
	}
	if _, err := s.GC(2); !errors.Is(err, errInjected) {
		t.Fatalf("gc with a failure injected (at %q): %v", at, err)
	}
	crash(s)
}

func TestGCCrashPoints(t *testing.T) {
	for _, point := range []string{"gc-reanchored", "gc-recorded", "gc-manifests-deleted"} {
		t.Run(point, func(t *testing.T) {
			root, want := gcCrashedAt(t, point, 10)
			s := openStore(t, root, Options{})
			for _, info := range s.Versions() {
				sameTree(t, fmt.Sprintf("v%d after a crash in gc", info.Number), exportHashes(t, s, info.Number), want[info.Number])
			}
			if _, err := s.GC(2); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Verify(nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestGCRefusals(t *testing.T) {
	s, _ := newStore(t, Options{})
	if _, err := s.GC(0); err == nil {
		t.Fatal("gc keeping no version accepted")
	}
	commitTree(t, s, 1, map[string][]byte{"a": []byte("x")})
	st, err := s.GC(5)
	if err != nil || st.DroppedVersions != 0 {
		t.Fatalf("gc with fewer versions than kept: %+v, %v", st, err)
	}
}

func storeBytes(t testing.TB, s *Store) int64 {
	var n int64
	s.be.ListObjects(func(_ ID, size int64) error { n += size; return nil })
	return n
}
