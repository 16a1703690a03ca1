package s3

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weightfs/weightfs/store"
)

// objectCache is the local disk cache of objects of a remote store: complete object files,
// exactly as stored, in DIR/ab/<64 hex>, bounded by the sum of their sizes and dropping the
// least recently used first. Every file in it is a whole object that was in the remote store
// when it was fetched (objects are immutable, so it stays right); objects still waiting for
// their upload live elsewhere (Backend's upload directory), because until the upload is
// done they are not in the store.
//
// It keeps packs (store format 3) too, in DIR/packs/<64 hex>, under the same bound and LRU
// order: an entry's key says whether it is an object or a pack (cacheKey), so an object and
// a pack never stand for each other even if their ids were equal.
//
// A file is put in place by rename, so a crash leaves whole files or none; files not named
// like an object are removed when the cache is opened. An evicted file may still be open by
// a reader: Linux keeps its bytes until the last descriptor closes. Safe for concurrent use.
type objectCache struct {
	dir   string
	limit int64

	mu        sync.Mutex
	used      int64
	evictions int64
	order     *list.List // of *cacheEntry; front: most recently used
	items     map[cacheKey]*list.Element
}

// cacheKey names a cached file: an object's, or a pack's.
type cacheKey struct {
	id   store.ID
	pack bool
}

func objectEntry(id store.ID) cacheKey { return cacheKey{id: id} }
func packEntry(id store.ID) cacheKey   { return cacheKey{id: id, pack: true} }

// cachePacks is the directory of cached packs inside the cache's directory.
const cachePacks = "packs"

type cacheEntry struct {
	key  cacheKey
	size int64
	// checked: the file's bytes were checked in this process (its CRC-32C and the identity
	// its header names: Backend.openCached), or the process put them there itself.
	// Files found in the directory at open are not, until their first use.
	checked bool
}

// openObjectCache opens (creating it if needed) the cache in dir and takes stock of the
// files already there, oldest modification first at the back of the LRU order.
func openObjectCache(dir string, limit int64) (*objectCache, error) {
	c := &objectCache{dir: dir, limit: limit, order: list.New(), items: map[cacheKey]*list.Element{}}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("object cache: %w", err)
	}
	type found struct {
		key   cacheKey
		size  int64
		mtime time.Time
	}
	var files []found
	fans, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("object cache: %w", err)
	}
	for _, fan := range fans {
		fanPath := filepath.Join(dir, fan.Name())
		if fan.Name() == cachePacks && fan.IsDir() {
			packs, err := os.ReadDir(fanPath)
			if err != nil {
				return nil, fmt.Errorf("object cache: %w", err)
			}
			for _, e := range packs {
				id, err := store.ParseID(e.Name())
				info, ierr := e.Info()
				if err != nil || ierr != nil || !info.Mode().IsRegular() {
					os.RemoveAll(filepath.Join(fanPath, e.Name()))
					continue
				}
				files = append(files, found{packEntry(id), info.Size(), info.ModTime()})
			}
			continue
		}
		if !fan.IsDir() || len(fan.Name()) != 2 {
			os.RemoveAll(fanPath) // not ours: a temporary file of a crashed process
			continue
		}
		entries, err := os.ReadDir(fanPath)
		if err != nil {
			return nil, fmt.Errorf("object cache: %w", err)
		}
		for _, e := range entries {
			id, err := store.ParseID(e.Name())
			info, ierr := e.Info()
			if err != nil || ierr != nil || !strings.HasPrefix(e.Name(), fan.Name()) || !info.Mode().IsRegular() {
				os.RemoveAll(filepath.Join(fanPath, e.Name()))
				continue
			}
			files = append(files, found{objectEntry(id), info.Size(), info.ModTime()})
		}
	}
	slices.SortFunc(files, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	for _, f := range files {
		c.items[f.key] = c.order.PushFront(&cacheEntry{key: f.key, size: f.size})
		c.used += f.size
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

func (c *objectCache) path(id store.ID) string { return c.pathOf(objectEntry(id)) }

// pathOf is the file of the object or pack k.
func (c *objectCache) pathOf(k cacheKey) string {
	h := k.id.String()
	if k.pack {
		return filepath.Join(c.dir, cachePacks, h)
	}
	return filepath.Join(c.dir, h[:2], h)
}

// open opens the cached file of id and marks it used; ok is false when id is not cached.
func (c *objectCache) open(id store.ID) (f *os.File, size int64, ok bool) {
	return c.openKey(objectEntry(id))
}

func (c *objectCache) openKey(k cacheKey) (f *os.File, size int64, ok bool) {
	c.mu.Lock()
	e, ok := c.items[k]
	if ok {
		c.order.MoveToFront(e)
		size = e.Value.(*cacheEntry).size
	}
	c.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	f, err := os.Open(c.pathOf(k))
	if err != nil {
		// Removed behind our back: forget it, the caller fetches it again.
		c.removeKey(k)
		return nil, 0, false
	}
	return f, size, true
}

// isChecked says whether the cached file of id was checked in this process.
func (c *objectCache) isChecked(id store.ID) bool { return c.isCheckedKey(objectEntry(id)) }

func (c *objectCache) isCheckedKey(k cacheKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	return ok && e.Value.(*cacheEntry).checked
}

// markChecked records that the cached file of id was checked.
func (c *objectCache) markChecked(id store.ID) { c.markCheckedKey(objectEntry(id)) }

func (c *objectCache) markCheckedKey(k cacheKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		e.Value.(*cacheEntry).checked = true
	}
}

// size returns the size of a cached object.
func (c *objectCache) size(id store.ID) (int64, bool) { return c.sizeKey(objectEntry(id)) }

func (c *objectCache) sizeKey(k cacheKey) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		return e.Value.(*cacheEntry).size, true
	}
	return 0, false
}

// adopt moves the complete object file at tmp (on the cache's file system) into the cache as
// id, replacing any cached file of id, and evicts what no longer fits. The caller may keep
// reading tmp's open descriptor even if the file is evicted at once.
func (c *objectCache) adopt(id store.ID, tmp string, size int64) error {
	return c.adoptKey(objectEntry(id), tmp, size)
}

func (c *objectCache) adoptKey(k cacheKey, tmp string, size int64) error {
	dst := c.pathOf(k)
	if err := os.MkdirAll(filepath.Dir(dst), dirPerm); err != nil {
		return fmt.Errorf("object cache: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("object cache: %w", err)
	}
	if e, ok := c.items[k]; ok {
		c.used -= e.Value.(*cacheEntry).size
		c.order.Remove(e)
	}
	c.items[k] = c.order.PushFront(&cacheEntry{key: k, size: size, checked: true})
	c.used += size
	c.evictLocked()
	return nil
}

// evictLocked drops least recently used files until the cache fits its limit.
func (c *objectCache) evictLocked() {
	for c.used > c.limit && c.order.Len() > 0 {
		e := c.order.Back()
		ent := e.Value.(*cacheEntry)
		c.order.Remove(e)
		delete(c.items, ent.key)
		c.used -= ent.size
		c.evictions++
		if err := os.Remove(c.pathOf(ent.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The bytes stay on disk but out of the count; the next open of the cache
			// takes stock again.
			continue
		}
	}
}

// remove drops id from the cache.
func (c *objectCache) remove(id store.ID) { c.removeKey(objectEntry(id)) }

func (c *objectCache) removeKey(k cacheKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.used -= e.Value.(*cacheEntry).size
		c.order.Remove(e)
		delete(c.items, k)
	}
	os.Remove(c.pathOf(k))
}

// purge drops every cached object (the remote store may have replaced some: gc ran). Packs
// stay: gc never replaces a pack under its id (a rewritten pack has another table, so
// another id), so a cached pack is still exactly the pack of its name.
func (c *objectCache) purge() {
	c.mu.Lock()
	keys := make([]cacheKey, 0, len(c.items))
	for k := range c.items {
		if !k.pack {
			keys = append(keys, k)
		}
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.removeKey(k)
	}
}

// stats returns the number of cached objects, their bytes and the evictions so far.
func (c *objectCache) stats() (objects, bytes, evictions int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.items)), c.used, c.evictions
}
