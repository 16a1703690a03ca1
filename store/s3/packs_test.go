package s3

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// packTestStore creates a store on the test server and returns an opener of its backends
// (each a process: its own client, so its own request counts) on cache directory dir ("":
// a fresh one). The lease lasts long enough that no renewal falls inside a test.
func packTestStore(t *testing.T, name string, cfg Config) func(t *testing.T, writer bool, dir string) *Backend {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := "s3://weightfs-test/" + name
	if err := Init(url, Config{}, nil); err != nil {
		t.Fatal(err)
	}
	cfg.RetryFor = 2 * time.Second
	cfg.LeaseTTL = time.Hour
	return func(t *testing.T, writer bool, dir string) *Backend {
		t.Helper()
		c, err := setup(url, cfg, logtest.New(t.Logf))
		if err != nil {
			t.Fatal(err)
		}
		var ls *lease
		if writer {
			if ls, err = acquireLease(context.Background(), c, logtest.New(t.Logf), time.Now); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ls.release() })
		}
		if dir == "" {
			dir = t.TempDir()
		}
		b, err := newBackend(c, dir, writer, ls, logtest.New(t.Logf))
		if err != nil {
			t.Fatal(err)
		}
		if writer {
			b.startUploads()
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

// writtenPack is a pack put by writePack.
type writtenPack struct {
	id      store.ID
	data    []byte
	entries []pack.Entry
}

// writePack puts a pack of object records of the given sizes (random bytes and their
// CRC-32C) through b.
func writePack(t *testing.T, b *Backend, rng *rand.Rand, sizes ...int) writtenPack {
	t.Helper()
	f, err := b.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	w := pack.NewWriter(f)
	for _, n := range sizes {
		rec := make([]byte, n, n+4)
		for i := range rec {
			rec[i] = byte(rng.Uint32())
		}
		id := store.IDOf(rec)
		rec = binary.LittleEndian.AppendUint32(rec, crc32.Checksum(rec, castagnoli))
		if err := w.Add(pack.ID(id), rec); err != nil {
			t.Fatal(err)
		}
	}
	pid, size, entries, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	p := writtenPack{id: store.ID(pid), data: make([]byte, size), entries: entries}
	if _, err := f.ReadAt(p.data, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.PutPack(p.id, f); err != nil {
		t.Fatal(err)
	}
	return p
}

// readPack reads pack id whole through b.
func readPack(t *testing.T, b *Backend, id store.ID) []byte {
	t.Helper()
	f, err := b.OpenPack(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, f.Size())
	if n, err := f.ReadAt(got, 0); n != len(got) {
		t.Fatalf("read pack %s: %d of %d bytes: %v", id, n, len(got), err)
	}
	return got
}

// TestS3PackRequests pins the requests a version in packs costs on S3, from the code: the
// writer sends one PUT per pack up to packWhole, whatever the part size (a larger pack:
// initiate, one PUT per part, complete), and one PUT for the index, nothing for SyncObjects;
// a reader that catches up sends one LIST of index/, one GET of the index, and per pack one
// GET (a pack past packWhole: one more ranged GET per further part). Reads of the packs and
// the index after that cost nothing. (packWhole is 7 MiB here, 96 MiB in use.)
func TestS3PackRequests(t *testing.T) {
	const part, whole = MinPartSize, 7 << 20 // 5 MiB, 7 MiB
	open := packTestStore(t, "packreq", Config{PartSize: part})
	w := open(t, true, "")
	w.packWhole = whole
	rng := rand.New(rand.NewPCG(30, 1))
	before := w.Stats().Requests
	packs := []writtenPack{
		writePack(t, w, rng, 1<<20, 300),                // 1 MiB: one PUT
		writePack(t, w, rng, 3<<20, 3<<20, 500),         // 6 MiB, past the part size, within whole: one PUT
		writePack(t, w, rng, 4<<20, 4<<20, 1000, 70000), // 8 MiB, past whole: initiate, 2 part PUTs, complete
	}
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	x := pack.Index{Seq: 1}
	for _, p := range packs {
		x.Packs = append(x.Packs, pack.IndexedPack{ID: pack.ID(p.id), Size: int64(len(p.data)), Entries: p.entries})
	}
	enc := x.Encode()
	name := pack.Name(1, enc)
	if err := w.PutRecord(store.RecordIndex, name, enc); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if got, want := st.Requests-before, int64(1+1+4+1); got != want {
		t.Errorf("the writer sent %d requests for 3 packs and their index, want %d", got, want)
	}
	if st.PackUploads != 3 || st.MultipartUploads != 1 || st.ObjectUploads != 0 {
		t.Errorf("writer's stats: %d pack uploads, %d multipart, %d objects; want 3, 1, 0", st.PackUploads, st.MultipartUploads, st.ObjectUploads)
	}

	r := open(t, false, "")
	r.packWhole = whole
	before = r.Stats().Requests
	names, err := r.ListRecords(store.RecordIndex)
	if err != nil || len(names) != 1 || names[0] != name {
		t.Fatalf("indexes listed: %q, %v", names, err)
	}
	data, err := r.GetRecord(store.RecordIndex, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pack.DecodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	for i, ip := range got.Packs {
		if !bytes.Equal(readPack(t, r, store.ID(ip.ID)), packs[i].data) {
			t.Fatalf("pack %d read other bytes", i)
		}
	}
	st = r.Stats()
	// Packs: 1, 1, and the first 7 MiB then the last 1 MiB of the third.
	if got, want := st.Requests-before, int64(1+1+(1+1+2)); got != want {
		t.Errorf("the reader sent %d requests to list, get the index and open 3 packs, want %d", got, want)
	}
	if st.PackDownloads != 3 || st.IndexDownloads != 1 {
		t.Errorf("reader's stats: %d packs and %d indexes downloaded, want 3 and 1", st.PackDownloads, st.IndexDownloads)
	}
	// Cached now: no request.
	before = st.Requests
	if _, err := r.GetRecord(store.RecordIndex, name); err != nil {
		t.Fatal(err)
	}
	for _, p := range packs {
		if !r.IsPackCached(p.id) {
			t.Fatalf("pack %s is not cached after its read", p.id)
		}
		if !bytes.Equal(readPack(t, r, p.id), p.data) {
			t.Fatal("a cached pack read other bytes")
		}
	}
	if n := r.Stats().Requests - before; n != 0 {
		t.Errorf("reads of cached packs and index sent %d requests, want 0", n)
	}
	// The writer kept what it uploaded: its reads cost nothing either.
	before = w.Stats().Requests
	for _, p := range packs {
		if !w.IsPackCached(p.id) || !bytes.Equal(readPack(t, w, p.id), p.data) {
			t.Fatalf("the writer's pack %s: not cached or other bytes", p.id)
		}
	}
	if _, err := w.GetRecord(store.RecordIndex, name); err != nil {
		t.Fatal(err)
	}
	if n := w.Stats().Requests - before; n != 0 {
		t.Errorf("the writer's reads of its own packs and index sent %d requests, want 0", n)
	}
}

// TestS3PackCacheChecked: a process that finds a damaged pack or index in the cache
// directory (left by an earlier one) drops it and fetches it again, and serves the right
// bytes; PrefetchPacks fetches packs into the cache, several at a time, and packs share the
// object cache's bound (the least recently used is evicted) without standing for objects.
func TestS3PackCacheChecked(t *testing.T) {
	open := packTestStore(t, "packcache", Config{ObjectCacheBytes: 5 << 20})
	w := open(t, true, "")
	rng := rand.New(rand.NewPCG(31, 1))
	p1 := writePack(t, w, rng, 1<<20, 200)
	p2 := writePack(t, w, rng, 1<<20, 300, 400)
	p3 := writePack(t, w, rng, 3<<20)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	x := pack.Index{Seq: 7, Packs: []pack.IndexedPack{{ID: pack.ID(p1.id), Size: int64(len(p1.data)), Entries: p1.entries}}}
	enc := x.Encode()
	name := pack.Name(7, enc)
	if err := w.PutRecord(store.RecordIndex, name, enc); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	r := open(t, false, dir)
	if err := r.PrefetchPacks([]store.ID{p1.id, p2.id}); err != nil {
		t.Fatal(err)
	}
	if !r.IsPackCached(p1.id) || !r.IsPackCached(p2.id) || r.IsPackCached(p3.id) {
		t.Fatal("PrefetchPacks did not cache the packs asked for, or cached another")
	}
	if r.IsCached(p1.id) {
		t.Fatal("a cached pack counts as a cached object of its id")
	}
	if _, err := r.GetRecord(store.RecordIndex, name); err != nil {
		t.Fatal(err)
	}
	r.Close()

	// Another process on the same cache directory: a bit of p1 flipped in a record, p2's
	// table replaced by zeros, the index cut short.
	damage := func(p string, f func([]byte) []byte) {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f(b), filePerm); err != nil {
			t.Fatal(err)
		}
	}
	packFile := func(id store.ID) string { return filepath.Join(dir, cacheObjects, cachePacks, id.String()) }
	damage(packFile(p1.id), func(b []byte) []byte { b[1000] ^= 1; return b })
	damage(packFile(p2.id), func(b []byte) []byte { clear(b[len(b)-pack.FooterLen:]); return b })
	damage(filepath.Join(dir, cacheIndexes, name), func(b []byte) []byte { return b[:len(b)-1] })
	r = open(t, false, dir)
	for _, p := range []writtenPack{p1, p2} {
		if !bytes.Equal(readPack(t, r, p.id), p.data) {
			t.Fatalf("pack %s: damaged cached bytes served", p.id)
		}
	}
	if got, err := r.GetRecord(store.RecordIndex, name); err != nil || !bytes.Equal(got, enc) {
		t.Fatalf("index: %d bytes, %v; want the %d put", len(got), err, len(enc))
	}
	st := r.Stats()
	if st.PackDownloads != 2 || st.IndexDownloads != 1 {
		t.Fatalf("%d packs and %d indexes fetched again, want 2 and 1", st.PackDownloads, st.IndexDownloads)
	}
	// The cache holds 5 MiB: p3 (3 MiB) evicts the least recently used pack.
	if !bytes.Equal(readPack(t, r, p3.id), p3.data) {
		t.Fatal("pack 3 read other bytes")
	}
	if st := r.Stats(); st.CacheEvictions == 0 || st.CachedBytes > 5<<20 || r.IsPackCached(p1.id) || !r.IsPackCached(p3.id) {
		t.Fatalf("after a pack past the bound: %d evictions, %d bytes cached, p1 cached %v, p3 cached %v",
			st.CacheEvictions, st.CachedBytes, r.IsPackCached(p1.id), r.IsPackCached(p3.id))
	}
}
