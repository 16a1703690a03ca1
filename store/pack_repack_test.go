package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store/pack"
)

// The gc of packs (pack_repack.go) is tested on the local backend and package store/pack
// directly: synthetic records (random bytes ending in their CRC-32C, as an object file does),
// packs and indexes written as a writer writes them, then rewritePacks, and after it (or
// after a crash at any of its steps) a fresh loadIndexes must locate every kept object in a
// pack that exists, its record byte-identical and passing its CRC.

// repackRig is a local store's backend with packs and indexes written into it, and the
// record of every object it holds.
type repackRig struct {
	t       *testing.T
	be      *localBackend
	env     packEnv
	records map[ID][]byte // object -> the record a reader must find (the last written)
	seq     uint64
	logBuf  *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the log's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newRepackRig(t *testing.T) *repackRig {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	be, err := NewLocalBackend(root)
	if err != nil {
		t.Fatal(err)
	}
	r := &repackRig{t: t, be: be.(*localBackend), records: map[ID][]byte{}, logBuf: &syncBuffer{}}
	r.env = packEnv{be: r.be, packs: r.be, records: r.be, log: slog.New(slog.NewTextHandler(r.logBuf, nil)),
		nextSeq: func() uint64 { r.seq++; return r.seq }}
	return r
}

// record is the synthetic object file of object n (content variant v): 100 to 355 bytes
// ending in the CRC-32C of those before it.
func repackRecord(n, v int) (ID, []byte) {
	id := ID(sha256.Sum256([]byte(fmt.Sprint("object ", n))))
	b := make([]byte, 100+(n*37+v*11)%256)
	for i := range b {
		b[i] = byte(n*7 + v*13 + i)
	}
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return id, b
}

// putPack writes a pack of objects ns (variant v) and returns it as an index names it.
func (r *repackRig) putPack(v int, ns ...int) pack.IndexedPack {
	r.t.Helper()
	tmp, err := r.be.CreateTemp()
	if err != nil {
		r.t.Fatal(err)
	}
	w := pack.NewWriter(tmp)
	for _, n := range ns {
		id, rec := repackRecord(n, v)
		if err := w.Add(id, rec); err != nil {
			r.t.Fatal(err)
		}
		r.records[id] = rec
	}
	id, size, entries, err := w.Finish()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.be.PutPack(ID(id), tmp); err != nil {
		r.t.Fatal(err)
	}
	if err := r.be.SyncObjects(); err != nil {
		r.t.Fatal(err)
	}
	return pack.IndexedPack{ID: id, Size: size, Entries: entries}
}

// putIndex writes an index of packs under the next sequence number.
func (r *repackRig) putIndex(packs ...pack.IndexedPack) string {
	r.t.Helper()
	x := &pack.Index{Seq: r.env.nextSeq(), Packs: packs}
	data := x.Encode()
	name := pack.Name(x.Seq, data)
	if err := r.be.PutRecord(RecordIndex, name, data); err != nil {
		r.t.Fatal(err)
	}
	return name
}

// indexes is a fresh loadIndexes; a damaged index fails the test.
func (r *repackRig) indexes() []namedIndex {
	r.t.Helper()
	good, bad, err := loadIndexes(r.be)
	if err != nil || len(bad) > 0 {
		r.t.Fatalf("load indexes: %v %v", err, bad)
	}
	return good
}

// packsOnDisk lists the packs the backend holds.
func (r *repackRig) packsOnDisk() map[ID]bool {
	r.t.Helper()
	out := map[ID]bool{}
	if err := r.be.ListPacks(func(id ID, _ int64) error { out[id] = true; return nil }); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// checkReachable locates every object of want through a fresh loadIndexes (the last entry
// of an id serves it) and checks that its record, read from its pack, is want's bytes and
// passes its CRC.
func (r *repackRig) checkReachable(what string, want map[ID][]byte) {
	r.t.Helper()
	serve := map[ID]pack.Entry{}
	in := map[ID]ID{}
	for _, x := range r.indexes() {
		for _, p := range x.Packs {
			for _, e := range p.Entries {
				serve[ID(e.ID)], in[ID(e.ID)] = e, ID(p.ID)
			}
		}
	}
	for id, rec := range want {
		e, ok := serve[id]
		if !ok {
			r.t.Errorf("%s: kept object %s is in no index", what, id)
			continue
		}
		f, err := r.be.OpenPack(in[id])
		if err != nil {
			r.t.Errorf("%s: kept object %s: %v", what, id, err)
			continue
		}
		got := make([]byte, e.Length)
		if err := readFull(f, got, e.Offset); err != nil {
			r.t.Errorf("%s: kept object %s: %v", what, id, err)
		}
		f.Close()
		if !bytes.Equal(got, rec) {
			r.t.Errorf("%s: kept object %s: its record in pack %s differs from the one written", what, id, in[id])
		}
		if crc32.Checksum(got[:len(got)-4], castagnoli) != binary.LittleEndian.Uint32(got[len(got)-4:]) || e.CRC != binary.LittleEndian.Uint32(got[len(got)-4:]) {
			r.t.Errorf("%s: kept object %s fails its CRC", what, id)
		}
	}
}

// keepAllBut is a keep func refusing the objects ns.
func keepAllBut(ns ...int) func(ID) bool {
	dead := map[ID]bool{}
	for _, n := range ns {
		id, _ := repackRecord(n, 0)
		dead[id] = true
	}
	return func(id ID) bool { return !dead[id] }
}

// threePacks writes pack A (objects 1-4, index 1), B (5-8, index 2) and C (9, 10 and another
// record of object 1, which shadows A's: index 3). It returns the packs.
func (r *repackRig) threePacks() (a, b, c pack.IndexedPack) {
	a = r.putPack(0, 1, 2, 3, 4)
	r.putIndex(a)
	b = r.putPack(0, 5, 6, 7, 8)
	r.putIndex(b)
	c = r.putPack(1, 9, 10, 1)
	r.putIndex(c)
	return a, b, c
}

// kept is the records of the rig's objects but ns.
func (r *repackRig) kept(ns ...int) map[ID][]byte {
	keep := keepAllBut(ns...)
	out := map[ID][]byte{}
	for id, rec := range r.records {
		if keep(id) {
			out[id] = rec
		}
	}
	return out
}

func TestRewritePacks(t *testing.T) {
	r := newRepackRig(t)
	a, b, c := r.threePacks()
	name, err := rewritePacks(r.env, r.indexes(), keepAllBut(2, 6))
	if err != nil {
		t.Fatal(err)
	}
	x := r.indexes()
	if len(x) != 1 || x[0].Name != name || x[0].Seq != 4 {
		t.Fatalf("indexes after the rewrite: %v, want one: %s of sequence 4", indexNames(x), name)
	}
	// C is untouched; A (2 dead, 1 shadowed by C) and B (6 dead) are rewritten into one pack.
	on := r.packsOnDisk()
	if on[ID(a.ID)] || on[ID(b.ID)] || !on[ID(c.ID)] || len(on) != 2 || len(x[0].Packs) != 2 {
		t.Fatalf("packs after the rewrite: %d on disk (A %v, B %v, C %v), %d indexed; want C and one new", len(on), on[ID(a.ID)], on[ID(b.ID)], on[ID(c.ID)], len(x[0].Packs))
	}
	entries := 0
	for _, p := range x[0].Packs {
		entries += len(p.Entries)
	}
	if entries != 8 { // 1, 3, 4, 5, 7, 8, 9, 10: each once
		t.Errorf("the consolidated index holds %d entries, want 8", entries)
	}
	r.checkReachable("after the rewrite", r.kept(2, 6))
	for _, n := range []int{2, 6} {
		id, _ := repackRecord(n, 0)
		for _, p := range x[0].Packs {
			if _, ok := pack.Find(p.Entries, id); ok {
				t.Errorf("dropped object %d is still indexed", n)
			}
		}
	}
	// Nothing left to do: a second run writes nothing.
	if name, err := rewritePacks(r.env, r.indexes(), keepAllBut(2, 6)); err != nil || name != "" {
		t.Errorf("second rewrite: %q, %v; want nothing done", name, err)
	}
}

// TestRewritePacksSplits: the live records of the rewritten packs go into new packs of about
// repackTarget bytes.
func TestRewritePacksSplits(t *testing.T) {
	defer func(n int64) { repackTarget = n }(repackTarget)
	repackTarget = 600
	r := newRepackRig(t)
	r.putIndex(r.putPack(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	if _, err := rewritePacks(r.env, r.indexes(), keepAllBut(1)); err != nil {
		t.Fatal(err)
	}
	x := r.indexes()
	if len(x) != 1 || len(x[0].Packs) < 3 {
		t.Fatalf("%d indexes, the first of %d packs: want one of several packs", len(x), len(x[0].Packs))
	}
	for _, p := range x[0].Packs {
		var longest int64
		for _, e := range p.Entries {
			longest = max(longest, e.Length)
		}
		if recs := p.Size - int64(len(p.Entries))*pack.EntryLen - pack.FooterLen; recs-longest >= repackTarget {
			t.Errorf("pack %x holds %d bytes of records, over the target", p.ID[:4], recs)
		}
	}
	r.checkReachable("after a split", r.kept(1))
}

func TestRewritePacksNothingToDo(t *testing.T) {
	r := newRepackRig(t)
	a := r.putPack(0, 1, 2)
	name := r.putIndex(a)
	if got, err := rewritePacks(r.env, r.indexes(), keepAllBut()); err != nil || got != "" {
		t.Fatalf("one index, nothing dropped: %q, %v; want nothing done", got, err)
	}
	if x := r.indexes(); len(x) != 1 || x[0].Name != name {
		t.Fatalf("the index changed: %v", indexNames(x))
	}
	// Several indexes, nothing dropped: consolidated into one, the packs untouched.
	b := r.putPack(0, 3, 4)
	r.putIndex(b)
	got, err := rewritePacks(r.env, r.indexes(), keepAllBut())
	if err != nil || got == "" {
		t.Fatalf("two indexes: %q, %v; want them consolidated", got, err)
	}
	x := r.indexes()
	if len(x) != 1 || x[0].Name != got || len(x[0].Packs) != 2 || !r.packsOnDisk()[ID(a.ID)] || !r.packsOnDisk()[ID(b.ID)] {
		t.Fatalf("after consolidation: %v", indexNames(x))
	}
	r.checkReachable("after consolidation", r.kept())
}

func TestRewritePacksAllDropped(t *testing.T) {
	r := newRepackRig(t)
	r.putIndex(r.putPack(0, 1, 2))
	r.putIndex(r.putPack(0, 3))
	name, err := rewritePacks(r.env, r.indexes(), keepAllBut(1, 2, 3))
	if err != nil || name != "" {
		t.Fatalf("%q, %v; want no index written", name, err)
	}
	if x, on := r.indexes(), r.packsOnDisk(); len(x) != 0 || len(on) != 0 {
		t.Fatalf("%d indexes and %d packs left, want none", len(x), len(on))
	}
}

// TestRewritePacksDamagedRecord: a kept record that fails its CRC is copied as it is (not
// dropped, not made to check) and logged with its object and pack.
func TestRewritePacksDamagedRecord(t *testing.T) {
	r := newRepackRig(t)
	a := r.putPack(0, 1, 2, 3)
	r.putIndex(a)
	id3, _ := repackRecord(3, 0)
	e, _ := pack.Find(a.Entries, id3)
	p := r.be.PackPath(ID(a.ID))
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xee}, e.Offset+50); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r.records[id3][50] = 0xee
	if _, err := rewritePacks(r.env, r.indexes(), keepAllBut(1)); err != nil {
		t.Fatal(err)
	}
	log := r.logBuf.String()
	if !strings.Contains(log, "object="+id3.String()) || !strings.Contains(log, "pack="+ID(a.ID).String()) {
		t.Errorf("the log does not name the damaged object and its pack:\n%s", log)
	}
	// The damaged record is in the new pack, byte for byte, still failing its CRC.
	x := r.indexes()
	ne, ok := pack.Find(x[0].Packs[0].Entries, id3)
	if !ok {
		t.Fatal("the damaged kept object was dropped")
	}
	pf, err := r.be.OpenPack(ID(x[0].Packs[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	got := make([]byte, ne.Length)
	if err := readFull(pf, got, ne.Offset); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, r.records[id3]) {
		t.Error("the damaged record was not copied as it was")
	}
	if checkCRC(memObject(got)) == nil {
		t.Error("the damaged record passes its CRC in the new pack")
	}
	id2, rec2 := repackRecord(2, 0)
	r.checkReachable("beside the damaged record", map[ID][]byte{id2: rec2})
}

func indexNames(x []namedIndex) []string {
	var out []string
	for _, i := range x {
		out = append(out, i.Name)
	}
	return out
}

// crashingPacks is a backend that dies (every later change fails with errInjected, as if
// the process were gone) at its change number at, counting every PutPack, SyncObjects,
// PutRecord, DeleteRecord and DeletePack: a crash between any two steps of rewritePacks.
type crashingPacks struct {
	*localBackend
	at, n int
}

func (c *crashingPacks) change() error {
	if c.n++; c.n > c.at {
		return errInjected
	}
	return nil
}

func (c *crashingPacks) PutPack(id ID, tmp *os.File) error {
	if err := c.change(); err != nil {
		c.localBackend.RemoveTemp(tmp)
		return err
	}
	return c.localBackend.PutPack(id, tmp)
}

func (c *crashingPacks) SyncObjects() error {
	if err := c.change(); err != nil {
		return err
	}
	return c.localBackend.SyncObjects()
}

func (c *crashingPacks) PutRecord(kind RecordKind, name string, data []byte) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.localBackend.PutRecord(kind, name, data)
}

func (c *crashingPacks) DeleteRecord(kind RecordKind, name string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.localBackend.DeleteRecord(kind, name)
}

func (c *crashingPacks) DeletePack(id ID) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.localBackend.DeletePack(id)
}

// TestRewritePacksCrash stops rewritePacks at each of its changes in turn (new packs put,
// synced, the consolidated index written, each old index deleted, each old pack deleted):
// at every point a fresh loadIndexes must find every kept object, whole; a later gc (another
// rewrite, then the orphan sweep) must end with one index, only the packs it names, and
// every kept object still there.
func TestRewritePacksCrash(t *testing.T) {
	defer func(n int64) { repackTarget = n }(repackTarget)
	repackTarget = 500 // two new packs: a crash between their puts too
	full := &crashingPacks{at: 1 << 30}
	{
		r := newRepackRig(t)
		r.threePacks()
		full.localBackend = r.be
		env := r.env
		env.be, env.packs, env.records = full, full, full
		if _, err := rewritePacks(env, r.indexes(), keepAllBut(2, 6)); err != nil {
			t.Fatal(err)
		}
	}
	// 2 puts, 1 sync, 1 index, 3 index deletions, 2 pack deletions.
	if full.n != 9 {
		t.Fatalf("a rewrite made %d changes, want 9", full.n)
	}
	for at := 0; at < full.n; at++ {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			r := newRepackRig(t)
			r.threePacks()
			want := r.kept(2, 6)
			c := &crashingPacks{localBackend: r.be, at: at}
			env := r.env
			env.be, env.packs, env.records = c, c, c
			if _, err := rewritePacks(env, r.indexes(), keepAllBut(2, 6)); !errors.Is(err, errInjected) {
				t.Fatalf("stopped at change %d: %v", at, err)
			}
			r.checkReachable(fmt.Sprintf("stopped at change %d", at), want)
			// The next gc.
			if _, err := rewritePacks(r.env, r.indexes(), keepAllBut(2, 6)); err != nil {
				t.Fatal(err)
			}
			r.checkReachable("after the next rewrite", want)
			if _, err := sweepOrphanPacks(r.env, r.indexes(), 0); err != nil {
				t.Fatal(err)
			}
			r.checkReachable("after the orphan sweep", want)
			x := r.indexes()
			on := r.packsOnDisk()
			named := 0
			for _, p := range x[0].Packs {
				if !on[ID(p.ID)] {
					t.Errorf("pack %x named but missing", p.ID[:4])
				}
				named++
			}
			if len(x) != 1 || len(on) != named {
				t.Errorf("after the next gc: %d indexes, %d packs on disk, %d named; want one index naming every pack", len(x), len(on), named)
			}
		})
	}
}

func TestSweepOrphanPacks(t *testing.T) {
	r := newRepackRig(t)
	named := r.putPack(0, 1, 2)
	r.putIndex(named)
	young := r.putPack(0, 3)
	old := r.putPack(0, 4)
	aged := time.Now().Add(-2 * time.Hour)
	for _, id := range []pack.ID{named.ID, old.ID} {
		if err := os.Chtimes(r.be.PackPath(ID(id)), aged, aged); err != nil {
			t.Fatal(err)
		}
	}
	n, err := sweepOrphanPacks(r.env, r.indexes(), orphanPackAge)
	if err != nil || n != 1 {
		t.Fatalf("removed %d, %v; want 1", n, err)
	}
	on := r.packsOnDisk()
	if !on[ID(named.ID)] || !on[ID(young.ID)] || on[ID(old.ID)] {
		t.Errorf("after the sweep: named %v, young %v, old %v; want only the old orphan gone", on[ID(named.ID)], on[ID(young.ID)], on[ID(old.ID)])
	}
	if log := r.logBuf.String(); !strings.Contains(log, "pack="+ID(old.ID).String()) {
		t.Errorf("the removal is not logged:\n%s", log)
	}
	// A backend that cannot tell a pack's age keeps every orphan.
	env := r.env
	env.packs = struct{ PackBackend }{r.be}
	if n, err := sweepOrphanPacks(env, nil, 0); err != nil || n != 0 || len(r.packsOnDisk()) != 2 {
		t.Errorf("without ages: removed %d, %v", n, err)
	}
}

// repackSpy is a backend with a pack layer's repack, counting its calls.
type repackSpy struct {
	Backend
	calls int
}

func (r *repackSpy) repack(func(ID) bool) error { r.calls++; return nil }

// TestGCRepacks: gc ends by the pack layer's repack and the orphan sweep; a damaged index
// keeps every orphan.
func TestGCRepacks(t *testing.T) {
	s, _ := newLooseStore(t, Options{}) // the packs on disk are the rig's alone: it counts them
	for i, files := range modelVersions(t, 3, 2) {
		commitTree(t, s, uint64(i+1), files)
	}
	spy := &repackSpy{Backend: s.be.Backend}
	s.be.Backend = spy
	be := s.be.given.(*localBackend)
	r := &repackRig{t: t, be: be, records: map[ID][]byte{}}
	orphan := r.putPack(0, 1)
	aged := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(be.PackPath(ID(orphan.ID)), aged, aged); err != nil {
		t.Fatal(err)
	}
	if err := be.PutRecord(RecordIndex, "0000000000000001-0000000000000000", []byte("WFSX damaged")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(2); err != nil {
		t.Fatal(err)
	}
	if spy.calls != 1 || len(r.packsOnDisk()) != 1 {
		t.Fatalf("gc: repack called %d times, %d packs left; want 1 and the orphan kept (a damaged index)", spy.calls, len(r.packsOnDisk()))
	}
	if err := be.DeleteRecord(RecordIndex, "0000000000000001-0000000000000000"); err != nil {
		t.Fatal(err)
	}
	// An open writer may have put packs it has not indexed yet: none is an orphan.
	w, err := s.NewVersion(4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(2); err != nil {
		t.Fatal(err)
	}
	if len(r.packsOnDisk()) != 1 {
		t.Fatal("gc removed an old pack no index names while a writer was open")
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(2); err != nil { // nothing to drop: the sweep-only gc
		t.Fatal(err)
	}
	if spy.calls != 3 || len(r.packsOnDisk()) != 0 {
		t.Fatalf("gc: repack called %d times, %d packs left; want 3 and the orphan removed", spy.calls, len(r.packsOnDisk()))
	}
	s.be.Backend = spy.Backend
}

// TestRewritePacksRandom: random packs of overlapping objects (a later copy of an object
// differs from an earlier one, so serving the wrong one shows), random objects dropped: after
// the rewrite every kept object is served by the record the last index gave it, each once,
// and no dropped one is indexed.
func TestRewritePacksRandom(t *testing.T) {
	defer func(n int64) { repackTarget = n }(repackTarget)
	repackTarget = 700
	for seed := range 25 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		r := newRepackRig(t)
		for x := range 2 + rng.IntN(3) {
			var packs []pack.IndexedPack
			for range 1 + rng.IntN(2) {
				var ns []int
				for range 1 + rng.IntN(5) {
					ns = append(ns, 1+rng.IntN(12))
				}
				packs = append(packs, r.putPack(x+len(packs)*10, ns...))
			}
			r.putIndex(packs...)
		}
		var dead []int
		for n := 1; n <= 12; n++ {
			if rng.IntN(3) == 0 {
				dead = append(dead, n)
			}
		}
		if _, err := rewritePacks(r.env, r.indexes(), keepAllBut(dead...)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		want := r.kept(dead...)
		r.checkReachable(fmt.Sprintf("seed %d", seed), want)
		seen := map[ID]int{}
		for _, x := range r.indexes() {
			for _, p := range x.Packs {
				for _, e := range p.Entries {
					seen[ID(e.ID)]++
				}
			}
		}
		if len(seen) != len(want) {
			t.Errorf("seed %d: %d objects indexed, want the %d kept", seed, len(seen), len(want))
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("seed %d: object %s indexed %d times", seed, id, n)
			}
		}
	}
}

// TestRewritePacksUnreadable: a pack to rewrite that is not the size its index gives is left
// as it is and named again, and where it holds a shadowed copy of an object the pack that
// served the object still serves it (whatever the order of the two packs' ids).
func TestRewritePacksUnreadable(t *testing.T) {
	for k := range 6 {
		n := 1 + 4*k
		r := newRepackRig(t)
		a := r.putPack(0, n, n+1, n+2)
		r.putIndex(a)
		r.putIndex(r.putPack(1, n, n+3)) // shadows a's copy of n
		p := r.be.PackPath(ID(a.ID))
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := rewritePacks(r.env, r.indexes(), keepAllBut(n+1)); err != nil {
			t.Fatal(err)
		}
		if !r.packsOnDisk()[ID(a.ID)] || !strings.Contains(r.logBuf.String(), "pack="+ID(a.ID).String()) {
			t.Fatalf("objects %d..: the pack of the wrong size was not left as it is, and logged", n)
		}
		r.checkReachable(fmt.Sprintf("objects %d..", n), r.kept(n+1))
	}
}
