package store

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Version numbers above MaxVersion are refused everywhere a number enters the store:
// 2^64-1 used to seal and then block every later version.
func TestVersionNumberBound(t *testing.T) {
	s, root := newStore(t, Options{})
	for _, v := range []uint64{math.MaxUint64, MaxVersion + 1} {
		if _, err := s.Commit(writeTree(t, t.TempDir(), map[string][]byte{"x": []byte("1")}), CommitOptions{Version: v}); !errors.Is(err, ErrVersionOutOfRange) {
			t.Fatalf("commit of version %d: %v", v, err)
		}
		if _, err := s.NewVersion(v); !errors.Is(err, ErrVersionOutOfRange) {
			t.Fatalf("new version %d: %v", v, err)
		}
	}
	if len(s.Versions()) != 0 {
		t.Fatalf("a refused commit left a version: %v", s.Versions())
	}
	// The bound itself is a version; nothing can follow it, and the error says why.
	commitTree(t, s, MaxVersion, map[string][]byte{"x": []byte("1")})
	_, err := s.Commit(writeTree(t, t.TempDir(), map[string][]byte{"x": []byte("2")}), CommitOptions{})
	if !errors.Is(err, ErrVersionOutOfRange) || !strings.Contains(err.Error(), "999999999999") {
		t.Fatalf("commit after version %d: %v", uint64(MaxVersion), err)
	}
	// A manifest of a number above the bound (written by an older weightfs) is not a version:
	// its name is ignored like any other name that is no manifest's, and its content refused.
	m := &manifest{Version: math.MaxUint64, Dirs: []manifestDir{}}
	if _, err := encodeManifestChecked(m, maxManifestLen); !errors.Is(err, ErrVersionOutOfRange) {
		t.Fatalf("encode of a manifest of version 2^64-1: %v", err)
	}
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeManifest(data); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrVersionOutOfRange) {
		t.Fatalf("decode of a manifest of version 2^64-1: %v", err)
	}
	if _, ok := parseManifestName("v18446744073709551615"); ok {
		t.Fatal("manifest name v18446744073709551615 accepted")
	}
	if v, ok := parseManifestName("v999999999999"); !ok || v != MaxVersion {
		t.Fatalf("manifest name of the bound: %d %v", v, ok)
	}
	if err := os.WriteFile(filepath.Join(root, "versions", "v18446744073709551615"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	if v, ok := r.Latest(); !ok || v != MaxVersion {
		t.Fatalf("latest %d %v with a manifest above the bound", v, ok)
	}
}

// Names the kernel would refuse (an element over 255 bytes) are refused by the writer and by
// manifest validation, wrapping ErrNameTooLong; a whole path has no bound (longpaths_test.go
// has long ones). Backslashes
// and other bytes a POSIX name may hold are stored; names that are not UTF-8 are refused
// (JSON would replace their bytes: the name read back would be another one).
func TestPathNamesRefusedAndStored(t *testing.T) {
	long := strings.Repeat("n", 256)
	refused := []struct {
		path string
		want error
	}{
		{long, ErrNameTooLong},
		{"dir/" + long, ErrNameTooLong},
		{long + "/file", ErrNameTooLong},
		{"bad\xffname", ErrBadPath},
	}
	s, _ := newStore(t, Options{})
	for _, c := range refused {
		if err := checkPath(c.path); !errors.Is(err, c.want) {
			t.Errorf("checkPath(%.40q...): %v, want %v", c.path, err, c.want)
		}
		w, err := s.NewVersion(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddFile(c.path, strings.NewReader("x"), 1, 0o644); !errors.Is(err, c.want) {
			t.Errorf("AddFile(%.40q...): %v, want %v", c.path, err, c.want)
		}
		if err := w.AddDir(c.path, 0o755); !errors.Is(err, c.want) {
			t.Errorf("AddDir(%.40q...): %v, want %v", c.path, err, c.want)
		}
		if _, err := w.StreamFile(c.path); !errors.Is(err, c.want) {
			t.Errorf("StreamFile(%.40q...): %v, want %v", c.path, err, c.want)
		}
		w.Abort()
		m := &manifest{Version: 1, Dirs: []manifestDir{{Path: c.path, Mode: 0o755}}}
		if err := m.Validate(); !errors.Is(err, c.want) {
			t.Errorf("manifest with directory %.40q...: %v, want %v", c.path, err, c.want)
		}
	}
	// The bounds themselves are fine.
	ok255 := strings.Repeat("n", 255)
	okDeep := strings.Repeat(strings.Repeat("d", 100)+"/", 40) + "f"
	for _, p := range []string{ok255, "d/" + ok255, okDeep, `back\slash`, "tab\there", "new\nline", "ünï"} {
		if err := checkPath(p); err != nil {
			t.Errorf("checkPath(%.40q...): %v", p, err)
		}
	}

	// Committed from a directory: a backslash round-trips.
	files := map[string][]byte{`back\slash`: []byte("1"), `sub\dir/x`: []byte("2"), ok255: []byte("3")}
	info, src := commitTree(t, s, 0, files)
	sameTree(t, "export", exportHashes(t, s, info.Number), treeHashes(t, src))
	mustEqualBytes(t, "read", readWhole(t, s, info.Number, `back\slash`), []byte("1"))
}
