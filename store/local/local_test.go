package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/store/format"
)

func TestModesFor(t *testing.T) {
	for format, want := range map[fs.FileMode]Modes{
		0o600: {Dir: 0o700, File: 0o600, Object: 0o400},
		0o640: {Dir: 0o750, File: 0o640, Object: 0o440},
		0o644: {Dir: 0o755, File: 0o644, Object: 0o444},
		0o666: {Dir: 0o755, File: 0o644, Object: 0o444}, // write bits are never given away
	} {
		if got := ModesFor(format); got != want {
			t.Errorf("ModesFor(%o) = %+v, want %+v", format, got, want)
		}
	}
}

// TestWriteFileSynced: the file holds the data with the mode asked, no temporary file is
// left, and the two fsyncs (the file, its directory) are counted.
func TestWriteFileSynced(t *testing.T) {
	dir := t.TempDir()
	var n atomic.Int64
	p := filepath.Join(dir, "f")
	if err := WriteFileSynced(p, dir, []byte("abc"), 0o640, &n); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "abc" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", st.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || n.Load() != 2 {
		t.Fatalf("%d entries, %d fsyncs; want 1 and 2", len(ents), n.Load())
	}
}

// TestFanOutFiles: a file is found where FanOutPath puts it, listed, stated and deleted;
// what is not a regular file in an object's place is damage (ErrCorrupt), never opened.
func TestFanOutFiles(t *testing.T) {
	top := filepath.Join(t.TempDir(), ObjectDir)
	id := format.IDOf([]byte("x"))
	p := FanOutPath(top, id)
	if want := filepath.Join(top, id.String()[:2], id.String()); p != want {
		t.Fatalf("FanOutPath = %s, want %s", p, want)
	}
	if err := ListFanOut(top, "objects", true, func(format.ID, int64) error { return nil }); err != nil {
		t.Fatalf("a missing top where it may be missing: %v", err)
	}
	if err := ListFanOut(top, "objects", false, func(format.ID, int64) error { return nil }); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing top: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("12345"), 0o400); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(filepath.Dir(p), "obj-123"), nil, 0o600) // not an object's name
	var got []format.ID
	if err := ListFanOut(top, "objects", false, func(id format.ID, size int64) error {
		if size != 5 {
			t.Errorf("size %d", size)
		}
		got = append(got, id)
		return nil
	}); err != nil || !slices.Equal(got, []format.ID{id}) {
		t.Fatalf("listed %v, %v", got, err)
	}
	f, err := OpenFile("object", id, p)
	if err != nil || f.Size() != 5 {
		t.Fatalf("open: %v, size %d", err, f.Size())
	}
	f.Close()
	if size, err := StatFile("object", id, p); err != nil || size != 5 {
		t.Fatalf("stat: %d, %v", size, err)
	}
	if err := DeleteFile("object", id, p); err != nil {
		t.Fatal(err)
	}
	if err := DeleteFile("object", id, p); err != nil {
		t.Fatalf("deleting a missing file: %v", err)
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile("object", id, p); !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("a FIFO in an object's place: %v", err)
	}
	os.Remove(p)
	os.RemoveAll(filepath.Dir(p))
	if err := os.WriteFile(filepath.Dir(p), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile("object", id, p); !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("a file in the fan-out directory's place: %v", err)
	}
}

// TestSyncerPutFile: a put file lands read-only in its fan-out directory (made, with the
// directory above where makeTop says so), and SyncDirty fsyncs each directory that changed
// once, deepest first: the file's fsync, then packs/ab, packs and the root.
func TestSyncerPutFile(t *testing.T) {
	root := t.TempDir()
	var s Syncer
	tmp, err := CreateTemp(root)
	if err != nil {
		t.Fatal(err)
	}
	tmp.WriteString("pack")
	id := format.IDOf([]byte("pack"))
	dst := FanOutPath(filepath.Join(root, PackDir), id)
	modes := ModesFor(0o600)
	if err := s.PutFile("pack", id, tmp, dst, true, modes); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != modes.Object {
		t.Fatalf("put file: %v, %v", st, err)
	}
	if st, _ := os.Stat(filepath.Dir(dst)); st.Mode().Perm() != modes.Dir {
		t.Fatalf("fan-out directory mode %v", st.Mode())
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Fatalf("the temporary file is left: %v", ents)
	}
	if n := s.Fsyncs(); n != 1 {
		t.Fatalf("%d fsyncs before SyncDirty, want 1 (the file)", n)
	}
	if err := s.SyncDirty(); err != nil {
		t.Fatal(err)
	}
	if n := s.Fsyncs(); n != 4 {
		t.Fatalf("%d fsyncs, want 4 (the file, packs/ab, packs, the root)", n)
	}
	if err := s.SyncDirty(); err != nil || s.Fsyncs() != 4 {
		t.Fatalf("a second SyncDirty: %v, %d fsyncs", err, s.Fsyncs())
	}
	// A put that fails leaves no temporary file.
	tmp, _ = CreateTemp(root)
	name := tmp.Name()
	if err := s.PutFile("pack", id, tmp, filepath.Join(root, "missing", "x", id.String()), false, modes); err == nil {
		t.Fatal("a put below a missing directory succeeded")
	}
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed put left %s: %v", name, err)
	}
}
