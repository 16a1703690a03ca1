package store

// absent reports that object id is surely not stored, without a syscall: it has no live
// record in a pack and the backend holds no loose objects at all (a store written with packs
// only). The dedup check before each new object (existsToWrite) asks it first: with tens of
// thousands of tensors a version, the stat of a loose file that is not there was a syscall per
// changed tensor. A wrong "absent" can only come from a loose object another process put in
// the last second (store/local's looseRecheck): the object is then written into a pack as
// well, which readers and gc allow (an id in a pack wins over its loose file).
func (p *packedObjects) absent(id ID) bool {
	if _, _, ok := p.lookup(id); ok {
		return false
	}
	lb, ok := p.Backend.(interface{ NoLooseObjects() bool })
	return ok && lb.NoLooseObjects()
}

// existsToWrite is exists for the check before an object is written (dedup): absent first.
func (in *ingester) existsToWrite(id ID) bool {
	if p := in.st.be.packs; p != nil && p.absent(id) {
		return false
	}
	return in.exists(id)
}
