package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestCrashMidStreamWithSeeds: the writer dies while its streams write a version, their
// seeds' writes (asynchronous, where the kernel has them) in flight. The next writer removes
// the dead one's seeds, every sealed version reads back exact, the version streamed again
// seals, and its copy holds exactly its bytes.
func TestCrashMidStreamWithSeeds(t *testing.T) {
	for _, async := range []bool{true, false} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			old := seedAsync
			seedAsync = async
			t.Cleanup(func() { seedAsync = old })
			versions := streamSeries(t, 2, 17)
			s, root := newStore(t, Options{})
			rng := rand.New(rand.NewPCG(17, 18))
			sealStreamed(t, s, 1, versions[0], rng)
			w, err := s.NewVersion(2)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range sortedPaths(versions[1]) {
				st, err := w.StreamFile(p)
				if err != nil {
					t.Fatal(err)
				}
				data := versions[1][p]
				streamWrites(t, rng, st, data[:len(data)*2/3])
			}
			seedDir := filepath.Join(s.cache.dir, "seed")
			if left, _ := os.ReadDir(seedDir); len(left) == 0 {
				t.Log("no seed file while the streams write (none was started)")
			}
			crash(s)
			s = openStore(t, root, Options{})
			if left, _ := os.ReadDir(seedDir); len(left) != 0 {
				t.Errorf("the dead writer's %d seed files are left", len(left))
			}
			for p, want := range versions[0] {
				mustEqualBytes(t, "v1 "+p, readWhole(t, s, 1, p), want)
			}
			sealStreamed(t, s, 2, versions[1], rng)
			if err := s.mat.ensure(); err != nil {
				t.Fatal(err)
			}
			for p, want := range versions[1] {
				mustEqualBytes(t, "v2 "+p, readWhole(t, s, 2, p), want)
				mustEqualBytes(t, "the copy of v2: "+p, readMaterialized(t, s, p), want)
			}
		})
	}
}
