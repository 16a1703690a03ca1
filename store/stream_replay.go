package store

import (
	"fmt"
	"io"
)

// Replay writes every byte the stream has accepted, in order, to dst: the caller goes on
// without the stream (docs/design.md: a write out of order, a read, a truncate). It stops
// the stream first; it may be called again (after dst failed, say) and then Abort drops the
// stream. Nothing is lost to a failure of the stream itself: bytes the worker did not take
// are still in their chunks, and the worker's state rebuilds the rest (from the whole copy
// being written, or from the base and the changes found so far, checked against the hash of
// the base bytes diffed). A byte that cannot be rebuilt exactly is an error, never a wrong
// byte.
func (st *FileStream) Replay(dst io.Writer) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.state == streamAborted {
		return fmt.Errorf("replay %s: %w", st.hint, ErrStreamStopped)
	}
	st.stopLocked()
	sink := writerSink{dst}
	if st.state == streamClosed {
		r := st.resultReader()
		_, err := io.Copy(dst, io.NewSectionReader(r, 0, r.Size()))
		return err
	}
	wk := &st.wk
	switch {
	case st.class == classUndecided:
		if err := sink.write(st.prefix); err != nil {
			return err
		}
	case wk.blob != nil:
		if err := copyObjStream(wk.blob, sink); err != nil {
			return fmt.Errorf("replay %s: %w", st.hint, err)
		}
	case st.hdr != nil:
		if err := st.replayTensors(sink, &wk.src); err != nil {
			return fmt.Errorf("replay %s: %w", st.hint, err)
		}
	}
	for _, j := range wk.unprocessed {
		switch {
		case j.kind == jobHeader, j.kind == jobFinishBlob, j.kind == jobBlobStart && j.fromTensors:
			// Already written: the header with the tensors, a switch's bytes with them.
		default:
			if err := sink.write(j.data); err != nil {
				return err
			}
		}
	}
	if st.fill != nil && st.fillLen > st.fillAt {
		return sink.write(st.fill.buf[st.fillAt:st.fillLen])
	}
	return nil
}

// writerSink adapts an io.Writer to a byteSink.
type writerSink struct{ w io.Writer }

func (s writerSink) write(p []byte) error {
	_, err := s.w.Write(p)
	return err
}

// copyObjStream writes the content an objStream received so far into dst.
func copyObjStream(o *objStream, dst byteSink) error {
	buf := make([]byte, min(o.received, fullChunkSize))
	for off := int64(0); off < o.received; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), o.received-off)]
		if err := o.readAt(b, off); err != nil {
			return err
		}
		if err := dst.write(b); err != nil {
			return err
		}
	}
	return nil
}

// replayTensors writes the bytes of a safetensors file that the worker has taken: the header,
// the finished tensors (read back from their objects), the processed part of the tensor in
// progress. Run by the worker (a switch to a whole-file object) or after it has exited.
func (st *FileStream) replayTensors(dst byteSink, src *baseSource) error {
	wk := &st.wk
	if err := dst.write(st.prefix[:st.hdr.DataStart()]); err != nil {
		return err
	}
	buf := make([]byte, pageSize)
	stored, unstored := st.fin.progress()
	for i := 0; i < stored; i++ {
		t := &wk.entry.Tensors[i]
		size := t.End - t.Begin
		for off := int64(0); off < size; off += pageSize {
			b := buf[:min(pageSize, size-off)]
			if err := st.w.in.readBase(t.ID, objHint{path: st.hint, tensor: t.Name}, off, b, readOpts{}); err != nil {
				return err
			}
			if err := dst.write(b); err != nil {
				return err
			}
		}
	}
	for _, ts := range unstored {
		if err := st.replayPartial(ts, dst, src); err != nil {
			return err
		}
	}
	if ts := wk.ts; ts != nil && ts.done > 0 {
		return st.replayPartial(ts, dst, src)
	}
	return nil
}

// replayPartial writes the processed bytes [0, ts.done) of the tensor in progress: from the
// whole copy being written if there is one, else from the base and the encoded changes.
func (st *FileStream) replayPartial(ts *tensorState, dst byteSink, src *baseSource) error {
	if ts.fw != nil && ts.fw.usable() {
		return copyObjStream(ts.fw, dst)
	}
	if !ts.hasBase {
		return fmt.Errorf("tensor %s: %w", ts.t.Name, errStreamCopy)
	}
	if ts.enc != nil {
		body, err := ts.enc.Finish()
		ts.enc = nil
		if err != nil {
			return fmt.Errorf("tensor %s: %w: %w", ts.t.Name, errStreamCopy, err)
		}
		ts.body = body
	}
	if ts.body == nil && ts.changed > 0 {
		return fmt.Errorf("tensor %s: %w", ts.t.Name, errStreamCopy)
	}
	return st.rebuildTensor(ts, dst, src)
}

// ReadAt reads the file of a closed stream, from the objects it stored (a file read back
// before its version is sealed). Other streams refuse with ErrStreamStopped.
func (st *FileStream) ReadAt(p []byte, off int64) (int, error) {
	st.mu.Lock()
	r := st.reader
	if st.state != streamClosed {
		r = nil
	} else if r == nil {
		r = st.resultReader()
		st.reader = r
	}
	st.mu.Unlock()
	if r == nil {
		return 0, fmt.Errorf("read %s: the stream is not closed: %w", st.hint, ErrStreamStopped)
	}
	return r.ReadAt(p, off)
}

// resultReader reads the file a closed stream stored, from its objects.
func (st *FileStream) resultReader() *versionFile {
	e := st.wk.entry
	e.Path = st.hint
	return st.s.newVersionFile(&version{m: &manifest{Version: st.w.v}}, &e, readOpts{})
}
