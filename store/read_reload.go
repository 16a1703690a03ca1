package store

// Reads under another process's gc (docs/design.md, "Reading while gc runs elsewhere"). A
// reader caches what it read of objects: headers, metas (also in its index), delta sections
// with their contexts, decoded blocks, pages, the objects whose CRC it checked. Another
// process's gc may rewrite an object in place (a delta re-anchored as a whole copy, a link
// re-coded) and delete its old bases, so a cached header can name a base that is gone, or a
// cached section a context that is gone. A read that fails with damage (ErrCorrupt, a missing
// file, EIO) therefore drops everything cached of the objects it walks and is tried once more
// from the files; only a second failure is damage.

// forgetObjects drops what this process cached of id, the objects down its chain of bases and
// those of the latest version's object at hint's place (a backward plan's path), as far as
// the caches know them: nothing is read from the files, and a cycle of bases ends the walk.
// The pack layer reads the store's pack indexes again: where each object is, is a cache of
// them too (gc elsewhere may have put a re-anchored record in a new pack, and the old record
// names a base that is gone). It returns how many objects it dropped.
func (o *objectStore) forgetObjects(id ID, hint objHint) int {
	if err := o.st.be.reloadIndexes(); err != nil {
		o.log.Warn("pack indexes not read again", "err", err)
	}
	drop := map[ID]bool{}
	o.cachedChain(id, drop)
	if hint.path != "" {
		if latest, err := o.st.versions.latestVersion(); err == nil && latest != nil {
			if d0, ok := latest.objectAt(hint); ok {
				o.cachedChain(d0, drop)
			}
		}
	}
	for x := range drop {
		o.forgetMeta(x)
		o.crcChecked.remove(x)
	}
	o.blocks.removeIf(func(k blockKey) bool { return drop[k.id] })
	o.pages.removeIf(func(k pageKey) bool { return drop[k.id] })
	return len(drop)
}

// cachedChain adds id and its bases, as the cached metas, headers and sections name them, to
// seen (a base the caches do not know ends the walk; so does one already seen). Where the
// caches disagree on a base, both are followed.
func (o *objectStore) cachedChain(id ID, seen map[ID]bool) {
	for cur := id; !cur.IsZero() && !seen[cur] && len(seen) < maxWalk; {
		seen[cur] = true
		var bases []ID
		if m, ok := o.cachedMeta(cur); ok {
			bases = append(bases, m.Base)
		}
		if info, ok := o.objInfos.get(cur); ok {
			bases = append(bases, info.hdr.Base)
		}
		if d, ok := o.deltas.get(cur); ok {
			bases = append(bases, d.hdr.Base)
		}
		cur = ID{}
		for _, b := range bases {
			switch {
			case b.IsZero() || b == cur:
			case cur.IsZero():
				cur = b
			default:
				o.cachedChain(b, seen)
			}
		}
	}
}
