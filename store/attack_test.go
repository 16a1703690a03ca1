package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// TestObjectNotARegularFileIsCorrupt puts something else than an object file where one
// should be (an empty directory; a file where its fan-out directory objects/ab/ should be):
// the read path, Export and Verify must each call it damage naming the object (EIO through
// a mount), never pass EISDIR or ENOTDIR on as if it were an I/O error of a good object.
func TestObjectNotARegularFileIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(t *testing.T, p string)
	}{
		{"directory", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"fan-out directory is a file", func(t *testing.T, p string) {
			if err := os.RemoveAll(filepath.Dir(p)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Dir(p), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root, victim := twoVersionsAndAVictim(t, 9, 1)
			tc.attack(t, s.be.given.(*localBackend).ObjectPath(victim))

			r := openLoose(t, root, Options{ReadOnly: true})
			expectDamage(r)
			f, err := r.OpenFile(2, "model.safetensors")
			if err == nil {
				_, err = f.ReadAt(make([]byte, f.Size()), 0)
				f.Close()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
				t.Errorf("read of a file whose object is damaged: %v, want corrupt naming %s", err, victim)
			}
			if err := r.Export(2, t.TempDir(), nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
				t.Errorf("export: %v, want corrupt naming %s", err, victim)
			}
			if _, err := r.Verify(nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
				t.Errorf("verify: %v, want corrupt naming %s", err, victim)
			}
		})
	}
}

// copyFile copies the file src to dst (replacing it), keeping nothing of dst.
func copyFileForTest(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(dst)
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestIndexFromAnEarlierVersion puts back an index saved two versions earlier (a restored
// backup, a cache directory copied from another node), with the materialized copy left at the
// latest version, in the writer's cache and in a reader's: the index's copy state then names
// a version whose content the copy does not hold. Every version must read right, a new
// version must seal and read right, and Verify must find nothing wrong with the store.
func TestIndexFromAnEarlierVersion(t *testing.T) {
	s, root := newLooseStore(t, Options{MaxChain: 3})
	versions := modelVersions(t, 5, 23)
	want := map[uint64]map[string][]byte{}
	readerCache := t.TempDir()
	reader := func() *Store {
		return openLoose(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: readerCache})
	}
	for v := uint64(1); v <= 2; v++ {
		commitTree(t, s, v, versions[v-1])
		want[v] = versions[v-1]
	}
	closeStore(t, s)
	closeStore(t, reader()) // the reader's copy at v2
	saved := t.TempDir()
	writerIndex := root + "/cache/index.db"
	readerIndex := readerCache + "/index.db"
	copyFileForTest(t, writerIndex, saved+"/writer.db")
	copyFileForTest(t, readerIndex, saved+"/reader.db")

	s = openLoose(t, root, Options{MaxChain: 3})
	for v := uint64(3); v <= 4; v++ {
		commitTree(t, s, v, versions[v-1])
		want[v] = versions[v-1]
	}
	closeStore(t, s)
	closeStore(t, reader()) // the reader's copy at v4
	copyFileForTest(t, saved+"/writer.db", writerIndex)
	copyFileForTest(t, saved+"/reader.db", readerIndex)

	check := func(what string, s *Store) {
		t.Helper()
		for v, files := range want {
			for p, b := range files {
				f, err := s.OpenFile(v, p)
				if err != nil {
					t.Errorf("%s: open v%d %s: %v", what, v, p, err)
					continue
				}
				got := make([]byte, f.Size())
				if _, err := f.ReadAt(got, 0); err != nil {
					t.Errorf("%s: read v%d %s: %v", what, v, p, err)
				} else if string(got) != string(b) {
					t.Errorf("%s: v%d %s: wrong bytes", what, v, p)
				}
				f.Close()
			}
		}
	}
	r := reader()
	check("reader with an older index", r)
	closeStore(t, r)
	s = openLoose(t, root, Options{MaxChain: 3})
	check("writer with an older index", s)
	commitTree(t, s, 5, versions[4])
	want[5] = versions[4]
	check("writer after a seal on an older index", s)
	for v := range want {
		sameTree(t, fmt.Sprintf("export of v%d", v), exportHashes(t, s, v), treeHashes(t, writeTree(t, t.TempDir(), want[v])))
	}
}

// TestWriterOpensWithDamagedScratchDirs takes away, or puts a file in place of, the store's
// own scratch directories, tmp/ (a copy of a store made by a tool that skips empty
// directories has none) and the writer's cache/: the writer opens, seals the next version and
// reads every version right, making them anew.
func TestWriterOpensWithDamagedScratchDirs(t *testing.T) {
	for _, tc := range []struct{ name, dir string }{
		{"tmp missing", "tmp"},
		{"tmp a file", "tmp"},
		{"cache a file", "cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newLooseStore(t, Options{})
			versions := modelVersions(t, 3, 31)
			for v := uint64(1); v <= 2; v++ {
				commitTree(t, s, v, versions[v-1])
			}
			closeStore(t, s)
			p := filepath.Join(root, tc.dir)
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(tc.name, "a file") {
				if err := os.WriteFile(p, []byte("not a directory"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			logs := &logLines{t: t}
			s, err := Open(root, loose(Options{Logger: logtest.New(logs.logf)}))
			if err != nil {
				t.Fatalf("open for writing: %v", err)
			}
			t.Cleanup(func() { closeStore(t, s) })
			commitTree(t, s, 3, versions[2])
			for v := uint64(1); v <= 3; v++ {
				for name, b := range versions[v-1] {
					mustEqualBytes(t, fmt.Sprintf("v%d %s", v, name), readWhole(t, s, v, name), b)
				}
			}
			if st, err := os.Stat(p); err != nil || !st.IsDir() {
				t.Errorf("%s after the writer opened: %v, %v", tc.dir, st, err)
			}
			if tc.dir == "cache" && !logs.has("cache directory is not a directory") {
				t.Errorf("no log line says the cache directory was made anew:\n%s", logs)
			}
		})
	}
}

// TestRenderCacheDirNotADirectory puts a file where the render cache's directories should be
// (CACHE/render, render/patches, render/deltas, render/tmp): a damaged cache must not cost a
// render, so each is made anew (logged) and the patch and the delta render as before.
func TestRenderCacheDirNotADirectory(t *testing.T) {
	for _, sub := range []string{"", "patches", "deltas", "tmp"} {
		t.Run("render/"+sub, func(t *testing.T) {
			logs := &logLines{t: t}
			s, _ := newLooseStore(t, Options{Logger: logtest.New(logs.logf)})
			direct := twoSlimeVersions(t, s, 5, 7)
			p := s.renders.renderDir(sub)
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("junk"), 0o600); err != nil {
				t.Fatal(err)
			}
			rf, err := s.RenderPatch(2)
			if err != nil {
				t.Fatalf("render the patch: %v", err)
			}
			mustEqualBytes(t, "rendered patch", readFile(t, rf.Path), direct)
			if _, files, err := s.RenderSlime(2); err != nil || len(files) == 0 {
				t.Fatalf("render the delta: %d files, %v", len(files), err)
			}
			if !logs.has("not a directory") {
				t.Errorf("no log line names the damaged render directory:\n%s", logs)
			}
		})
	}
}

// TestFIFOInAStoreFileNeverHangs puts a FIFO where an object file and where the format file
// should be: opening a FIFO for reading blocks until a writer comes, so every command (and
// every read of the object) would hang. Each must end, calling it damage.
func TestFIFOInAStoreFileNeverHangs(t *testing.T) {
	s, root, victim := twoVersionsAndAVictim(t, 41, 0)
	fifo := func(p string) {
		t.Helper()
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	within := func(what string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: no answer in 2 minutes (the FIFO left open for it is never written)", what)
			return nil
		}
	}

	fifo(s.be.given.(*localBackend).ObjectPath(victim))
	r := openLoose(t, root, Options{ReadOnly: true})
	expectDamage(r)
	err := within("read", func() error {
		f, err := r.OpenFile(2, "model.safetensors")
		if err == nil {
			_, err = f.ReadAt(make([]byte, f.Size()), 0)
			f.Close()
		}
		return err
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Errorf("read of a file whose object is a FIFO: %v, want corrupt naming %s", err, victim)
	}
	if err := within("export", func() error { return r.Export(2, t.TempDir(), nil) }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("export: %v, want corrupt", err)
	}
	if err := within("verify", func() error { _, err := r.Verify(nil); return err }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("verify: %v, want corrupt", err)
	}

	fifo(filepath.Join(root, formatFileName))
	err = within("open", func() error {
		s, err := Open(root, loose(Options{ReadOnly: true}))
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), formatFileName) {
		t.Errorf("open of a store whose format file is a FIFO: %v, want corrupt naming %s", err, formatFileName)
	}
}

// TestFIFOInTheRenderCacheNeverHangs puts a FIFO in place of each file of a cached patch and a
// cached delta (the patch, its sums, render.json, a shard): reading a FIFO blocks until a
// writer comes, which hung the mount's readdir of deltas/. Each render must come back, the
// damaged one dropped and rendered again, as for any other damage of the render cache.
func TestFIFOInTheRenderCacheNeverHangs(t *testing.T) {
	s, _ := newLooseStore(t, Options{})
	direct := twoSlimeVersions(t, s, 5, 9)
	within := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: no answer in 2 minutes (a FIFO in the render cache is never written)", what)
		}
	}
	var targets []string
	within("first render", func() error {
		rf, err := s.RenderPatch(2)
		if err != nil {
			return err
		}
		_, files, err := s.RenderSlime(2)
		if err != nil {
			return err
		}
		targets = []string{rf.Path, strings.TrimSuffix(rf.Path, ".safetensors") + patchSumsSuffix,
			filepath.Join(filepath.Dir(files[0].Path), slimeRenderFile), files[len(files)-1].Path}
		return nil
	})
	for _, p := range targets {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		within("render with "+filepath.Base(p)+" a FIFO", func() error {
			rf, err := s.RenderPatch(2)
			if err != nil {
				return err
			}
			if got := readFile(t, rf.Path); !bytes.Equal(got, direct) {
				return fmt.Errorf("the patch rendered again differs")
			}
			_, files, err := s.RenderSlime(2)
			if err == nil && len(files) == 0 {
				err = fmt.Errorf("no files")
			}
			return err
		})
	}
}

// TestFIFOPinNeverHangsGC puts a FIFO among the readers' pin records: gc reads every record,
// and reading a FIFO blocks until a writer comes. gc must stop with an error naming the file,
// as for any record it cannot read.
func TestFIFOPinNeverHangsGC(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	versions := modelVersions(t, 3, 43)
	commitAll(t, s, versions)
	p := filepath.Join(root, "pins", "0123456789abcdef0123456789abcdef.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.GC(1); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), filepath.Base(p)) {
			t.Errorf("gc with a FIFO among the pins: %v, want an error naming it", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("gc with a FIFO among the pins: no answer in 2 minutes")
	}
}

// twoVersionsAndAVictim commits two versions of modelVersions(seed) to a new store and closes
// it; victim is the object of tensor i of version 2's model.safetensors, for an attack.
func twoVersionsAndAVictim(t *testing.T, seed uint64, i int) (s *Store, root string, victim ID) {
	t.Helper()
	s, root = newLooseStore(t, Options{})
	commitAll(t, s, modelVersions(t, 2, seed))
	ver, _ := s.versions.sealedVersion(2)
	victim = ver.files["model.safetensors"].Tensors[i].ID
	closeStore(t, s)
	return s, root, victim
}
