package store

import (
	"bytes"
	"fmt"

	"github.com/weightfs/weightfs/delta"
)

// The worker of a stream's pipeline: it takes the file's bytes in order and does the batch
// path's work on them (ingest.go), one tensor at a time.

type jobKind int

const (
	jobHeader     jobKind = iota // store the header object (data)
	jobTensor                    // bytes [off, off+len(data)) of a tensor
	jobBlobStart                 // the file is stored whole: data, or (fromTensors) all so far
	jobBlob                      // the next bytes of a whole-file object
	jobFinishBlob                // store the whole-file object
)

// streamJob is one step of the worker, in file order.
type streamJob struct {
	kind        jobKind
	c           *chunk // the pool chunk holding data, if any
	data        []byte
	tensor      int
	off         int64
	first, last bool // the tensor's first and last job
	fromTensors bool
	// keep is the tensor's buffer in the base in memory its bytes were routed into
	// (FileStream.keepRoute; jobTensor; nil: none).
	keep []byte
}

func (j streamJob) release(p *chunkPool) { j.c.release(p) }

// workerState is what the worker goroutine owns. Other goroutines read it only after the
// worker and the finisher have exited (stopLocked); the finisher writes the results (ID,
// Base, Changed) of the entry's tensors handed to it.
type workerState struct {
	entry       manifestFile
	ts          *tensorState // the tensor being worked on
	blob        *objStream   // the whole-file object, for a file stored whole
	blobFailed  bool         // the switch to a whole-file object failed: replay the tensors
	unprocessed []streamJob  // jobs not done after a failure, in order: their bytes are raw
	src         baseSource   // reads of the bases
	ch          delta.Changes
}

// tensorState is one tensor in progress.
type tensorState struct {
	idx     int
	t       *manifestTensor
	width   int
	size    int64
	elems   int64
	float   bool
	base    ID
	hasBase bool
	enc     *delta.DeltaEncoder // nil: no base, or too many changes for a delta
	ctx     *writeContext       // what enc codes against (nil: version 1; object_delta_context.go)
	body    []byte              // the encoder's output once it has finished
	fw      *objStream          // the whole copy, when one is being written
	check   *streamBaseCheck    // checks the base bytes read (stream_check.go)
	changed int64
	done    int64 // bytes processed
	// mem is the base's content in memory, read instead of the copy (nil: none); keep takes in
	// the tensor's bytes, [0, kept), for the next version's (nil: not kept; checked there by
	// the tensor's xxh3-128: ingest_basemem.go).
	mem  *memTensor
	keep []byte
	kept int64
}

func (st *FileStream) runWorker() {
	defer close(st.workerDone)
	defer st.fin.close()
	wk := &st.wk
	for batch := range st.jobs {
		for _, j := range batch {
			if st.failed() != nil {
				wk.unprocessed = append(wk.unprocessed, j)
				continue
			}
			consumed, err := st.doJob(j)
			if !consumed {
				wk.unprocessed = append(wk.unprocessed, j)
			} else {
				j.release(st.w.pool)
			}
			if err != nil {
				st.setFailed(err)
			}
		}
		st.fin.flush() // the tensors finished in the batch, at once (stream_batch.go)
	}
}

// doJob runs one job. consumed reports whether the job's bytes are now part of the worker's
// state (else they are kept raw for Replay).
func (st *FileStream) doJob(j streamJob) (consumed bool, err error) {
	wk := &st.wk
	switch j.kind {
	case jobHeader:
		id, err := st.w.storeWhole(bytes.NewReader(j.data), 0, int64(len(j.data)), 1)
		if err != nil {
			return true, fmt.Errorf("store header: %w", err)
		}
		wk.entry.Header = id
		return true, nil
	case jobTensor:
		if j.first {
			if err := st.startTensor(j.tensor, j.keep); err != nil {
				return false, err
			}
		}
		if len(j.data) > 0 {
			if consumed, err := st.addTensorBytes(wk.ts, j.data, j.off); err != nil {
				return consumed, fmt.Errorf("tensor %s: %w", wk.ts.t.Name, err)
			}
		}
		if j.last {
			st.fin.hand(wk.ts)
			wk.ts = nil
		}
		return true, nil
	case jobBlobStart:
		blob, _ := newObjStream(st.s, 1, -1, true) // never fails: no file until the first frame
		if j.fromTensors {
			st.fin.drain()
			if err := st.failed(); err != nil {
				blob.abort()
				return false, err
			}
			if err := st.replayTensors(blob, &wk.src); err != nil {
				// Nothing lost: the tensors' state is still there for Replay.
				blob.abort()
				wk.blobFailed = true
				return false, fmt.Errorf("store as a whole file: %w", err)
			}
		} else if err := blob.write(j.data); err != nil {
			wk.blob = blob
			return true, err
		}
		wk.blob = blob
		return true, nil
	case jobBlob:
		return true, wk.blob.write(j.data)
	case jobFinishBlob:
		return true, st.finishBlob()
	}
	return false, fmt.Errorf("unknown stream job %d", j.kind)
}

// startTensor sets up the work of tensor i: against its base (the same tensor of the latest
// version) when there is one, else as a whole copy.
func (st *FileStream) startTensor(i int, routed []byte) error {
	wk := &st.wk
	t := &wk.entry.Tensors[i]
	ts := &tensorState{idx: i, t: t, width: t.DType.Size(), size: t.End - t.Begin, float: t.DType.IsFloat()}
	ts.elems = ts.size / int64(ts.width)
	if st.basis != nil {
		if ref, ok := st.basis.findBase(st.hint, t.Name, t.DType, t.Shape); ok {
			ts.base, ts.hasBase = ref.tensor.ID, true
		}
	}
	wholeCopy := !ts.hasBase
	if ts.hasBase {
		ts.enc = delta.NewDeltaEncoder(ts.width, ts.float, ts.elems)
		ts.ctx = st.s.objects.writeContextOf(ts.base)
		ts.enc.SetContext(ts.ctx.fn())
		ts.check = newStreamBaseCheck(st.s.mat, ts.base)
		if ts.mem = st.w.in.mem.base(st.basis.m.Version, ts.base, ts.size); ts.mem != nil {
			ts.check.hb = memBaseCheck(ts.mem) // every byte is hashed: none is checked by the copy
		}
		// A full chain, or deltas that will be as large as a whole copy with a delta like
		// the ones before, make this tensor an anchor if it changed: the whole copy is then
		// written as the bytes pass rather than in a second pass at the end (a guess: the
		// policy at the end decides, as in the batch path).
		bm, err := st.s.objects.meta(ts.base)
		wholeCopy = err == nil && bm.Kind == kindDelta &&
			(bm.Depth+1 > st.s.maxChain || bm.ChainBytes+bm.ChainBytes/int64(bm.Depth) >= ts.size)
	}
	if wholeCopy {
		fw, err := newObjStream(st.s, ts.width, ts.size, false)
		if err != nil {
			return err
		}
		ts.fw = fw
	}
	if ts.keep = routed; !st.keepRoute {
		ts.keep = st.w.mem.buffer(ts.size)
	}
	wk.ts = ts
	return nil
}

// addTensorBytes processes bytes [off, off+len(data)) of the tensor: with a base, diffed
// against the base's bytes and fed to the encoder; into the whole copy, if one is written.
// Only a failed read of the base leaves the bytes unconsumed.
func (st *FileStream) addTensorBytes(ts *tensorState, data []byte, off int64) (bool, error) {
	keep := ts.keep != nil && off == ts.kept
	if keep {
		if !routedTo(ts.keep, off, data) {
			copy(ts.keep[off:], data)
		}
		ts.kept += int64(len(data))
	}
	if !ts.hasBase {
		ts.done += int64(len(data))
		return true, ts.fw.write(data)
	}
	wk := &st.wk
	if err := st.s.failpoint("stream-base-read"); err != nil {
		return false, err
	}
	base, checked, err := wk.src.read(st, ts, off, int64(len(data)), st.nextBase(ts, off+int64(len(data))))
	if err != nil {
		return false, err
	}
	// The check of the base's bytes and the diff, piece by piece (stream_keep.go): the bytes
	// are read from memory once, not in two passes. (The bytes kept need no pass of their
	// own: the hasher's xxh3-128 of them is their check.)
	found := int64(0)
	for at, piece := 0, st.workPiece(len(data)); at < len(data); at += piece {
		d, b, boff := data[at:min(at+piece, len(data))], base[at:min(at+piece, len(data))], off+int64(at)
		if err := ts.check.add(b, boff, checked, st.baseFromObjects(ts)); err != nil {
			return false, err
		}
		n, err := st.w.in.diffInto(ts.enc, b, d, boff/int64(ts.width), ts.width, &wk.ch)
		if err != nil {
			return false, err
		}
		found += n
	}
	ts.changed += found
	ts.done += int64(len(data))
	if ts.enc != nil && (ts.changed > ts.elems/8 || ts.changed*int64(ts.width+2) > maxDeltaMemory) {
		// Not an RL step (the batch path's rule): a whole copy is about as small, and the
		// encoder's memory stays bounded. The copy takes over from here.
		body, err := ts.enc.Finish()
		ts.enc = nil
		ts.ctx.done()
		if err != nil {
			return true, fmt.Errorf("encode delta: %w", err)
		}
		if ts.fw != nil {
			return true, ts.fw.write(data)
		}
		ts.body = body // the bytes so far, until the copy holds them
		fw, err := newObjStream(st.s, ts.width, ts.size, false)
		if err == nil {
			err = st.rebuildTensor(ts, fw, &wk.src)
		}
		if err != nil {
			fw.abort()
			return true, err
		}
		ts.fw, ts.body = fw, nil
		return true, nil
	}
	if ts.fw != nil {
		return true, ts.fw.write(data)
	}
	return true, nil
}

// baseSource reads the bases of a stream's tensors for one goroutine (the worker, or the
// finisher when it rebuilds a tensor).
type baseSource struct {
	copy  baseReader // from the materialized copy (stream_base.go)
	plain []byte     // bases read through the store's read path
}

// read returns bytes [off, off+n) (n <= ingestChunk) of the tensor's base, valid until the
// next read: from the materialized copy when it holds it, else through the store's read
// path (the copy moved on meanwhile). next is what the worker will read after the tensor.
// checked says the bytes were checked by the copy's sums (stream_check.go).
func (src *baseSource) read(st *FileStream, ts *tensorState, off, n int64, next nextRead) (b []byte, checked bool, err error) {
	if ts.mem != nil {
		return ts.mem.b[off : off+n], false, nil // checked by ts.check (ingest_basemem.go)
	}
	if src.copy.in == nil {
		src.copy.in = st.w.in
	}
	if view := st.s.mat.view(); view != nil {
		if view.holds(ts.base) {
			b, checked, err := src.copy.readChecked(view, ts.base, off, n, next)
			view.release()
			return b, checked, err
		}
		view.release() // readObject takes its own hold: never two at once
	}
	if int64(cap(src.plain)) < n {
		src.plain = make([]byte, max(n, streamChunkSize))
	}
	b = src.plain[:n]
	return b, false, st.w.in.readBase(ts.base, objHint{path: st.hint, tensor: ts.t.Name}, off, b, readOpts{})
}

// baseFromObjects reads bytes of ts's base through the store's read path, for the base
// check's hash of the bytes before the first that the copy did not check.
func (st *FileStream) baseFromObjects(ts *tensorState) func(off, n int64, p []byte) error {
	return func(off, n int64, p []byte) error {
		return st.w.in.readBase(ts.base, objHint{path: st.hint, tensor: ts.t.Name}, off, p[:n], readOpts{})
	}
}

// close waits for the source's read ahead, if any, and drops its buffers.
func (src *baseSource) close() {
	src.copy.wait()
	*src = baseSource{}
}

// nextBase is what the worker will read after bytes [.., end) of tensor ts: nothing before
// the tensor's end, else the first chunk of the base of the next tensor with bytes.
func (st *FileStream) nextBase(ts *tensorState, end int64) nextRead {
	if end < ts.size || st.basis == nil {
		return nextRead{}
	}
	tensors := st.wk.entry.Tensors
	for i := ts.idx + 1; i < len(tensors); i++ {
		t := &tensors[i]
		if t.End == t.Begin {
			continue
		}
		ref, ok := st.basis.findBase(st.hint, t.Name, t.DType, t.Shape)
		if !ok {
			return nextRead{}
		}
		return nextRead{id: ref.tensor.ID, n: min(t.End-t.Begin, streamChunkSize)}
	}
	return nextRead{}
}

// byteSink takes bytes in order: an objStream, or an io.Writer through writerSink.
type byteSink interface{ write([]byte) error }

// rebuildTensor writes the bytes [0, ts.done) of the tensor into dst, from its base and the
// encoded changes (ts.body). The base bytes read again must be those diffed (ts.check), so
// the bytes rebuilt are exactly the bytes received, or it fails.
func (st *FileStream) rebuildTensor(ts *tensorState, dst byteSink, src *baseSource) error {
	end := ts.done
	again := ts.check.again()
	var scratch []byte
	for off := int64(0); off < end; off += streamChunkSize {
		b, checked, err := src.read(st, ts, off, min(streamChunkSize, end-off), nextRead{})
		if err != nil {
			return err
		}
		if err := again.add(b, off, checked, st.baseFromObjects(ts)); err != nil {
			return err
		}
		if ts.body != nil {
			if ts.mem != nil {
				b = append(scratch[:0], b...) // the memory's bytes are shared: never changed
				scratch = b
			}
			if err := ts.ctx.apply(ts.body, b, off/int64(ts.width), delta.Forward); err != nil {
				return fmt.Errorf("apply own delta: %w", err)
			}
		}
		if err := dst.write(b); err != nil {
			return err
		}
	}
	same, known := ts.check.sameAs(again)
	if !known {
		// The bytes diffed were all checked by the copy; some read again were not: those
		// are right if the whole base, read on, is the base's content.
		var buf []byte
		for off := end; off < ts.size; off += streamChunkSize {
			n := min(streamChunkSize, ts.size-off)
			if int64(len(buf)) < n {
				buf = make([]byte, n)
			}
			if err := st.baseFromObjects(ts)(off, n, buf); err != nil {
				return err
			}
			if err := again.add(buf[:n], off, false, nil); err != nil {
				return err
			}
		}
		same = again.matches()
	}
	if !same {
		return fmt.Errorf("base object %s read back differs from the bytes diffed: %w", ts.base, errStreamCopy)
	}
	return nil
}

// finishTensor decides how the tensor is stored, exactly as Writer.ingestTensor does. The
// finisher runs it (stream_finish.go); src is its own reader of bases.
func (st *FileStream) finishTensor(ts *tensorState, src *baseSource) (err error) {
	w, s, t := st.w, st.s, ts.t
	defer func() {
		if err == nil {
			st.keptTensor(ts)
		}
	}()
	id := st.hs.tensorSumOf(ts.idx)
	t.XXH3 = st.hs.tensorXXH3Of(ts.idx)
	if !ts.hasBase {
		t.ID, t.Changed = id, ts.elems
		w.hold(id)
		if w.in.existsToWrite(id) {
			ts.fw.abort()
			return nil
		}
		stored, err := ts.fw.finish(id, ID{}, nil)
		if err != nil {
			return err
		}
		w.noteCreated(id, stored)
		s.objects.putMeta(id, objMeta{Kind: kindFull, Width: ts.width, ContentLen: ts.size, FileSize: stored})
		return nil
	}
	if !ts.check.matches() {
		if ts.mem != nil {
			// Not the copy: the memory failed its check (the file goes on through the
			// batch path, which reads the copy).
			w.in.mem.drop("a stream's base bytes from memory do not match their CRC-32C", ts.base)
			return fmt.Errorf("base object %s in memory: %w", ts.base, errMemBase)
		}
		s.mat.markBroken()
		return fmt.Errorf("the materialized copy of base object %s does not match it (rebuilding the copy)", ts.base)
	}
	t.ID, t.Base, t.Changed = id, ts.base, ts.changed
	w.hold(id)
	if id == ts.base || w.in.existsToWrite(id) {
		ts.fw.abort()
		return nil
	}
	bm, err := s.objects.meta(ts.base)
	baseBroken := false
	if err != nil {
		if !isDamage(err) {
			return fmt.Errorf("base: %w", err)
		}
		// The base's own chain is damaged: stored whole, without a link (as ingestTensor).
		s.log.Warn("the base's chain of deltas is damaged: tensor stored whole", "tensor", t.Name, "base", ts.base.String(), "err", err)
		baseBroken = true
	}
	if ts.enc != nil && ts.changed > 0 {
		body, err := ts.enc.Finish()
		ts.enc = nil
		ts.ctx.done()
		if err != nil {
			return fmt.Errorf("encode delta: %w", err)
		}
		ts.body = body
	}
	body := ts.body
	chainBytes := int64(len(body))
	depth := 1
	if bm.Kind == kindDelta {
		chainBytes += bm.ChainBytes
		depth = bm.Depth + 1
	}
	if body != nil && !baseBroken && depth <= s.maxChain && chainBytes < ts.size {
		file := encodeDeltaObject(id, ts.width, ts.size, ts.base, body)
		if err := s.failpoint("stream-object-put"); err != nil {
			return err
		}
		if err := putObjectBytes(s.be, id, file); err != nil {
			return err
		}
		// The next version's encoder codes against this section (its context), and the
		// seal's bring-forward applies it: kept, as the batch path keeps it, rather than
		// read back from the pack per tensor (TestStreamKeepsWrittenDeltas).
		s.objects.wroteDelta(id, file)
		ts.fw.abort()
		w.noteCreated(id, int64(len(file)))
		s.objects.putMeta(id, objMeta{Kind: kindDelta, Width: ts.width, Base: ts.base, ContentLen: ts.size,
			FileSize: int64(len(file)), DeltaLen: int64(len(body)), Depth: depth, ChainBytes: chainBytes})
		return nil
	}
	// An anchor, with the delta as its link unless that is large (as ingestTensor).
	link := body
	if int64(len(link)) > ts.size/4 || baseBroken {
		link = nil
	}
	if ts.fw == nil {
		fw, err := newObjStream(s, ts.width, ts.size, false)
		if err != nil {
			return err
		}
		if err := st.rebuildTensor(ts, fw, src); err != nil {
			fw.abort()
			return err
		}
		ts.fw = fw
	}
	stored, err := ts.fw.finish(id, ts.base, link)
	if err != nil {
		return err
	}
	base := ts.base
	if len(link) == 0 {
		base = ID{}
	}
	w.noteCreated(id, stored)
	s.objects.putMeta(id, objMeta{Kind: kindFull, Width: ts.width, Base: base, ContentLen: ts.size, FileSize: stored, DeltaLen: int64(len(link))})
	return nil
}

// finishBlob stores the whole-file object.
func (st *FileStream) finishBlob() error {
	w, s, blob := st.w, st.s, st.wk.blob
	id := blob.sum()
	w.hold(id)
	if w.in.existsToWrite(id) {
		blob.abort()
	} else {
		stored, err := blob.finish(id, ID{}, nil)
		if err != nil {
			return err
		}
		w.noteCreated(id, stored)
		s.objects.putMeta(id, objMeta{Kind: kindFull, Width: 1, ContentLen: blob.received, FileSize: stored})
	}
	st.wk.entry.Kind, st.wk.entry.ID = kindBlob, id
	st.wk.entry.Header, st.wk.entry.HeaderLen, st.wk.entry.Tensors = ID{}, 0, nil
	return nil
}
