package store

import (
	"errors"
	"github.com/weightfs/weightfs/internal/logtest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFlippedDeltaHeaderByteNeverHangs flips each byte of the header of a delta object in
// turn (several bit patterns each) and exports every version in a fresh reader: each export
// either writes the right bytes or fails with ErrCorrupt, and none spins forever; Verify (once
// a damage) finds it. A length
// taken from the damaged header (campaign seed 3 trial 36: byte 46, in the content length)
// once made a read loop run without progress. The deadline is a liveness check, generous
// enough for a loaded machine, not a speed assertion.
func TestFlippedDeltaHeaderByteNeverHangs(t *testing.T) {
	s, root := newLooseStore(t, Options{MaxChain: 4})
	versions := modelVersions(t, 3, 5)
	want := map[uint64]map[string]string{}
	for i, files := range versions {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	var obj string
	s.be.ListObjects(func(id ID, _ int64) error {
		if m, err := s.objects.meta(id); err == nil && m.Kind == kindDelta && obj == "" {
			obj = s.be.given.(*localBackend).ObjectPath(id)
		}
		return nil
	})
	closeStore(t, s)
	if obj == "" {
		t.Fatal("no delta object")
	}
	orig, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) {
		os.Chmod(obj, 0o644)
		if err := os.WriteFile(obj, b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	defer put(orig)
	for pos := 0; pos < objectHeaderLen; pos++ {
		for _, mask := range []byte{0x01, 0x10} {
			damaged := append([]byte(nil), orig...)
			damaged[pos] ^= mask
			put(damaged)
			for v := uint64(1); v <= uint64(len(versions)); v++ {
				r := openLoose(t, root, Options{ReadOnly: true, Logger: logtest.New(func(string, ...any) {})})
				expectDamage(r)
				out := filepath.Join(t.TempDir(), "out")
				done := make(chan error, 1)
				go func() { done <- r.Export(v, out, nil) }()
				select {
				case err = <-done:
				case <-time.After(2 * time.Minute):
					t.Fatalf("byte %d ^ %#02x of a delta object: export of v%d does not finish", pos, mask, v)
				}
				// A format version byte that is not this program's reads as a newer format.
				if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
					t.Errorf("byte %d ^ %#02x: export of v%d: %v, want ErrCorrupt", pos, mask, v, err)
				}
				for f, h := range treeHashes(t, out) {
					if h != "dir" && want[v][f] != h {
						t.Errorf("byte %d ^ %#02x: export of v%d wrote %s with wrong bytes", pos, mask, v, f)
					}
				}
				if v < uint64(len(versions)) {
					// Verify reads the same damaged files whichever version the reader
					// exported: it runs once a damage, in the last version's reader.
					r.Close()
					continue
				}
				closeStore(t, r) // requires Verify to find the damage (expectDamage)
			}
		}
	}
}
