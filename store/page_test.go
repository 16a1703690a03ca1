package store

import "testing"

// TestPageReferences follows one page through the cache: a page pushed out while a reader
// holds it is not recycled until that reader lets go.
func TestPageReferences(t *testing.T) {
	cache := newPageCache(2 * pageSize)
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
	// A partial page (a small object's only page) is never recycled.
	small := newPage(100)
	small.release()
	if p := newPage(100); p == small || len(p.b) != 100 {
		t.Fatal("a partial page was recycled")
	}
}
