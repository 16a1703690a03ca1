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
// objects are and the cache keeps packs; the others as objects. A pack that early fetches
// (or tried to fetch) is not asked for again: its fetch is waited for, and its error is
// this one's.
func (p *cachePolicy) prefetchObjects(ids []ID, early *earlyPacks) error {
	p.mu.Lock()
	packsOf := p.packsOf
	p.mu.Unlock()
	pc, ok := p.rc.(PackCache)
	if packsOf == nil || !ok || len(ids) == 0 {
		return p.rc.Prefetch(ids)
	}
	packs, loose := packsOf(ids)
	var fetch []ID
	fromEarly := false
	for _, id := range packs {
		switch {
		case early.has(id):
			fromEarly = true
		case !pc.IsPackCached(id):
			fetch = append(fetch, id)
		}
	}
	if err := p.rc.Prefetch(loose); err != nil {
		return err
	}
	if err := early.wait(); err != nil && fromEarly {
		return fmt.Errorf("%d packs: %w", len(early.ids), err)
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

// earlyPacks is a fetch of packs started before the objects that a listing's new versions
// added are known: the packs that the new versions' own index records list (the writer put
// each version's new objects in them), fetched while the manifests are parsed, which for a
// version of 20,000 tensors takes about as long as the download (docs/benchmarks.md, figure
// moe). prefetchObjects then asks for no pack twice, and waits for these.
type earlyPacks struct {
	ids  map[ID]bool
	done chan struct{}
	err  error
}

// startEarly starts fetching packs (id -> size) that are not cached yet, when the policy
// fetches packs at all (a locator and a cache that keeps packs) and they take at most half
// the cache (as prefetchNew bounds objects); nil when it starts nothing. The caller waits for
// it (wait) before it returns.
func (p *cachePolicy) startEarly(packs map[ID]int64) *earlyPacks {
	p.mu.Lock()
	packsOf := p.packsOf
	p.mu.Unlock()
	pc, ok := p.rc.(PackCache)
	if packsOf == nil || !ok || len(packs) == 0 {
		return nil
	}
	var ids []ID
	var total int64
	for id, n := range packs {
		if !pc.IsPackCached(id) {
			ids = append(ids, id)
			total += n
		}
	}
	if len(ids) == 0 || total > p.rc.CacheLimit()/2 {
		return nil
	}
	e := &earlyPacks{ids: make(map[ID]bool, len(ids)), done: make(chan struct{})}
	for _, id := range ids {
		e.ids[id] = true
	}
	go func() {
		defer close(e.done)
		e.err = pc.PrefetchPacks(ids)
	}()
	return e
}

// wait waits for the fetch to end and returns its error (nil for no fetch).
func (e *earlyPacks) wait() error {
	if e == nil {
		return nil
	}
	<-e.done
	return e.err
}

// has reports whether the fetch took pack id.
func (e *earlyPacks) has(id ID) bool { return e != nil && e.ids[id] }

// packsNamed returns the packs that the loaded index records names list, with their sizes:
// the packs a version's writer wrote, named in its manifest (indexes). An index not loaded
// (gc consolidated it, or it is damaged) lists none.
func (p *packedObjects) packsNamed(names []string) map[ID]int64 {
	if len(names) == 0 {
		return nil
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[ID]int64{}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, x := range p.loaded {
		if !want[x.Name] {
			continue
		}
		for _, ip := range x.Packs {
			out[ID(ip.ID)] = ip.Size
		}
	}
	return out
}
