package store

// What the rest of the store asks of the objects beyond reading and writing them. Their
// fields are their own (object_store.go): reads, the read-ahead and the open call these.

// writeVersion1Deltas makes the objects write version-1 delta sections only: a store of
// format 1 that is not upgraded (a reader, a rank of a writer group) keeps that format.
func (o *objectStore) writeVersion1Deltas() { o.contextChain = 0 }

// readsAhead says whether sequential reads have pages built ahead of them in the
// background (read_ahead.go).
func (o *objectStore) readsAhead() bool { return o.ra != nil }

// hasPage says whether page pg of object id's content is in the page cache.
func (o *objectStore) hasPage(id ID, pg int64) bool { return o.pages.has(pageKey{id, pg}) }

// buildAhead starts a background build of page pg of object id (hint: where the latest
// version has it), unless one is under way. It returns false, starting nothing, when every
// builder is busy: the reader then builds what it needs itself. An error of the build is the
// reader's to see when it gets there.
func (o *objectStore) buildAhead(id ID, hint objHint, pg int64) bool {
	key := pageKey{id, pg}
	if _, busy := o.ra.building.LoadOrStore(key, true); busy {
		return true
	}
	select {
	case o.ra.tokens <- struct{}{}:
	default:
		o.ra.building.Delete(key)
		return false
	}
	o.ra.wg.Add(1)
	go func() {
		defer func() { o.ra.building.Delete(key); <-o.ra.tokens; o.ra.wg.Done() }()
		if p, err := o.page(id, hint, pg, readOpts{}); err == nil {
			p.release()
		}
	}()
	return true
}
