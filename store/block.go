package store

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/delta"
)

// cachedBlock is a decoded delta block held by the block cache and by the page builds
// applying it. Its buffers are decoded into again once nobody holds it, like the pages'
// (page.go): a read ten deltas behind decodes ~5 bytes per change, 120 MB per 481 MiB, and
// fresh memory for each block cost page faults and clearing.
//
// Every holder took one reference (decodeBlock, lru.get, the cache's own in lru.add) and gives
// it back with release exactly once; it must not use db after.
type cachedBlock struct {
	db   *delta.DecodedBlock
	refs atomic.Int32
}

// freeBlocks holds blocks nobody holds any more, for decoding into.
var freeBlocks struct {
	mu     sync.Mutex
	blocks []*delta.DecodedBlock
}

// maxFreeBlocks bounds the idle blocks: a full cache gives one back for each block it takes.
const maxFreeBlocks = 64

// decodeBlock decodes block b of delta d (of object id) into a recycled block; the caller
// holds the one reference.
func decodeBlock(id ID, d *deltaObject, b int64) (*cachedBlock, error) {
	freeBlocks.mu.Lock()
	var spare *delta.DecodedBlock
	if k := len(freeBlocks.blocks); k > 0 {
		spare = freeBlocks.blocks[k-1]
		freeBlocks.blocks[k-1] = nil
		freeBlocks.blocks = freeBlocks.blocks[:k-1]
	}
	freeBlocks.mu.Unlock()
	db, err := d.parsed.DecodeBlockInto(b, spare)
	if err != nil {
		return nil, objectError(id, fmt.Errorf("decode delta: %v: %w", err, ErrCorrupt))
	}
	cb := &cachedBlock{db: db}
	cb.refs.Store(1)
	return cb, nil
}

// release gives back one reference; the last one recycles the block's buffers.
func (cb *cachedBlock) release() {
	if cb.refs.Add(-1) != 0 {
		return
	}
	freeBlocks.mu.Lock()
	if len(freeBlocks.blocks) < maxFreeBlocks {
		freeBlocks.blocks = append(freeBlocks.blocks, cb.db)
	}
	freeBlocks.mu.Unlock()
}

// newBlockCache returns a block cache of limit bytes that holds references on its blocks.
func newBlockCache(limit int64) *lru[blockKey, *cachedBlock] {
	c := newLRU[blockKey, *cachedBlock](limit)
	c.share = func(cb *cachedBlock) { cb.refs.Add(1) }
	c.drop = (*cachedBlock).release
	return c
}
