package s3

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// TestS3ContextSections: a writer opening an S3 store of format 1 upgrades its format file
// first (to format 3, objects in packs; to format 2 with loose objects, store format 2's
// layout, the test knob), then stores version-2 delta sections (coded against the previous
// version's sections) where a context exists and version 1 where none does; a reader that
// replays every read from the objects reads every version back byte-exact.
func TestS3ContextSections(t *testing.T) {
	t.Run("loose", func(t *testing.T) {
		t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // format 1 -> 2, sections of loose object files (store format 2's layout)
		contextSections(t, 2)
	})
	t.Run("packs", func(t *testing.T) { contextSections(t, 3) })
}

// contextSections is TestS3ContextSections; format is what the writer upgrades to (2: loose
// objects, 3: packs).
func contextSections(t *testing.T, format uint32) {
	srv, url := startInitialized(t)
	c, err := setup(url, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := c.loc.key(store.FormatFileName)
	formatOf := func(v uint32) []byte { // docs/format.md Part I §2
		b := append([]byte("WFSSTORE"), binary.LittleEndian.AppendUint32(nil, v)...)
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
	if _, err := c.putBytes(ctx, key, formatOf(1), putCond{}); err != nil {
		t.Fatal(err)
	}
	w := openTestStore(t, url, store.Options{})
	if b, _, err := c.getBytes(ctx, key, nil); err != nil || string(b) != string(formatOf(format)) {
		t.Fatalf("format file after a writer opened a format-1 store: %x, %v; want format %d", b, err, format)
	}
	m := newTestModel(3, 300_000, 5_000)
	var want []map[string][]byte
	for v := uint64(1); v <= 4; v++ {
		if v > 1 {
			m.step()
		}
		want = append(want, m.files(t))
		commitTree(t, w, v, want[v-1])
	}
	// Delta sections in the bucket, by body version (docs/format.md Part I §3.1).
	sections := map[byte]int{}
	count := func(b []byte) { // one object file
		if len(b) < 96 || string(b[:4]) != "WFSO" {
			return
		}
		f, dl := binary.LittleEndian.Uint64(b[80:]), binary.LittleEndian.Uint64(b[88:])
		if dl > 0 {
			sections[b[96+f+4]]++
		}
	}
	sub := map[uint32]string{2: "objects", 3: "packs"}[format]
	err = filepath.WalkDir(filepath.Join(srv.ObjectDir("weightfs-test", c.loc.Prefix), sub), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if format == 2 {
			count(b)
			return nil
		}
		// A pack: its records are object files (docs/format.md Part I §3.5).
		entries, _, err := pack.ReadTrailer(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return fmt.Errorf("pack %s: %w", p, err)
		}
		for _, e := range entries {
			count(b[e.Offset : e.Offset+e.Length])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Version 2's deltas are against whole copies (version 1), versions 3 and 4's against
	// version 2 and 3's deltas (version 2).
	if sections[1] != 2 || sections[2] != 4 {
		t.Errorf("delta sections by body version: %v, want 2 of version 1 and 4 of version 2", sections)
	}
	r := openTestStore(t, url, store.Options{ReadOnly: true, FileCopyBytes: -1})
	for i, files := range want {
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("v%d %s", i+1, p), readWhole(t, r, uint64(i+1), p), b)
		}
	}
}
