package s3

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/weightfs/weightfs/store"
)

// Backend keeps a store in an S3 bucket under a prefix, with the local layout's keys:
//
//	PREFIX/weightfs-store        format file
//	PREFIX/objects/ab/<64 hex>   objects
//	PREFIX/packs/<64 hex>        packs (store format 3: many objects each; packs.go)
//	PREFIX/index/NAME            pack indexes (records of kind store.RecordIndex; records.go)
//	PREFIX/versions/v000043      manifests
//	PREFIX/lock                  the writer's lease (lease.go)
//	PREFIX/latest                the change hint (hint.go), rewritten at every seal
//
// and this process's local state in the store's cache directory:
//
//	CACHE/objects/ab/<64 hex>    objects fetched from S3 or uploaded to it (objcache.go: LRU)
//	CACHE/objects/packs/<64 hex> packs fetched or uploaded (the same LRU and bound)
//	CACHE/upload/<64 hex>        objects put but not yet uploaded (the store's Seal waits)
//	CACHE/upload/pack-<64 hex>   packs put but not yet uploaded
//	CACHE/manifests/v000043      manifests seen (immutable; dropped when gc removes them)
//	CACHE/index/NAME             pack indexes seen (immutable; dropped when a listing lacks them)
//	CACHE/tmp/                   files being written
//	CACHE/s3-origin.json         which store the cache belongs to
//	CACHE/s3-stats.json          the traffic counters (Stats)
//
// Uploads run in the background on Concurrency workers; SyncObjects waits for them (the
// objects are durable in S3 once their PUT returned). OpenObject serves cached files; a miss
// returns a lazy handle that fetches the first bytes by a ranged GET (object headers) and the
// whole object into the cache on any other read. It is a store.RemoteCache: the store
// decides what to fetch ahead (a reader's new versions' objects) and tells it when versions
// disappeared (store/cache_policy.go); its ListManifests is a pure listing.
type Backend struct {
	c     *client
	cache *objectCache
	dir   string // the cache directory
	// writer: this process holds the lease and is the only one that writes the bucket, so
	// its listing of the objects stays exact once taken.
	writer bool
	lease  *lease // the writer's, for fencing manifests and deletes
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	dl     chan struct{} // one token per whole-object download in flight
	queue  chan *uploadJob
	wg     sync.WaitGroup // upload workers

	mu       sync.Mutex
	cond     *sync.Cond // signalled when an upload ends
	closed   bool
	pending  map[store.ID]*uploadJob // put, not yet uploaded (or failed: retried at SyncObjects)
	packs    map[store.ID]*uploadJob // packs put, not yet uploaded (packs.go)
	inflight int                     // jobs queued or running
	remote   map[store.ID]int64      // objects known to be in S3, with their sizes
	listed   bool                    // writer: remote holds every object of the bucket
	flights  map[store.ID]*fetchFlight
	pflights map[store.ID]*fetchFlight // downloads of packs
	// packWhole: a pack up to this size goes up by one PUT and comes down by one GET
	// (packs.go); tests make it smaller.
	packWhole int64

	listMu sync.Mutex // one full object listing at a time

	hint hintState // the change hint: the writer's last write, the reader's last ETag

	manifests checkedManifests // the manifests read, written or checked (manifest_cache.go)
}

var (
	_ store.Backend       = (*Backend)(nil)
	_ store.RemoteCache   = (*Backend)(nil)
	_ store.VersionHinter = (*Backend)(nil)
)

// Cache layout names.
const (
	cacheObjects   = "objects"
	cacheUpload    = "upload"
	cacheManifests = "manifests"
	cacheTmp       = "tmp"
)

// The cache directory is private, as every cache of the store (store/perm.go).
const (
	dirPerm  = 0o700
	filePerm = 0o600
)

func newBackend(c *client, dir string, writer bool, lease *lease, log *slog.Logger) (*Backend, error) {
	for _, d := range []string{cacheUpload, cacheManifests, cacheTmp, cacheIndexes} {
		if err := os.MkdirAll(filepath.Join(dir, d), dirPerm); err != nil {
			return nil, fmt.Errorf("S3 cache: %w", err)
		}
	}
	cache, err := openObjectCache(filepath.Join(dir, cacheObjects), c.set.cacheBytes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{
		c: c, cache: cache, dir: dir, writer: writer, lease: lease, log: log,
		ctx: ctx, cancel: cancel,
		dl:      make(chan struct{}, c.set.concurrency),
		queue:   make(chan *uploadJob, 2*c.set.concurrency),
		pending: map[store.ID]*uploadJob{}, remote: map[store.ID]int64{}, flights: map[store.ID]*fetchFlight{},
		packs: map[store.ID]*uploadJob{}, pflights: map[store.ID]*fetchFlight{}, packWhole: packWhole,
	}
	b.cond = sync.NewCond(&b.mu)
	// Half-written downloads of a process that died.
	if err := clearDir(filepath.Join(dir, cacheTmp)); err != nil {
		return nil, err
	}
	// Anything in the manifest cache that is not a manifest is not ours.
	entries, err := os.ReadDir(filepath.Join(dir, cacheManifests))
	if err != nil {
		return nil, fmt.Errorf("S3 cache: %w", err)
	}
	for _, e := range entries {
		if _, ok := store.ParseManifestName(e.Name()); !ok {
			os.RemoveAll(filepath.Join(dir, cacheManifests, e.Name()))
		}
	}
	if writer {
		b.startUploads()
	}
	return b, nil
}

// startUploads starts the upload workers (a writer's, or a writer group's rank's: group.go).
func (b *Backend) startUploads() {
	for range b.c.set.concurrency {
		b.wg.Add(1)
		go b.uploadWorker()
	}
}

// Close stops the transfers: uploads not yet done belong to no sealed version.
func (b *Backend) Close() error {
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

func (b *Backend) objectKey(id store.ID) string {
	h := id.String()
	return b.c.loc.key("objects/" + h[:2] + "/" + h)
}

func (b *Backend) manifestKey(v uint64) string {
	return b.c.loc.key("versions/" + store.ManifestName(v))
}

// Stats returns what the backend moved since it was opened, with the cache's numbers.
func (b *Backend) Stats() Stats {
	st := b.c.stats.snapshot()
	st.CachedObjects, st.CachedBytes, st.CacheEvictions = b.cache.stats()
	return st
}

func (b *Backend) writeStats() { b.c.stats.writeFile(b.dir, b.Stats()) }

func (b *Backend) CreateTemp() (*os.File, error) {
	f, err := os.CreateTemp(filepath.Join(b.dir, cacheTmp), "obj-*")
	if err != nil {
		return nil, fmt.Errorf("create temporary object file: %w", err)
	}
	return f, nil
}

func (b *Backend) RemoveTemp(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}

func (b *Backend) OpenObject(id store.ID) (store.ObjectFile, error) {
	b.mu.Lock()
	if j := b.pending[id]; j != nil {
		// Opened under the lock: the upload worker moves the file only while holding it.
		f, err := os.Open(j.path)
		b.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("open object %s waiting for upload: %w", id, err)
		}
		return fileObject{f, j.size}, nil
	}
	size, known := b.remote[id]
	b.mu.Unlock()
	if f, cached, ok := b.openCached(id); ok {
		b.c.stats.add(&b.c.stats.cacheHits, 1)
		return fileObject{f, cached}, nil
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

// openCached opens the cached file of object id, as the object cache's open does, and checks
// it the first time this process uses it: a file that another process left (or that was
// damaged on disk, or another object's put in its place) is checked whole before any of its
// bytes is served. One that fails is logged and dropped, and ok is false: the caller fetches
// the object from the bucket again.
func (b *Backend) openCached(id store.ID) (f *os.File, size int64, ok bool) {
	f, size, ok = b.cache.open(id)
	if !ok || b.cache.isChecked(id) {
		return f, size, ok
	}
	if err := store.CheckCachedObject(id, fileObject{f, size}); err != nil {
		f.Close()
		b.cache.remove(id)
		b.log.Warn("S3 object cache: a cached object failed its check; dropped, fetched again from the bucket",
			"object", id.String(), "file", b.cache.path(id), "err", err)
		return nil, 0, false
	}
	b.cache.markChecked(id)
	return f, size, true
}

func (b *Backend) noteRemote(id store.ID, size int64) {
	b.mu.Lock()
	b.remote[id] = size
	b.mu.Unlock()
}

func (b *Backend) StatObject(id store.ID) (int64, error) {
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
func (b *Backend) ensureListed() error {
	b.listMu.Lock()
	defer b.listMu.Unlock()
	b.mu.Lock()
	listed := b.listed
	b.mu.Unlock()
	if listed {
		return nil
	}
	return b.listObjectsLocked(func(store.ID, int64) error { return nil })
}

func (b *Backend) ListObjects(fn func(id store.ID, size int64) error) error {
	b.listMu.Lock()
	defer b.listMu.Unlock()
	return b.listObjectsLocked(fn)
}

func (b *Backend) listObjectsLocked(fn func(id store.ID, size int64) error) error {
	found := map[store.ID]int64{}
	err := b.c.list(b.ctx, "objects/", func(rel string, size int64) error {
		fan, name, ok := strings.Cut(strings.TrimPrefix(rel, "objects/"), "/")
		id, err := store.ParseID(name)
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

func (b *Backend) DeleteObject(id store.ID) error {
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
func (b *Backend) fence(strict bool) error {
	if b.lease == nil {
		return fmt.Errorf("%s: %w", b.c.loc, store.ErrReadOnly)
	}
	return b.lease.ensure(b.ctx, strict)
}

func (b *Backend) PutManifest(v uint64, data []byte) error {
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
			err = fmt.Errorf("version %d already exists in %s, written by another writer: %w", v, b.c.loc, store.ErrLocked)
		}
	}
	if err != nil {
		return fmt.Errorf("write manifest of version %d: %w", v, err)
	}
	b.manifests.note(v, data)
	b.cacheManifest(v, data)
	b.putHint(v)
	b.writeStats()
	return nil
}

func (b *Backend) manifestCachePath(v uint64) string {
	return filepath.Join(b.dir, cacheManifests, store.ManifestName(v))
}

// cacheManifest keeps a manifest's bytes on local disk (a failure only costs a download).
func (b *Backend) cacheManifest(v uint64, data []byte) {
	tmp, err := os.CreateTemp(filepath.Join(b.dir, cacheTmp), "manifest-*")
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

func (b *Backend) GetManifest(v uint64) ([]byte, error) {
	if data, err := os.ReadFile(b.manifestCachePath(v)); err == nil {
		// A cached manifest is a cache: checked before it is served, fetched again if it
		// fails (the bucket's copy is checked by the store as always). One this process
		// read or wrote is checked by its CRC-32C alone (manifest_cache.go).
		if b.manifests.holds(v, data) {
			return data, nil
		}
		b.manifests.fullChecks.Add(1)
		err := store.CheckCachedManifest(v, data)
		if err == nil {
			b.manifests.note(v, data)
			return data, nil
		}
		os.Remove(b.manifestCachePath(v))
		b.log.Warn("S3 manifest cache: a cached manifest failed its check; dropped, fetched again from the bucket",
			"version", v, "file", b.manifestCachePath(v), "err", err)
	}
	data, _, err := b.c.getBytes(b.ctx, b.manifestKey(v), &b.c.stats.manifestBytes)
	if err != nil {
		return nil, fmt.Errorf("read manifest of version %d: %w", v, err)
	}
	b.c.stats.add(&b.c.stats.manifestDownloads, 1)
	b.manifests.note(v, data)
	b.cacheManifest(v, data)
	b.writeStats()
	return data, nil
}

func (b *Backend) ListManifests() ([]uint64, error) {
	var vs []uint64
	err := b.c.list(b.ctx, "versions/", func(rel string, _ int64) error {
		if v, ok := store.ParseManifestName(strings.TrimPrefix(rel, "versions/")); ok {
			vs = append(vs, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	slices.Sort(vs)
	vs = slices.Compact(vs)
	if b.lease != nil && !b.hint.opened.Swap(true) {
		// The writer's first listing, at open: a writer that died between a manifest and
		// the hint left readers a change they have not been told of.
		var top uint64
		if len(vs) > 0 {
			top = vs[len(vs)-1]
		}
		b.putHint(top)
	}
	b.writeStats()
	return vs, nil
}

func (b *Backend) DeleteManifest(v uint64) error {
	if err := b.fence(false); err != nil {
		return fmt.Errorf("delete manifest of version %d: %w", v, err)
	}
	if err := b.c.remove(b.ctx, b.manifestKey(v)); err != nil {
		return fmt.Errorf("delete manifest of version %d: %w", v, err)
	}
	os.Remove(b.manifestCachePath(v))
	b.manifests.forget(v)
	b.putHint(0)
	return nil
}

// CleanTemp drops local files of a writer that died: uploads it never finished belong to no
// sealed version (and may not be in S3), and temporary files.
func (b *Backend) CleanTemp() error {
	b.mu.Lock()
	busy := len(b.pending)+len(b.packs) > 0
	b.mu.Unlock()
	if busy {
		return nil
	}
	if err := clearDir(filepath.Join(b.dir, cacheUpload)); err != nil {
		return err
	}
	return clearDir(filepath.Join(b.dir, cacheTmp))
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
