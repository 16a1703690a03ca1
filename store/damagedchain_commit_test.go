package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/weightfs/weightfs/internal/testfiles"
)

// TestCommitOnABaseWithABrokenChain: an anchor of the version before the latest is deleted (an attack, a
// lost file), a read that needs it fails as damage and drops what the store cached of the
// latest version's objects on that chain; the next version must still be committed, from the
// checked materialized copy, and read back byte-exact from its objects. (It failed with "base:
// base of object …: object … is missing" while computing the base's chain depth.)
func TestCommitOnABaseWithABrokenChain(t *testing.T) {
	t.Setenv(looseObjectsEnv, "1") // loose objects: it damages object files, or needs gc of packs (not yet)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			trees := testfiles.ShardedSeries(t, 6, 7)
			s, root := newStore(t, Options{MaxChain: 2})
			for k, files := range trees[:5] {
				commitTree(t, s, uint64(k+1), files)
			}
			ver, err := s.versions.loadVersion(5)
			if err != nil {
				t.Fatal(err)
			}
			var victim ID
			var victimFile string
		find:
			for i := range ver.m.Files {
				for _, tn := range ver.m.Files[i].Tensors {
					m, err := s.objects.meta(tn.ID)
					if err == nil && m.Kind == kindDelta && s.isAnchor(m.Base) {
						victim, victimFile = m.Base, ver.m.Files[i].Path
						break find
					}
				}
			}
			if victimFile == "" {
				t.Fatal("no delta object on an anchor in version 5: the test needs one")
			}
			expectDamage(s)
			if err := os.Remove(fixtureObjectPath(t, root, victim)); err != nil {
				t.Fatal(err)
			}
			f, err := s.OpenFile(4, victimFile)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.ReadAt(make([]byte, f.Size()), 0)
			f.Close()
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("read of version 4 without object %s: %v, want ErrCorrupt", victim, err)
			}
			if stream {
				sealStreamed(t, s, 6, trees[5], rand.New(rand.NewPCG(5, 5)))
			} else {
				commitTree(t, s, 6, trees[5])
			}
			s.objects.pages.clear()
			s.objects.blocks.clear()
			for name, want := range trees[5] {
				mustEqualBytes(t, "version 6 "+name, readWhole(t, s, 6, name), want)
			}
		})
	}
}

// isAnchor says whether id is a whole object (of the tests' store).
func (s *Store) isAnchor(id ID) bool {
	m, err := s.objects.meta(id)
	return err == nil && m.Kind == kindFull
}
