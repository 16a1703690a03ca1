package store

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// storeModesOf maps every path under root (relative) to its permission bits.
func storeModesOf(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	modes := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		modes[filepath.ToSlash(rel)] = info.Mode() & (fs.ModePerm | fs.ModeDir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return modes
}

// withUmask sets the process's umask for one test.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// fillStore seals two versions (a delta between them), runs a read-only materialized open
// with its own cache directory below cache, and returns that directory.
func fillStore(t *testing.T, root, cache string) string {
	t.Helper()
	s := openStore(t, root, Options{})
	files := map[string][]byte{"model.safetensors": safetensorsFile(t, bf16Tensor("w", 4096, 1)), "sub/config.json": []byte("{}")}
	commitTree(t, s, 0, files)
	files["model.safetensors"] = safetensorsFile(t, bf16Tensor("w", 4096, 2))
	commitTree(t, s, 0, files)
	readerCache := filepath.Join(cache, "reader")
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: readerCache})
	readWhole(t, r, 2, "model.safetensors")
	return readerCache
}

// checkModes checks the permission bits of every path under root: objects want obj,
// directories dir, other files file; everything under cache/ (the writer's node-local cache)
// is private whatever the store's mode.
func checkModes(t *testing.T, root string, dir, file, obj fs.FileMode) {
	t.Helper()
	n := 0
	for p, m := range storeModesOf(t, root) {
		want := file
		switch {
		case m&fs.ModeDir != 0 && (p == "cache" || strings.HasPrefix(p, "cache/")):
			want = fs.ModeDir | 0o700
		case m&fs.ModeDir != 0:
			want = fs.ModeDir | dir
		case strings.HasPrefix(p, "cache/"):
			want = 0o600
		case strings.HasPrefix(p, "objects/"), strings.HasPrefix(p, "packs/"):
			want = obj
		}
		if m != want {
			t.Errorf("%s: mode %v, want %v", p, m, want)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("only %d paths in the store", n)
	}
}

// A store is private by default (docs/format.md §1): 0700 directories, 0600 files, 0400
// objects, whatever the umask; caches too, the writer's and a reader's.
func TestStoreIsPrivate(t *testing.T) {
	withUmask(t, 0o022)
	root := filepath.Join(t.TempDir(), "store")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	readerCache := fillStore(t, root, cache)
	checkModes(t, root, 0o700, 0o600, 0o400)
	for p, m := range storeModesOf(t, readerCache) {
		if want := fs.FileMode(0o600); m&fs.ModeDir != 0 && m != fs.ModeDir|0o700 || m&fs.ModeDir == 0 && m != want {
			t.Errorf("reader cache %s: mode %v", p, m)
		}
	}
}

// A shared store (InitShared, or a private one after chmod -R g+rX) is readable by its
// group: new files follow the mode of the store's format file, as restic's follow its
// config file's. Opening a store changes no mode.
func TestStoreSharedModes(t *testing.T) {
	withUmask(t, 0o077) // the modes do not depend on it
	shared := filepath.Join(t.TempDir(), "shared")
	if err := InitShared(shared); err != nil {
		t.Fatal(err)
	}
	fillStore(t, shared, t.TempDir())
	checkModes(t, shared, 0o750, 0o640, 0o440)

	chmodded := filepath.Join(t.TempDir(), "chmodded")
	if err := Init(chmodded); err != nil {
		t.Fatal(err)
	}
	// docs/format.md §1: chmod -R g+rX STORE, then chmod -R go-rwx STORE/cache.
	for p, m := range storeModesOf(t, chmodded) {
		if p != "cache" {
			add := fs.FileMode(0o040)
			if m&fs.ModeDir != 0 {
				add = 0o050
			}
			os.Chmod(filepath.Join(chmodded, p), m&fs.ModePerm|add)
		}
	}
	fillStore(t, chmodded, t.TempDir())
	checkModes(t, chmodded, 0o750, 0o640, 0o440)
}

// bf16Tensor is a bf16 tensor of n elements, the same at every step but for every 97th
// element, which depends on step.
func bf16Tensor(name string, n int, step byte) testTensor {
	data := make([]byte, 2*n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for i := 0; i < n; i += 97 {
		data[2*i] += step
	}
	return testTensor{name, "BF16", []int64{int64(n)}, data}
}
