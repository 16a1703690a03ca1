package s3

import (
	"os"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestCachedManifestCheckedOnce: a manifest this process read from the bucket is served from
// the cache, as often as asked, by its CRC-32C alone (no full check, no request); a cached
// file damaged since, or another version's manifest under its name, is still refused and
// fetched again; a cache left by an earlier process is checked in full once, then remembered.
func TestCachedManifestCheckedOnce(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	m := newTestModel(5, 4_000, 1_000)
	commitTree(t, w, 1, m.files(t))
	m.step()
	commitTree(t, w, 2, m.files(t))
	cache := t.TempDir()
	r := openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: cache})
	rb := r.Backend().(*Backend)
	want := map[uint64][]byte{}
	for _, v := range []uint64{1, 2} {
		data, err := rb.GetManifest(v) // the open read them both
		if err != nil {
			t.Fatal(err)
		}
		want[v] = data
	}
	get := func(what string, v uint64, fulls, requests int64) {
		t.Helper()
		f0, r0 := rb.manifests.fullChecks.Load(), rb.Stats().Requests
		data, err := rb.GetManifest(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		mustEqualBytes(t, what, data, want[v])
		if f, n := rb.manifests.fullChecks.Load()-f0, rb.Stats().Requests-r0; f != fulls || n != requests {
			t.Fatalf("%s: %d full checks and %d requests, want %d and %d", what, f, n, fulls, requests)
		}
	}
	for range 3 {
		get("cached, read by this process", 2, 0, 0)
	}

	path := rb.manifestCachePath(2)
	damaged := append([]byte(nil), want[2]...)
	damaged[len(damaged)/2] ^= 1
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	get("a damaged cached manifest", 2, 1, 1)
	get("fetched again", 2, 0, 0)

	if err := os.WriteFile(path, want[1], 0o600); err != nil {
		t.Fatal(err)
	}
	get("version 1's manifest under version 2's name", 2, 1, 1)

	// Another process on the same cache: nothing remembered yet.
	r.Close()
	r2 := openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: cache})
	rb = r2.Backend().(*Backend)
	rb.manifests.fullChecks.Store(0)
	rb.manifests.forget(2) // what the open checked of it, as if it never had
	get("a cache of an earlier process", 2, 1, 0)
	get("then remembered", 2, 0, 0)
}
