package s3

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// s3Versions commits n versions of a small model to the store at url and returns each
// version's files.
func s3Versions(t *testing.T, url string, n int) map[uint64]map[string][]byte {
	t.Helper()
	w := openTestStore(t, url, store.Options{})
	want, _ := commitVersions(t, w, n)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// commitVersions commits versions 1 to n of s3Versions' model through the writer w, which
// stays open, and returns each version's files and the model, at version n.
func commitVersions(t *testing.T, w *store.Store, n int) (map[uint64]map[string][]byte, *testModel) {
	t.Helper()
	m := newTestModel(11, 90_000, 40_000)
	want := map[uint64]map[string][]byte{}
	for v := uint64(1); v <= uint64(n); v++ {
		if v > 1 {
			m.step()
		}
		want[v] = m.files(t)
		commitTree(t, w, v, want[v])
	}
	return want, m
}

// readAllVersions reads every file of every version of want through s and fails the test on
// any error or wrong byte.
func readAllVersions(t *testing.T, what string, s *store.Store, want map[uint64]map[string][]byte) {
	t.Helper()
	for v, files := range want {
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("%s: v%d %s", what, v, p), readWhole(t, s, v, p), b)
		}
	}
}

// regularFiles lists the regular files under dir.
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flipByte XORs byte off (from the end when negative) of the file p with 0x40.
func flipByte(t *testing.T, p string, off int64) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x40
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestS3DamagedLocalCacheFallsBack damages every file of a reader's node-local cache of an S3
// store (the cached objects and manifests) in turn with a flipped byte, a truncation, a
// deletion or another cached file's bytes: a reader that opens the cache again reads every version right (the cache is
// checked and falls back to the bucket) and Verify finds no damage of the store.
func TestS3DamagedLocalCacheFallsBack(t *testing.T) {
	_, url := startInitialized(t)
	want := s3Versions(t, url, 3)
	cache := t.TempDir()
	r := openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: cache})
	readAllVersions(t, "pristine", r, want)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	type target struct{ path, other string } // other: a file of the same kind, for swap
	var targets []target
	for _, sub := range []string{cacheObjects, cacheManifests} {
		files := regularFiles(t, filepath.Join(cache, sub))
		if len(files) < 2 {
			t.Fatalf("the reader's cache holds %d files in %s", len(files), sub)
		}
		for i, p := range files {
			targets = append(targets, target{p, files[(i+1)%len(files)]})
		}
	}
	for i, tg := range targets {
		p := tg.path
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		attack := []string{"flip", "truncate", "delete", "swap"}[i%4]
		switch attack {
		case "swap":
			b, err := os.ReadFile(tg.other)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		case "flip":
			flipByte(t, p, int64(len(orig)/2))
		case "truncate":
			if err := os.Truncate(p, int64(len(orig)/2)); err != nil {
				t.Fatal(err)
			}
		case "delete":
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		rel, _ := filepath.Rel(cache, p)
		what := attack + " " + rel
		r := openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: cache})
		readAllVersions(t, what, r, want)
		if rep, err := r.Verify(nil); err != nil {
			t.Errorf("%s: verify: %v %v", what, err, rep.Damaged)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err == nil {
			if got, err := os.ReadFile(p); err != nil || string(got) != string(orig) {
				t.Errorf("%s: the damaged file is still in the cache", what)
			}
		}
	}
}

// TestS3DamagedObjectIsCorrupt damages objects (a flipped byte, a truncation, a deletion,
// another object's bytes) and manifests (a flipped byte; then an older version's manifest over
// the newest) in the bucket itself: reads of
// what needs them fail with store.ErrCorrupt naming them (never wrong bytes, never "not
// found"), the others read right, and Verify names each.
func TestS3DamagedObjectIsCorrupt(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it damages loose object files in the bucket (store format 2's layout)
	srv, url := startInitialized(t)
	want := s3Versions(t, url, 3)
	loc := strings.TrimPrefix(url, "s3://weightfs-test/")
	dir := srv.ObjectDir("weightfs-test", loc)
	objs := regularFiles(t, filepath.Join(dir, "objects"))
	if len(objs) < 5 {
		t.Fatalf("%d objects in the bucket", len(objs))
	}
	var damaged []string
	for i, p := range objs[:4] {
		switch i {
		case 3: // another object's bytes
			b, err := os.ReadFile(objs[4])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		case 0:
			flipByte(t, p, 100)
		case 1:
			b, _ := os.ReadFile(p)
			if err := os.WriteFile(p, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		damaged = append(damaged, filepath.Base(p))
	}
	manifest := filepath.Join(dir, "versions", store.ManifestName(2))
	flipByte(t, manifest, 40)

	r := openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	rep, err := r.Verify(nil)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("verify of a damaged S3 store: %v", err)
	}
	report := fmt.Sprint(rep.Damaged)
	for _, id := range damaged {
		if !strings.Contains(err.Error()+report, id) {
			t.Errorf("verify does not name damaged object %s: %v", id[:12], report)
		}
	}
	if !strings.Contains(err.Error()+report, "version 2") {
		t.Errorf("verify does not name version 2 (manifest damaged): %v", report)
	}
	for v, files := range want {
		mustReadOrCorrupt(t, "damaged store", r, v, files)
	}
	r.Close()

	// An older version's manifest over the newest one: the newest is damaged, not version 1
	// twice.
	older, err := os.ReadFile(filepath.Join(dir, "versions", store.ManifestName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "versions", store.ManifestName(3)), older, 0o600); err != nil {
		t.Fatal(err)
	}
	r = openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if _, err := r.Verify(nil); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("verify with v1's manifest as v3's: %v, want damage naming version 3", err)
	}
	if _, err := r.OpenFile(3, "config.json"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("open of a file of v3 (v1's manifest in its place): %v, want store.ErrCorrupt", err)
	}
	r.Close()
}
