package store

import "fmt"

// PackCache is the optional part of a RemoteCache that keeps packs (store format 3) in its
// local cache beside objects (store/s3). The cache policy (cache_policy.go) fetches ahead the
// packs that hold a new version's objects, when the store's pack layer has told it where
// objects are (cachePolicy.packsOf); a backend without it has every object fetched as a
// loose one.
type PackCache interface {
	// PrefetchPacks fetches the packs ids whole into the local cache, several at a time, and
	// returns the first error once all have ended.
	PrefetchPacks(ids []ID) error
	// IsPackCached reports whether pack id is in the local cache (or waiting there for its
	// upload): opening it costs no request.
	IsPackCached(id ID) bool
}

// setPacksOf tells the policy where objects are (the pack layer's locator): from then on it
// fetches ahead the packs that hold a new version's objects, and the loose ones as objects.
func (p *cachePolicy) setPacksOf(f func(ids []ID) (packs []ID, loose []ID)) {
	p.mu.Lock()
	p.packsOf = f
	p.mu.Unlock()
}

// prefetchObjects has the cache fetch objects ids (none of them cached as a loose object):
// those in packs as their packs (the packs not cached yet), when the policy knows where
// objects are and the cache keeps packs; the others as objects.
func (p *cachePolicy) prefetchObjects(ids []ID) error {
	p.mu.Lock()
	packsOf := p.packsOf
	p.mu.Unlock()
	pc, ok := p.rc.(PackCache)
	if packsOf == nil || !ok || len(ids) == 0 {
		return p.rc.Prefetch(ids)
	}
	packs, loose := packsOf(ids)
	var fetch []ID
	for _, id := range packs {
		if !pc.IsPackCached(id) {
			fetch = append(fetch, id)
		}
	}
	if err := p.rc.Prefetch(loose); err != nil {
		return err
	}
	if len(fetch) == 0 {
		return nil
	}
	if err := pc.PrefetchPacks(fetch); err != nil {
		return fmt.Errorf("%d packs: %w", len(fetch), err)
	}
	return nil
}
