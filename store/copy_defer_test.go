package store

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// The copy deferred (copy_defer.go): with the base in memory, a writer's seal does not bring
// the materialized copy forward; a read of the latest version does, once; a crash meanwhile
// loses nothing and the next Open brings it forward.

// copyFiles describes every file under the copy's directory (and the seeds'): size, mtime
// and inode, so that any write, rename or new file shows.
func copyFiles(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range []string{filepath.Join(s.cache.dir, "materialized"), filepath.Join(s.cache.dir, "seed")} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			var ino uint64
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				ino = st.Ino
			}
			out[p] = fmt.Sprintf("size %d mtime %d inode %d", info.Size(), info.ModTime().UnixNano(), ino)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sameCopyFiles(t *testing.T, what string, was, now map[string]string) {
	t.Helper()
	for p, d := range now {
		if was[p] != d {
			t.Errorf("%s: %s was written (%q, before %q)", what, p, d, was[p])
		}
	}
	for p := range was {
		if _, ok := now[p]; !ok {
			t.Errorf("%s: %s was removed", what, p)
		}
	}
}

func countLines(l *logLines, part string) int {
	return strings.Count(l.String(), part)
}

// TestCopyDeferredWhileBasesInMemory seals five versions with a base memory that holds them,
// through each path: after the first, no seal writes a byte of the copy or a seed (only the
// objects reach the disk); a read of the latest version returns its bytes and brings the copy
// forward once; a sixth version, deferred too, survives a crash, and the next Open brings the
// copy forward (said at info) and serves every version right.
func TestCopyDeferredWhileBasesInMemory(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		t.Run(fmt.Sprintf("streamed %v", streamed), func(t *testing.T) {
			versions := streamSeries(t, 6, 5)
			var lines logLines
			opts := Options{MaxChain: 2, BaseMemory: 64 << 20, Logger: logtest.New(lines.logf)}
			s, root := newStore(t, opts)
			rng := rand.New(rand.NewPCG(3, 4))
			seal := func(s *Store, v uint64) {
				if streamed {
					sealStreamed(t, s, v, versions[v-1], rng)
				} else {
					sealBatch(t, s, v, versions[v-1])
				}
				s.mat.bg.Wait() // a streamed seal brings the copy forward in the background
			}
			seal(s, 1)
			was, state := copyFiles(t, s), s.ix.materialized()
			for v := uint64(2); v <= 5; v++ {
				seal(s, v)
				sameCopyFiles(t, fmt.Sprintf("v%d", v), was, copyFiles(t, s))
				if got := s.ix.materialized(); got != state {
					t.Errorf("v%d: the copy's record is %+v, was %+v", v, got, state)
				}
				if got := s.mat.deferredTo(); got != v {
					t.Errorf("v%d: the copy is deferred at %d, want %d", v, got, v)
				}
			}
			if t.Failed() {
				return
			}
			// A read of the latest version: the right bytes, and the copy written once.
			for range 2 {
				for p, b := range versions[4] {
					got := readWhole(t, s, 5, p)
					if sha256.Sum256(got) != sha256.Sum256(b) {
						t.Fatalf("%s of v5: wrong bytes", p)
					}
				}
				s.mat.bg.Wait()
			}
			if n := countLines(&lines, "a reader reads version 5"); n != 1 {
				t.Errorf("the copy was asked for %d times, want once; log:\n%s", n, lines.String())
			}
			if got := s.ix.materialized(); got != (matState{Version: 5, Clean: true}) {
				t.Errorf("after the read the copy's record is %+v, want version 5, clean", got)
			}
			for p, b := range versions[4] {
				mustEqualBytes(t, "the copy of "+p, readMaterialized(t, s, p), b)
			}
			// A sixth version, deferred, and the process dies.
			seal(s, 6)
			if got := s.mat.deferredTo(); got != 6 {
				t.Fatalf("v6: the copy is deferred at %d, want 6", got)
			}
			crash(s)
			var again logLines
			opts.Logger = logtest.New(again.logf)
			s2 := openStore(t, root, opts)
			if !again.has("materialized copy: it holds version 5, the latest is 6; bringing it forward") {
				t.Errorf("the next Open did not say it brings the copy forward; log:\n%s", again.String())
			}
			checkAllVersions(t, "after the crash", s2, versions)
			for p, b := range versions[5] {
				mustEqualBytes(t, "the copy of "+p+" after the crash", readMaterialized(t, s2, p), b)
			}
		})
	}
}

// TestCopyDeferredBaseNotInMemory: while the copy is deferred, a base the memory does not
// hold (here: the memory dropped) is read from the copy brought forward (batch) or through
// the objects (a stream), and the versions stored are those of a store without the memory.
func TestCopyDeferredBaseNotInMemory(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		t.Run(fmt.Sprintf("streamed %v", streamed), func(t *testing.T) {
			var lines logLines
			plain, mem := memStores(t, 64<<20, &lines)
			rng := rand.New(rand.NewPCG(9, 10))
			versions := streamSeries(t, 4, 6)
			for i, files := range versions {
				v := uint64(i + 1)
				if v == 3 {
					if mem.mat.deferredTo() != 2 {
						t.Fatalf("v2: the copy is deferred at %d, want 2", mem.mat.deferredTo())
					}
					mem.ingest.mem.drop("the test drops it", ID{})
				}
				sealBoth(t, plain, mem, v, files, streamed, rng)
				mem.mat.bg.Wait()
			}
			checkAllVersions(t, "with the memory dropped once", mem, versions)
		})
	}
}
