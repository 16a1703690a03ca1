package s3

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store"
)

// cacheFile writes size bytes of b into a temporary file of dir and returns its path.
func cacheFile(t *testing.T, dir string, b byte, size int) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{b}, size)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}

func cachedBytes(t *testing.T, c *objectCache, id store.ID) []byte {
	t.Helper()
	f, _, ok := c.open(id)
	if !ok {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestObjectCacheEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	tmp := t.TempDir()
	c, err := openObjectCache(filepath.Join(dir, "objects"), 300)
	if err != nil {
		t.Fatal(err)
	}
	ids := []store.ID{store.IDOf([]byte("a")), store.IDOf([]byte("b")), store.IDOf([]byte("c")), store.IDOf([]byte("d"))}
	for i, id := range ids[:3] {
		if err := c.adopt(id, cacheFile(t, tmp, byte('a'+i), 100), 100); err != nil {
			t.Fatal(err)
		}
	}
	// Use a, so that b is the least recently used when d comes.
	if got := cachedBytes(t, c, ids[0]); !bytes.Equal(got, bytes.Repeat([]byte{'a'}, 100)) {
		t.Fatalf("a: %q", got)
	}
	if err := c.adopt(ids[3], cacheFile(t, tmp, 'd', 100), 100); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		id     store.ID
		cached bool
	}{{"a", ids[0], true}, {"b", ids[1], false}, {"c", ids[2], true}, {"d", ids[3], true}}
	for _, tt := range tests {
		if _, ok := c.size(tt.id); ok != tt.cached {
			t.Errorf("%s cached: %v, want %v", tt.name, ok, tt.cached)
		}
		if _, err := os.Stat(c.path(tt.id)); (err == nil) != tt.cached {
			t.Errorf("%s file present: %v, want %v", tt.name, err == nil, tt.cached)
		}
	}
	if n, used, ev := c.stats(); n != 3 || used != 300 || ev != 1 {
		t.Fatalf("stats: %d objects, %d bytes, %d evictions; want 3, 300, 1", n, used, ev)
	}
	// An object larger than the whole cache is dropped at once, but an open descriptor of
	// its file keeps reading.
	big := cacheFile(t, tmp, 'e', 400)
	f, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.adopt(store.IDOf([]byte("e")), big, 400); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(f); err != nil || len(b) != 400 {
		t.Fatalf("read of an evicted file: %d bytes, %v", len(b), err)
	}
	if n, used, _ := c.stats(); n != 0 || used != 0 {
		t.Fatalf("after a too-large object: %d objects, %d bytes", n, used)
	}
}

func TestObjectCacheReopenTakesStock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	tmp := t.TempDir()
	c, err := openObjectCache(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	old, young := store.IDOf([]byte("old")), store.IDOf([]byte("young"))
	if err := c.adopt(old, cacheFile(t, tmp, 'o', 300), 300); err != nil {
		t.Fatal(err)
	}
	if err := c.adopt(young, cacheFile(t, tmp, 'y', 300), 300); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(c.path(old), past, past)
	// Debris of a crashed process: a stray file and a misnamed one.
	os.WriteFile(filepath.Join(dir, "stray.tmp"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, young.String()[:2], "not-an-object"), []byte("x"), 0o644)

	c2, err := openObjectCache(dir, 500) // smaller: the older file must go
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c2.size(old); ok {
		t.Error("the least recently modified object survived a smaller limit")
	}
	if got := cachedBytes(t, c2, young); !bytes.Equal(got, bytes.Repeat([]byte{'y'}, 300)) {
		t.Errorf("young object: %d bytes", len(got))
	}
	for _, p := range []string{filepath.Join(dir, "stray.tmp"), filepath.Join(dir, young.String()[:2], "not-an-object")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was not cleaned up", p)
		}
	}
	c2.purge()
	if n, used, _ := c2.stats(); n != 0 || used != 0 {
		t.Fatalf("after purge: %d objects, %d bytes", n, used)
	}
	if _, _, ok := c2.open(young); ok {
		t.Fatal("purged object still opens")
	}
}
