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

// packsOf is the cache policy's locator (setPacksOf): the distinct packs that hold ids, and
// the ids no pack holds (loose objects of a store of format 1 or 2). An id not located is
// looked for once more after the indexes are read again (a version sealed by another
// process whose index the layer has not read yet), so that it is not fetched as a loose
// object that does not exist.
func (p *packedObjects) packsOf(ids []ID) (packs []ID, loose []ID) {
	seen := map[ID]bool{}
	var missing []ID
	for _, id := range ids {
		if l, ok := p.locate(id); ok {
			if !seen[l.Pack] {
				seen[l.Pack] = true
				packs = append(packs, l.Pack)
			}
			continue
		}
		missing = append(missing, id)
	}
	if len(missing) > 0 {
		if err := p.reload(); err != nil {
			p.log.Warn("pack indexes could not be read again to fetch a version ahead", "err", err)
		}
	}
	for _, id := range missing {
		if l, ok := p.locate(id); ok {
			if !seen[l.Pack] {
				seen[l.Pack] = true
				packs = append(packs, l.Pack)
			}
			continue
		}
		loose = append(loose, id)
	}
	return packs, loose
}
