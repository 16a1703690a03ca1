package store

import "errors"

// The bases a stream (or a batch ingest: Writer.diffTensor) diffs against are read from the
// materialized copy as the bytes arrive.
// After a restart, or whenever the kernel dropped it, the copy is cold, and reading it through
// the page cache cost the kernel 1.8 CPU-s per GB here (a fresh page of memory for every
// 4 KiB, filled, copied out, later reclaimed), on a path that is CPU-bound on two cores. So
// bytes the kernel does not cache are read with O_DIRECT (readInto) into the worker's own
// buffers, and, since the kernel reads ahead only through its page cache, the next chunk of
// the same base (or, at its end, of the next tensor's base) is read in the background while
// the worker diffs this one.

// baseReader reads base bytes from the copy for one ingesting goroutine (a stream's worker,
// a batch ingest). Not safe for concurrent use.
type baseReader struct {
	in    *ingester
	bufs  [2][]byte // directAlign-aligned (buf), made when first used
	cur   int       // the buffer the last bytes returned live in
	ahead *baseRead // the read of the next chunk, into bufs[1-cur]
	// checksWhole: the caller checks every base byte it reads against the base's identity
	// or CRC (Writer.diffTensor's baseCheck), so bytes the page cache holds are read without
	// the copy's sums (matView.readCached). objects: read from the objects, not the copy
	// (the copy failed that check).
	checksWhole, objects bool
}

// baseRead is a read of bytes [off, off+n) of object id from the copy in generation gen.
type baseRead struct {
	id     ID
	off, n int64
	gen    uint64
	done   chan struct{}
	b      []byte
	err    error
}

// nextRead names what a reader will read after the last chunk of an object: the first n
// bytes of object id (the next tensor's base). n == 0: nothing known.
type nextRead struct {
	id ID
	n  int64
}

// read returns bytes [off, off+n) (n <= ingestChunk) of object id, which view holds. They
// stay valid until the next read. The next chunk of the object is read ahead, or, after its
// last chunk, the first chunk of next: the first chunk of every tensor would otherwise be
// waited for.
func (r *baseReader) read(view *matView, id ID, off, n int64, next nextRead) ([]byte, error) {
	b, _, err := r.readChecked(view, id, off, n, next)
	return b, err
}

// readChecked is read, and says whether the bytes were checked by the copy's sums (else
// they came from the objects: the copy failed its check).
func (r *baseReader) readChecked(view *matView, id ID, off, n int64, next nextRead) (b []byte, checked bool, err error) {
	if r.objects {
		err = &copyError{errors.New("the base is read from the objects")}
	} else {
		b, err = r.readCopy(view, id, off, n, next)
	}
	if err == nil {
		r.in.mem.noteCopy(n) // counted for the base in memory's figures (ingest_basemem.go)
	}
	if isCopyError(err) {
		// The copy failed its check (it is marked broken and rebuilt): the base's bytes come
		// from the objects. This goroutine holds a view, so the read must take none, nor
		// wait for a page another reader builds (that one may wait for the rebuild, which
		// waits for this view): a private page cache.
		r.wait()
		b = r.buf(r.cur, n)[:n]
		err = r.in.readBase(id, objHint{}, off, b, readOpts{noMaterialized: true, pages: newPageCache(2 * pageSize)})
		return b, false, err
	}
	return b, err == nil, err
}

func (r *baseReader) readCopy(view *matView, id ID, off, n int64, next nextRead) ([]byte, error) {
	if n > ingestChunk {
		r.wait()
		b := make([]byte, n)
		return b, view.readAt(id, b, off)
	}
	if r.checksWhole && r.ahead == nil {
		b := r.buf(r.cur, n)[:n]
		if ok, err := view.readCached(id, b, off); ok || err != nil {
			return b, err
		}
	}
	if a := r.ahead; a != nil {
		r.ahead = nil
		<-a.done
		if a.err == nil && a.id == id && a.off == off && a.n == n && a.gen == view.gen {
			r.cur = 1 - r.cur
			r.readAfter(view, id, off+n, n, next)
			return a.b, nil
		}
	}
	b, direct, err := view.readInto(id, r.buf(r.cur, n), off, n)
	if err != nil {
		return nil, err
	}
	if direct {
		r.readAfter(view, id, off+n, n, next)
	}
	return b, nil
}

// readAfter starts reading what follows bytes [.., off) of id: its next n bytes, or at its
// end the first chunk of next.
func (r *baseReader) readAfter(view *matView, id ID, off, n int64, next nextRead) {
	if !r.readAhead(view, id, off, n) && next.n > 0 {
		r.readAhead(view, next.id, 0, min(next.n, ingestChunk))
	}
}

// readAhead starts reading the chunk at off (up to n bytes, within the object) into the
// buffer not in use; false: off is past the object's end (or its size is unknown).
func (r *baseReader) readAhead(view *matView, id ID, off, n int64) bool {
	m, err := r.in.st.objects.meta(id)
	if err != nil || off >= m.ContentLen {
		return false
	}
	a := &baseRead{id: id, off: off, n: min(n, m.ContentLen-off), gen: view.gen, done: make(chan struct{})}
	raw := r.buf(1-r.cur, a.n)
	r.ahead = a
	mat := r.in.st.mat // r belongs to the caller's goroutine
	go func() {
		defer close(a.done)
		// A hold of its own (the caller's ends when its read returns), but not one that
		// waits: a change of the copy waiting for the caller's hold would wait for this
		// read, and this read for it. A copy changed in between (another generation)
		// makes the read useless, not wrong: read checks gen.
		v := mat.tryView()
		if v == nil || v.gen != a.gen || !v.holds(a.id) {
			v.release()
			a.err = errStale
			return
		}
		a.b, _, a.err = v.readInto(a.id, raw, a.off, a.n)
		v.release()
	}()
	return true
}

// baseBufferLen is the size of the base readers' buffers that the ingester keeps for reuse:
// a chunk and the slack of a checked read, which every read of a base fits.
const baseBufferLen = ingestChunk + copySlack

// buf returns buffer i, large enough for n bytes read with O_DIRECT; no read may be under way
// into it. It comes from the ingester's free list (a batch ingest has a reader per tensor, and
// most tensors are small: fresh buffers for each made a commit of 100,000 tensors allocate
// tens of GB), or is made when the list is empty.
func (r *baseReader) buf(i int, n int64) []byte {
	need := int(n) + copySlack
	if len(r.bufs[i]) >= need {
		return r.bufs[i]
	}
	if need <= baseBufferLen {
		if b, ok := r.in.baseBufs.get(); ok {
			r.bufs[i] = b
			return b
		}
	}
	r.bufs[i] = alignedBuffer(max(baseBufferLen, need))
	return r.bufs[i]
}

// release waits for a read in the background and gives the buffers back to the ingester.
func (r *baseReader) release() {
	r.wait()
	for i, b := range r.bufs {
		if len(b) == baseBufferLen {
			r.in.baseBufs.put(b)
		}
		r.bufs[i] = nil
	}
}

// wait lets a read in the background finish (the worker's buffers are free again).
func (r *baseReader) wait() {
	if a := r.ahead; a != nil {
		<-a.done
		r.ahead = nil
	}
}
