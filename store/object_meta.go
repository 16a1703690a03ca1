package store

import "fmt"

// meta returns what planning and the anchor policy need of object id: from memory, else the
// index, else the object's header (computing chain depth from its base's meta).
func (o *objectStore) meta(id ID) (objMeta, error) {
	if m, ok := o.cachedMeta(id); ok {
		return m, nil
	}
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
		m := objMeta{Kind: h.Kind, Width: h.Width, Base: h.Base, ContentLen: h.ContentLen, FileSize: h.fileSize(), DeltaLen: h.DeltaLen}
		if h.Kind == kindFull {
			o.putMeta(cur, m)
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
		o.putMeta(chain[i].id, m)
		base = m
	}
	return base, nil
}

// maxWalk bounds every walk along base links (a damaged store could hold a cycle).
const maxWalk = 1 << 16

func (o *objectStore) cachedMeta(id ID) (objMeta, bool) {
	o.metaMu.Lock()
	m, ok := o.metas[id]
	o.metaMu.Unlock()
	if ok {
		return m, true
	}
	if m, ok = o.st.ix.object(id); ok {
		o.metaMu.Lock()
		o.metas[id] = m
		n := len(o.metas)
		o.metaMu.Unlock()
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
	if n >= 4096 {
		o.flushMetas()
	}
	o.trimMetas(all)
}

// forgetMeta drops what is known of id (its representation changed).
func (o *objectStore) forgetMeta(id ID) {
	o.metaMu.Lock()
	delete(o.metas, id)
	delete(o.dirtyMetas, id)
	o.metaMu.Unlock()
	o.objInfos.remove(id)
	o.deltas.remove(id)
	o.st.ix.deleteObjects([]ID{id})
}

func (o *objectStore) flushMetas() {
	o.metaMu.Lock()
	dirty := o.dirtyMetas
	o.dirtyMetas = nil
	o.metaMu.Unlock()
	if err := o.st.ix.putObjects(dirty); err != nil {
		o.log.Warn("index: not updated", "err", err)
	}
}
