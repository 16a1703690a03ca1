package store

import (
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/delta"
)

// Recycling of the read path's big buffers (pages: read_page_cache.go; decoded blocks: read_block_cache.go). A
// version read end to end would otherwise take fresh memory for every MiB served, which the
// runtime clears and the kernel faults in 4 KiB at a time.

// recycler holds one Store's free lists and buffer pools: fields of the Store, never package
// variables, so two stores in one process (a test's writer and reader, say) share no state
// and a test may look into or empty one store's lists without touching another's.
type recycler struct {
	// pages holds released pages with recycled buffers (raw != nil) for the next builds. A
	// full page cache gives one back for each page it takes, so only the pages released in
	// a burst (a reader's replies, a cache cleared) wait here.
	pages freeList[*cachedPage]
	// blocks holds decoded delta blocks nobody holds any more, for decoding into. A full
	// cache gives one back for each block it takes.
	blocks freeList[*delta.DecodedBlock]
	// decoded counts the delta blocks decoded (read_block_cache.go), contexts included: what a read
	// costs besides its pages, for tests and benchmarks.
	decoded atomic.Int64
	// edges are the buffers a checked read of the copy reads the rest of its first and last
	// chunks into (copy_read.go): *[]byte of 2*sumChunk.
	edges sync.Pool
	// renderReads hold the whole chunks under reads of a render that do not start and end
	// on them (render_sums.go): *[]byte, grown as needed.
	renderReads sync.Pool
}

func newRecycler() *recycler {
	r := &recycler{
		pages:  freeList[*cachedPage]{max: 32},
		blocks: freeList[*delta.DecodedBlock]{max: 64},
	}
	r.edges.New = func() any { b := make([]byte, 2*sumChunk); return &b }
	r.renderReads.New = func() any { return new([]byte) }
	return r
}

// freeList holds released values for reuse, at most max of them. Not a sync.Pool: the runtime
// empties a Pool at every collection, and a read of an old version collects every few MiB,
// so most values came from fresh memory after all.
type freeList[T any] struct {
	mu    sync.Mutex
	items []T
	max   int
}

// get takes a value, if there is one.
func (f *freeList[T]) get() (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var zero T
	k := len(f.items)
	if k == 0 {
		return zero, false
	}
	v := f.items[k-1]
	f.items[k-1] = zero
	f.items = f.items[:k-1]
	return v, true
}

// put keeps v for reuse unless the list is full.
func (f *freeList[T]) put(v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.items) < f.max {
		f.items = append(f.items, v)
	}
}

// counted is a value that counts its holders and is recycled when the last lets go. Every
// holder took one reference (at creation, from lru.get, or the cache's own in lru.add) and
// gives it back with release exactly once; a holder that forgets only keeps the value from
// being reused. A holder must not use the value after its release.
type counted interface {
	hold()
	release()
}

// newCountingCache returns a cache of limit bytes that holds references on its values.
func newCountingCache[K comparable, V counted](limit int64) *lru[K, V] {
	c := newLRU[K, V](limit)
	c.share = V.hold
	c.drop = V.release
	return c
}
