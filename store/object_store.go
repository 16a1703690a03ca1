package store

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
)

// objectStore is the store's objects as reads and writes see them (Store.objects): what is
// known of each object (its meta, in front of the index: object_meta.go), its file read and
// checked (object_reader.go), the contexts of version-2 delta sections
// (object_delta_context.go), and the pages of content rebuilt from them for reads, with the
// decoded delta blocks they apply (read.go, read_plan.go, read_blocks.go). It owns the caches
// of all these; the rest of the store asks it, and clears them through its methods (drop*,
// forget*).
type objectStore struct {
	// st is the store, for its backend, index and codec (set at open, after the objects are
	// made; a test may swap the backend), the materialized copy and the version list.
	st    *Store
	log   *slog.Logger
	stats *storeStats

	metaMu     sync.Mutex
	metas      map[ID]objMeta // in front of the index's objects bucket
	dirtyMetas map[ID]objMeta // not yet written to the index
	flushing   sync.WaitGroup // flushes behind a seal (flushMetasBehind)

	// fillMu orders the fills of the caches of objects (metas, headers, delta sections, the
	// index's metas) against forgetMeta: a fill that read an object before gc rewrote it
	// (object_meta.go, cacheFill) must not land after the rewrite's forget, or the cache
	// would keep the old representation (a delta whose base gc has deleted) for good.
	fillMu  sync.RWMutex
	forgets uint64 // forgetMeta calls so far, under fillMu

	objInfos     *lru[ID, *objectInfo]  // headers and chunk tables (object_reader.go)
	deltas       *lru[ID, *deltaObject] // loaded delta sections, with their contexts
	crcChecked   crcSet                 // the objects whose CRC was verified by this process (object_crc.go)
	chunkScratch sync.Pool              // *[]byte: a frame's decompression scratch (readChunk)
	deltaReads   atomic.Int64           // delta sections loaded from the backend, not the cache (tests)

	// contextChain is the most version-2 delta sections a chain of contexts may hold when a
	// new one is written (maxContextChain; 0 writes version 1 only: tests, object_delta_context.go).
	contextChain int

	pages       *lru[pageKey, *cachedPage]   // rebuilt pages of object content (read.go, read_page_cache.go)
	blocks      *lru[blockKey, *cachedBlock] // decoded delta blocks (read_blocks.go, read_block_cache.go)
	ra          *readAhead                   // background builds of the pages a sequential reader needs next
	pageFlight  singleflight.Group
	blockFlight singleflight.Group
	bufs        *recycler // free lists and buffer pools of the read path (read_recycle.go)
}

// newObjectStore returns the objects of store s, with cacheBytes of memory for what reads
// keep (Options.CacheBytes).
func newObjectStore(s *Store, cacheBytes int64) *objectStore {
	return &objectStore{st: s, log: s.log, stats: &s.stats, metas: map[ID]objMeta{}, contextChain: maxContextChain,
		objInfos:     newLRU[ID, *objectInfo](16 << 20),
		deltas:       newLRU[ID, *deltaObject](cacheBytes * 3 / 8),
		chunkScratch: sync.Pool{New: func() any { b := make([]byte, 0, fullChunkSize); return &b }},
		blocks:       newBlockCache(cacheBytes / 8),
		// Rebuilt pages need not stay long: the kernel keeps what it was sent (FOPEN_KEEP_CACHE),
		// and the read-ahead builds only 8 MiB ahead of a reader. Every page of the cache is
		// memory the daemon touches for the first time while it fills (kernel page faults).
		pages: newPageCache(cacheBytes / 8),
		ra:    newReadAhead(),
		bufs:  newRecycler(),
	}
}

// buffers is the read path's free lists and buffer pools, which the reads of the
// materialized copy, of file copies and of renders share.
func (o *objectStore) buffers() *recycler { return o.bufs }

// wait returns when no background build of pages and no flush of metas behind a seal runs
// (Close).
func (o *objectStore) wait() {
	o.ra.wait()
	o.flushing.Wait()
}

// forgetObject drops everything known of id (its file was rewritten, mended or removed): its
// meta, in memory and in the index, its header and delta section, and that its CRC was
// checked.
func (o *objectStore) forgetObject(id ID) { o.forgetGone([]ID{id}) }

// forgetGone is forgetObject of every id in ids (a sweep's deleted objects), with one index
// transaction for them all: one per object was a read-write transaction each, whose commit
// costs with the size of the index file (its free list), so that a gc dropping a version of
// n tensors grew as n times the index (TestSweepForgetsInOneIndexWrite).
func (o *objectStore) forgetGone(ids []ID) {
	o.forgetMetas(ids)
	for _, id := range ids {
		o.crcChecked.remove(id)
	}
}

// noteCRC records that the CRC of object id was checked (by Verify, say).
func (o *objectStore) noteCRC(id ID) { o.crcChecked.add(id) }

// dropHeaders drops every object header and delta section held: they are read again from
// the files.
func (o *objectStore) dropHeaders() {
	o.objInfos.clear()
	o.deltas.clear()
}

// dropCRCs forgets which objects' CRCs were checked: each is checked again at its next read.
func (o *objectStore) dropCRCs() { o.crcChecked.clear() }

// dropPages drops every rebuilt page held.
func (o *objectStore) dropPages() { o.pages.clear() }

// dropMetas drops every meta held in memory (the index keeps those written to it).
func (o *objectStore) dropMetas() {
	o.metaMu.Lock()
	clear(o.metas)
	o.dirtyMetas = nil
	o.metaMu.Unlock()
}

// forgetAllMetas drops every object header remembered, in memory and in the index: they
// refill from the object files.
func (o *objectStore) forgetAllMetas() {
	o.dropMetas()
	if err := o.st.ix.clearObjects(); err != nil {
		o.log.Warn("index: not updated", "err", err)
	}
}
