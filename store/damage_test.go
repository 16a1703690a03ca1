package store

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// allObjectFiles lists the object files of a store.
func allObjectFiles(t testing.TB, s *Store) []string {
	t.Helper()
	var out []string
	s.be.ListObjects(func(id ID, _ int64) error {
		out = append(out, s.be.given.(*localBackend).ObjectPath(id))
		return nil
	})
	if len(out) == 0 {
		t.Fatal("no objects")
	}
	return out
}

// TestFlippedByteInAnyObject flips one byte of every object in turn: Verify names the object,
// and exports of the versions that need it fail naming it and write no wrong file.
func TestFlippedByteInAnyObject(t *testing.T) {
	s, root := newLooseStore(t, Options{MaxChain: 2})
	versions := modelVersions(t, 4, 4)
	want := map[uint64]map[string]string{}
	for i, files := range versions {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	// A version whose tensor is the base of an anchor's link reads back from the anchor, not
	// through its own delta object: damage to that object shows in Verify only.
	bypassed := map[string]bool{}
	s.be.ListObjects(func(id ID, _ int64) error {
		if m, err := s.objects.meta(id); err == nil && m.Kind == kindFull && m.DeltaLen > 0 {
			bypassed[m.Base.String()] = true
		}
		return nil
	})
	closeStore(t, s)
	rng := rand.New(rand.NewPCG(17, 18))
	for _, obj := range allObjectFiles(t, openLoose(t, root, Options{ReadOnly: true})) {
		name := filepath.Base(obj)
		orig, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		damaged := append([]byte(nil), orig...)
		pos := rng.IntN(len(damaged))
		damaged[pos] ^= 1 << rng.IntN(8)
		os.Chmod(obj, 0o644)
		if err := os.WriteFile(obj, damaged, 0o444); err != nil {
			t.Fatal(err)
		}

		// Each check runs in a fresh reader, as each CLI command would.
		r := openLoose(t, root, Options{ReadOnly: true})
		expectDamage(r)
		rep, err := r.Verify(nil)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
			t.Errorf("byte %d of %s flipped: verify says %v", pos, name[:12], err)
		}
		found := false
		for _, d := range rep.Damaged {
			if d.Object.String() == name {
				found = true
			}
		}
		if !found {
			t.Errorf("byte %d of %s flipped: the report does not list the object: %v", pos, name[:12], rep.Damaged)
		}
		failed := 0
		for v := uint64(1); v <= uint64(len(versions)); v++ {
			r := openLoose(t, root, Options{ReadOnly: true})
			expectDamage(r)
			out := filepath.Join(t.TempDir(), "out")
			err := r.Export(v, out, nil)
			for f, h := range treeHashes(t, out) {
				if h != "dir" && want[v][f] != h {
					t.Errorf("%s damaged: export of v%d wrote %s with wrong bytes", name[:12], v, f)
				}
			}
			if err != nil {
				failed++
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "corrupt") {
					t.Errorf("export of v%d failed without a clear message: %v", v, err)
				}
			}
			// The damage was verified above, in a reader of its own: closeStore's Verify
			// would read the same damaged files again.
			r.Close()
		}
		if failed == 0 && !bypassed[name] {
			t.Errorf("object %s damaged at byte %d, yet every version exported", name[:12], pos)
		}
		r.Close() // verified above, and nothing read since
		os.Chmod(obj, 0o644)
		if err := os.WriteFile(obj, orig, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	r := openLoose(t, root, Options{ReadOnly: true})
	if _, err := r.Verify(nil); err != nil {
		t.Fatalf("verify after repair: %v", err)
	}
}

func TestMissingObjectAndManifestDamage(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	versions := modelVersions(t, 2, 5)
	commitAll(t, s, versions)
	closeStore(t, s)
	// A damaged manifest: the version is reported, the other exports.
	mpath := filepath.Join(root, "versions", "v000002")
	orig, _ := os.ReadFile(mpath)
	bad := append([]byte(nil), orig...)
	bad[len(bad)/2] ^= 4
	os.WriteFile(mpath, bad, 0o644)
	r := openLoose(t, root, Options{ReadOnly: true})
	expectDamage(r)
	if _, err := r.Verify(nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("verify with a damaged manifest: %v", err)
	}
	if err := r.Export(2, t.TempDir(), nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("export of a version with a damaged manifest: %v", err)
	}
	if err := r.Export(1, t.TempDir(), nil); err != nil {
		t.Fatalf("export of an intact version: %v", err)
	}
	closeStore(t, r)
	os.WriteFile(mpath, orig, 0o644)

	// A missing object.
	r = openLoose(t, root, Options{ReadOnly: true})
	ver, _ := r.versions.sealedVersion(2)
	victim := ver.files["model.safetensors"].Tensors[1].ID
	closeStore(t, r)
	os.Remove(r.be.given.(*localBackend).ObjectPath(victim))
	r = openLoose(t, root, Options{ReadOnly: true})
	expectDamage(r)
	if _, err := r.Verify(nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Fatalf("verify with a missing object: %v", err)
	}
	err := r.Export(2, t.TempDir(), nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Fatalf("export with a missing object: %v", err)
	}
}
