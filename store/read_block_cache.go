package store

import (
	"fmt"
	"sync/atomic"

	"github.com/weightfs/weightfs/delta"
)

// cachedBlock is a decoded delta block held by the block cache and by the page builds
// applying it. Its buffers are decoded into again once nobody holds it, like the pages'
// (read_page_cache.go): a read ten deltas behind decodes ~5 bytes per change, 120 MB per 481 MiB, and
// fresh memory for each block cost page faults and clearing.
//
// Its references are those of counted (read_recycle.go), the first one decodeBlock's.
type cachedBlock struct {
	db   *delta.DecodedBlock
	refs atomic.Int32
	home *freeList[*delta.DecodedBlock] // where the last release puts db (its store's recycler)
}

// decodeBlock decodes block b of delta d (of object id) into a recycled block; the caller
// holds the one reference. A version-2 section decodes against block b of its context, the
// decoded section of its base, taken from the block cache (decoded first if need be) and
// held only while this block decodes (object_delta_context.go); path holds the sections whose decodes wait
// on this one.
func (r *recycler) decodeBlock(id ID, d *deltaObject, b int64, path []ID) (*cachedBlock, error) {
	r.decoded.Add(1)
	spare, _ := r.blocks.get()
	h := contextHold{path: append(path[:len(path):len(path)], id)}
	db, err := d.parsed.DecodeBlockContext(b, h.fn(d), spare)
	h.release()
	if err != nil && h.err != nil {
		return nil, h.err // the context failed: its error names it
	}
	if err != nil {
		return nil, objectError(id, fmt.Errorf("decode delta: %v: %w", err, ErrCorrupt))
	}
	cb := &cachedBlock{db: db, home: &r.blocks}
	cb.refs.Store(1)
	return cb, nil
}

// release gives back one reference; the last one recycles the block's buffers.
func (cb *cachedBlock) release() {
	if cb.refs.Add(-1) != 0 {
		return
	}
	cb.home.put(cb.db)
}

func (cb *cachedBlock) hold() { cb.refs.Add(1) }

// newBlockCache returns a block cache of limit bytes that holds references on its blocks.
func newBlockCache(limit int64) *lru[blockKey, *cachedBlock] {
	return newCountingCache[blockKey, *cachedBlock](limit)
}
