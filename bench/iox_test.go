package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// makeTree writes files (relative path -> content) under a fresh directory.
func makeTree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestWriteTreeCopiesBytes(t *testing.T) {
	files := map[string][]byte{
		"config.json":       []byte(`{"a":1}`),
		"model.safetensors": patterned(3<<20+5, 1), // not a multiple of the write size
		"sub/empty":         nil,
	}
	for _, syncFiles := range []bool{false, true} {
		src := makeTree(t, files)
		dst := filepath.Join(t.TempDir(), "out")
		st, err := writeTree(src, dst, 1<<20, syncFiles)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("sync %v: %s differs after the copy (%v)", syncFiles, name, err)
			}
			total += int64(len(want))
		}
		if st.Bytes != total || st.Files != len(files) {
			t.Fatalf("stats %+v, want %d bytes in %d files", st, total, len(files))
		}
		if st.LastWrite.Before(st.Start) || st.End.Before(st.LastWrite) {
			t.Fatalf("times out of order: %+v", st)
		}
	}
}

func TestWriteTreeErrors(t *testing.T) {
	if _, err := writeTree(filepath.Join(t.TempDir(), "missing"), t.TempDir(), 1<<20, false); err == nil {
		t.Error("a missing source gave no error")
	}
	src := makeTree(t, map[string][]byte{"a": {1}})
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeTree(src, filepath.Join(blocker, "under"), 1<<20, false); err == nil {
		t.Error("a destination under a file gave no error")
	}
}

func TestReadTreeChecksBytes(t *testing.T) {
	files := map[string][]byte{"a": patterned(5000, 2), "d/b": patterned(100, 3)}
	dir := makeTree(t, files)
	want := hashFiles(files)
	st, err := readTree(dir, 1<<10, want)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != 5100 || len(st.Hashes) != 2 || st.Hashes["d/b"] != xxh3.Hash128(files["d/b"]) {
		t.Fatalf("read %+v", st)
	}
	tests := []struct {
		name string
		want map[string]xxh3.Uint128
		msg  string
	}{
		{"wrong bytes", map[string]xxh3.Uint128{"a": xxh3.Hash128([]byte("x")), "d/b": want["d/b"]}, "differ"},
		{"missing file", map[string]xxh3.Uint128{"a": want["a"], "d/b": want["d/b"], "c": {}}, "missing"},
		{"extra file", map[string]xxh3.Uint128{"a": want["a"]}, "unexpected"},
	}
	for _, tc := range tests {
		if _, err := readTree(dir, 1<<10, tc.want); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.msg)
		}
	}
}

func TestTreeBytes(t *testing.T) {
	dir := makeTree(t, map[string][]byte{"a": make([]byte, 10), "x/y/z": make([]byte, 32)})
	if n, err := treeBytes(dir); err != nil || n != 42 {
		t.Fatalf("treeBytes = %d, %v; want 42", n, err)
	}
	if n, err := treeBytes(filepath.Join(dir, "missing")); err != nil || n != 0 {
		t.Fatalf("treeBytes(missing) = %d, %v; want 0", n, err)
	}
}

func TestFileHashAndSyncedWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := patterned(10000, 9)
	if err := writeFileSynced(p, data); err != nil {
		t.Fatal(err)
	}
	h, err := fileHash(p)
	if err != nil || h != xxh3.Hash128(data) {
		t.Fatalf("fileHash = %v, %v", h, err)
	}
	if err := writeFileSynced(filepath.Join(p, "under-a-file"), data); err == nil {
		t.Fatal("no error writing under a file")
	}
}
