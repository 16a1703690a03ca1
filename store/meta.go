package store

import "fmt"

// meta returns what planning and the anchor policy need of object id: from memory, else the
// index, else the object's header (computing chain depth from its base's meta).
func (s *Store) meta(id ID) (objMeta, error) {
	if m, ok := s.cachedMeta(id); ok {
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
		if m, ok := s.cachedMeta(cur); ok {
			base = m
			break
		}
		info, err := s.objectInfoOf(cur)
		if err != nil {
			if len(chain) > 0 {
				return objMeta{}, fmt.Errorf("base of object %s: %w", chain[len(chain)-1].id, err)
			}
			return objMeta{}, err
		}
		h := info.hdr
		m := objMeta{Kind: h.Kind, Width: h.Width, Base: h.Base, ContentLen: h.ContentLen, FileSize: h.fileSize(), DeltaLen: h.DeltaLen}
		if h.Kind == kindFull {
			s.putMeta(cur, m)
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
		s.putMeta(chain[i].id, m)
		base = m
	}
	return base, nil
}

// maxWalk bounds every walk along base links (a damaged store could hold a cycle).
const maxWalk = 1 << 16

func (s *Store) cachedMeta(id ID) (objMeta, bool) {
	s.metaMu.Lock()
	m, ok := s.metas[id]
	s.metaMu.Unlock()
	if ok {
		return m, true
	}
	if m, ok = s.ix.object(id); ok {
		s.metaMu.Lock()
		s.metas[id] = m
		n := len(s.metas)
		s.metaMu.Unlock()
		s.trimMetas(n)
	}
	return m, ok
}

// maxMetas bounds the metas kept in memory in front of the index (about 170 bytes each: a
// process that touches every object of a store of 10^6 tensors would otherwise keep them
// all). Past it they are dropped wholesale, once the new ones are in the index, and found
// there again.
const maxMetas = 1 << 17

// trimMetas drops the metas in memory when there are n >= maxMetas of them.
func (s *Store) trimMetas(n int) {
	if n < maxMetas {
		return
	}
	s.flushMetas()
	s.metaMu.Lock()
	if len(s.metas) >= maxMetas {
		clear(s.metas)
		// Any written since the flush stay until the next one.
		for id, m := range s.dirtyMetas {
			s.metas[id] = m
		}
	}
	s.metaMu.Unlock()
}

// putMeta records a meta in memory; flushMetas writes the new ones to the index in one
// transaction (the index is derived, so losing unflushed entries costs only a re-read).
func (s *Store) putMeta(id ID, m objMeta) {
	s.metaMu.Lock()
	s.metas[id] = m
	if s.dirtyMetas == nil {
		s.dirtyMetas = map[ID]objMeta{}
	}
	s.dirtyMetas[id] = m
	n, all := len(s.dirtyMetas), len(s.metas)
	s.metaMu.Unlock()
	if n >= 4096 {
		s.flushMetas()
	}
	s.trimMetas(all)
}

// forgetMeta drops what is known of id (its representation changed).
func (s *Store) forgetMeta(id ID) {
	s.metaMu.Lock()
	delete(s.metas, id)
	delete(s.dirtyMetas, id)
	s.metaMu.Unlock()
	s.objInfos.remove(id)
	s.deltas.remove(id)
	s.ix.deleteObjects([]ID{id})
}

func (s *Store) flushMetas() {
	s.metaMu.Lock()
	dirty := s.dirtyMetas
	s.dirtyMetas = nil
	s.metaMu.Unlock()
	if err := s.ix.putObjects(dirty); err != nil {
		s.log.Warn("index: not updated", "err", err)
	}
}
