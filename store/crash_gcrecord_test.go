package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestGCCrashThenVerify: after a crash at each of gc's failpoints, the store verifies at
// once (before any gc runs again), from a read-only reader and from the writer's next open,
// and every version it lists reads back exact.
func TestGCCrashThenVerify(t *testing.T) {
	for _, point := range []string{"gc-reanchored", "gc-recorded", "gc-manifests-deleted"} {
		t.Run(point, func(t *testing.T) {
			root, want := gcCrashedAt(t, point, 31)
			for _, opts := range []Options{{ReadOnly: true}, {}} {
				s := openStore(t, root, opts)
				if rep, err := s.Verify(nil); err != nil {
					t.Fatalf("verify (read-only %v) after a crash at %s: %v (%v)", opts.ReadOnly, point, err, rep.Damaged)
				}
				for _, info := range s.Versions() {
					sameTree(t, fmt.Sprintf("v%d", info.Number), exportHashes(t, s, info.Number), want[info.Number])
				}
				if !opts.ReadOnly {
					crash(s)
				}
			}
		})
	}
}

// TestGCRecordAfterAnInterruptedGCKeptAfterAll: gc recorded versions 1-3 as dropped and
// stopped before it deleted a manifest (the process died, or the delete failed); the writer's
// next open, or the next gc that keeps them all (asked to keep more), cuts them out of the
// record. A manifest of one of them lost after that is damage, not a version gc dropped:
// Verify must say so.
func TestGCRecordAfterAnInterruptedGCKeptAfterAll(t *testing.T) {
	for _, how := range []string{"reopened", "kept by the next gc"} {
		t.Run(how, func(t *testing.T) {
			s, root := newStore(t, Options{})
			for i, files := range modelVersions(t, 5, 33) {
				commitTree(t, s, uint64(i+1), files)
			}
			s.hook = func(p string) error {
				if p == "gc-recorded" {
					return errInjected
				}
				return nil
			}
			if _, err := s.GC(2); !errors.Is(err, errInjected) {
				t.Fatalf("gc with a failure at gc-recorded: %v", err)
			}
			s.hook = nil
			if how == "reopened" {
				crash(s)
				s = openStore(t, root, Options{})
			} else if st, err := s.GC(10); err != nil || len(st.Dropped) != 0 {
				t.Fatalf("gc keeping ten: %+v, %v", st, err)
			}
			if err := os.Remove(filepath.Join(root, "versions", manifestName(2))); err != nil {
				t.Fatal(err)
			}
			expectDamage(s)
			rep, err := s.Verify(nil)
			if err == nil {
				t.Fatalf("verify after the manifest of version 2, which gc kept, was lost: no damage (notes %v)", rep.Notes)
			}
			t.Logf("verify: %v", err)
		})
	}
}
