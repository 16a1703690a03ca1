package store

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// The base in memory (ingest_basemem.go) changes where a diff reads its base, never what is
// stored: these tests seal the same versions into a store without it and one with it, through
// each ingest path, and require the same manifests and objects byte for byte.

// memStores opens a store without the base in memory and one with budget (MaxChain 2, as
// streamAndBatch: anchors with links too); lines gets the second's log.
func memStores(t *testing.T, budget int64, lines *logLines) (plain, mem *Store) {
	t.Helper()
	plain, _ = newStore(t, Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})})
	mem, _ = newStore(t, Options{MaxChain: 2, BaseMemory: budget, Logger: logtest.New(lines.logf)})
	return plain, mem
}

// sealBoth seals files as version v into both stores, by the batch path or streamed, and
// requires the same manifest and objects.
func sealBoth(t *testing.T, plain, mem *Store, v uint64, files map[string][]byte, streamed bool, rng *rand.Rand) {
	t.Helper()
	if streamed {
		sealStreamed(t, plain, v, files, rng)
		sealStreamed(t, mem, v, files, rng)
	} else {
		sealBatch(t, plain, v, files)
		sealBatch(t, mem, v, files)
	}
	sameStores(t, fmt.Sprintf("v%d", v), plain, mem, v)
}

// TestBaseMemoryStoresTheSameObjects: with the base in memory, every version after the first
// diffs against bases from memory (Served grows by the bytes of the tensors that have a
// base), and stores the same manifests and objects as without it.
func TestBaseMemoryStoresTheSameObjects(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		t.Run(fmt.Sprintf("streamed %v", streamed), func(t *testing.T) {
			var lines logLines
			plain, mem := memStores(t, 64<<20, &lines)
			rng := rand.New(rand.NewPCG(7, 8))
			versions := streamSeries(t, 4, 2)
			for i, files := range versions {
				v := uint64(i + 1)
				before := mem.BaseMemory().Served
				sealBoth(t, plain, mem, v, files, streamed, rng)
				st := mem.BaseMemory()
				if st.Version != v || st.Bytes == 0 {
					t.Fatalf("v%d: the memory holds version %d (%d bytes), want this one", v, st.Version, st.Bytes)
				}
				// Every base of this version is the previous version's tensor of the same
				// name: the memory served each of them whole.
				var want int64
				for _, row := range tensorsWithBase(t, mem, v) {
					want += row
				}
				if got := st.Served - before; got != want {
					t.Errorf("v%d: %d base bytes served from memory, want %d (every base)", v, got, want)
				}
				// The batch path read no base from the copy. (A stream may: the stream of
				// short.safetensors diffs its tensors against model.safetensors' too, by name,
				// until it turns out not to be safetensors, and finds those entries used up by
				// model.safetensors' stream: it reads the copy.)
				if got := st.FromCopy; got != 0 && !streamed {
					t.Errorf("v%d: %d base bytes read from the copy, want none", v, got)
				}
				if v > 1 && want == 0 {
					t.Fatalf("v%d: no tensor had a base: the series tests nothing", v)
				}
			}
		})
	}
}

// tensorsWithBase returns the sizes of the tensors of version v that were diffed against a
// base.
func tensorsWithBase(t *testing.T, s *Store, v uint64) []int64 {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, f := range ver.m.Files {
		for _, ti := range f.Tensors {
			if !ti.Base.IsZero() {
				out = append(out, ti.End-ti.Begin)
			}
		}
	}
	return out
}

// TestBaseMemoryOfAnotherVersionIsNotUsed: entries labelled with a version other than the
// base version (the latest) are not served, even where an identity matches; the diff reads
// the copy and stores the same objects.
func TestBaseMemoryOfAnotherVersionIsNotUsed(t *testing.T) {
	var lines logLines
	plain, mem := memStores(t, 64<<20, &lines)
	versions := streamSeries(t, 3, 4)
	for i := range 2 {
		sealBoth(t, plain, mem, uint64(i+1), versions[i], false, nil)
	}
	// The memory holds version 2's tensors; say they are version 1's.
	m := mem.ingest.memory()
	m.mu.Lock()
	m.ver = 1
	m.mu.Unlock()
	m.tamper = func(id ID, b []byte) { t.Errorf("entry %s of another version was served", id) }
	before := mem.BaseMemory().Served
	sealBoth(t, plain, mem, 3, versions[2], false, nil)
	if got := mem.BaseMemory().Served; got != before {
		t.Errorf("%d base bytes served from memory of another version", got-before)
	}
	// From the copy, or through the objects while the copy is deferred (copy_defer.go).
	if st := mem.BaseMemory(); st.FromCopy+st.FromObjects == 0 {
		t.Error("no base byte read from the copy or the objects")
	}
}

// TestBaseMemoryOverBudget: a version whose tensors exceed the budget is not kept at all (said
// once in the log), and the next version reads its bases from the copy.
func TestBaseMemoryOverBudget(t *testing.T) {
	var lines logLines
	plain, mem := memStores(t, 1<<20, &lines) // the series' "big" tensor is 4.2 MB
	for i, files := range streamSeries(t, 3, 5) {
		sealBoth(t, plain, mem, uint64(i+1), files, i == 2, rand.New(rand.NewPCG(1, 2)))
		if st := mem.BaseMemory(); st.Bytes != 0 || st.Served != 0 {
			t.Fatalf("v%d: over the budget, the memory holds %d bytes and served %d", i+1, st.Bytes, st.Served)
		}
	}
	if n := strings.Count(lines.String(), "exceed the base memory"); n != 1 {
		t.Errorf("said %d times that the version exceeds the budget, want once:\n%s", n, lines.String())
	}
}

// TestBaseMemoryDamagedIsNotServed: an entry whose bytes changed in memory fails the diff's
// check of its base: the memory is dropped, and nothing diffed against the damaged bytes is
// stored. The batch path diffs the tensor again from the copy; a stream fails, and its file
// goes on through the batch path (as the mount does: Replay, then AddFile), which reads the
// copy. Either way the version is the same as without the memory. The entries of a version
// 1 the batch path took in are checked by their CRC-32C, those of a streamed version 1 by
// their xxh3-128 (memSum): both kinds are damaged.
func TestBaseMemoryDamagedIsNotServed(t *testing.T) {
	for _, c := range []struct{ v1Streamed, streamed bool }{{false, false}, {false, true}, {true, true}} {
		streamed := c.streamed
		t.Run(fmt.Sprintf("v1 streamed %v, streamed %v", c.v1Streamed, streamed), func(t *testing.T) {
			var lines logLines
			plain, mem := memStores(t, 64<<20, &lines)
			versions := streamSeries(t, 2, 6)
			sealBoth(t, plain, mem, 1, versions[0], c.v1Streamed, rand.New(rand.NewPCG(6, 7)))
			mem.ingest.memory().mu.Lock()
			for id, e := range mem.ingest.memory().byID {
				if e.sum.byXXH != c.v1Streamed {
					t.Fatalf("entry %s of version 1 (streamed %v) checked by %+v", id, c.v1Streamed, e.sum)
				}
			}
			mem.ingest.memory().mu.Unlock()
			var once sync.Once
			mem.ingest.memory().tamper = func(id ID, b []byte) {
				once.Do(func() { b[len(b)/2] ^= 0x10 }) // one bit, once: the entry stays damaged
			}
			sealBatch(t, plain, 2, versions[1])
			if streamed {
				sealStreamedOrBatch(t, mem, 2, versions[1])
			} else {
				sealBatch(t, mem, 2, versions[1])
			}
			sameStores(t, "v2", plain, mem, 2)
			if !lines.has("base in memory failed its check") {
				t.Errorf("the damaged entry was not found:\n%s", lines.String())
			}
		})
	}
}

// sealStreamedOrBatch streams each file of version v; a file whose stream fails is taken back
// (Replay) and added through the batch path, as the mount does.
func sealStreamedOrBatch(t *testing.T, s *Store, v uint64, files map[string][]byte) {
	t.Helper()
	w, err := s.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, p := range sortedPaths(files) {
		st, err := w.StreamFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Write(files[p])
		if err == nil {
			err = st.Close()
		}
		if err == nil {
			err = w.AddStream(p, st, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		failed++
		var back bytes.Buffer
		if err := st.Replay(&back); err != nil {
			t.Fatalf("replay %s: %v", p, err)
		}
		st.Abort()
		mustEqualBytes(t, p+" replayed", back.Bytes(), files[p])
		if err := w.AddFile(p, bytes.NewReader(back.Bytes()), int64(back.Len()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if failed == 0 {
		t.Errorf("no stream failed: the damaged base was not found")
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
}

// TestBaseMemoryRecyclesOnlyUnreadBuffers: the buffer of an entry is taken in again by the
// next version only once every tensor that diffs against it was stored (used) and no diff
// reads it (release), in either order; an entry dropped or replaced is never recycled.
func TestBaseMemoryRecyclesOnlyUnreadBuffers(t *testing.T) {
	m := newBaseMemory(1<<20, logtest.New(func(string, ...any) {}))
	mk := func(ver uint64, ids ...ID) { installTiny(m, ver, ids...) }
	a, b := ID{1}, ID{2}
	mk(1, a, b, a) // a twice: two tensors diff against it
	if e := m.base(2, a, 100); e != nil {
		t.Fatal("served an entry of version 1 as version 2's")
	}
	if e := m.base(1, a, 99); e != nil {
		t.Fatal("served an entry of another size")
	}
	if e := m.base(1, ID{3}, 100); e != nil {
		t.Fatal("served an identity it does not hold")
	}
	ea := m.base(1, a, 100)
	eb := m.base(1, b, 100)
	if ea == nil || eb == nil {
		t.Fatal("entries of version 1 not served")
	}
	bufA := &ea.b[0]
	m.used(1, a) // one of a's two tensors
	m.used(1, b) // b is gone, but still read
	if m.freeBytes != 0 {
		t.Fatalf("a buffer still read was freed (%d bytes)", m.freeBytes)
	}
	m.release(eb)
	if m.freeBytes != 100 {
		t.Fatalf("b's buffer not freed once neither used nor read: %d bytes free", m.freeBytes)
	}
	m.release(ea)
	m.used(1, a)
	if m.freeBytes != 200 || m.stats().Bytes != 0 {
		t.Fatalf("after every use: %d bytes free, %d held; want 200 and 0", m.freeBytes, m.stats().Bytes)
	}
	c := m.newCapture()
	if got := c.buffer(100); &got[0] != bufA || m.reused.Load() != 100 {
		t.Fatal("a free buffer of the size was not taken")
	}
	// A dropped memory recycles nothing, even once its readers are done.
	mk(2, a)
	e := m.base(2, a, 100)
	m.drop("test", a)
	m.used(2, a)
	m.release(e)
	if m.freeBytes != 0 {
		t.Fatalf("a dropped entry was recycled (%d bytes free)", m.freeBytes)
	}
}

// TestBaseMemoryOfARank: a rank keeps the tensors of the part it sealed, and diffs its next
// part against them once the version is published; the group stores what one writer stores.
func TestBaseMemoryOfARank(t *testing.T) {
	series := groupSeries(t, 3)
	single, singleRoot := newStore(t, Options{})
	fixedClock(single)
	commitAll(t, single, series)
	pub, root := newStore(t, Options{})
	fixedClock(pub)
	var ranks []*Store
	for r := range 2 {
		s, err := OpenRank(root, Rank{Group: "g", Rank: r, Ranks: 2}, Options{CacheDir: t.TempDir(), BaseMemory: 64 << 20, Logger: logtest.New(t.Logf)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ranks = append(ranks, s)
	}
	for i, files := range series {
		v := uint64(i + 1)
		for r, s := range ranks {
			if _, err := writePart(s, v, files, func(n string) bool { return shardOwner(n, 2) == r }); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pub.PublishGroup("g", v, 2); err != nil {
			t.Fatal(err)
		}
	}
	for r, s := range ranks {
		if st := s.BaseMemory(); st.Served == 0 || st.Version != 3 {
			t.Errorf("rank %d: the base in memory %+v: served nothing, or not of version 3", r, st)
		}
	}
	want, n := objectsDigest(t, singleRoot)
	got, m := objectsDigest(t, root)
	if got != want || n != m {
		t.Fatalf("the group stored %d objects and manifests hashing to %s; one writer %d hashing to %s", m, got, n, want)
	}
}

// TestBaseMemoryKeepsSpareBuffersAcrossVersions: buffers freed during a version and not taken
// in again (a version's tensors of a size are taken in before the last of the version before
// them are used: its largest tensor, the first of each size) stay free for the next version
// while the held version and they fit the budget, so that a steady state allocates nothing;
// beyond the budget they are let go at install.
func TestBaseMemoryKeepsSpareBuffersAcrossVersions(t *testing.T) {
	for _, c := range []struct {
		budget int64
		spare  bool
	}{{1000, true}, {250, true}, {150, false}} {
		m := newBaseMemory(c.budget, logtest.New(func(string, ...any) {}))
		version := func(ver uint64, ids ...ID) { installTiny(m, ver, ids...) }
		a, b, x := ID{1}, ID{2}, ID{3}
		m.mu.Lock()
		if c.budget < 200 {
			m.budget = 200 // version 1 must fit
		}
		m.mu.Unlock()
		version(1, a, b)
		m.budget = c.budget
		m.used(1, a)
		m.used(1, b) // both buffers free
		version(2, x)
		if m.reused.Load() != 100 {
			t.Fatalf("budget %d: version 2 reused %d bytes, want 100", c.budget, m.reused.Load())
		}
		want := int64(0)
		if c.spare {
			want = 100
		}
		if m.freeBytes != want || m.stats().Bytes != 100 {
			t.Fatalf("budget %d: after version 2's install %d bytes free, %d held; want %d and 100", c.budget, m.freeBytes, m.stats().Bytes, want)
		}
		if got := m.newCapture().buffer(100); got == nil || m.reused.Load() != 100+want {
			t.Fatalf("budget %d: version 3 reused %d bytes in all, want %d", c.budget, m.reused.Load(), 100+want)
		}
	}
}

// installTiny installs version ver in m: one file of a tensor of 100 bytes per id (the i-th
// starting with byte i), each taken into a buffer of the memory's (a spare one when it has
// one).
func installTiny(m *baseMemory, ver uint64, ids ...ID) {
	c := m.newCapture()
	man := &manifest{Version: ver, Files: []manifestFile{{Path: "f", Kind: kindSafetensors}}}
	for i, id := range ids {
		b := c.buffer(100)
		b[0] = byte(i)
		c.add(id, b, crc32.Checksum(b, castagnoli))
		man.Files[0].Tensors = append(man.Files[0].Tensors, manifestTensor{Name: fmt.Sprint(i), ID: id, Begin: int64(100 * i), End: int64(100*i + 100)})
	}
	m.install(c, man)
}
