package store

import "fmt"

// meta returns what planning and the anchor policy need of object id: from memory, else the
// index, else the object's header (computing chain depth from its base's meta).
func (o *objectStore) meta(id ID) (objMeta, error) {
	if m, ok := o.cachedMeta(id); ok {
		return m, nil
	}
	epoch := o.fillEpoch()
	var found []idMeta // cached at the end, unless gc forgot an object meanwhile
	type link struct {
		id ID
		m  objMeta
	}
	var chain []link // objects whose depth waits for their base's
	var base objMeta
	cur := id
	for {
		if m, ok := o.cachedMeta(cur); ok {
			base = m
			break
		}
		info, err := o.objectInfoOf(cur)
		if err != nil {
			if len(chain) > 0 {
				return objMeta{}, fmt.Errorf("base of object %s: %w", chain[len(chain)-1].id, err)
			}
			return objMeta{}, err
		}
		h := info.hdr
		m := objMeta{Kind: h.Kind, Width: h.Width, Base: h.Base, ContentLen: h.ContentLen, FileSize: h.FileSize(), DeltaLen: h.DeltaLen}
		if h.Kind == kindFull {
			found = append(found, idMeta{cur, m})
			base = m
			break
		}
		chain = append(chain, link{cur, m})
		if len(chain) > maxWalk {
			return objMeta{}, fmt.Errorf("object %s: delta chain longer than %d (a cycle?): %w", id, maxWalk, ErrCorrupt)
		}
		cur = h.Base
	}
	for i := len(chain) - 1; i >= 0; i-- {
		m := chain[i].m
		m.Depth = base.Depth + 1
		m.ChainBytes = base.ChainBytes + m.DeltaLen
		if base.Kind == kindFull {
			m.Depth, m.ChainBytes = 1, m.DeltaLen
		}
		found = append(found, idMeta{chain[i].id, m})
		base = m
	}
	o.putMetasIf(epoch, found)
	return base, nil
}

type idMeta struct {
	id ID
	m  objMeta
}

// putMetasIf is putMeta of metas read from the objects since epoch, unless an object was
// forgotten since (cacheFill).
func (o *objectStore) putMetasIf(epoch uint64, metas []idMeta) {
	var n, all int
	if !o.cacheFill(epoch, func() {
		o.metaMu.Lock()
		defer o.metaMu.Unlock()
		if o.dirtyMetas == nil {
			o.dirtyMetas = map[ID]objMeta{}
		}
		for _, x := range metas {
			o.metas[x.id] = x.m
			o.dirtyMetas[x.id] = x.m
		}
		n, all = len(o.dirtyMetas), len(o.metas)
	}) {
		return
	}
	if n >= metaFlushAt(all) {
		o.flushMetas()
	}
	o.trimMetas(all)
}

// metaFlushAt is how many new metas wait in memory before flushMetas writes them to the
// index, when all are held: at least 4,096, and half of those held, so that a process that
// touches every object (log, verify, gc, a mount reading versions) writes them in batches that
// double. The index is a B-tree keyed by object id, and a batch of random ids rewrites about
// min(batch, leaves) of its pages: with fixed batches of 4,096 every batch rewrote nearly
// every leaf of an index of up to ~150,000 objects, so the pages written grew as the square
// of the objects (bbolt, 32-byte keys: 0.11 page per object at 20,000 objects, 0.55 at
// 200,000); doubling batches write a number of pages linear in the objects
// (TestMetaFlushesDouble). Bounded by maxMetas, past which the metas are dropped.
func metaFlushAt(all int) int { return max(4096, all/2) }

// maxWalk bounds every walk along base links (a damaged store could hold a cycle).
const maxWalk = 1 << 16

func (o *objectStore) cachedMeta(id ID) (objMeta, bool) {
	o.metaMu.Lock()
	m, ok := o.metas[id]
	o.metaMu.Unlock()
	if ok {
		return m, true
	}
	epoch := o.fillEpoch()
	if m, ok = o.st.ix.object(id); ok {
		n := 0
		o.cacheFill(epoch, func() {
			o.metaMu.Lock()
			o.metas[id] = m
			n = len(o.metas)
			o.metaMu.Unlock()
		})
		o.trimMetas(n)
	}
	return m, ok
}

// maxMetas bounds the metas kept in memory in front of the index (about 170 bytes each: a
// process that touches every object of a store of 10^6 tensors would otherwise keep them
// all). Past it they are dropped wholesale, once the new ones are in the index, and found
// there again.
const maxMetas = 1 << 17

// trimMetas drops the metas in memory when there are n >= maxMetas of them.
func (o *objectStore) trimMetas(n int) {
	if n < maxMetas {
		return
	}
	o.flushMetas()
	o.metaMu.Lock()
	if len(o.metas) >= maxMetas {
		clear(o.metas)
		// Any written since the flush stay until the next one.
		for id, m := range o.dirtyMetas {
			o.metas[id] = m
		}
	}
	o.metaMu.Unlock()
}

// putMeta records a meta in memory; flushMetas writes the new ones to the index in one
// transaction (the index is derived, so losing unflushed entries costs only a re-read).
func (o *objectStore) putMeta(id ID, m objMeta) {
	o.metaMu.Lock()
	o.metas[id] = m
	if o.dirtyMetas == nil {
		o.dirtyMetas = map[ID]objMeta{}
	}
	o.dirtyMetas[id] = m
	n, all := len(o.dirtyMetas), len(o.metas)
	o.metaMu.Unlock()
	if n >= metaFlushAt(all) {
		o.flushMetas()
	}
	o.trimMetas(all)
}

// forgetMeta drops what is known of id (its representation changed). Fills that began
// before it are not cached (cacheFill), and a flush of metas under way ends first, so the
// index keeps no old meta of id either.
func (o *objectStore) forgetMeta(id ID) { o.forgetMetas([]ID{id}) }

// forgetMetas is forgetMeta of every id in ids, with one index transaction for them all (one
// per object costs with the size of the index file: TestSweepForgetsInOneIndexWrite).
func (o *objectStore) forgetMetas(ids []ID) {
	if len(ids) == 0 {
		return
	}
	o.fillMu.Lock()
	o.forgets++
	o.metaMu.Lock()
	for _, id := range ids {
		delete(o.metas, id)
		delete(o.dirtyMetas, id)
	}
	o.metaMu.Unlock()
	for _, id := range ids {
		o.objInfos.remove(id)
		o.deltas.remove(id)
	}
	o.fillMu.Unlock()
	if err := o.st.ix.deleteObjects(ids); err != nil {
		o.log.Warn("index: not updated", "err", err)
	}
}

// fillEpoch is taken before an object is read for a cache: cacheFill caches what was read
// only if no forgetMeta ran since (gc may have rewritten any object in between; a fill that
// is not cached is read again next time).
func (o *objectStore) fillEpoch() uint64 {
	o.fillMu.RLock()
	defer o.fillMu.RUnlock()
	return o.forgets
}

// cacheFill runs add (which caches what was read since epoch) unless an object was forgotten
// since epoch. It reports whether add ran.
func (o *objectStore) cacheFill(epoch uint64, add func()) bool {
	o.fillMu.RLock()
	defer o.fillMu.RUnlock()
	if o.forgets != epoch {
		return false
	}
	add()
	return true
}

// flushMetasBehind is flushMetas in a goroutine of its own (wait waits for it): a seal writes
// the metas of its version's objects to the index after it returns, not before. They are a
// derived cache (a kill -9 before they are written costs re-reads of object headers, never a
// version), and a version of many tensors has one each: at 3,000 tensors their write was the
// largest part of a streamed seal's CPU after the last file closed (issue 29, figure moe).
func (o *objectStore) flushMetasBehind() {
	o.metaMu.Lock()
	n := len(o.dirtyMetas)
	o.metaMu.Unlock()
	if n == 0 {
		return
	}
	o.flushing.Add(1)
	go func() {
		defer o.flushing.Done()
		o.flushMetas()
	}()
}

func (o *objectStore) flushMetas() {
	// Under fillMu: a forgetMeta beside it waits until these are in the index, then deletes
	// its id from there.
	o.fillMu.RLock()
	defer o.fillMu.RUnlock()
	o.metaMu.Lock()
	dirty := o.dirtyMetas
	o.dirtyMetas = nil
	o.metaMu.Unlock()
	if err := o.st.ix.putObjects(dirty); err != nil {
		o.log.Warn("index: not updated", "err", err)
	}
}
