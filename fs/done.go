package fs

// DONE is a marker, not a file of the version: its close seals the version (sealOpenVersion)
// and the seal leaves it out. What is written into it is therefore not stored, and never an
// error: a program that writes a word into its marker (`echo done > DONE`) seals the version
// like one that only creates it, and the log says that the bytes were not stored. Refusing
// them instead would answer the shell with an error for a version that sealed: the shell
// opens DONE, hands the descriptor to echo and closes its own first, and that close seals,
// before echo writes. A write through a descriptor of DONE that outlived the seal is
// therefore taken and dropped, as is the setting of DONE's times (touch(1)); everything else
// on a sealed version is refused as usual.

// skipAsMarker records, at a seal, that f is the DONE its version leaves out, and logs that
// its bytes, if it has any, are not stored. Caller holds the tree's mu exclusively.
func (f *openFile) skipAsMarker() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marker = true
	if f.size > 0 && !f.markerLogged {
		f.markerLogged = true
		f.t.m.log.Warn("DONE holds bytes; they are not stored (DONE only marks the version sealed)", "file", f.t.name+"/"+doneName, "bytes", f.size)
	}
}

// sealedMarker reports whether f is the DONE of a tree that has been sealed.
func (f *openFile) sealedMarker() bool {
	f.mu.Lock()
	marker := f.marker
	f.mu.Unlock()
	if !marker {
		return false
	}
	f.t.mu.RLock()
	defer f.t.mu.RUnlock()
	return f.t.state == treeSealed
}

// dropMarkerWrite takes a write into the DONE of a sealed version: the version is sealed,
// and what DONE holds was never going to be stored.
func (f *openFile) dropMarkerWrite(n int) (uint32, bool) {
	if !f.sealedMarker() {
		return 0, false
	}
	f.mu.Lock()
	if !f.markerLogged {
		f.markerLogged = true
		f.t.m.log.Warn("bytes written to DONE after the seal are not stored (DONE only marks the version sealed)", "file", f.t.name+"/"+doneName, "bytes", n)
	}
	f.mu.Unlock()
	return uint32(n), true
}
