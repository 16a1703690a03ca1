package s3

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestS3ContextSections: a writer opening an S3 store of format 1 upgrades its format file to
// format 2 first, then stores version-2 delta sections (coded against the previous version's
// sections) where a context exists and version 1 where none does; a reader that replays every
// read from the objects reads every version back byte-exact.
func TestS3ContextSections(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // format 1 -> 2 and the sections of loose object files (store format 2's layout; 1 -> 3 and packs: store's TestPacksFormat2StoreTakesPacks)
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
	if b, _, err := c.getBytes(ctx, key, nil); err != nil || string(b) != string(formatOf(2)) {
		t.Fatalf("format file after a writer opened a format-1 store: %x, %v; want format 2", b, err)
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
	err = filepath.WalkDir(filepath.Join(srv.ObjectDir("weightfs-test", c.loc.Prefix), "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 96 || string(b[:4]) != "WFSO" {
			return err
		}
		f, dl := binary.LittleEndian.Uint64(b[80:]), binary.LittleEndian.Uint64(b[88:])
		if dl > 0 {
			sections[b[96+f+4]]++
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
