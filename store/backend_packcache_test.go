package store

import (
	"log/slog"
	"slices"
	"testing"
)

// fakeRemote is a RemoteCache that records what it is asked to fetch; fakePackRemote keeps
// packs as well (PackCache).
type fakeRemote struct {
	prefetched []ID
}

func (f *fakeRemote) CachedVersions() []uint64 { return nil }
func (f *fakeRemote) CacheLimit() int64        { return 1 << 30 }
func (f *fakeRemote) IsCached(ID) bool         { return false }
func (f *fakeRemote) VersionsRemoved([]uint64) {}
func (f *fakeRemote) Prefetch(ids []ID) error {
	f.prefetched = append(f.prefetched, ids...)
	return nil
}
func (f *fakeRemote) sorted() []ID { return sortedIDs(f.prefetched) }
func sortedIDs(ids []ID) []ID      { s := slices.Clone(ids); slices.SortFunc(s, compareIDs); return s }
func compareIDs(a, b ID) int       { return slices.Compare(a[:], b[:]) }

type fakePackRemote struct {
	fakeRemote
	cached map[ID]bool
	packs  []ID
}

func (f *fakePackRemote) PrefetchPacks(ids []ID) error { f.packs = append(f.packs, ids...); return nil }
func (f *fakePackRemote) IsPackCached(id ID) bool      { return f.cached[id] }

// TestCachePolicyPrefetchesPacks: once the pack layer tells the cache policy where objects
// are (setPacksOf), a new version's objects are fetched ahead as the packs holding them (but
// those already cached) and the loose ones as objects; without a locator, or with a cache
// that keeps no packs, every object is fetched as an object (format 2's behaviour).
func TestCachePolicyPrefetchesPacks(t *testing.T) {
	a, b, c := IDOf([]byte("a")), IDOf([]byte("b")), IDOf([]byte("c"))
	p1, p2 := IDOf([]byte("pack 1")), IDOf([]byte("pack 2"))
	all := []ID{a, b, c}
	locate := func(ids []ID) (packs, loose []ID) {
		for _, id := range ids {
			switch id {
			case a:
				packs = append(packs, p1)
			case b:
				packs = append(packs, p2)
			default:
				loose = append(loose, id)
			}
		}
		return packs, loose
	}
	log := slog.New(slog.DiscardHandler)

	plain := &fakePackRemote{cached: map[ID]bool{}}
	p := newCachePolicy(nil, plain, true, "test", log)
	if err := p.prefetchObjects(all); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plain.sorted(), sortedIDs(all)) || len(plain.packs) != 0 {
		t.Fatalf("without a locator: objects %d, packs %d; want the 3 objects and no pack", len(plain.prefetched), len(plain.packs))
	}

	noPacks := &fakeRemote{}
	p = newCachePolicy(nil, noPacks, true, "test", log)
	p.setPacksOf(locate)
	if err := p.prefetchObjects(all); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(noPacks.sorted(), sortedIDs(all)) {
		t.Fatalf("a cache without packs: fetched %d objects, want the 3", len(noPacks.prefetched))
	}

	packed := &fakePackRemote{cached: map[ID]bool{p2: true}}
	p = newCachePolicy(nil, packed, true, "test", log)
	p.setPacksOf(locate)
	if err := p.prefetchObjects(all); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(packed.prefetched, []ID{c}) || !slices.Equal(packed.packs, []ID{p1}) {
		t.Fatalf("with a locator: objects %v, packs %v; want [c] and [pack 1] (pack 2 is cached)", packed.prefetched, packed.packs)
	}
}
