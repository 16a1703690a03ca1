package store

import (
	"sync"
	"sync/atomic"
)

// cachedPage is a page of object content held by a page cache and by its readers (copying out
// of it, or waiting for the kernel to take its bytes: SliceReader). Whole pages are recycled
// once nobody holds them: a version read end to end would otherwise allocate (and the runtime
// clear) a MiB for every MiB served, ~5% of the CPU of a read that replays deltas.
//
// Every holder took one reference (newPage, lru.get, the cache's own in lru.add) and gives it
// back with release exactly once; a holder that forgets only keeps the buffer from being
// reused. A holder must not touch b after its release.
type cachedPage struct {
	b    []byte
	refs atomic.Int32
}

// pagePool holds released whole pages (len == cap == pageSize).
var pagePool sync.Pool

// newPage returns a page of n bytes (n <= pageSize) with one reference, its caller's. The
// contents are arbitrary: the builder overwrites all of them.
func newPage(n int64) *cachedPage {
	if n == pageSize {
		if p, ok := pagePool.Get().(*cachedPage); ok {
			p.refs.Store(1)
			return p
		}
	}
	p := &cachedPage{b: make([]byte, n)}
	p.refs.Store(1)
	return p
}

// release gives back one reference; the last one recycles a whole page.
func (p *cachedPage) release() {
	if p.refs.Add(-1) == 0 && len(p.b) == pageSize && cap(p.b) == pageSize {
		pagePool.Put(p)
	}
}

// newPageCache returns a page cache of limit bytes that holds references on its pages.
func newPageCache(limit int64) *lru[pageKey, *cachedPage] {
	c := newLRU[pageKey, *cachedPage](limit)
	c.share = func(p *cachedPage) { p.refs.Add(1) }
	c.drop = (*cachedPage).release
	return c
}
