package store

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestPageReferences follows one page through the cache: a page pushed out while a reader
// holds it is not recycled until that reader lets go.
func TestPageReferences(t *testing.T) {
	cache := newPageCache(2 * pageSize)
	r := newRecycler()
	newPage := r.newPage
	held := newPage(pageSize)
	cache.add(pageKey{page: 1}, held, pageSize)
	held.release() // the builder's reference: the cache keeps the page
	if got := held.refs.Load(); got != 1 {
		t.Fatalf("after add and the builder's release: %d references, want 1", got)
	}
	reader, ok := cache.get(pageKey{page: 1})
	if !ok || reader != held || reader.refs.Load() != 2 {
		t.Fatalf("get: %v %v, %d references; want the page with 2", ok, reader == held, held.refs.Load())
	}
	if !cache.has(pageKey{page: 1}) || held.refs.Load() != 2 {
		t.Fatalf("has must not take a reference: %d", held.refs.Load())
	}
	for pg := int64(2); pg <= 3; pg++ { // pushes page 1 out
		p := newPage(pageSize)
		cache.add(pageKey{page: pg}, p, pageSize)
		p.release()
	}
	if cache.has(pageKey{page: 1}) {
		t.Fatal("page 1 still cached")
	}
	if got := held.refs.Load(); got != 1 {
		t.Fatalf("pushed out while read: %d references, want the reader's 1", got)
	}
	for range 4 {
		if p := newPage(pageSize); p == held {
			t.Fatal("a page still held by a reader was handed out again")
		}
	}
	held.release()
	if got := held.refs.Load(); got != 0 {
		t.Fatalf("after the reader's release: %d references", got)
	}

	// Replacing and clearing let go of the cache's references too.
	a, b := newPage(pageSize), newPage(pageSize)
	cache.add(pageKey{page: 9}, a, pageSize)
	cache.add(pageKey{page: 9}, b, pageSize)
	if a.refs.Load() != 1 || b.refs.Load() != 2 {
		t.Fatalf("replaced: %d and %d references, want 1 and 2", a.refs.Load(), b.refs.Load())
	}
	cache.clear()
	if b.refs.Load() != 1 {
		t.Fatalf("cleared: %d references, want 1", b.refs.Load())
	}
	// A small object's page gets a buffer of its own size and is not recycled; a tensor's
	// partial last page of at least minRecycledLen bytes uses a whole page's buffer.
	small := newPage(100)
	small.release()
	if p := newPage(100); p == small || len(p.b) != 100 || p.raw != nil {
		t.Fatal("a small page was recycled")
	}
	last := newPage(pageSize / 2)
	if len(last.b) != pageSize/2 || len(last.raw) != pageBufferLen || &last.b[0] != &last.raw[0] {
		t.Fatalf("partial page: %d bytes at the start of a buffer of %d, want %d of %d", len(last.b), len(last.raw), pageSize/2, pageBufferLen)
	}
	if addr := uintptr(unsafe.Pointer(&last.raw[0])); addr%directAlign != 0 {
		t.Fatalf("page buffer at %#x: not aligned to %d", addr, directAlign)
	}
	last.release()
	if p := newPage(pageSize); p != last || len(p.b) != pageSize {
		t.Fatalf("the partial page's buffer was not recycled whole: same %v, len %d", p == last, len(p.b))
	}
}

// TestPagesSurviveCollections: released buffers wait for the next build through garbage
// collections (a sync.Pool would drop them, and the next page would be fresh memory).
func TestPagesSurviveCollections(t *testing.T) {
	r := newRecycler() // a store's own: its free list starts empty
	newPage, free := r.newPage, &r.pages
	var released []*cachedPage
	for range free.max + 3 {
		released = append(released, newPage(pageSize))
	}
	for _, p := range released {
		p.release()
	}
	runtime.GC()
	runtime.GC()
	reused := map[*cachedPage]bool{}
	for _, p := range released[:free.max] {
		reused[p] = true
	}
	for i := range free.max {
		if p := newPage(pageSize); !reused[p] {
			t.Fatalf("page %d after two collections: not one of the released buffers", i)
		}
	}
	for _, p := range released[free.max:] {
		if p == newPage(pageSize) {
			t.Fatal("more buffers kept than free.max")
		}
	}
}
