package store

import (
	"log/slog"
	"sync"
)

// objectStore is the store's objects as reads and writes see them: what is known of each
// object (its meta, in front of the index: meta.go), and the caches of what was read of
// them. It owns these; the rest of the store asks it.
type objectStore struct {
	// st is the store, for what is set at open after the objects are made or may be
	// replaced later (its backend, index and codec) and for the version list.
	st    *Store
	log   *slog.Logger
	stats *storeStats

	metaMu     sync.Mutex
	metas      map[ID]objMeta // in front of the index's objects bucket
	dirtyMetas map[ID]objMeta // not yet written to the index
}

// newObjectStore returns the objects of store s, with cacheBytes of memory for what reads
// keep (Options.CacheBytes).
func newObjectStore(s *Store, cacheBytes int64) *objectStore {
	return &objectStore{st: s, log: s.log, stats: &s.stats, metas: map[ID]objMeta{}}
}

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
