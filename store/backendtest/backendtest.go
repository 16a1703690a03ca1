// Package backendtest is the contract suite of store.Backend: Run holds one kind of backend
// to every promise the interface's comments make, so that the store may rely on them
// whatever keeps its bytes, and the optional parts of store format 3 (store.PackBackend and
// records of kind store.RecordIndex: pack.go) where a backend has them. Every backend's tests
// run it: the local directory's in
// store/local/contract_test.go, S3's (on the test server) in store/s3/backend_test.go. It is
// test support only: nothing but tests imports it.
//
// The objects it writes are well-formed object files as far as a backend can tell (bytes
// followed by their CRC-32C, docs/format.md): a remote backend checks that trailer on what
// it downloads.
package backendtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// Opener opens a backend of one store, as a process would: the writer (the one process
// that puts and deletes) or a reader. The suite closes what it opens.
type Opener func(t *testing.T, writer bool) store.Backend

// NewStore creates an empty store for one test and returns the opener of its backends.
type NewStore func(t *testing.T) Opener

// Run runs the contract suite against the backends newStore makes.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"PutThenOpen", testPutThenOpen},
		{"StatAndList", testStatAndList},
		{"AtomicReplace", testAtomicReplace},
		{"ManifestWholeOrAbsent", testManifestWholeOrAbsent},
		{"DeleteMissing", testDeleteMissing},
		{"TempFiles", testTempFiles},
		{"ReaderOfConcurrentWriter", testReaderOfConcurrentWriter},
		{"GroupRecords", testGroupRecords},
		{"GCRecord", testGCRecord},
		{"PinRecords", testPinRecords},
		{"RecordKinds", testRecordKinds},
		{"Packs", testPacks},
		{"PackDelete", testPackDelete},
		{"IndexRecords", testIndexRecords},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, opened(newStore(t))) })
	}
}

// opened wraps open so that every backend it returns is closed when the test ends.
func opened(open Opener) Opener {
	return func(t *testing.T, writer bool) store.Backend {
		t.Helper()
		b := open(t, writer)
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return b
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// object returns the file of an object of n bytes from rng (its CRC-32C last) and its ID.
func object(rng *rand.Rand, n int) (store.ID, []byte) {
	b := make([]byte, n, n+4)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	id := store.IDOf(b)
	return id, binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// put stores data as object id through a temporary file.
func put(t *testing.T, b store.Backend, id store.ID, data []byte) {
	t.Helper()
	f, err := b.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		b.RemoveTemp(f)
		t.Fatal(err)
	}
	if err := b.PutObject(id, f); err != nil {
		t.Fatalf("put object %s: %v", id, err)
	}
}

// read returns the whole of object id as b serves it.
func read(t *testing.T, b store.Backend, id store.ID) []byte {
	t.Helper()
	f, err := b.OpenObject(id)
	if err != nil {
		t.Fatalf("open object %s: %v", id, err)
	}
	defer f.Close()
	return readAll(t, f)
}

func readAll(t *testing.T, f store.ObjectFile) []byte {
	t.Helper()
	buf := make([]byte, f.Size())
	if n, err := f.ReadAt(buf, 0); n != len(buf) {
		t.Fatalf("read %d of %d bytes: %v", n, len(buf), err)
	}
	if n, err := f.ReadAt(make([]byte, 1), f.Size()); n != 0 || err != io.EOF {
		t.Fatalf("read at the end: %d bytes, %v, want 0 and io.EOF", n, err)
	}
	return buf
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the %d put", what, len(got), len(want))
	}
}

// testPutThenOpen: an object put (and synced) opens with its size and exactly its bytes,
// in the writer and in a reader opened afterwards; a ranged read in the middle is exact.
func testPutThenOpen(t *testing.T, open Opener) {
	w := open(t, true)
	rng := rand.New(rand.NewPCG(1, 1))
	id, data := object(rng, 300_000)
	put(t, w, id, data)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "writer's read", read(t, w, id), data)
	r := open(t, false)
	f, err := r.OpenObject(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size() != int64(len(data)) {
		t.Fatalf("size %d, want %d", f.Size(), len(data))
	}
	mid := make([]byte, 1000)
	if n, err := f.ReadAt(mid, 150_000); n != len(mid) || err != nil && err != io.EOF {
		t.Fatalf("ranged read: %d bytes, %v", n, err)
	}
	mustEqual(t, "reader's ranged read", mid, data[150_000:151_000])
	mustEqual(t, "reader's read", readAll(t, f), data)
}

// testStatAndList: StatObject gives the file size of each object and fs.ErrNotExist for
// others (as does OpenObject); ListObjects lists exactly the objects, with their sizes, in
// the writer and in a reader.
func testStatAndList(t *testing.T, open Opener) {
	w := open(t, true)
	rng := rand.New(rand.NewPCG(2, 1))
	want := map[store.ID]int64{}
	for _, n := range []int{0, 1, 4096, 70_000} {
		id, data := object(rng, n)
		put(t, w, id, data)
		want[id] = int64(len(data))
	}
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	missing, _ := object(rng, 10)
	for _, b := range []store.Backend{w, open(t, false)} {
		for id, size := range want {
			if got, err := b.StatObject(id); err != nil || got != size {
				t.Fatalf("stat %s: %d, %v, want %d", id, got, err, size)
			}
		}
		if _, err := b.StatObject(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat of a missing object: %v, want fs.ErrNotExist", err)
		}
		if f, err := b.OpenObject(missing); !errors.Is(err, fs.ErrNotExist) {
			if f != nil {
				f.Close()
			}
			t.Fatalf("open of a missing object: %v, want fs.ErrNotExist", err)
		}
		got := map[store.ID]int64{}
		if err := b.ListObjects(func(id store.ID, size int64) error {
			if _, dup := got[id]; dup {
				return fmt.Errorf("%s listed twice", id)
			}
			got[id] = size
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("listed %d objects, want %d", len(got), len(want))
		}
		for id, size := range want {
			if got[id] != size {
				t.Fatalf("listed %s with size %d, want %d", id, got[id], size)
			}
		}
		stop := errors.New("stop")
		if err := b.ListObjects(func(store.ID, int64) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("ListObjects returned %v, want the callback's error", err)
		}
	}
}

// testAtomicReplace: putting an object again under its ID (another file of the same
// content, as gc's re-anchoring does) replaces it whole: a handle opened before reads the
// old file or the new one, never a mix, and opens afterwards read the new one.
func testAtomicReplace(t *testing.T, open Opener) {
	w := open(t, true)
	rng := rand.New(rand.NewPCG(3, 1))
	id, old := object(rng, 200_000)
	_, repl := object(rng, 150_000)
	put(t, w, id, old)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	before, err := w.OpenObject(id)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	put(t, w, id, repl)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, before); !bytes.Equal(got, old) && !bytes.Equal(got, repl) {
		t.Fatalf("a handle opened before the replacement reads %d bytes that are neither file", len(got))
	}
	mustEqual(t, "writer's read after the replacement", read(t, w, id), repl)
	mustEqual(t, "a new reader's read after the replacement", read(t, open(t, false), id), repl)
	if size, err := w.StatObject(id); err != nil || size != int64(len(repl)) {
		t.Fatalf("stat after the replacement: %d, %v, want %d", size, err, len(repl))
	}
}

// testManifestWholeOrAbsent: a manifest reads back exactly as put, ListManifests lists the
// versions ascending, GetManifest of another version is fs.ErrNotExist, and a deleted one is
// gone from both.
func testManifestWholeOrAbsent(t *testing.T, open Opener) {
	w := open(t, true)
	rng := rand.New(rand.NewPCG(4, 1))
	manifests := map[uint64][]byte{}
	for _, v := range []uint64{12, 3, 1_000_001, 7} {
		_, manifests[v] = object(rng, 1000+int(v%5000))
		if err := w.PutManifest(v, manifests[v]); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []store.Backend{w, open(t, false)} {
		vs, err := b.ListManifests()
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{3, 7, 12, 1_000_001}; !slices.Equal(vs, want) {
			t.Fatalf("ListManifests: %v, want %v", vs, want)
		}
		for v, data := range manifests {
			got, err := b.GetManifest(v)
			if err != nil {
				t.Fatal(err)
			}
			mustEqual(t, fmt.Sprintf("manifest of v%d", v), got, data)
		}
		if _, err := b.GetManifest(4); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("manifest of a version never put: %v, want fs.ErrNotExist", err)
		}
	}
	if err := w.DeleteManifest(7); err != nil {
		t.Fatal(err)
	}
	for _, b := range []store.Backend{w, open(t, false)} {
		if vs, err := b.ListManifests(); err != nil || !slices.Equal(vs, []uint64{3, 12, 1_000_001}) {
			t.Fatalf("ListManifests after a delete: %v, %v", vs, err)
		}
		if _, err := b.GetManifest(7); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a deleted manifest: %v, want fs.ErrNotExist", err)
		}
	}
}

// testDeleteMissing: deleting an object or a manifest that is not there is not an error,
// and deleting an object makes it missing.
func testDeleteMissing(t *testing.T, open Opener) {
	w := open(t, true)
	rng := rand.New(rand.NewPCG(5, 1))
	missing, _ := object(rng, 10)
	if err := w.DeleteObject(missing); err != nil {
		t.Fatalf("delete of a missing object: %v", err)
	}
	if err := w.DeleteManifest(99); err != nil {
		t.Fatalf("delete of a missing manifest: %v", err)
	}
	id, data := object(rng, 5000)
	put(t, w, id, data)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := w.DeleteObject(id); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if _, err := w.StatObject(id); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of a deleted object: %v, want fs.ErrNotExist", err)
	}
	if _, err := open(t, false).StatObject(id); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a reader's stat of a deleted object: %v, want fs.ErrNotExist", err)
	}
}

// testTempFiles: RemoveTemp deletes a temporary file, PutObject takes its file away, and
// CleanTemp in the next writer removes what a writer that died left behind; none of them
// becomes an object.
func testTempFiles(t *testing.T, open Opener) {
	w := open(t, true)
	gone := func(what, name string) {
		t.Helper()
		if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %s is still there (%v)", what, name, err)
		}
	}
	f, err := w.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("abandoned")
	w.RemoveTemp(f)
	gone("after RemoveTemp", f.Name())
	rng := rand.New(rand.NewPCG(6, 1))
	id, data := object(rng, 100)
	f, err = w.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	f.Write(data)
	if err := w.PutObject(id, f); err != nil {
		t.Fatal(err)
	}
	gone("after PutObject", f.Name())
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	// A writer dies with a temporary file open; the next one cleans up at its start.
	left, err := w.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	left.Write(data)
	left.Close()
	if err := w.CleanTemp(); err != nil {
		t.Fatal(err)
	}
	gone("after CleanTemp", left.Name())
	n := 0
	if err := w.ListObjects(func(store.ID, int64) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("%d objects (%v), want the 1 put", n, err)
	}
}

// testReaderOfConcurrentWriter: a reader polling while the writer puts objects and
// manifests sees each manifest whole or not at all, and once a manifest is listed, every
// object put and synced before it opens with exactly its bytes.
func testReaderOfConcurrentWriter(t *testing.T, open Opener) {
	w := open(t, true)
	r := open(t, false)
	rng := rand.New(rand.NewPCG(7, 1))
	type version struct {
		manifest []byte
		objects  map[store.ID][]byte
	}
	const n = 4
	versions := map[uint64]version{}
	for v := uint64(1); v <= n; v++ {
		ver := version{objects: map[store.ID][]byte{}}
		for range 3 {
			id, data := object(rng, 20_000+rng.IntN(50_000))
			ver.objects[id] = data
		}
		_, ver.manifest = object(rng, 400_000) // large: a torn write would show
		versions[v] = ver
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		checked := map[uint64]bool{}
		for last := false; !last; {
			last = done.Load()
			vs, err := r.ListManifests()
			if err != nil {
				fail(fmt.Errorf("reader's listing: %w", err))
				return
			}
			for v := uint64(1); v <= n; v++ {
				data, err := r.GetManifest(v)
				switch {
				case errors.Is(err, fs.ErrNotExist):
					if slices.Contains(vs, v) {
						fail(fmt.Errorf("v%d listed but its manifest is missing: %w", v, err))
						return
					}
					continue
				case err != nil:
					fail(fmt.Errorf("reader's manifest of v%d: %w", v, err))
					return
				case !bytes.Equal(data, versions[v].manifest):
					fail(fmt.Errorf("reader got %d bytes of v%d's manifest of %d: torn", len(data), v, len(versions[v].manifest)))
					return
				}
				if checked[v] {
					continue
				}
				checked[v] = true
				for id, want := range versions[v].objects {
					f, err := r.OpenObject(id)
					if err != nil {
						fail(fmt.Errorf("v%d is sealed but its object %s: %w", v, id, err))
						return
					}
					got := make([]byte, f.Size())
					k, err := f.ReadAt(got, 0)
					f.Close()
					if k != len(want) || !bytes.Equal(got, want) {
						fail(fmt.Errorf("v%d's object %s read %d of %d bytes (%v), or other bytes", v, id, k, len(want), err))
						return
					}
				}
			}
		}
		if len(checked) != n {
			fail(fmt.Errorf("the reader saw %d of the %d versions after the writer was done", len(checked), n))
		}
	}()
	for v := uint64(1); v <= n; v++ {
		for id, data := range versions[v].objects {
			put(t, w, id, data)
		}
		if err := w.SyncObjects(); err != nil {
			t.Fatal(err)
		}
		if err := w.PutManifest(v, versions[v].manifest); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// records returns the small-record API of a backend, or skips the test when it has none.
func records(t *testing.T, b store.Backend) store.Records {
	t.Helper()
	r, ok := b.(store.Records)
	if !ok {
		t.Skip("no small records")
	}
	return r
}

// testGroupRecords: a backend that holds a writer group's records (store.Records, kind
// store.RecordGroup) gives another process what was put, whole, the newer bytes after a
// replacement, lists it, and deletes it (a missing one too); a process without the writer's
// lock (a rank) may put and delete records. A backend without them skips.
func testGroupRecords(t *testing.T, open Opener) {
	w := records(t, open(t, true))
	rank, ok := open(t, false).(store.Records)
	if !ok {
		t.Fatal("the writer's backend holds records, a reader's does not")
	}
	const kind = store.RecordGroup
	const name, other = "train/v000002/rank-1.part", "train/v000002/rank-0.open"
	if _, err := w.GetRecord(kind, name); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no group records")
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("get of a missing record: %v, want fs.ErrNotExist", err)
	}
	for i, data := range [][]byte{[]byte("first"), bytes.Repeat([]byte("second"), 1000)} {
		if err := rank.PutRecord(kind, name, data); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		got, err := w.GetRecord(kind, name)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "record", got, data)
	}
	if err := rank.PutRecord(kind, other, []byte("open")); err != nil {
		t.Fatal(err)
	}
	names, err := w.ListRecords(kind)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, name) || !slices.Contains(names, other) {
		t.Fatalf("list: %q, want %q and %q among them", names, name, other)
	}
	if err := rank.DeleteRecord(kind, other); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := w.DeleteRecord(kind, name); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if names, err := w.ListRecords(kind); err != nil || slices.Contains(names, name) || slices.Contains(names, other) {
		t.Fatalf("list after the deletes: %q, %v", names, err)
	}
}

// testGCRecord: a backend that holds the gc record (store.Records, kind store.RecordGC, the
// one name store.GCRecordName) says fs.ErrNotExist before the first put, gives a reader what
// the writer put, whole, and the newer bytes after a replacement; the record is neither an
// object nor a manifest. A backend without it skips.
func testGCRecord(t *testing.T, open Opener) {
	b := open(t, true)
	w := records(t, b)
	r, ok := open(t, false).(store.Records)
	if !ok {
		t.Fatal("the writer's backend holds records, a reader's does not")
	}
	const kind, name = store.RecordGC, store.GCRecordName
	if _, err := r.GetRecord(kind, name); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no gc record")
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("get of a missing gc record: %v, want fs.ErrNotExist", err)
	}
	if names, err := r.ListRecords(kind); err != nil || len(names) != 0 {
		t.Fatalf("list before the first put: %q, %v", names, err)
	}
	for i, data := range [][]byte{[]byte("first"), bytes.Repeat([]byte("second"), 1000)} {
		if err := w.PutRecord(kind, name, data); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		got, err := r.GetRecord(kind, name)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "gc record", got, data)
	}
	if names, err := r.ListRecords(kind); err != nil || !slices.Equal(names, []string{name}) {
		t.Fatalf("list: %q, %v; want [%q]", names, err, name)
	}
	if vs, err := b.ListManifests(); err != nil || len(vs) != 0 {
		t.Fatalf("manifests beside the gc record: %v, %v", vs, err)
	}
	if err := b.ListObjects(func(id store.ID, _ int64) error { return fmt.Errorf("object %s listed", id) }); err != nil {
		t.Fatalf("objects beside the gc record: %v", err)
	}
}

// testPinRecords: a backend that holds readers' pins (store.Records, kind store.RecordPin)
// lets a reader put, replace and delete its pin, and the writer list and read it; a backend
// that keeps none refuses the put with errors.ErrUnsupported (and skips).
func testPinRecords(t *testing.T, open Opener) {
	w := records(t, open(t, true))
	reader, ok := open(t, false).(store.Records)
	if !ok {
		t.Fatal("the writer's backend holds records, a reader's does not")
	}
	const kind, name = store.RecordPin, "0123456789abcdef0123456789abcdef.json"
	if err := reader.PutRecord(kind, name, []byte("first\n")); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no pins")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := reader.PutRecord(kind, name, []byte("second\n")); err != nil {
		t.Fatal(err)
	}
	if names, err := w.ListRecords(kind); err != nil || !slices.Equal(names, []string{name}) {
		t.Fatalf("list: %q, %v; want [%q]", names, err, name)
	}
	got, err := w.GetRecord(kind, name)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "pin", got, []byte("second\n"))
	if w.RecordPath(kind, name) == "" {
		t.Error("no path for a pin record")
	}
	for range 2 {
		if err := reader.DeleteRecord(kind, name); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if names, err := w.ListRecords(kind); err != nil || len(names) != 0 {
		t.Fatalf("list after the delete: %q, %v", names, err)
	}
}

// testRecordKinds: a kind no backend knows is refused with errors.ErrUnsupported, by every
// call; a gc record of another name than store.GCRecordName is refused, and writes nothing.
func testRecordKinds(t *testing.T, open Opener) {
	b := open(t, true)
	w := records(t, b)
	const odd = store.RecordKind("no-such-kind")
	if err := w.PutRecord(odd, "x", []byte("x")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("put of an unknown kind: %v, want errors.ErrUnsupported", err)
	}
	if _, err := w.GetRecord(odd, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("get of an unknown kind: %v, want errors.ErrUnsupported", err)
	}
	if _, err := w.ListRecords(odd); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("list of an unknown kind: %v, want errors.ErrUnsupported", err)
	}
	if err := w.DeleteRecord(odd, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("delete of an unknown kind: %v, want errors.ErrUnsupported", err)
	}
	if err := w.PutRecord(store.RecordGC, "other", []byte("x")); err == nil {
		t.Error("a gc record of another name was put")
	}
	if names, err := w.ListRecords(store.RecordGC); err != nil || len(names) != 0 {
		t.Errorf("gc records after a refused put: %q, %v", names, err)
	}
}
