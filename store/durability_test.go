package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestSecondWriterRefused(t *testing.T) {
	s, root := newStore(t, Options{})
	if _, err := Open(root, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: %v", err)
	}
	// Readers take no lock.
	openStore(t, root, Options{ReadOnly: true})
	closeStore(t, s)
	openStore(t, root, Options{})
}

func TestIndexDeletedAndRebuilt(t *testing.T) {
	s, root := newStore(t, Options{MaxChain: 3})
	versions := modelVersions(t, 6, 6)
	want := map[uint64]map[string]string{}
	for i, files := range versions {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	infos := s.Versions()
	closeStore(t, s)
	if err := os.Remove(filepath.Join(root, "cache", "index.db")); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, root, Options{MaxChain: 3})
	if got := s.Versions(); fmt.Sprint(got) != fmt.Sprint(infos) {
		t.Fatalf("versions after the index was deleted:\n%v\nwant\n%v", got, infos)
	}
	for v, w := range want {
		sameTree(t, fmt.Sprintf("v%d", v), exportHashes(t, s, v), w)
	}
	// The next commit continues the chains where they were (the depths came back).
	commitTree(t, s, 7, modelVersions(t, 7, 6)[6])
	if err := s.RebuildIndex(); err != nil {
		t.Fatal(err)
	}
	for v, w := range want {
		sameTree(t, fmt.Sprintf("v%d after RebuildIndex", v), exportHashes(t, s, v), w)
	}
	// A damaged index file is dropped and rebuilt.
	closeStore(t, s)
	os.WriteFile(filepath.Join(root, "cache", "index.db"), []byte("garbage, not a bbolt file"), 0o644)
	s = openStore(t, root, Options{})
	if len(s.Versions()) != 7 {
		t.Fatalf("%d versions after the index was damaged", len(s.Versions()))
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// failingBackend wraps a backend and fails chosen operations with ENOSPC.
type failingBackend struct {
	Backend
	failPuts, failManifests bool
}

func (b *failingBackend) PutObject(id ID, tmp *os.File) error {
	if b.failPuts {
		b.Backend.RemoveTemp(tmp)
		return fmt.Errorf("put object %s: %w", id, &os.PathError{Op: "write", Path: tmp.Name(), Err: syscall.ENOSPC})
	}
	return b.Backend.PutObject(id, tmp)
}

func (b *failingBackend) PutManifest(v uint64, data []byte) error {
	if b.failManifests {
		return fmt.Errorf("write manifest: %w", &os.PathError{Op: "write", Path: "versions", Err: syscall.ENOSPC})
	}
	return b.Backend.PutManifest(v, data)
}

func TestFullDisk(t *testing.T) {
	s, root := newStore(t, Options{})
	versions := modelVersions(t, 3, 7)
	_, dir1 := commitTree(t, s, 1, versions[0])
	fb := &failingBackend{Backend: s.be.Backend}
	s.be.Backend = fb

	// The seal fails at the manifest: nothing sealed is harmed, the writer stays usable.
	fb.failManifests = true
	w, err := s.NewVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := writeTree(t, t.TempDir(), versions[1])
	for p := range versions[1] {
		f, _ := os.Open(filepath.Join(dir2, p))
		st, _ := f.Stat()
		if err := w.AddFile(p, f, st.Size(), 0o644); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if _, err := w.Seal(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("seal on a full disk: %v", err)
	}
	if v, _ := s.Latest(); v != 1 {
		t.Fatalf("latest %d after a failed seal", v)
	}
	sameTree(t, "v1 after a failed seal", exportHashes(t, s, 1), treeHashes(t, dir1))
	fb.failManifests = false
	if _, err := w.Seal(); err != nil {
		t.Fatalf("seal after space was freed: %v", err)
	}
	sameTree(t, "v2 sealed on the second try", exportHashes(t, s, 2), treeHashes(t, dir2))

	// Objects cannot be written: the commit fails with ENOSPC, the store stays as it was.
	fb.failPuts = true
	_, err = s.Commit(writeTree(t, t.TempDir(), versions[2]), CommitOptions{Version: 3})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit on a full disk: %v", err)
	}
	fb.failPuts = false
	s.be.Backend = fb.Backend
	if len(s.Versions()) != 2 {
		t.Fatalf("%d versions after a failed commit", len(s.Versions()))
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	// Nothing is left in tmp/ after the next writer opens.
	openStore(t, root, Options{})
	if left, _ := os.ReadDir(filepath.Join(root, "tmp")); len(left) != 0 {
		t.Fatalf("tmp/ holds %d files", len(left))
	}
}

// crash simulates the death of the process: resources are released, nothing is cleaned up.
func crash(s *Store) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ingest.pendMu.Lock()
	s.ingest.open = map[uint64]*Writer{}
	s.ingest.pending = map[ID]int{}
	s.ingest.leftovers = true // keep the dirty flag as a dead process would
	s.ingest.pendMu.Unlock()
	s.shutdown()
}

func TestCrashPoints(t *testing.T) {
	points := []string{"seal-objects-written", "seal-objects-synced", "seal-manifest-written", "seal-index-updated", "materialize-partial"}
	versions := modelVersions(t, 4, 8)
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			s, root := newStore(t, Options{})
			want := map[uint64]map[string]string{}
			for i := 0; i < 2; i++ {
				_, dir := commitTree(t, s, uint64(i+1), versions[i])
				want[uint64(i+1)] = treeHashes(t, dir)
			}
			s.hook = func(p string) error {
				if p == point {
					return errInjected
				}
				return nil
			}
			dir3 := writeTree(t, t.TempDir(), versions[2])
			_, err := s.Commit(dir3, CommitOptions{Version: 3})
			if point != "materialize-partial" && !errors.Is(err, errInjected) {
				t.Fatalf("commit with a failure at %s: %v", point, err)
			}
			crash(s)

			s = openStore(t, root, Options{})
			present := s.versions.isSealed(3)
			shouldBe := point != "seal-objects-written" && point != "seal-objects-synced"
			if present != shouldBe {
				t.Fatalf("after a crash at %s: version 3 present %v, want %v", point, present, shouldBe)
			}
			if present {
				want[3] = treeHashes(t, dir3)
			}
			for v, w := range want {
				sameTree(t, fmt.Sprintf("v%d after a crash at %s", v, point), exportHashes(t, s, v), w)
			}
			// No unreferenced object survives the reopen; the next version commits and
			// diffs against a correct materialized copy.
			if _, err := s.Verify(nil); err != nil {
				t.Fatal(err)
			}
			s.writeMu.Lock()
			n, _, err := s.collector.sweepLocked()
			s.writeMu.Unlock()
			if err != nil || n != 0 {
				t.Fatalf("after reopen, a sweep still finds %d unreferenced objects (%v)", n, err)
			}
			_, dir4 := commitTree(t, s, 4, versions[3])
			sameTree(t, "v4 after recovery", exportHashes(t, s, 4), treeHashes(t, dir4))
			st := s.ix.materialized()
			if !st.Clean || st.Version != 4 {
				t.Fatalf("materialized state %+v after recovery, want clean at 4", st)
			}
			mustEqualBytes(t, "materialized copy", readMaterialized(t, s, "model.safetensors"), []byte(versions[3]["model.safetensors"]))
		})
	}
}

func readMaterialized(t *testing.T, s *Store, p string) []byte {
	b, err := os.ReadFile(filepath.Join(s.cache.dir, "materialized", p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAbortLeavesNothing(t *testing.T) {
	s, root := newStore(t, Options{})
	commitTree(t, s, 1, map[string][]byte{"a": []byte("one")})
	w, _ := s.NewVersion(2)
	if err := w.AddFile("b", strings.NewReader("two, never sealed"), 17, 0o644); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	closeStore(t, s)
	s = openStore(t, root, Options{})
	count := 0
	s.be.ListObjects(func(ID, int64) error { count++; return nil })
	if count != 1 {
		t.Fatalf("%d objects after an aborted version, want 1", count)
	}
	var _ io.Reader
}

func TestDamagedMaterializedCopyIsRebuilt(t *testing.T) {
	s, _ := newStore(t, Options{})
	versions := modelVersions(t, 4, 22)
	commitTree(t, s, 1, versions[0])
	mat := filepath.Join(s.cache.dir, "materialized", "model.safetensors")
	for i, damage := range []func(){
		func() { os.Remove(mat) },
		func() { os.Truncate(mat, 100) },
		func() {
			// Same size, one byte of a tensor changed: only the base's SHA-256 shows it.
			b, _ := os.ReadFile(mat)
			b[len(b)-100] ^= 1
			os.WriteFile(mat, b, 0o644)
		},
	} {
		damage()
		v := uint64(i + 2)
		_, dir := commitTree(t, s, v, versions[i+1])
		sameTree(t, fmt.Sprintf("v%d after the copy was damaged", v), exportHashes(t, s, v), treeHashes(t, dir))
		mustEqualBytes(t, "rebuilt copy", readMaterialized(t, s, "model.safetensors"), versions[i+1]["model.safetensors"])
	}
}

func TestDeadReaderCachesAreRemoved(t *testing.T) {
	base := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1)")
	}
	dead := filepath.Join(base, fmt.Sprintf("reader-%d-abc", cmd.Process.Pid))
	mine := filepath.Join(base, fmt.Sprintf("reader-%d-def", os.Getpid()))
	other := filepath.Join(base, "not-a-reader")
	for _, d := range []string{dead, mine, other} {
		os.MkdirAll(d, 0o755)
	}
	removeDeadReaderCaches(base)
	for d, want := range map[string]bool{dead: false, mine: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
