package store

// What the files and checks of renders ask of the renders. Their fields are their own
// (render.go): a rendered file's reads and its checks call these.

// chunkBuffer is a pooled buffer for the whole chunks under a read of a render that does not
// start and end on chunks (RenderedFile.ReadAt); give it back with putChunkBuffer.
func (r *renders) chunkBuffer() *[]byte { return r.bufs.renderReads.Get().(*[]byte) }

// putChunkBuffer gives back a buffer of chunkBuffer.
func (r *renders) putChunkBuffer(pb *[]byte) { r.bufs.renderReads.Put(pb) }

// dropDamaged logs that the render at p (a file of render drop) is damaged, for the reason
// why, and drops the render, with extra (dropRender).
func (r *renders) dropDamaged(p string, why error, drop, extra string) {
	r.log.Warn("cached render is damaged: dropped, it is rendered again from the store", "render", p, "err", why)
	r.dropRender(drop, extra)
}

// knownFileXXH3 is the xxh3-128 of the file whose SHA-256 is id, when a render or a patch
// written in computed it from bytes checked in the same pass (ok false: not known).
func (r *renders) knownFileXXH3(id ID) ([16]byte, bool) { return r.fileXXH3.get(id) }

// noteFileXXH3 remembers d, the xxh3-128 of the file whose SHA-256 is id, computed from the
// same bytes as id (a patch written in: ingest_patch_xxh3.go).
func (r *renders) noteFileXXH3(id ID, d [16]byte) { r.fileXXH3.add(id, d, 64) }
