package store

import (
	"sync/atomic"
	"unsafe"
)

// cachedPage is a page of object content held by a page cache and by its readers (copying out
// of it, or waiting for the kernel to take its bytes: SliceReader). Page buffers are recycled
// once nobody holds them: a version read end to end would otherwise take a MiB of fresh memory
// for every MiB served, which the runtime clears and the kernel faults in 4 KiB at a time.
//
// Its references are those of counted (read_recycle.go), the first one newPage's.
type cachedPage struct {
	b []byte // the page's bytes: within raw, or a buffer of their own for short pages
	// raw is the recycled buffer b lies in: directAlign-aligned and pageBufferLen long, so
	// that a page of the copy can be read with O_DIRECT into it wherever its first byte falls
	// in a block of the file (readPage). nil for short pages.
	raw  []byte
	refs atomic.Int32
	home *freeList[*cachedPage] // where the last release puts it (its store's recycler)
}

// pageBufferLen is the length of a recycled buffer: a page plus a chunk of the copy's sums
// before and after it (a read of the copy checks the whole chunks under it: copy_read.go).
const pageBufferLen = pageSize + copySlack

// minRecycledLen is the shortest page that gets a whole recycled buffer: a tensor's last page
// is partial, and most of a model's tensors are a few pages long. Shorter pages (small tensors)
// get buffers of their own size.
const minRecycledLen = pageSize / 8

// newPage returns a page of n bytes (n <= pageSize) with one reference, its caller's. The
// contents are arbitrary: the builder overwrites all of them.
func (r *recycler) newPage(n int64) *cachedPage {
	if n < minRecycledLen {
		p := &cachedPage{b: make([]byte, n)}
		p.refs.Store(1)
		return p
	}
	p, ok := r.pages.get()
	if !ok {
		p = &cachedPage{raw: alignedBuffer(pageBufferLen), home: &r.pages}
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
	p.home.put(p)
}

func (p *cachedPage) hold() { p.refs.Add(1) }

// newPageCache returns a page cache of limit bytes that holds references on its pages.
func newPageCache(limit int64) *lru[pageKey, *cachedPage] {
	return newCountingCache[pageKey, *cachedPage](limit)
}
