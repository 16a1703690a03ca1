package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// s3Backend keeps a store in an S3 bucket under a prefix, with the local layout's keys:
//
//	PREFIX/weightfs-store        format file
//	PREFIX/objects/ab/<64 hex>   objects
//	PREFIX/versions/v000043      manifests
//	PREFIX/lock                  the writer's lease (lease.go)
//
// and this process's local state in its cache directory:
//
//	CACHE/objects/ab/<64 hex>    objects fetched from S3 or uploaded to it (objcache.go: LRU)
//	CACHE/upload/<64 hex>        objects put but not yet uploaded (the store's Seal waits)
//	CACHE/manifests/v000043      manifests seen (immutable; dropped when gc removes them)
//	CACHE/tmp/                   files being written
//	CACHE/s3-origin.json         which store the cache belongs to
//	CACHE/s3-stats.json          the traffic counters (S3Stats)
//
// Uploads run in the background on Concurrency workers; SyncObjects waits for them (the
// objects are durable in S3 once their PUT returned). OpenObject serves cached files; a miss
// returns a lazy handle that fetches the first bytes by a ranged GET (object headers) and the
// whole object into the cache on any other read. A read-only store that keeps a materialized
// copy prefetches, when it lists manifests, exactly the objects each new version added
// (s3prefetch.go), so that bringing the copy forward needs no request and an unreachable
// S3 leaves the copy where it was.
type s3Backend struct {
	c     *s3Client
	cache *objectCache
	dir   string // the cache directory
	// writer: this process holds the lease and is the only one that writes the bucket, so
	// its listing of the objects stays exact once taken.
	writer   bool
	prefetch bool
	lease    *lease // the writer's, for fencing manifests and deletes
	logf     func(string, ...any)

	ctx    context.Context
	cancel context.CancelFunc
	dl     chan struct{} // one token per whole-object download in flight
	queue  chan *uploadJob
	wg     sync.WaitGroup // upload workers

	mu       sync.Mutex
	cond     *sync.Cond // signalled when an upload ends
	closed   bool
	pending  map[ID]*uploadJob // put, not yet uploaded (or failed: retried at SyncObjects)
	inflight int               // jobs queued or running
	remote   map[ID]int64      // objects known to be in S3, with their sizes
	listed   bool              // writer: remote holds every object of the bucket
	flights  map[ID]*fetchFlight
	seen     map[uint64]bool // versions of the last listing whose objects were prefetched

	listMu sync.Mutex // one full object listing at a time
}

var _ Backend = (*s3Backend)(nil)

// Cache layout names.
const (
	s3CacheObjects   = "objects"
	s3CacheUpload    = "upload"
	s3CacheManifests = "manifests"
	s3CacheTmp       = "tmp"
)

func newS3Backend(c *s3Client, dir string, writer, prefetch bool, logf func(string, ...any)) (*s3Backend, error) {
	for _, d := range []string{s3CacheUpload, s3CacheManifests, s3CacheTmp} {
		if err := os.MkdirAll(filepath.Join(dir, d), cacheDirPerm); err != nil {
			return nil, fmt.Errorf("S3 cache: %w", err)
		}
	}
	cache, err := openObjectCache(filepath.Join(dir, s3CacheObjects), c.set.cacheBytes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &s3Backend{
		c: c, cache: cache, dir: dir, writer: writer, prefetch: prefetch, logf: logf,
		ctx: ctx, cancel: cancel,
		dl:      make(chan struct{}, c.set.concurrency),
		queue:   make(chan *uploadJob, 2*c.set.concurrency),
		pending: map[ID]*uploadJob{}, remote: map[ID]int64{}, flights: map[ID]*fetchFlight{},
		seen: map[uint64]bool{},
	}
	b.cond = sync.NewCond(&b.mu)
	// Half-written downloads of a process that died.
	if err := clearDir(filepath.Join(dir, s3CacheTmp)); err != nil {
		return nil, err
	}
	// The manifests cached by an earlier run are the versions it had seen (and prefetched).
	entries, err := os.ReadDir(filepath.Join(dir, s3CacheManifests))
	if err != nil {
		return nil, fmt.Errorf("S3 cache: %w", err)
	}
	for _, e := range entries {
		if v, ok := parseManifestName(e.Name()); ok {
			b.seen[v] = true
		} else {
			os.RemoveAll(filepath.Join(dir, s3CacheManifests, e.Name()))
		}
	}
	if writer {
		for range c.set.concurrency {
			b.wg.Add(1)
			go b.uploadWorker()
		}
	}
	return b, nil
}

func (b *s3Backend) close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	b.cond.Broadcast()
	b.mu.Unlock()
	b.writeStats()
	return nil
}

func (b *s3Backend) objectKey(id ID) string {
	h := id.String()
	return b.c.loc.key("objects/" + h[:2] + "/" + h)
}

func (b *s3Backend) manifestKey(v uint64) string {
	return b.c.loc.key("versions/" + manifestName(v))
}

// stats is the counters with the cache's numbers filled in.
func (b *s3Backend) stats() S3Stats {
	st := b.c.stats.snapshot()
	st.CachedObjects, st.CachedBytes, st.CacheEvictions = b.cache.stats()
	return st
}

func (b *s3Backend) writeStats() { b.c.stats.writeFile(b.dir, b.stats()) }

func (b *s3Backend) CreateTemp() (*os.File, error) {
	return createTempObject(filepath.Join(b.dir, s3CacheTmp))
}

func (b *s3Backend) RemoveTemp(f *os.File) { removeTempObject(f) }

func (b *s3Backend) OpenObject(id ID) (ObjectFile, error) {
	b.mu.Lock()
	if j := b.pending[id]; j != nil {
		// Opened under the lock: the upload worker moves the file only while holding it.
		f, err := os.Open(j.path)
		b.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("open object %s waiting for upload: %w", id, err)
		}
		return localObject{f, j.size}, nil
	}
	size, known := b.remote[id]
	b.mu.Unlock()
	if f, cached, ok := b.cache.open(id); ok {
		b.c.stats.add(&b.c.stats.cacheHits, 1)
		return localObject{f, cached}, nil
	}
	if !known {
		var err error
		if size, _, err = b.c.stat(b.ctx, b.objectKey(id)); err != nil {
			return nil, fmt.Errorf("open object %s: %w", id, err)
		}
		b.noteRemote(id, size)
	}
	return &remoteObject{b: b, id: id, size: size}, nil
}

func (b *s3Backend) noteRemote(id ID, size int64) {
	b.mu.Lock()
	b.remote[id] = size
	b.mu.Unlock()
}

func (b *s3Backend) StatObject(id ID) (int64, error) {
	b.mu.Lock()
	if j := b.pending[id]; j != nil {
		b.mu.Unlock()
		return j.size, nil
	}
	size, ok := b.remote[id]
	listed := b.listed
	b.mu.Unlock()
	if ok {
		return size, nil
	}
	if b.writer {
		// The only writer knows the bucket's objects from one listing (taken once) and its
		// own puts and deletes since: no request per object.
		if !listed {
			if err := b.ensureListed(); err != nil {
				return 0, fmt.Errorf("stat object %s: %w", id, err)
			}
			return b.StatObject(id)
		}
		return 0, fmt.Errorf("stat object %s: %w", id, fs.ErrNotExist)
	}
	if size, ok := b.cache.size(id); ok {
		return size, nil
	}
	size, _, err := b.c.stat(b.ctx, b.objectKey(id))
	if err != nil {
		return 0, fmt.Errorf("stat object %s: %w", id, err)
	}
	b.noteRemote(id, size)
	return size, nil
}

// ensureListed takes the writer's one listing of the bucket's objects unless another caller
// did meanwhile.
func (b *s3Backend) ensureListed() error {
	b.listMu.Lock()
	defer b.listMu.Unlock()
	b.mu.Lock()
	listed := b.listed
	b.mu.Unlock()
	if listed {
		return nil
	}
	return b.listObjectsLocked(func(ID, int64) error { return nil })
}

func (b *s3Backend) ListObjects(fn func(id ID, size int64) error) error {
	b.listMu.Lock()
	defer b.listMu.Unlock()
	return b.listObjectsLocked(fn)
}

func (b *s3Backend) listObjectsLocked(fn func(id ID, size int64) error) error {
	found := map[ID]int64{}
	err := b.c.list(b.ctx, "objects/", func(rel string, size int64) error {
		fan, name, ok := strings.Cut(strings.TrimPrefix(rel, "objects/"), "/")
		id, err := ParseID(name)
		if !ok || err != nil || len(fan) != 2 || !strings.HasPrefix(name, fan) {
			return nil // not an object key; the layout has nothing else here
		}
		found[id] = size
		return fn(id, size)
	})
	if err != nil {
		return fmt.Errorf("list objects: %w", err)
	}
	b.mu.Lock()
	for id, size := range found {
		b.remote[id] = size
	}
	if b.writer {
		// Exact from now on: only this process changes the bucket.
		for id := range b.remote {
			if _, ok := found[id]; !ok {
				delete(b.remote, id)
			}
		}
		b.listed = true
	}
	b.mu.Unlock()
	return nil
}

func (b *s3Backend) DeleteObject(id ID) error {
	if err := b.fence(false); err != nil {
		return fmt.Errorf("delete object %s: %w", id, err)
	}
	if err := b.c.remove(b.ctx, b.objectKey(id)); err != nil {
		return fmt.Errorf("delete object %s: %w", id, err)
	}
	b.mu.Lock()
	delete(b.remote, id)
	b.mu.Unlock()
	b.cache.remove(id)
	return nil
}

// fence refuses a change of the bucket by a writer that no longer holds its lease; strict
// renews the lease first (before a manifest makes a version visible).
func (b *s3Backend) fence(strict bool) error {
	if b.lease == nil {
		return fmt.Errorf("%s: %w", b.c.loc, ErrReadOnly)
	}
	return b.lease.ensure(b.ctx, strict)
}

func (b *s3Backend) PutManifest(v uint64, data []byte) error {
	if err := b.fence(true); err != nil {
		return fmt.Errorf("write manifest of version %d: %w", v, err)
	}
	// Create only: a version, once sealed, is never overwritten, whoever tries.
	_, err := b.c.putBytes(b.ctx, b.manifestKey(v), data, putCond{ifNoneMatch: true})
	if isPrecondition(err) {
		// Our own earlier attempt may have landed with its answer lost: same bytes, done.
		have, _, gerr := b.c.getBytes(b.ctx, b.manifestKey(v), nil)
		if gerr == nil && string(have) == string(data) {
			err = nil
		} else {
			err = fmt.Errorf("version %d already exists in %s, written by another writer: %w", v, b.c.loc, ErrLocked)
		}
	}
	if err != nil {
		return fmt.Errorf("write manifest of version %d: %w", v, err)
	}
	b.cacheManifest(v, data)
	b.mu.Lock()
	b.seen[v] = true
	b.mu.Unlock()
	b.writeStats()
	return nil
}

func (b *s3Backend) manifestCachePath(v uint64) string {
	return filepath.Join(b.dir, s3CacheManifests, manifestName(v))
}

// cacheManifest keeps a manifest's bytes on local disk (a failure only costs a download).
func (b *s3Backend) cacheManifest(v uint64, data []byte) {
	tmp, err := os.CreateTemp(filepath.Join(b.dir, s3CacheTmp), "manifest-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), b.manifestCachePath(v))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

func (b *s3Backend) GetManifest(v uint64) ([]byte, error) {
	if data, err := os.ReadFile(b.manifestCachePath(v)); err == nil {
		return data, nil
	}
	data, _, err := b.c.getBytes(b.ctx, b.manifestKey(v), &b.c.stats.manifestBytes)
	if err != nil {
		return nil, fmt.Errorf("read manifest of version %d: %w", v, err)
	}
	b.c.stats.add(&b.c.stats.manifestDownloads, 1)
	b.cacheManifest(v, data)
	b.writeStats()
	return data, nil
}

func (b *s3Backend) ListManifests() ([]uint64, error) {
	var vs []uint64
	err := b.c.list(b.ctx, "versions/", func(rel string, _ int64) error {
		if v, ok := parseManifestName(strings.TrimPrefix(rel, "versions/")); ok {
			vs = append(vs, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	slices.Sort(vs)
	vs = slices.Compact(vs)
	b.noticeRemovedVersions(vs)
	if b.prefetch {
		if err := b.prefetchNew(vs); err != nil {
			b.writeStats()
			return nil, err
		}
	}
	b.mu.Lock()
	clear(b.seen)
	for _, v := range vs {
		b.seen[v] = true
	}
	b.mu.Unlock()
	b.writeStats()
	return vs, nil
}

func (b *s3Backend) DeleteManifest(v uint64) error {
	if err := b.fence(false); err != nil {
		return fmt.Errorf("delete manifest of version %d: %w", v, err)
	}
	if err := b.c.remove(b.ctx, b.manifestKey(v)); err != nil {
		return fmt.Errorf("delete manifest of version %d: %w", v, err)
	}
	b.mu.Lock()
	delete(b.seen, v)
	b.mu.Unlock()
	os.Remove(b.manifestCachePath(v))
	return nil
}

// CleanTemp drops local files of a writer that died: uploads it never finished belong to no
// sealed version (and may not be in S3), and temporary files.
func (b *s3Backend) CleanTemp() error {
	b.mu.Lock()
	busy := len(b.pending) > 0
	b.mu.Unlock()
	if busy {
		return nil
	}
	if err := clearDir(filepath.Join(b.dir, s3CacheUpload)); err != nil {
		return err
	}
	return clearDir(filepath.Join(b.dir, s3CacheTmp))
}

// clearDir removes everything inside dir.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clean %s: %w", dir, err)
		}
	}
	return nil
}
