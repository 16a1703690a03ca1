package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// FuzzCommitPatch: whatever bytes are written into patches/, CommitPatch never panics, and
// either refuses them and seals nothing, or seals a version whose every file changed by the
// patch reads back with the patch's result_sha256 and every other file as it was.
func FuzzCommitPatch(f *testing.F) {
	v1, v2 := patchVersions(f)
	_, good := renderedPatch(f, v1, v2)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, patch []byte) {
		s, _ := newStore(t, Options{})
		commitTree(t, s, 1, v1)
		_, err := s.CommitPatch(bytes.NewReader(patch), int64(len(patch)), 2)
		if err != nil {
			if errors.Is(err, errInjected) {
				t.Fatal(err)
			}
			if latest, _ := s.Latest(); latest != 1 {
				t.Fatalf("refused (%v), yet the latest version is %d", err, latest)
			}
			return
		}
		p, err := delta.OpenPatch(bytes.NewReader(patch), int64(len(patch)))
		if err != nil {
			t.Fatalf("sealed from a patch that does not open: %v", err)
		}
		entries, err := s.Entries(2)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Dir {
				continue
			}
			got := sha256.Sum256(readWhole(t, s, 2, e.Path))
			if pf, ok := p.File(e.Path); ok {
				if got != pf.ResultSHA256 {
					t.Fatalf("%s reads back as %x, the patch's result is %x", e.Path, got, pf.ResultSHA256)
				}
			} else if got != sha256.Sum256(v1[e.Path]) {
				t.Fatalf("%s, which the patch leaves out, changed", e.Path)
			}
		}
	})
}
