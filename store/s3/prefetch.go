package s3

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/weightfs/weightfs/store"
)

// The backend's side of store.RemoteCache: the store decides what to fetch ahead and when
// the cache must be emptied (store/cache_policy.go); these do it.

// fileObject is an object open from a local file: the cache, or an upload not yet done.
type fileObject struct {
	*os.File
	size int64
}

func (o fileObject) Size() int64 { return o.size }

// CachedVersions returns the versions whose manifests are in the cache directory.
func (b *Backend) CachedVersions() []uint64 {
	entries, _ := os.ReadDir(filepath.Join(b.dir, cacheManifests))
	var vs []uint64
	for _, e := range entries {
		if v, ok := store.ParseManifestName(e.Name()); ok {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

// CacheLimit is the byte bound of the object cache (Config.ObjectCacheBytes).
func (b *Backend) CacheLimit() int64 { return b.cache.limit }

// IsCached reports whether object id is in the object cache or waiting for its upload.
func (b *Backend) IsCached(id store.ID) bool {
	b.mu.Lock()
	_, pending := b.pending[id]
	b.mu.Unlock()
	_, cached := b.cache.size(id)
	return pending || cached
}

// VersionsRemoved forgets what the cache knows of the bucket's objects, drops the manifests
// of the versions gone and empties the object cache: gc in another process may have
// replaced delta objects by whole copies and deleted their bases.
func (b *Backend) VersionsRemoved(vs []uint64) {
	b.mu.Lock()
	clear(b.remote)
	b.listed = false
	b.mu.Unlock()
	for _, v := range vs {
		os.Remove(b.manifestCachePath(v))
		b.manifests.forget(v)
	}
	b.cache.purge()
}

// Prefetch downloads objects into the cache, Concurrency at a time (fetch takes a download
// token), and returns the first error after all have ended. An object missing from the
// bucket or damaged there (fetch downloaded it twice) is damage of the versions that name it,
// which no retry mends, so it is logged and skipped rather than failing the prefetch (that
// fails the listing and would hold the reader at its version for ever, or fail its open).
// Reads that need it fail with ErrCorrupt; the other versions stay readable.
func (b *Backend) Prefetch(ids []store.ID) error {
	return b.prefetchEach(ids, "objects", "an object a version names", func(id store.ID) (io.Closer, error) {
		return b.fetch(id)
	})
}

// prefetchEach runs fetch over ids, Concurrency at a time, closing what each returns; what is
// missing or damaged in the bucket is logged (naming what, an object or a pack) and skipped,
// any other error is counted and the first returned once all have ended.
func (b *Backend) prefetchEach(ids []store.ID, kind, what string, fetch func(store.ID) (io.Closer, error)) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	next := make(chan store.ID)
	for range min(len(ids), b.c.set.concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				f, err := fetch(id)
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, store.ErrCorrupt) {
					b.log.Warn("S3 prefetch: "+what+" is missing or damaged in the bucket; reads that need it fail as damaged",
						"id", id.String(), "err", err)
					continue
				}
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
		return fmt.Errorf("%d of %d %s failed: %w", len(errs), len(ids), kind, errs[0])
	}
	return nil
}
