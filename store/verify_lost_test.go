package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// anchorStore commits six versions with MaxChain 1: every other version (3, 5) is all
// anchors whose links lead to the delta objects of the version before (2, 4).
func anchorStore(t *testing.T) (*Store, string, map[uint64]map[string]string) {
	return anchorStoreNumbered(t, 1, 2, 3, 4, 5, 6)
}

// anchorStoreNumbered is anchorStore with the versions numbered as given: the third and
// fifth are all anchors.
func anchorStoreNumbered(t *testing.T, numbers ...uint64) (*Store, string, map[uint64]map[string]string) {
	t.Helper()
	s, root := newStore(t, Options{MaxChain: 1})
	want := map[uint64]map[string]string{}
	for i, files := range modelVersions(t, len(numbers), 23) {
		_, dir := commitTree(t, s, numbers[i], files)
		want[numbers[i]] = treeHashes(t, dir)
	}
	for _, v := range []uint64{numbers[2], numbers[4]} {
		ver, err := s.versions.sealedVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		links := 0
		for _, tn := range ver.files["model.safetensors"].Tensors {
			m, err := s.objects.meta(tn.ID)
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind == kindDelta {
				t.Fatalf("v%d %s is a delta: the test needs a version of anchors", v, tn.Name)
			}
			if m.DeltaLen > 0 {
				links++
			}
		}
		if links < 2 {
			t.Fatalf("v%d has %d anchors with links: the test needs them", v, links)
		}
	}
	return s, root, want
}

// TestVerifyNamesALostManifestBehindAnchors: the manifest of a middle version is deleted, and
// the version after it holds only anchors whose links lead to its objects (no delta to give
// it away). Verify names the lost version as damage, with the version that names it.
func TestVerifyNamesALostManifestBehindAnchors(t *testing.T) {
	s, root, _ := anchorStore(t)
	closeStore(t, s)
	if err := os.Remove(filepath.Join(root, "versions", "v000002")); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	rep, err := r.Verify(nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify after the manifest of v2 was deleted: %v (report %+v)", err, rep.Damaged)
	}
	found := false
	for _, d := range rep.Damaged {
		if d.Version == 2 && strings.Contains(d.Err.Error(), "version 3") && strings.Contains(d.Err.Error(), "manifest") {
			found = true
		} else {
			t.Errorf("unexpected finding: %s", d)
		}
	}
	if !found {
		t.Fatalf("verify does not name version 2 as lost: %v", err)
	}
}

// TestGCInterruptedAfterManifestsDeletedIsNotDamage: a gc that drops a middle version (kept
// milestones) stops after it deleted the manifests and before it deleted any object: the
// kept version after the dropped one is all anchors whose links lead to the dropped
// version's objects, still there, as after a lost manifest. gc recorded what it dropped, so
// Verify reports no damage; and gc run again finishes (deletes those objects).
func TestGCInterruptedAfterManifestsDeletedIsNotDamage(t *testing.T) {
	s, root, want := anchorStore(t)
	s.hook = func(p string) error {
		if p == "gc-manifests-deleted" {
			return errInjected
		}
		return nil
	}
	// Keeps 3 (a milestone), 5 and 6; drops 1, 2 and 4. Version 5 names 4.
	if _, err := s.GCWith(2, GCOptions{KeepEvery: 3}); !errors.Is(err, errInjected) {
		t.Fatalf("gc with a failure after the manifests: %v", err)
	}
	crash(s)
	before := storeBytes(t, s)
	s = openStore(t, root, Options{ReadOnly: true})
	if got := fmt.Sprint(numbers(s.Versions())); got != "[3 5 6]" {
		t.Fatalf("versions after the interrupted gc: %s", got)
	}
	if rep, err := s.Verify(nil); err != nil {
		t.Fatalf("verify after a gc interrupted before its sweep: %v (%v)", err, rep.Damaged)
	}
	closeStore(t, s)

	s = openStore(t, root, Options{})
	st, err := s.GCWith(2, GCOptions{KeepEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	if st.DeletedObjects == 0 || storeBytes(t, s) >= before {
		t.Fatalf("gc run again deleted nothing: %+v", st)
	}
	for _, v := range []uint64{3, 5, 6} {
		sameTree(t, fmt.Sprintf("v%d after gc ran again", v), exportHashes(t, s, v), want[v])
	}
	if rep, err := s.Verify(nil); err != nil {
		t.Fatalf("verify after gc ran again: %v (%v)", err, rep.Damaged)
	}
}

// TestVerifyLostManifestWithGapsAfterGC: versions numbered 10, 20, ... 70; gc keeps 30 (a
// milestone), 50, 60 and 70 and drops 10, 20 and 40; then the manifest of 60 is deleted, and
// 70 is all anchors whose links lead to 60's objects. Verify names 60, and nothing else (the
// versions gc dropped, and the numbers between them that no version had, are not lost).
func TestVerifyLostManifestWithGapsAfterGC(t *testing.T) {
	s, root, _ := anchorStoreNumbered(t, 10, 20, 30, 40, 50, 60, 70)
	st, err := s.GCWith(3, GCOptions{KeepEvery: 30})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st.Dropped) != "[10 20 40]" {
		t.Fatalf("gc dropped %v", st.Dropped)
	}
	if rep, err := s.Verify(nil); err != nil || len(rep.Notes) > 0 {
		t.Fatalf("verify after gc: %v, notes %q", err, rep.Notes)
	}
	closeStore(t, s)
	if err := os.Remove(filepath.Join(root, "versions", "v000060")); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	rep, err := r.Verify(nil)
	if !errors.Is(err, ErrCorrupt) || len(rep.Damaged) != 1 || rep.Damaged[0].Version != 60 ||
		!strings.Contains(rep.Damaged[0].Err.Error(), "manifest lost: version 70 names it") {
		t.Fatalf("verify after the manifest of v60 was deleted: %v", err)
	}
	t.Logf("finding: %s", rep.Damaged[0])
}

// TestRepairRecordsALostManifest: verify --repair has no file to move for a lost manifest; it
// records the version as gone in the gc record, so that the next Verify passes, and the next
// gc deletes the objects only it named.
func TestRepairRecordsALostManifest(t *testing.T) {
	s, root, want := anchorStore(t)
	closeStore(t, s)
	if err := os.Remove(filepath.Join(root, "versions", "v000002")); err != nil {
		t.Fatal(err)
	}
	w := openStore(t, root, Options{})
	rr, err := w.RepairWith(RepairOptions{})
	if err != nil || fmt.Sprint(rr.Lost) != "[2]" || len(rr.Moved) != 0 || len(rr.Verify.Damaged) != 1 {
		t.Fatalf("repair of a lost manifest: lost %v, moved %v, damaged %v, %v", rr.Lost, rr.Moved, rr.Verify.Damaged, err)
	}
	if rep, err := w.Verify(nil); err != nil || len(rep.Notes) > 0 {
		t.Fatalf("verify after repair: %v, notes %q", err, rep.Notes)
	}
	if _, err := w.GC(10); err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{1, 3, 4, 5, 6} {
		sameTree(t, fmt.Sprintf("v%d after repair and gc", v), exportHashes(t, w, v), want[v])
	}
}

// TestSweepKeepsTheContextsOfALostVersion: the manifest of version 2 is lost, and version 3's
// anchors keep links of version 2 coded against version 2's delta sections, which versions
// 4 and 6 decode against in turn. A sweep (a gc that drops nothing) must keep version 2's
// objects that those links need, though no manifest names them: the lost manifest must not
// take the versions after it with it.
func TestSweepKeepsTheContextsOfALostVersion(t *testing.T) {
	s, root, want := anchorStore(t)
	closeStore(t, s)
	if err := os.Remove(filepath.Join(root, "versions", "v000002")); err != nil {
		t.Fatal(err)
	}
	w := openStore(t, root, Options{})
	expectDamage(w)
	if _, err := w.GC(10); err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{1, 3, 4, 5, 6} {
		sameTree(t, fmt.Sprintf("v%d after a sweep", v), exportHashes(t, w, v), want[v])
	}
	rep, err := w.Verify(nil)
	if !errors.Is(err, ErrCorrupt) || len(rep.Damaged) != 1 || rep.Damaged[0].Version != 2 {
		t.Fatalf("verify after a sweep of a store with a lost manifest: %v", err)
	}
}
