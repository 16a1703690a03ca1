package store

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// cachedPage is a page of object content held by a page cache and by its readers (copying out
// of it, or waiting for the kernel to take its bytes: SliceReader). Page buffers are recycled
// once nobody holds them: a version read end to end would otherwise take a MiB of fresh memory
// for every MiB served, which the runtime clears and the kernel faults in 4 KiB at a time.
//
// Every holder took one reference (newPage, lru.get, the cache's own in lru.add) and gives it
// back with release exactly once; a holder that forgets only keeps the buffer from being
// reused. A holder must not touch b after its release.
type cachedPage struct {
	b []byte // the page's bytes: within raw, or a buffer of their own for short pages
	// raw is the recycled buffer b lies in: directAlign-aligned and pageBufferLen long, so
	// that a page of the copy can be read with O_DIRECT into it wherever its first byte falls
	// in a block of the file (readPage). nil for short pages.
	raw  []byte
	refs atomic.Int32
}

// pageBufferLen is the length of a recycled buffer: a page plus a block of the file before
// and after it.
const pageBufferLen = pageSize + 2*directAlign

// freePages holds released pages with recycled buffers (raw != nil) for the next builds. Not a
// sync.Pool: the runtime empties a Pool at every collection, and a read of an old version
// collects every few MiB, so most pages came from fresh memory after all (perf counted ~50k
// page faults per 481 MiB read, three quarters of them in the page builders' pread).
var freePages struct {
	mu    sync.Mutex
	pages []*cachedPage
}

// maxFreePages bounds the idle buffers: a full page cache gives one back for each page it
// takes, so only the pages released in a burst (a reader's replies, a cache cleared) wait here.
const maxFreePages = 32

// minRecycledLen is the shortest page that gets a whole recycled buffer: a tensor's last page
// is partial, and most of a model's tensors are a few pages long. Shorter pages (small tensors)
// get buffers of their own size.
const minRecycledLen = pageSize / 8

// newPage returns a page of n bytes (n <= pageSize) with one reference, its caller's. The
// contents are arbitrary: the builder overwrites all of them.
func newPage(n int64) *cachedPage {
	if n < minRecycledLen {
		p := &cachedPage{b: make([]byte, n)}
		p.refs.Store(1)
		return p
	}
	freePages.mu.Lock()
	var p *cachedPage
	if k := len(freePages.pages); k > 0 {
		p = freePages.pages[k-1]
		freePages.pages[k-1] = nil
		freePages.pages = freePages.pages[:k-1]
	}
	freePages.mu.Unlock()
	if p == nil {
		p = &cachedPage{raw: alignedBuffer(pageBufferLen)}
	}
	p.b = p.raw[:n]
	p.refs.Store(1)
	return p
}

// alignedBuffer returns n bytes starting at a multiple of directAlign in memory.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign)) % directAlign
	return b[skip : skip+n : skip+n]
}

// size is what the page costs a cache.
func (p *cachedPage) size() int64 {
	if p.raw != nil {
		return int64(len(p.raw))
	}
	return int64(len(p.b))
}

// release gives back one reference; the last one recycles a page's buffer.
func (p *cachedPage) release() {
	if p.refs.Add(-1) != 0 || p.raw == nil {
		return
	}
	freePages.mu.Lock()
	if len(freePages.pages) < maxFreePages {
		freePages.pages = append(freePages.pages, p)
	}
	freePages.mu.Unlock()
}

// newPageCache returns a page cache of limit bytes that holds references on its pages.
func newPageCache(limit int64) *lru[pageKey, *cachedPage] {
	c := newLRU[pageKey, *cachedPage](limit)
	c.share = func(p *cachedPage) { p.refs.Add(1) }
	c.drop = (*cachedPage).release
	return c
}
