package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"

	bolt "go.etcd.io/bbolt"

	"github.com/weightfs/weightfs/delta"
)

// Regression tests of the checked copy (docs/format.md §6, §8): the materialized copy is a checked cache, reads check a file's composition,
// and no cache failure stops a store.

// flipCopyByte flips one byte of a file of the copy in dir (CACHE/materialized) at off.
func flipCopyByte(t *testing.T, cacheDir, p string, off int64) {
	t.Helper()
	fp := filepath.Join(cacheDir, "materialized", filepath.FromSlash(p))
	b, err := os.ReadFile(fp)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x10
	if err := os.WriteFile(fp, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// setCopyState writes the copy's state record in the index at cacheDir (no store open).
func setCopyState(t *testing.T, cacheDir string, st matState) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(cacheDir, "index.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	js, _ := json.Marshal(st)
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyMaterial, js) }); err != nil {
		t.Fatal(err)
	}
}

// checkAllVersions reads every file of every version whole and compares it with want.
func checkAllVersions(t *testing.T, what string, s *Store, versions []map[string][]byte) {
	t.Helper()
	for i, files := range versions {
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("%s: %s of v%d", what, p, i+1), readWhole(t, s, uint64(i+1), p), b)
		}
	}
}

// TestCopyDamageIsNeverServed flips a byte of the copy of the latest version (a writer's and
// a read-only mount's persistent cache, each restarted over it), or makes the copy's state
// record claim another version: reads of the latest version and of the one rebuilt backward
// from it return the exact bytes, the damage is logged, and the copy is rebuilt.
func TestCopyDamageIsNeverServed(t *testing.T) {
	versions := modelVersions(t, 3, 41)
	// Inside the second tensor (model.layers.0.mlp.weight), past the first tensor's 600 KB.
	const off = 1_000_000
	for _, tc := range []struct {
		name     string
		readOnly bool
		damage   func(t *testing.T, cacheDir string)
	}{
		{"flipped byte, writer", false, func(t *testing.T, c string) { flipCopyByte(t, c, "model.safetensors", off) }},
		{"flipped byte, reader", true, func(t *testing.T, c string) { flipCopyByte(t, c, "model.safetensors", off) }},
		{"flipped config byte, writer", false, func(t *testing.T, c string) { flipCopyByte(t, c, "config.json", 3) }},
		{"state claims v2, writer", false, func(t *testing.T, c string) { setCopyState(t, c, matState{Version: 2, Clean: true}) }},
		{"state claims v2, reader", true, func(t *testing.T, c string) { setCopyState(t, c, matState{Version: 2, Clean: true}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
			commitAll(t, w, versions)
			cacheDir := w.cache.dir
			opts := Options{}
			if tc.readOnly {
				closeStore(t, w)
				cacheDir = t.TempDir()
				opts = Options{ReadOnly: true, Materialize: true, CacheDir: cacheDir}
				closeStore(t, openStore(t, root, opts)) // builds the reader's persistent copy
			}
			closeStore(t, w)
			tc.damage(t, cacheDir)
			var log logLines
			opts.Logger = logtest.New(log.logf)
			s := openStore(t, root, opts)
			checkAllVersions(t, "after the damage", s, versions)
			if !log.has("materialized copy") {
				t.Errorf("nothing logged about the damaged copy; log:\n%s", log.String())
			}
			s.mat.bg.Wait()
			if err := s.mat.ensure(); err != nil {
				t.Fatal(err)
			}
			for p, b := range versions[2] {
				mustEqualBytes(t, "the copy once rebuilt: "+p, readMaterializedAt(t, cacheDir, p), b)
			}
			checkAllVersions(t, "after the rebuild", s, versions)
		})
	}
}

func readMaterializedAt(t *testing.T, cacheDir, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cacheDir, "materialized", filepath.FromSlash(p)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCopyDamagedWhileOpen flips a byte of the copy under a running writer (after its first
// reads): the next reads, and the next version's ingest, still see exact bytes.
func TestCopyDamagedWhileOpen(t *testing.T) {
	versions := modelVersions(t, 4, 43)
	var log logLines
	s, _ := newStore(t, Options{Logger: logtest.New(log.logf)})
	for i, files := range versions[:3] {
		commitTree(t, s, uint64(i+1), files)
	}
	checkAllVersions(t, "before the damage", s, versions[:3])
	s.objects.pages.clear()
	flipCopyByte(t, s.cache.dir, "model.safetensors", 1_000_000)
	checkAllVersions(t, "after the damage", s, versions[:3])
	if !log.has("chunk") {
		t.Errorf("the damaged chunk is not logged; log:\n%s", log.String())
	}
	s.mat.bg.Wait()
	_, dir := commitTree(t, s, 4, versions[3])
	sameTree(t, "v4", exportHashes(t, s, 4), treeHashes(t, dir))
	checkAllVersions(t, "after v4", s, versions)
}

// TestVerifyChecksCopy damages the writer's copy: Verify reports which caches it checked and
// the damaged one, without calling the store damaged.
func TestVerifyChecksCopy(t *testing.T) {
	versions := modelVersions(t, 2, 44)
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitAll(t, w, versions)
	closeStore(t, w)
	flipCopyByte(t, filepath.Join(root, "cache"), "model.safetensors", 1_000_000)
	r := openStore(t, root, Options{ReadOnly: true})
	rep, err := r.Verify(nil)
	if err != nil {
		t.Fatalf("verify over a damaged cache: %v (a cache is not the store)", err)
	}
	found := false
	for _, c := range rep.Caches {
		t.Logf("cache: %s", c)
		if strings.Contains(c.String(), "materialized") && c.Damaged {
			found = true
		}
	}
	if !found {
		t.Errorf("the damaged copy is not reported: %v", rep.Caches)
	}
	// A writer opened over it never serves the damage.
	s := openStore(t, root, Options{Logger: logtest.New(func(string, ...any) {})})
	checkAllVersions(t, "writer after verify", s, versions)
}

// forgeManifest rewrites the manifest of v with edit applied, recomputing its CRC.
func forgeManifest(t *testing.T, root string, v uint64, edit func(m *manifest)) {
	t.Helper()
	p := filepath.Join(root, "versions", fmt.Sprintf("v%06d", v))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, out, 0o444); err != nil {
		t.Fatal(err)
	}
}

// twinVersions are versions of a file with two tensors of one shape and dtype.
func twinVersions(t *testing.T, n int) []map[string][]byte {
	base := modelVersions(t, n, 45)
	out := make([]map[string][]byte, n)
	for i := range base {
		a := make([]byte, 2*50_000)
		b := make([]byte, 2*50_000)
		for j := range a {
			a[j], b[j] = byte(j*7+i), byte(j*13+1)
		}
		out[i] = map[string][]byte{
			"twins.safetensors": safetensorsFile(t,
				testTensor{"a.weight", delta.DTypeBF16, []int64{50_000}, a},
				testTensor{"b.weight", delta.DTypeBF16, []int64{50_000}, b}),
			"config.json": base[i]["config.json"],
		}
	}
	return out
}

// TestSwappedObjectsAreNotServed: two tensors of one shape whose object files were swapped
// on disk (the file named for a's object holds b's, and the other way round) are not served:
// reads of that file fail with ErrCorrupt instead of returning the other tensor's bytes, on a
// writer and on readers with and without a copy, and the version's other files still read.
// So is a version whose manifest is another version's (copied over it): its reads fail, and
// never return the other version's bytes.
//
// A manifest whose tensor ids were swapped and its CRC recomputed is outside the threat model
// (docs/design.md, "What the checks guard against"): forging it takes write access to the store
// and recomputing its checksums, which only a secret key would catch. Such a manifest names
// two sound objects, each checked against its own id, and is served as it says.
func TestSwappedObjectsAreNotServed(t *testing.T) {
	versions := twinVersions(t, 3)
	for _, damaged := range []uint64{2, 3} {
		for _, opts := range []Options{{}, {ReadOnly: true}, {ReadOnly: true, Materialize: true}} {
			t.Run(fmt.Sprintf("v%d ro=%v mat=%v", damaged, opts.ReadOnly, opts.Materialize), func(t *testing.T) {
				// Object files: the format-2 layout (packed records: TestSwappedPackRecordsAreNotServed).
				w, root := newLooseStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
				commitAll(t, w, versions)
				ver, err := w.versions.sealedVersion(damaged)
				if err != nil {
					t.Fatal(err)
				}
				ts := ver.files["twins.safetensors"].Tensors
				pa, pb := w.be.given.(*localBackend).ObjectPath(ts[0].ID), w.be.given.(*localBackend).ObjectPath(ts[1].ID)
				closeStore(t, w)
				a, err := os.ReadFile(pa)
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(pb)
				if err != nil {
					t.Fatal(err)
				}
				os.Chmod(pa, 0o600)
				os.Chmod(pb, 0o600)
				if os.WriteFile(pa, b, 0o444) != nil || os.WriteFile(pb, a, 0o444) != nil {
					t.Fatal("swap the object files")
				}
				opts.Logger = logtest.New(func(string, ...any) {})
				s := openLoose(t, root, opts)
				expectDamage(s)
				f, err := s.OpenFile(damaged, "twins.safetensors")
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, f.Size())
				n, err := f.ReadAt(got, 0)
				if err == nil && string(got[:n]) != string(versions[damaged-1]["twins.safetensors"]) {
					t.Fatalf("swapped object files served wrong bytes")
				}
				if err == nil {
					return // the copy served the bytes checked when it was made
				}
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("read over swapped object files: %v, want ErrCorrupt", err)
				}
				// The other files of the version still read.
				mustEqualBytes(t, "config.json", readWhole(t, s, damaged, "config.json"), versions[damaged-1]["config.json"])
			})
		}
	}
	t.Run("manifest of another version", func(t *testing.T) {
		w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
		commitAll(t, w, versions)
		closeStore(t, w)
		p2 := filepath.Join(root, "versions", fmt.Sprintf("v%06d", 2))
		b3, err := os.ReadFile(filepath.Join(root, "versions", fmt.Sprintf("v%06d", 3)))
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(p2, 0o644)
		if err := os.WriteFile(p2, b3, 0o444); err != nil {
			t.Fatal(err)
		}
		s := openStore(t, root, Options{ReadOnly: true, Logger: logtest.New(func(string, ...any) {})})
		expectDamage(s)
		f, err := s.OpenFile(2, "twins.safetensors")
		if err == nil {
			got := make([]byte, f.Size())
			_, err = f.ReadAt(got, 0)
			if err == nil {
				t.Fatalf("version 2 read through version 3's manifest")
			}
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("version 2 under version 3's manifest: %v, want ErrCorrupt", err)
		}
		mustEqualBytes(t, "v3", readWhole(t, s, 3, "twins.safetensors"), versions[2]["twins.safetensors"])
	})
}

func slicesIndex(files []manifestFile, p string) int {
	for i := range files {
		if files[i].Path == p {
			return i
		}
	}
	panic("no such file " + p)
}

// TestBadVersionDoesNotBlockLater seals a version whose file SHA-256 matches no content (as a
// commit racing a writer of its source did): the writer still opens, commits, collects
// garbage and serves every other version exactly, and says in its log what it did.
func TestBadVersionDoesNotBlockLater(t *testing.T) {
	versions := modelVersions(t, 4, 46)
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitTree(t, w, 1, versions[0])
	commitTree(t, w, 2, versions[1])
	closeStore(t, w)
	forgeManifest(t, root, 2, func(m *manifest) {
		m.Files[slicesIndex(m.Files, "model.safetensors")].SHA256[0] ^= 1
	})
	os.RemoveAll(filepath.Join(root, "cache")) // the copy is built anew from the bad version
	var log logLines
	s, err := Open(root, Options{Logger: logtest.New(log.logf)})
	if err != nil {
		t.Fatalf("open over a bad latest version: %v", err)
	}
	defer closeStore(t, s)
	_, dir3 := commitTree(t, s, 3, versions[2])
	sameTree(t, "v3", exportHashes(t, s, 3), treeHashes(t, dir3))
	_, dir4 := commitTree(t, s, 4, versions[3])
	sameTree(t, "v4", exportHashes(t, s, 4), treeHashes(t, dir4))
	if _, err := s.GC(2); err != nil {
		t.Fatalf("gc after a bad version: %v", err)
	}
	sameTree(t, "v4 after gc", exportHashes(t, s, 4), treeHashes(t, dir4))
	mustEqualBytes(t, "v4 read", readWhole(t, s, 4, "model.safetensors"), versions[3]["model.safetensors"])
	if !log.has("version 2") {
		t.Errorf("the bad version is not named in the log:\n%s", log.String())
	}
	closeStore(t, s)
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: t.TempDir()})
	mustEqualBytes(t, "v4 read-only", readWhole(t, r, 4, "model.safetensors"), versions[3]["model.safetensors"])
}

// TestCopyFailureDegrades puts the cache directory on a file system too small for the copy
// (ENOSPC) and injects a failure of the copy's build: read-only stores start and serve
// every version from the objects, the writer seals, and a warning is logged.
func TestCopyFailureDegrades(t *testing.T) {
	versions := modelVersions(t, 3, 47)
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	for i, files := range versions[:2] {
		commitTree(t, w, uint64(i+1), files)
	}
	closeStore(t, w)

	t.Run("injected", func(t *testing.T) {
		var log logLines
		s := openStore(t, root, Options{Logger: logtest.New(log.logf)})
		// Every write of a file of the copy fails with EIO, as on a failing cache disk.
		s.hook = func(point string) error {
			if point == "materialize-write" {
				return fmt.Errorf("injected: %w", syscall.EIO)
			}
			return nil
		}
		_, dir := commitTree(t, s, 3, versions[2])
		sameTree(t, "v3 sealed without a copy", exportHashes(t, s, 3), treeHashes(t, dir))
		checkAllVersions(t, "without a copy", s, versions)
		if !log.has("version 3 cannot be copied") {
			t.Errorf("no warning about the copy; log:\n%s", log.String())
		}
		if s.mat.view() != nil {
			t.Errorf("a copy is held after its build failed")
		}
		s.hook = nil
		_, dir = commitTree(t, s, 4, versions[0])
		sameTree(t, "v4 sealed once the disk works", exportHashes(t, s, 4), treeHashes(t, dir))
		v := s.mat.view()
		if v == nil || v.ver.m.Version != 4 {
			t.Errorf("the copy is not rebuilt at version 4 once the disk works")
		}
		v.release()
	})

	t.Run("ENOSPC", func(t *testing.T) {
		small := tinyFS(t, 256<<10)
		var log logLines
		r, err := Open(root, Options{ReadOnly: true, Materialize: true, CacheDir: small, Logger: logtest.New(log.logf)})
		if err != nil {
			t.Fatalf("a read-only store whose cache cannot hold the copy: %v", err)
		}
		defer closeStore(t, r)
		checkAllVersions(t, "reader on a small cache", r, versions)
		if !log.has("materialized copy") {
			t.Errorf("no warning about the copy; log:\n%s", log.String())
		}
	})
}

// tinyFS mounts a tmpfs of size bytes for the test, or skips it where that is not allowed.
func tinyFS(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := mountTmpfs(dir, size); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unmountTmpfs(dir) })
	return dir
}

// TestVerifyNoticesMissingManifest deletes a manifest in the middle of the history: Verify
// reports the version a later version names as its previous.
func TestVerifyNoticesMissingManifest(t *testing.T) {
	versions := modelVersions(t, 3, 48)
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitAll(t, w, versions)
	closeStore(t, w)
	if err := os.Remove(filepath.Join(root, "versions", "v000002")); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	rep, err := r.Verify(nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("verify with a manifest deleted from the middle: %v", err)
	}
	found := false
	for _, d := range rep.Damaged {
		found = found || d.Version == 2
	}
	if !found {
		t.Errorf("report: %v", rep.Damaged)
	}
}

// TestVerifyChecksRenderCache damages a rendered patch and a rendered slime delta in the
// writer's render cache: Verify reports the render cache damaged, removes the renders and
// does not call the store damaged; the next render is exact again.
func TestVerifyChecksRenderCache(t *testing.T) {
	versions := modelVersions(t, 2, 49)
	// Only tensors change: version 2 is a slime delta, not a full checkpoint.
	versions[1]["tokenizer/vocab.txt"] = versions[0]["tokenizer/vocab.txt"]
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitAll(t, w, versions)
	rf, err := w.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(rf.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := w.RenderSlime(2)
	if err != nil || len(files) == 0 {
		t.Fatalf("render the delta of version 2: %d files, %v", len(files), err)
	}
	closeStore(t, w)
	bad := append([]byte(nil), good...)
	bad[len(bad)-10] ^= 1
	if err := os.WriteFile(rf.Path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.Name, ".safetensors") {
			b, _ := os.ReadFile(f.Path)
			b[len(b)-3] ^= 1
			os.WriteFile(f.Path, b, 0o644)
		}
	}
	r := openStore(t, root, Options{ReadOnly: true})
	rep, err := r.Verify(nil)
	if err != nil {
		t.Fatalf("verify over a damaged render cache: %v", err)
	}
	found := false
	for _, c := range rep.Caches {
		t.Logf("cache: %s", c)
		if c.Name == "render cache" && c.Damaged && strings.Contains(c.Note, "2 damaged") {
			found = true
		}
	}
	if !found {
		t.Errorf("the damaged renders are not reported: %v", rep.Caches)
	}
	if _, err := os.Stat(rf.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the damaged patch was not removed: %v", err)
	}
	s := openStore(t, root, Options{})
	rf, err = s.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(rf.Path)
	mustEqualBytes(t, "the patch rendered again", again, good)
}

// TestVerifyNoticesMissingOldestManifest deletes the oldest manifest by hand: version 2's
// tensors are still deltas against objects only version 1 named, which gc never leaves
// behind, so Verify names version 1. After a real gc to the same two versions it is quiet.
func TestVerifyNoticesMissingOldestManifest(t *testing.T) {
	versions := modelVersions(t, 3, 50)
	build := func() string {
		w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
		commitAll(t, w, versions)
		closeStore(t, w)
		return root
	}
	root := build()
	if err := os.Remove(filepath.Join(root, "versions", "v000001")); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	rep, err := r.Verify(nil)
	if !errors.Is(err, ErrCorrupt) || len(rep.Damaged) != 1 || rep.Damaged[0].Version != 1 {
		t.Fatalf("verify with the oldest manifest deleted: %v (report %v)", err, rep.Damaged)
	}

	root = build()
	w := openStore(t, root, Options{})
	if _, err := w.GC(2); err != nil {
		t.Fatal(err)
	}
	if rep, err := w.Verify(nil); err != nil {
		t.Fatalf("verify after gc --keep-last 2: %v (report %v)", err, rep.Damaged)
	}
}
