package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// TestSwappedPackRecordsAreNotServed is TestSwappedObjectsAreNotServed on packs: two records
// of the same length swapped inside their pack (the pack's table unchanged, so each entry
// points at a record whose header names another id). Reads of the file fail with ErrCorrupt
// and never return the other tensor's bytes, on a writer and on readers with and without a
// copy; the version's other files still read.
func TestSwappedPackRecordsAreNotServed(t *testing.T) {
	versions := twinVersions(t, 3)
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitAll(t, w, versions)
	damaged, la, lb := uint64(0), packLocation{}, packLocation{}
	for v := uint64(1); v <= 3 && damaged == 0; v++ {
		ver, err := w.versions.sealedVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		ts := ver.files["twins.safetensors"].Tensors
		a, oka := w.be.packs.locate(ts[0].ID)
		b, okb := w.be.packs.locate(ts[1].ID)
		if oka && okb && a.Pack == b.Pack && a.Length == b.Length {
			damaged, la, lb = v, a, b
		}
	}
	closeStore(t, w)
	if damaged == 0 {
		t.Fatal("no version whose two tensors are packed records of one length in one pack")
	}
	h := la.Pack.String()
	path := filepath.Join(root, packDir, h[:2], h)
	p, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ra := append([]byte(nil), p[la.Offset:la.Offset+la.Length]...)
	copy(p[la.Offset:], p[lb.Offset:lb.Offset+lb.Length])
	copy(p[lb.Offset:], ra)
	os.Chmod(path, 0o600)
	if err := os.WriteFile(path, p, 0o400); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{}, {ReadOnly: true}, {ReadOnly: true, Materialize: true}} {
		t.Run(fmt.Sprintf("v%d ro=%v mat=%v", damaged, opts.ReadOnly, opts.Materialize), func(t *testing.T) {
			opts.Logger = logtest.New(func(string, ...any) {})
			s := openStore(t, root, opts)
			expectDamage(s)
			f, err := s.OpenFile(damaged, "twins.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, f.Size())
			n, err := f.ReadAt(got, 0)
			if err == nil {
				t.Fatalf("read over swapped pack records: %d bytes, no error (want ErrCorrupt; same bytes: %v)",
					n, string(got[:n]) == string(versions[damaged-1]["twins.safetensors"]))
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("read over swapped pack records: %v, want ErrCorrupt", err)
			}
			mustEqualBytes(t, "config.json", readWhole(t, s, damaged, "config.json"), versions[damaged-1]["config.json"])
		})
	}
}
