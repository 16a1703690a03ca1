package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/testfiles"
)

// forgeBase rewrites the header of object id in the local store at root to name base as its
// base, with a valid CRC-32C (which is no MAC: anyone who can write the files can do this).
func forgeBase(t *testing.T, root string, id, base ID) {
	t.Helper()
	p := newLocalBackend(root, storeModes{}).ObjectPath(id)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[48:80], base[:])
	binary.LittleEndian.PutUint32(b[len(b)-objectTrailerLen:], crc32c(b[:len(b)-objectTrailerLen]))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// v2Chain returns the objects of the latest version's tensor that heads a chain of at least n
// version-2 delta objects, and the chain (the tensor's object, its base, ...), with where the
// tensor is (for the read).
func v2Chain(t *testing.T, s *Store, v uint64, n int) ([]ID, string) {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ver.m.Files {
		for _, tn := range ver.m.Files[i].Tensors {
			var chain []ID
			for cur := tn.ID; len(chain) < n; {
				info, err := s.objects.objectInfoOf(cur)
				if err != nil || info.hdr.Kind != kindDelta {
					break
				}
				if v2, err := s.collector.sectionIsV2(cur); err != nil || !v2 {
					break
				}
				chain = append(chain, cur)
				cur = info.hdr.Base
			}
			if len(chain) == n {
				return chain, ver.m.Files[i].Path
			}
		}
	}
	t.Fatalf("version %d has no chain of %d version-2 delta objects", v, n)
	return nil, ""
}

// TestBaseCycle: delta objects forged so that their bases form a cycle (X's base is Y, Y's is
// X; or X -> Y -> Z -> X), each with a valid header and CRC and a delta section that parses,
// make the reads through them fail with ErrCorrupt, promptly (no deadlock of a decode waiting
// on itself through the contexts, no panic), in a reader that opens after the forgery and in
// one that read the file before it (and keeps the first section of the chain); Verify reports the damage.
func TestBaseCycle(t *testing.T) {
	// One store of six versions for every case, each case on its own copy of it (the forgery
	// damages the copy): the chains are the same objects in every copy.
	trees := testfiles.ShardedSeries(t, 6, 41)
	w, pristine := newLooseStore(t, Options{})
	w.objects.contextChain = 16
	for k, files := range trees {
		commitTree(t, w, uint64(k+1), files)
	}
	chains, files := map[int][]ID{}, map[int]string{}
	for _, n := range []int{2, 3} {
		chains[n], files[n] = v2Chain(t, w, 6, n)
	}
	if err := closeStore(t, w); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3} {
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("cycle%d-cached%v", n, cached), func(t *testing.T) {
				root := filepath.Join(t.TempDir(), "store")
				if err := os.CopyFS(root, os.DirFS(pristine)); err != nil {
					t.Fatal(err)
				}
				s := openLoose(t, root, Options{})
				s.objects.contextChain = 16
				chain, file := chains[n], files[n]
				var r *Store
				if cached {
					r = openLoose(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
					readWhole(t, r, 6, file)
					// Its pages and blocks, and the sections but the first of the chain, are
					// pushed out by other reads; its headers and metas stay.
					r.objects.pages.clear()
					r.objects.blocks.clear()
					for _, id := range chain[1:] {
						r.objects.deltas.remove(id)
					}
				}
				forgeBase(t, root, chain[n-1], chain[0]) // the last of the chain's base is its first
				if !cached {
					r = openLoose(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
				}
				expectDamage(s)
				expectDamage(r)
				done := make(chan error, 1)
				go func() {
					f, err := r.OpenFile(6, file)
					if err != nil {
						done <- err
						return
					}
					defer f.Close()
					_, err = f.ReadAt(make([]byte, f.Size()), 0)
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("read of %s of version 6 through a cycle of %d bases: %v, want ErrCorrupt", file, n, err)
					}
				case <-time.After(2 * time.Minute):
					t.Fatalf("read of %s of version 6 through a cycle of %d bases: no answer in 2 minutes (a deadlock)", file, n)
				}
			})
		}
	}
}
