package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// The contract of the optional parts of store format 3: store.PackBackend (packs) and
// records of kind store.RecordIndex (pack indexes). A backend without them skips.

// packs returns the pack API of a backend, or skips the test when it has none.
func packs(t *testing.T, b store.Backend) store.PackBackend {
	t.Helper()
	p, ok := b.(store.PackBackend)
	if !ok {
		t.Skip("no packs")
	}
	return p
}

// testPack is a pack as written: its id, its bytes, its entries and each record's bytes.
type testPack struct {
	id      store.ID
	data    []byte
	entries []pack.Entry
	records map[store.ID][]byte
}

// putPack writes a pack of records of the given sizes (object files from rng) through a
// temporary file of b and PutPack.
func putPack(t *testing.T, b store.Backend, rng *rand.Rand, sizes ...int) testPack {
	t.Helper()
	f, err := b.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	w := pack.NewWriter(f)
	p := testPack{records: map[store.ID][]byte{}}
	for _, n := range sizes {
		id, rec := object(rng, n)
		if err := w.Add(pack.ID(id), rec); err != nil {
			b.RemoveTemp(f)
			t.Fatal(err)
		}
		p.records[id] = rec
	}
	pid, size, entries, err := w.Finish()
	if err != nil {
		b.RemoveTemp(f)
		t.Fatal(err)
	}
	p.id, p.entries = store.ID(pid), entries
	p.data = make([]byte, size)
	if _, err := f.ReadAt(p.data, 0); err != nil {
		b.RemoveTemp(f)
		t.Fatal(err)
	}
	if err := packs(t, b).PutPack(p.id, f); err != nil {
		t.Fatalf("put pack %s: %v", p.id, err)
	}
	return p
}

// checkPackReads opens pack p in b and checks its size, each record read at its offset, a
// read across the end, the whole pack, and that its table names it.
func checkPackReads(t *testing.T, who string, b store.Backend, p testPack) {
	t.Helper()
	f, err := packs(t, b).OpenPack(p.id)
	if err != nil {
		t.Fatalf("%s: open pack %s: %v", who, p.id, err)
	}
	defer f.Close()
	if f.Size() != int64(len(p.data)) {
		t.Fatalf("%s: pack of size %d, want %d", who, f.Size(), len(p.data))
	}
	for _, e := range p.entries {
		got := make([]byte, e.Length)
		if n, err := f.ReadAt(got, e.Offset); n != len(got) || err != nil && err != io.EOF {
			t.Fatalf("%s: record at %d: %d bytes, %v", who, e.Offset, n, err)
		}
		mustEqual(t, fmt.Sprintf("%s: record of %s at %d", who, store.ID(e.ID), e.Offset), got, p.records[store.ID(e.ID)])
	}
	tail := make([]byte, 64)
	if n, err := f.ReadAt(tail, f.Size()-10); n != 10 || err != io.EOF {
		t.Fatalf("%s: read across the end: %d bytes, %v; want 10 and io.EOF", who, n, err)
	}
	mustEqual(t, who+": the last bytes", tail[:10], p.data[len(p.data)-10:])
	mustEqual(t, who+": the whole pack", readAll(t, f), p.data)
	if _, id, err := pack.ReadTrailer(f, f.Size()); err != nil || store.ID(id) != p.id {
		t.Fatalf("%s: the pack's table: %v, id %s; want %s", who, err, store.ID(id), p.id)
	}
}

// listPacks returns what ListPacks lists, failing on an id listed twice.
func listPacks(t *testing.T, b store.Backend) map[store.ID]int64 {
	t.Helper()
	got := map[store.ID]int64{}
	if err := packs(t, b).ListPacks(func(id store.ID, size int64) error {
		if _, dup := got[id]; dup {
			return fmt.Errorf("pack %s listed twice", id)
		}
		got[id] = size
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// testPacks: a pack put opens in the writer at once (before SyncObjects) and, once
// SyncObjects returned, in a reader opened before and in one opened after, with exactly its
// bytes, each record at its offset; a pack of several MiB too (a remote backend's multipart
// upload and parallel download). StatPack gives each pack's size and ListPacks lists exactly
// the packs; a pack never put is fs.ErrNotExist to OpenPack and StatPack. Packs are not
// objects: ListObjects and StatObject do not see them.
func testPacks(t *testing.T, open Opener) {
	w := open(t, true)
	packs(t, w)
	early := open(t, false)
	rng := rand.New(rand.NewPCG(20, 1))
	small := putPack(t, w, rng, 100, 5000, 70_000)
	large := putPack(t, w, rng, 3<<20, 200, 4<<20+17, 1<<20)
	checkPackReads(t, "writer before SyncObjects", w, small)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	want := map[store.ID]int64{small.id: int64(len(small.data)), large.id: int64(len(large.data))}
	missing, _ := object(rng, 10)
	for _, c := range []struct {
		who string
		b   store.Backend
	}{{"writer", w}, {"reader opened before", early}, {"reader opened after", open(t, false)}} {
		checkPackReads(t, c.who, c.b, small)
		checkPackReads(t, c.who, c.b, large)
		pb := packs(t, c.b)
		for id, size := range want {
			if got, err := pb.StatPack(id); err != nil || got != size {
				t.Fatalf("%s: stat pack %s: %d, %v, want %d", c.who, id, got, err, size)
			}
		}
		if got := listPacks(t, c.b); len(got) != len(want) || got[small.id] != want[small.id] || got[large.id] != want[large.id] {
			t.Fatalf("%s: listed %v, want %v", c.who, got, want)
		}
		if _, err := pb.StatPack(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: stat of a missing pack: %v, want fs.ErrNotExist", c.who, err)
		}
		if f, err := pb.OpenPack(missing); !errors.Is(err, fs.ErrNotExist) {
			if f != nil {
				f.Close()
			}
			t.Fatalf("%s: open of a missing pack: %v, want fs.ErrNotExist", c.who, err)
		}
		if _, err := c.b.StatObject(small.id); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: a pack's id as an object: %v, want fs.ErrNotExist", c.who, err)
		}
		if err := c.b.ListObjects(func(id store.ID, _ int64) error { return fmt.Errorf("object %s listed", id) }); err != nil {
			t.Fatalf("%s: objects beside the packs: %v", c.who, err)
		}
	}
	stop := errors.New("stop")
	if err := packs(t, w).ListPacks(func(store.ID, int64) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("ListPacks returned %v, want the callback's error", err)
	}
}

// testPackDelete: deleting a pack that is not there is not an error; a deleted pack is gone
// for the writer and for a reader opened afterwards (stat, open, list), and the other pack
// stays.
func testPackDelete(t *testing.T, open Opener) {
	w := open(t, true)
	pw := packs(t, w)
	rng := rand.New(rand.NewPCG(21, 1))
	missing, _ := object(rng, 10)
	if err := pw.DeletePack(missing); err != nil {
		t.Fatalf("delete of a missing pack: %v", err)
	}
	gone := putPack(t, w, rng, 300, 400)
	kept := putPack(t, w, rng, 500)
	if err := w.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	checkPackReads(t, "writer", w, gone)
	for range 2 {
		if err := pw.DeletePack(gone.id); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	for _, c := range []struct {
		who string
		b   store.Backend
	}{{"writer", w}, {"reader", open(t, false)}} {
		pb := packs(t, c.b)
		if _, err := pb.StatPack(gone.id); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: stat of a deleted pack: %v, want fs.ErrNotExist", c.who, err)
		}
		if f, err := pb.OpenPack(gone.id); !errors.Is(err, fs.ErrNotExist) {
			if f != nil {
				f.Close()
			}
			t.Fatalf("%s: open of a deleted pack: %v, want fs.ErrNotExist", c.who, err)
		}
		if got := listPacks(t, c.b); len(got) != 1 || got[kept.id] != int64(len(kept.data)) {
			t.Fatalf("%s: listed %v after the delete, want only %s", c.who, got, kept.id)
		}
		checkPackReads(t, c.who, c.b, kept)
	}
}

// indexRecord returns the bytes and name of a pack index of sequence number seq naming the
// packs ps.
func indexRecord(seq uint64, ps ...testPack) (string, []byte) {
	x := pack.Index{Seq: seq}
	for _, p := range ps {
		x.Packs = append(x.Packs, pack.IndexedPack{ID: pack.ID(p.id), Size: int64(len(p.data)), Entries: p.entries})
	}
	data := x.Encode()
	return pack.Name(seq, data), data
}

// testIndexRecords: a backend that keeps pack indexes (records of kind store.RecordIndex)
// says fs.ErrNotExist for one never put, gives what the writer put to a reader (whole; it is
// durable when PutRecord returns), lists the indexes by their names, and deletes them (a
// missing one too); a deleted index is gone for the writer and for a reader opened
// afterwards. Names that are not pack.Name's are refused, and write nothing.
func testIndexRecords(t *testing.T, open Opener) {
	b := open(t, true)
	w := records(t, b)
	const kind = store.RecordIndex
	rng := rand.New(rand.NewPCG(22, 1))
	p1 := putPack(t, b, rng, 1000, 2000)
	p2 := putPack(t, b, rng, 3000)
	if err := b.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	n1, x1 := indexRecord(1, p1)
	n2, x2 := indexRecord(2, p1, p2)
	if _, err := w.GetRecord(kind, n1); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no pack indexes")
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("get of a missing index: %v, want fs.ErrNotExist", err)
	}
	if names, err := w.ListRecords(kind); err != nil || len(names) != 0 {
		t.Fatalf("list before the first put: %q, %v", names, err)
	}
	for _, bad := range []string{"x", "", "../" + n1, n1 + "/x", "0000000000000001-ABCDEF0123456789", "1-0123456789abcdef", n1 + ".tmp"} {
		if err := w.PutRecord(kind, bad, x1); err == nil {
			t.Errorf("an index named %q was put", bad)
		}
		if _, err := w.GetRecord(kind, bad); err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("get of an index named %q: %v, want a refusal", bad, err)
		}
	}
	if names, err := w.ListRecords(kind); err != nil || len(names) != 0 {
		t.Fatalf("indexes after refused puts: %q, %v", names, err)
	}
	for name, data := range map[string][]byte{n1: x1, n2: x2} {
		if err := w.PutRecord(kind, name, data); err != nil {
			t.Fatalf("put index %s: %v", name, err)
		}
	}
	if w.RecordPath(kind, n1) == "" {
		t.Error("no path for an index record")
	}
	reader := records(t, open(t, false))
	for _, c := range []struct {
		who string
		r   store.Records
	}{{"writer", w}, {"reader", reader}} {
		names, err := c.r.ListRecords(kind)
		slices.Sort(names)
		if err != nil || !slices.Equal(names, []string{n1, n2}) {
			t.Fatalf("%s: list: %q, %v; want [%s %s]", c.who, names, err, n1, n2)
		}
		for range 2 { // the second get may be served from a cache
			for name, want := range map[string][]byte{n1: x1, n2: x2} {
				got, err := c.r.GetRecord(kind, name)
				if err != nil {
					t.Fatalf("%s: get index %s: %v", c.who, name, err)
				}
				mustEqual(t, c.who+": index "+name, got, want)
				if x, err := pack.DecodeIndex(got); err != nil || len(x.Packs) == 0 {
					t.Fatalf("%s: index %s decodes to %v, %v", c.who, name, x, err)
				}
			}
		}
	}
	for range 2 {
		if err := w.DeleteRecord(kind, n1); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	for _, c := range []struct {
		who string
		r   store.Records
	}{{"writer", w}, {"reader opened after the delete", records(t, open(t, false))}} {
		if names, err := c.r.ListRecords(kind); err != nil || !slices.Equal(names, []string{n2}) {
			t.Fatalf("%s: list after the delete: %q, %v; want [%s]", c.who, names, err, n2)
		}
		if _, err := c.r.GetRecord(kind, n1); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: get of a deleted index: %v, want fs.ErrNotExist", c.who, err)
		}
		got, err := c.r.GetRecord(kind, n2)
		if err != nil || !bytes.Equal(got, x2) {
			t.Fatalf("%s: the index kept: %d bytes, %v", c.who, len(got), err)
		}
	}
	// Indexes are neither objects, nor manifests, nor packs.
	if vs, err := b.ListManifests(); err != nil || len(vs) != 0 {
		t.Fatalf("manifests beside the indexes: %v, %v", vs, err)
	}
	if got := listPacks(t, b); len(got) != 2 {
		t.Fatalf("%d packs beside the indexes, want the 2 put", len(got))
	}
}
