package store

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// cachePolicy is the store's policy for the object cache: a backend's local cache of a remote store
// (RemoteCache: store/s3). It wraps the backend, so that every listing of the versions
// (Open, Refresh, gc, Verify) is followed by what the policy decides of versions gone, and
// the backend's own ListManifests stays a pure listing; what it fetches ahead, it fetches
// when the store tells it of a listing it is about to publish (prefetchListed: Open and
// Refresh, versionList.fetchAhead), not on the side of every listing:
//
//   - a version that was seen and is gone was dropped by gc in another process, which may
//     also have replaced delta objects by whole copies and deleted their bases: cached
//     object files could then need objects that no longer exist, so the cache is emptied
//     (files are fetched again on demand; the materialized copy stays);
//   - a reader that keeps a materialized copy has the objects each new version added (the
//     objects its manifest names that its predecessor's does not: for an RL step, its delta
//     objects) fetched into the cache, so that bringing the copy forward needs no request
//     and an unreachable remote store leaves the copy where it was. A cache that has seen
//     no version yet fetches the objects the latest version names, for the first build of
//     the copy. When that is more than half the cache, nothing is fetched ahead (it would
//     evict what the rebuild needs next); reads fetch on demand. A failed fetch fails the
//     Refresh (or Open), so the store does not move to a version whose objects it cannot
//     read; the next Refresh retries, and what was fetched stays cached.
//
// "Seen" and "fetched" start as the versions whose manifests the cache holds from earlier
// runs, grow with this process's seals, and shrink with its own gc; "seen" becomes each
// listing, "fetched" each listing whose new objects were fetched (prefetchListed).
type cachePolicy struct {
	Backend
	rc       RemoteCache
	q        Quarantiner // the wrapped backend's quarantine, asserted once; nil: none
	prefetch bool
	root     string
	log      *slog.Logger
	// packsOf splits objects into the packs that hold them and those that are loose (the
	// store's pack layer sets it at wiring: setPacksOf); nil: every object is loose. With it,
	// a new version's objects are fetched ahead as their packs (backend_packcache.go).
	packsOf func(ids []ID) (packs []ID, loose []ID)

	mu      sync.Mutex
	seen    map[uint64]bool // versions of the last listing (noticeRemoved)
	fetched map[uint64]bool // versions of the last listing whose objects were prefetched
}

func newCachePolicy(be Backend, rc RemoteCache, prefetch bool, root string, log *slog.Logger) *cachePolicy {
	p := &cachePolicy{Backend: be, rc: rc, prefetch: prefetch, root: root, log: log, seen: map[uint64]bool{}, fetched: map[uint64]bool{}}
	p.q, _ = be.(Quarantiner)
	for _, v := range rc.CachedVersions() {
		p.seen[v] = true
		p.fetched[v] = true
	}
	return p
}

func (p *cachePolicy) PutManifest(v uint64, data []byte) error {
	if err := p.Backend.PutManifest(v, data); err != nil {
		return err
	}
	p.mu.Lock()
	p.seen[v] = true
	p.fetched[v] = true
	p.mu.Unlock()
	return nil
}

func (p *cachePolicy) DeleteManifest(v uint64) error {
	if err := p.Backend.DeleteManifest(v); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.seen, v)
	delete(p.fetched, v)
	p.mu.Unlock()
	return nil
}

func (p *cachePolicy) ListManifests() ([]uint64, error) {
	vs, err := p.Backend.ListManifests()
	if err != nil {
		return nil, err
	}
	p.noticeRemoved(vs)
	p.mu.Lock()
	clear(p.seen)
	for _, v := range vs {
		p.seen[v] = true
	}
	p.mu.Unlock()
	return vs, nil
}

// prefetchListed is told of a listing of the versions (vs, ascending) that the store is
// about to publish (versionList.fetchAhead): a reader that keeps a materialized copy has the
// objects of the versions new since the last such listing fetched (prefetchNew). A failed
// fetch is returned, and the next listing it is told of fetches them again. load gives the
// parsed manifest of a version (versionList.loadVersion: the cache of parsed versions, so the
// new version is parsed once for the fetch and the copy brought forward, and the version
// before is usually parsed already); nil: each manifest is read and decoded here.
//
// packs returns the packs that versions' own pack indexes list (packedObjects.packsNamed; nil:
// none known): those of the versions whose objects are fetched start at once, while the
// manifests are parsed.
func (p *cachePolicy) prefetchListed(vs []uint64, load manifestLoader, packs func(vs []uint64) map[ID]int64) error {
	if !p.prefetch {
		return nil
	}
	if err := p.prefetchNew(vs, load, packs); err != nil {
		return err
	}
	p.mu.Lock()
	clear(p.fetched)
	for _, v := range vs {
		p.fetched[v] = true
	}
	p.mu.Unlock()
	return nil
}

// noticeRemoved compares a fresh listing with the versions seen before and tells the cache
// of those that are gone.
func (p *cachePolicy) noticeRemoved(vs []uint64) {
	p.mu.Lock()
	var gone []uint64
	for v := range p.seen {
		if _, found := slices.BinarySearch(vs, v); !found {
			gone = append(gone, v)
		}
	}
	for _, v := range gone {
		delete(p.seen, v)
	}
	p.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	slices.Sort(gone)
	p.rc.VersionsRemoved(gone)
	p.log.Info(fmt.Sprintf("%d versions (v%d..v%d) were removed from %s (gc): emptied the local object cache", len(gone), gone[0], gone[len(gone)-1], p.root))
}

// prefetchNew has the cache fetch the objects the versions new in this listing added. The
// cache is fresh when no version of the listing was fetched before.
func (p *cachePolicy) prefetchNew(vs []uint64, load manifestLoader, packs func(vs []uint64) map[ID]int64) error {
	p.mu.Lock()
	fresh := true
	var news []uint64
	for _, v := range vs {
		if p.fetched[v] {
			fresh = false
		} else {
			news = append(news, v)
		}
	}
	p.mu.Unlock()
	if len(news) == 0 {
		return nil
	}
	// The packs of the versions whose objects are fetched: all the new ones, or for a fresh
	// cache the newest (the one fetched unless its manifest is damaged; a wasted fetch is
	// bounded like any). Waited for on every return; a failure of it that matters is
	// prefetchObjects's.
	var early *earlyPacks
	if packs != nil {
		if fresh {
			early = p.startEarly(packs(news[len(news)-1:]))
		} else {
			early = p.startEarly(packs(news))
		}
	}
	defer early.wait()
	want := map[ID]int64{} // object -> content length (a bound of its file's size)
	if fresh {
		// The newest readable version: a damaged manifest is skipped, as the version list
		// skips it (logged there, and here).
		for i := len(news) - 1; i >= 0; i-- {
			objs, err := p.manifestObjects(news[i], load)
			if p.skipDamaged(news[i], err) {
				continue
			}
			if err != nil {
				return err
			}
			want = objs
			break
		}
	} else {
		for _, v := range news {
			objs, err := p.manifestObjects(v, load)
			if p.skipDamaged(v, err) {
				continue
			}
			if err != nil {
				return err
			}
			i, _ := slices.BinarySearch(vs, v)
			if i > 0 {
				prev, err := p.manifestObjects(vs[i-1], load)
				if err != nil && !p.skipDamaged(vs[i-1], err) {
					return err
				}
				for id := range prev {
					delete(objs, id)
				}
			}
			for id, n := range objs {
				want[id] = n
			}
		}
	}
	var ids []ID
	var total int64
	for id, n := range want {
		if !p.rc.IsCached(id) {
			ids = append(ids, id)
			total += n
		}
	}
	if total > p.rc.CacheLimit()/2 {
		p.log.Info(fmt.Sprintf("%s: not prefetching %d objects (%d bytes of content) of v%d: more than half the object cache", p.root, len(ids), total, news[len(news)-1]))
		return nil
	}
	if err := p.prefetchObjects(ids, early); err != nil {
		return fmt.Errorf("prefetch %d new objects: %w", len(ids), err)
	}
	return nil
}

// skipDamaged reports whether err says that version v's manifest is damaged: then its
// objects are not fetched ahead (logged), and the listing goes on, as the version list skips
// the version (noteDamaged) rather than fail. A failed request still fails the listing.
func (p *cachePolicy) skipDamaged(v uint64, err error) bool {
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return false
	}
	p.log.Warn(fmt.Sprintf("%s: the manifest of version %d is damaged: its objects are not fetched ahead (run weightfs verify --repair %s to move it aside)", p.root, v, p.root), "err", err)
	return true
}

// manifestLoader returns the parsed manifest of version v, checked (versionList.loadVersion).
type manifestLoader func(v uint64) (*manifest, error)

// manifestObjects returns the objects version v's manifest names, with their content
// lengths: from load's parsed manifest, or (load nil) from the manifest read and decoded.
func (p *cachePolicy) manifestObjects(v uint64, load manifestLoader) (map[ID]int64, error) {
	if load == nil {
		load = p.decodedManifest
	}
	m, err := load(v)
	if err != nil {
		return nil, err
	}
	return manifestObjectSizes(m), nil
}

// decodedManifest reads and decodes version v's manifest: manifestObjects without a cache of
// parsed versions.
func (p *cachePolicy) decodedManifest(v uint64) (*manifest, error) {
	data, err := p.GetManifest(v)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("manifest of version %d: %w", v, err)
	}
	return m, nil
}

// manifestObjectSizes returns the objects manifest m names, with their content lengths.
func manifestObjectSizes(m *manifest) map[ID]int64 {
	objs := map[ID]int64{}
	for i := range m.Files {
		f := &m.Files[i]
		if f.Kind == kindBlob {
			objs[f.ID] = f.Size
			continue
		}
		objs[f.Header] = f.HeaderLen
		for j := range f.Tensors {
			t := &f.Tensors[j]
			objs[t.ID] = t.End - t.Begin
		}
	}
	return objs
}

// The quarantine of a backend with a remote cache (store/s3), forwarded to its Quarantiner:
// the policy is a Quarantiner in front of it. One that has none lists nothing in
// quarantine, and Repair refuses it (canQuarantine).

func (p *cachePolicy) canQuarantine() bool {
	return p.q != nil
}

func (p *cachePolicy) QuarantineManifest(v uint64) (string, error) {
	if p.q != nil {
		return p.q.QuarantineManifest(v)
	}
	return "", fmt.Errorf("quarantine version %d: not supported for this store's backend", v)
}

func (p *cachePolicy) QuarantineObject(id ID) (string, error) {
	if p.q != nil {
		return p.q.QuarantineObject(id)
	}
	return "", fmt.Errorf("quarantine object %s: not supported for this store's backend", id)
}

func (p *cachePolicy) ListQuarantined() ([]uint64, error) {
	if p.q != nil {
		return p.q.ListQuarantined()
	}
	return nil, nil
}

func (p *cachePolicy) QuarantineManifestPath(v uint64) string {
	if p.q != nil {
		return p.q.QuarantineManifestPath(v)
	}
	return ""
}

func (p *cachePolicy) QuarantineObjectPath(id ID) string {
	if p.q != nil {
		return p.q.QuarantineObjectPath(id)
	}
	return ""
}
