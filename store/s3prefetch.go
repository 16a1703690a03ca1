package store

import (
	"fmt"
	"os"
	"slices"
	"sync"
)

// noticeRemovedVersions compares a fresh listing with the versions seen before. A version
// that is gone was dropped by gc in another process, which may also have replaced delta
// objects by whole copies and deleted their bases: cached object files could then need
// objects that no longer exist, so the object cache is emptied (its files are re-fetched on
// demand; the materialized copy stays). Manifests of the dropped versions are forgotten.
func (b *s3Backend) noticeRemovedVersions(vs []uint64) {
	b.mu.Lock()
	var gone []uint64
	for v := range b.seen {
		if _, found := slices.BinarySearch(vs, v); !found {
			gone = append(gone, v)
		}
	}
	for _, v := range gone {
		delete(b.seen, v)
	}
	if len(gone) > 0 {
		clear(b.remote)
		b.listed = false
	}
	b.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	for _, v := range gone {
		os.Remove(b.manifestCachePath(v))
	}
	b.cache.purge()
	slices.Sort(gone)
	b.logf("s3: %d versions (v%d..v%d) were removed from %s (gc): emptied the local object cache", len(gone), gone[0], gone[len(gone)-1], b.c.loc)
}

// prefetchNew fetches into the cache the objects the versions new in this listing added:
// for each new version, the objects its manifest names that its predecessor's does not
// (which, for an RL step, are its delta objects). For a cache that has seen no version yet,
// it fetches the objects the latest version names, for the first build of the materialized
// copy. Downloads run in parallel (Concurrency at a time). Any failure fails the listing, so
// the store does not move to a version whose objects it cannot read; the next poll retries,
// and what was fetched stays cached.
func (b *s3Backend) prefetchNew(vs []uint64) error {
	b.mu.Lock()
	fresh := len(b.seen) == 0
	var news []uint64
	for _, v := range vs {
		if !b.seen[v] {
			news = append(news, v)
		}
	}
	b.mu.Unlock()
	if len(news) == 0 {
		return nil
	}
	want := map[ID]int64{} // object -> content length (a bound of its file's size)
	if fresh {
		objs, err := b.manifestObjects(news[len(news)-1])
		if err != nil {
			return err
		}
		want = objs
	} else {
		for _, v := range news {
			objs, err := b.manifestObjects(v)
			if err != nil {
				return err
			}
			i, _ := slices.BinarySearch(vs, v)
			if i > 0 {
				prev, err := b.manifestObjects(vs[i-1])
				if err != nil {
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
		b.mu.Lock()
		_, pending := b.pending[id]
		b.mu.Unlock()
		if _, cached := b.cache.size(id); !cached && !pending {
			ids = append(ids, id)
			total += n
		}
	}
	if total > b.cache.limit/2 {
		// More than the cache holds comfortably: fetching it all would evict what the
		// rebuild needs next. Reads fetch on demand instead.
		b.logf("s3: not prefetching %d objects (%d bytes of content) of v%d: more than half the object cache", len(ids), total, news[len(news)-1])
		return nil
	}
	return b.fetchAll(ids)
}

// manifestObjects returns the objects version v's manifest names, with their content
// lengths.
func (b *s3Backend) manifestObjects(v uint64) (map[ID]int64, error) {
	data, err := b.GetManifest(v)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("manifest of version %d: %w", v, err)
	}
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
	return objs, nil
}

// fetchAll downloads objects into the cache, Concurrency at a time (fetch takes a download
// token), and returns the first error after all have ended.
func (b *s3Backend) fetchAll(ids []ID) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	next := make(chan ID)
	for range min(len(ids), b.c.set.concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				f, err := b.fetch(id)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				f.Close()
			}
		}()
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("prefetch %d new objects: %d failed: %w", len(ids), len(errs), errs[0])
	}
	return nil
}
