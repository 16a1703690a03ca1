package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// Tests of the checked copies of older versions' files (filecopy.go).

// fileCopyNames lists the copies in a store's cache directory (not the ones being written).
func fileCopyNames(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.CacheDir(), "files"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name()[0] != '.' {
			out = append(out, e.Name())
		}
	}
	return out
}

// copiesDiskUse is the disk the files under CACHE/files take (allocated blocks).
func copiesDiskUse(t *testing.T, s *Store) (logical, allocated int64) {
	t.Helper()
	dir := filepath.Join(s.CacheDir(), "files")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		info, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		logical += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			allocated += st.Blocks * 512
		}
	}
	return logical, allocated
}

// TestOldFileReadFromCheckedCopy reads a file of a version three deltas behind the latest on
// a fresh reader: its bytes hash like the export's, and its first read leaves no copy; the
// second read has one written behind it (filecopy.go: one private copy, 0600 in a 0700
// directory, named by its content), and a third read is served from the copy, so it builds no
// page.
func TestOldFileReadFromCheckedCopy(t *testing.T) {
	versions := modelVersions(t, 4, 71)
	w, root := newStore(t, Options{})
	commitAll(t, w, versions)
	want := exportHashes(t, w, 1)
	closeStore(t, w)
	var log logLines
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, Logger: logtest.New(log.logf)})
	got := readWhole(t, r, 1, "model.safetensors")
	if h := fmt.Sprintf("%x", sha256.Sum256(got)); h != want["model.safetensors"] {
		t.Fatalf("model.safetensors of v1 hashes to %s, the export to %s", h, want["model.safetensors"])
	}
	r.files.bg.Wait()
	if names := fileCopyNames(t, r); len(names) != 0 {
		t.Fatalf("file copies %v after the file's first read, want none", names)
	}
	// The second open file that reads it from the objects has the copy written behind it.
	mustEqualBytes(t, "second read", readWhole(t, r, 1, "model.safetensors"), got)
	r.files.bg.Wait()
	names := fileCopyNames(t, r)
	if len(names) != 1 || names[0] != fmt.Sprintf("%s-%d", want["model.safetensors"], len(got)) {
		t.Fatalf("file copies %v, want one named by model.safetensors' content\n%s", names, &log)
	}
	if used, n := r.FileCopyUsage(); n != 1 || used != int64(len(got)) {
		t.Fatalf("FileCopyUsage %d bytes in %d copies, want %d in 1", used, n, len(got))
	}
	dir := filepath.Join(r.CacheDir(), "files")
	for p, perm := range map[string]fs.FileMode{dir: cacheDirPerm, filepath.Join(dir, names[0]): cacheFilePerm} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != perm {
			t.Fatalf("%s: %v, mode %v, want %v", p, err, info.Mode().Perm(), perm)
		}
	}
	if !log.has("file copies: model.safetensors of version 1 copied") {
		t.Fatalf("no log line of the copy:\n%s", &log)
	}
	r.objects.ra.wait() // pages the first read built ahead
	r.objects.pages.clear()
	r.objects.blocks.clear()
	again := readWhole(t, r, 1, "model.safetensors")
	mustEqualBytes(t, "read from the copy", again, got)
	if r.objects.pages.used != 0 || r.objects.blocks.used != 0 {
		t.Fatalf("a read of a copied file built pages (%d bytes) or blocks (%d bytes)", r.objects.pages.used, r.objects.blocks.used)
	}
	// The copy is the process's: Close removes it.
	closeStore(t, r)
	if names := fileCopyNames(t, r); len(names) != 0 {
		t.Fatalf("copies left after Close: %v", names)
	}
}

// TestDamagedFileCopyIsNotServed flips a byte of a copy: the next read returns the right bytes
// (from the objects), logs the chunk, drops the copy and writes it again in the background.
func TestDamagedFileCopyIsNotServed(t *testing.T) {
	versions, root := committedVersions(t, 3, 72)
	var log logLines
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, Logger: logtest.New(log.logf)})
	want := versions[0]["model.safetensors"]
	mustEqualBytes(t, "first read", readWhole(t, r, 1, "model.safetensors"), want)
	mustEqualBytes(t, "second read", readWhole(t, r, 1, "model.safetensors"), want) // the copy written behind it
	r.files.bg.Wait()
	names := fileCopyNames(t, r)
	if len(names) != 1 {
		t.Fatalf("file copies %v, want one", names)
	}
	p := filepath.Join(r.CacheDir(), "files", names[0])
	const at = 3*sumChunk + 17
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x40
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A read of the damaged chunk alone, then the whole file.
	f, err := r.OpenFile(1, "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 100)
	if n, err := f.ReadAt(one, at-50); n != len(one) || err != nil {
		t.Fatalf("read at %d: %d bytes, %v", at-50, n, err)
	}
	mustEqualBytes(t, "read of the damaged chunk", one, want[at-50:at+50])
	if !log.has("chunk 3 (bytes 196608-262144)") || !log.has("not served") {
		t.Fatalf("no log line of the damaged chunk:\n%s", &log)
	}
	mustEqualBytes(t, "whole read", readWhole(t, r, 1, "model.safetensors"), want)
	// The copy is written again.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, n := r.FileCopyUsage(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy was not written again:\n%s", &log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.files.bg.Wait()
	again, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "the copy written again", again, want)
	mustEqualBytes(t, "read from the new copy", readWhole(t, r, 1, "model.safetensors"), want)
	// A second damaged copy of the same content: served from the objects, and no more copies.
	again[at] ^= 0x40
	if err := os.WriteFile(p, again, 0o600); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "read of the copy damaged again", readWhole(t, r, 1, "model.safetensors"), want)
	r.files.bg.Wait()
	mustEqualBytes(t, "read without a copy", readWhole(t, r, 1, "model.safetensors"), want)
	if _, n := r.FileCopyUsage(); n != 0 || !log.has("not copied again") {
		t.Fatalf("%d copies after the second damage, want none and a log line:\n%s", n, &log)
	}
}

// TestDamagedFileGetsNoCopy flips a byte of the object of one tensor of a file large enough
// to be copied: reads of it fail with ErrCorrupt, the background pass that would copy the file
// keeps no copy, also after a reader has a copy of the sound file of another version. (A
// manifest with two tensors' ids swapped and its CRC recomputed, which this test forged
// before, is outside the threat model: docs/design.md, "What the checks guard against".)
func TestDamagedFileGetsNoCopy(t *testing.T) {
	var versions []map[string][]byte
	for i := 0; i < 3; i++ {
		a := make([]byte, 2*400_000)
		b := make([]byte, 2*400_000)
		for j := range a {
			a[j], b[j] = byte(j*7+i), byte(j*13+1)
		}
		versions = append(versions, map[string][]byte{"twins.safetensors": safetensorsFile(t,
			testTensor{"a.weight", delta.DTypeBF16, []int64{400_000}, a},
			testTensor{"b.weight", delta.DTypeBF16, []int64{400_000}, b})})
	}
	w, root := newLooseStore(t, Options{Logger: logtest.New(func(string, ...any) {})}) // it damages an object file
	commitAll(t, w, versions)
	ver, err := w.versions.sealedVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, w.be.given.(*localBackend).ObjectPath(ver.files["twins.safetensors"].Tensors[0].ID))
	expectDamage(w)
	closeStore(t, w)
	r := openLoose(t, root, Options{ReadOnly: true, Materialize: true, Logger: logtest.New(func(string, ...any) {})})
	expectDamage(r)
	for range 2 { // the second read has the copy written behind it
		mustEqualBytes(t, "v2", readWhole(t, r, 2, "twins.safetensors"), versions[1]["twins.safetensors"])
	}
	r.files.bg.Wait()
	if _, n := r.FileCopyUsage(); n != 1 {
		t.Fatalf("%d copies after reading v2, want 1", n)
	}
	f, err := r.OpenFile(1, "twins.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, f.Size())
	for i := 0; i < 3; i++ {
		if i > 0 {
			if f, err = r.OpenFile(1, "twins.safetensors"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.ReadAt(got, 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read %d of a damaged file: %v, want ErrCorrupt", i, err)
		}
	}
	r.files.bg.Wait()
	if _, n := r.FileCopyUsage(); n != 1 || len(fileCopyNames(t, r)) != 1 {
		t.Fatalf("%d copies (%v) after the damaged file's reads, want v2's alone", n, fileCopyNames(t, r))
	}
}

// TestFileCopiesBounded reads files of five old versions with room for two copies: the disk
// the copies use never exceeds the bound, the least recently read go first, and every read
// is exact.
func TestFileCopiesBounded(t *testing.T) {
	versions, root := committedVersions(t, 6, 73)
	size := int64(len(versions[0]["model.safetensors"]))
	bound := 2*size + size/2
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: bound, Logger: logtest.New(func(string, ...any) {})})
	for round := 0; round < 2; round++ {
		for v := uint64(1); v <= 5; v++ {
			mustEqualBytes(t, fmt.Sprintf("v%d", v), readWhole(t, r, v, "model.safetensors"), versions[v-1]["model.safetensors"])
			used, n := r.FileCopyUsage()
			logical, allocated := copiesDiskUse(t, r)
			if used > bound || logical > bound || allocated > bound+int64(n)*64<<10 || n > 2 {
				t.Fatalf("after v%d: %d copies, %d bytes counted, %d on disk (%d allocated), bound %d", v, n, used, logical, allocated, bound)
			}
		}
	}
	// A bound below one file's size: no copy, reads replay.
	r2 := openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: size - 1, Logger: logtest.New(func(string, ...any) {})})
	mustEqualBytes(t, "v1 without a copy", readWhole(t, r2, 1, "model.safetensors"), versions[0]["model.safetensors"])
	if used, n := r2.FileCopyUsage(); used != 0 || n != 0 || len(fileCopyNames(t, r2)) != 0 {
		t.Fatalf("a bound below the file's size kept %d copies of %d bytes", n, used)
	}
}

// TestFileCopiesConcurrent reads files of four old versions from eight goroutines at once,
// with room for two copies (so copies are removed while others read them): every read is
// exact, and no more than the bound is in use at the end.
func TestFileCopiesConcurrent(t *testing.T) {
	versions, root := committedVersions(t, 5, 74)
	size := int64(len(versions[0]["model.safetensors"]))
	bound := 2*size + size/2
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: bound, Logger: logtest.New(func(string, ...any) {})})
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			var err error
			defer func() { errs <- err }()
			for i := 0; i < 6 && err == nil; i++ {
				v := uint64(1 + (g+i)%4)
				f, oerr := r.OpenFile(v, "model.safetensors")
				if oerr != nil {
					err = oerr
					return
				}
				b := make([]byte, size)
				for off := int64(0); off < size; off += 300_000 {
					end := min(off+300_000, size)
					if _, rerr := f.ReadAt(b[off:end], off); rerr != nil && end < size {
						err = rerr
						return
					}
				}
				if string(b) != string(versions[v-1]["model.safetensors"]) {
					err = fmt.Errorf("v%d: wrong bytes", v)
				}
			}
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if used, n := r.FileCopyUsage(); used > bound || n > 2 {
		t.Fatalf("%d copies of %d bytes, bound %d", n, used, bound)
	}
}

// committedVersions commits n generated versions (seed) into a new store, closes it, and
// returns the versions' files and the store's root.
func committedVersions(t *testing.T, n int, seed uint64) ([]map[string][]byte, string) {
	t.Helper()
	versions := modelVersions(t, n, seed)
	w, root := newStore(t, Options{})
	commitAll(t, w, versions)
	closeStore(t, w)
	return versions, root
}
