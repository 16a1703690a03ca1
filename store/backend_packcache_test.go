package store

import (
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
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
	if err := p.prefetchObjects(all, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plain.sorted(), sortedIDs(all)) || len(plain.packs) != 0 {
		t.Fatalf("without a locator: objects %d, packs %d; want the 3 objects and no pack", len(plain.prefetched), len(plain.packs))
	}

	noPacks := &fakeRemote{}
	p = newCachePolicy(nil, noPacks, true, "test", log)
	p.setPacksOf(locate)
	if err := p.prefetchObjects(all, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(noPacks.sorted(), sortedIDs(all)) {
		t.Fatalf("a cache without packs: fetched %d objects, want the 3", len(noPacks.prefetched))
	}

	packed := &fakePackRemote{cached: map[ID]bool{p2: true}}
	p = newCachePolicy(nil, packed, true, "test", log)
	p.setPacksOf(locate)
	if err := p.prefetchObjects(all, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(packed.prefetched, []ID{c}) || !slices.Equal(packed.packs, []ID{p1}) {
		t.Fatalf("with a locator: objects %v, packs %v; want [c] and [pack 1] (pack 2 is cached)", packed.prefetched, packed.packs)
	}
}

// TestCachePolicyEarlyPacks: packs named before the objects are known (the new version's own
// pack indexes) are fetched at once, unless cached or more than half the cache; the fetch of
// the objects then asks for none of them again, waits for them, and fails with their fetch
// only when it needed one of them.
func TestCachePolicyEarlyPacks(t *testing.T) {
	a, b, c := IDOf([]byte("a")), IDOf([]byte("b")), IDOf([]byte("c"))
	p1, p2, p3 := IDOf([]byte("pack 1")), IDOf([]byte("pack 2")), IDOf([]byte("pack 3"))
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
	remote := &fakePackRemote{cached: map[ID]bool{p3: true}}
	p := newCachePolicy(nil, remote, true, "test", log)
	p.setPacksOf(locate)
	early := p.startEarly(map[ID]int64{p1: 100, p3: 100})
	if err := early.wait(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(remote.packs, []ID{p1}) {
		t.Fatalf("early fetch: packs %v, want [pack 1] (pack 3 is cached)", remote.packs)
	}
	if err := p.prefetchObjects([]ID{a, b, c}, early); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(remote.packs, []ID{p1, p2}) || !slices.Equal(remote.prefetched, []ID{c}) {
		t.Fatalf("after the objects' fetch: packs %v, objects %v; want [pack 1, pack 2] and [c]", remote.packs, remote.prefetched)
	}
	if e := p.startEarly(map[ID]int64{p2: remote.CacheLimit()}); e != nil {
		t.Fatal("an early fetch of more than half the cache was started")
	}

	// An early fetch that failed: its error is the objects' fetch's when that needs one of
	// its packs, and no pack of it is asked for again.
	failing := &fakePackRemote{cached: map[ID]bool{}}
	p = newCachePolicy(nil, failing, true, "test", log)
	p.setPacksOf(locate)
	early = &earlyPacks{ids: map[ID]bool{p1: true}, done: make(chan struct{}), err: errors.New("early failed")}
	close(early.done)
	if err := p.prefetchObjects([]ID{a, c}, early); err == nil || !strings.Contains(err.Error(), "early failed") || len(failing.packs) != 0 {
		t.Fatalf("objects of pack 1, whose early fetch failed: %v (packs fetched %v), want that failure and none", err, failing.packs)
	}
	if err := p.prefetchObjects([]ID{b, c}, early); err != nil || !slices.Equal(failing.packs, []ID{p2}) {
		t.Fatalf("objects of pack 2 beside the failed early fetch of pack 1: %v (packs %v), want no error and [pack 2]", err, failing.packs)
	}
}

// TestCachePolicyEarlyPacksOfFetchedVersions: the packs fetched early are those of the
// versions whose objects are fetched: the new ones since the last listing, and for a fresh
// cache the newest alone (not every version a first listing read).
func TestCachePolicyEarlyPacksOfFetchedVersions(t *testing.T) {
	remote := &fakePackRemote{cached: map[ID]bool{}}
	p := newCachePolicy(nil, remote, true, "test", slog.New(slog.DiscardHandler))
	p.setPacksOf(func(ids []ID) (packs, loose []ID) { return nil, ids })
	load := func(v uint64) (*manifest, error) { return &manifest{Version: v}, nil }
	var asked [][]uint64
	packs := func(vs []uint64) map[ID]int64 {
		asked = append(asked, slices.Clone(vs))
		return nil
	}
	if err := p.prefetchListed([]uint64{1, 2, 3}, load, packs); err != nil {
		t.Fatal(err)
	}
	if err := p.prefetchListed([]uint64{1, 2, 3, 4, 5}, load, packs); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || !slices.Equal(asked[0], []uint64{3}) || !slices.Equal(asked[1], []uint64{4, 5}) {
		t.Fatalf("early packs asked for versions %v, want [[3] [4 5]]", asked)
	}
}

// remoteLocal is a local store's backend dressed as a remote one's local cache
// (RemoteCache, with nothing to fetch), so that a store opened on it has a cache policy; it
// counts the manifests read.
type remoteLocal struct {
	*localBackend
	manifestReads atomic.Int64
}

func (r *remoteLocal) GetManifest(v uint64) ([]byte, error) {
	r.manifestReads.Add(1)
	return r.localBackend.GetManifest(v)
}
func (r *remoteLocal) CachedVersions() []uint64 { return nil }
func (r *remoteLocal) CacheLimit() int64        { return 1 << 40 }
func (r *remoteLocal) IsCached(ID) bool         { return true }
func (r *remoteLocal) Prefetch([]ID) error      { return nil }
func (r *remoteLocal) VersionsRemoved([]uint64) {}

// TestFetchAheadParsesManifestOnce: a reader behind a cache policy that catches up with a
// new version reads its manifest for the listing and once more to parse it, which the fetch
// ahead and the copy brought forward share (the version cache); the policy read and decoded
// the new manifest and the one before on its own as well (four reads, three decodes of a
// manifest of as many tensors as the model). The objects it fetches ahead are those of the
// manifests as decoded directly (the reference path, manifestObjects without a loader).
func TestFetchAheadParsesManifestOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	a, b := bf16Like(rng, 24<<10), bf16Like(rng, 8<<10)
	file := func(a, b []byte) []byte {
		return safetensorsFile(t, testTensor{"a", "BF16", []int64{int64(len(a) / 2)}, a}, testTensor{"b", "BF16", []int64{int64(len(b) / 2)}, b})
	}
	v1 := map[string][]byte{"model.safetensors": file(a, b), "config.json": []byte(`{"v": 1}`)}
	v2 := map[string][]byte{"model.safetensors": file(perturb(rng, a, 2, 0.01), perturb(rng, b, 2, 0.01)), "config.json": []byte(`{"v": 2}`)}
	w, root := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitTree(t, w, 1, v1)
	_, format, err := localFormat(root)
	if err != nil {
		t.Fatal(err)
	}
	var be *remoteLocal
	r, err := OpenBackend(Opening{Root: root, Format: format, NewBackend: func(string) (Backend, error) {
		lb, err := NewLocalBackend(root)
		if err != nil {
			return nil, err
		}
		be = &remoteLocal{localBackend: lb.(*localBackend)}
		return be, nil
	}}, Options{ReadOnly: true, Materialize: true, CacheDir: t.TempDir(), Logger: logtest.New(func(string, ...any) {})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore(t, r) })
	if r.be.policy == nil {
		t.Fatal("the reader has no cache policy")
	}
	commitTree(t, w, 2, v2)
	be.manifestReads.Store(0)
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Latest(); v != 2 {
		t.Fatalf("latest %d after Refresh, want 2", v)
	}
	if n := be.manifestReads.Load(); n > 2 {
		t.Errorf("the catch-up read %d manifests, want 2 (version 2's: listed, then parsed once)", n)
	}
	for p, want := range v2 {
		mustEqualBytes(t, p, readWhole(t, r, 2, p), want)
	}
	for _, v := range []uint64{1, 2} {
		fast, err := r.be.policy.manifestObjects(v, r.versions.parsedManifest)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := r.be.policy.manifestObjects(v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(fast, ref) || len(ref) != 4 {
			t.Fatalf("version %d: the parsed manifest names %d objects, the decoded one %d (want 4: the header, two tensors, the config; the same)", v, len(fast), len(ref))
		}
	}
}
