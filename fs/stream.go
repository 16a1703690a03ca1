package fs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"syscall"

	"github.com/weightfs/weightfs/store"
)

// The streaming fast path of open files (docs/design.md, "Ingest paths").
//
// A file of an open version whose bytes arrive in order, each write exactly at its end,
// never touches its staging file: the writes go to a store.FileStream, which diffs them
// against the previous version as they come and stores only new objects. The first thing the
// stream cannot follow switches the file to its staging file for good (until it is truncated
// to nothing): a write anywhere but at the end, a read of an unfinished file, a truncate to
// another size, a fallocate, an unlink while it is still open, a failure of the stream. The
// switch asks the stream for every byte it took (FileStream.Replay) and writes them to the
// staging file; the batch path stores the file at the seal. A rename needs nothing: the
// stream is added under the file's path at the seal, and the store redoes it through the
// batch path if that path would diff it against other tensors.
//
// The stream of a file is closed when its last handle is released, so the seal only adds
// it. A closed stream serves reads of its file from the objects it stored; after the seal,
// handles still open read the sealed version.
//
// Staging directories (no version number yet) and the DONE marker always use staging files.

// errFileLost marks a file whose bytes could not be taken back from its stream.
var errFileLost = errors.New("the file's bytes could not be recovered from its stream")

// tuneWriter prepares a new writer of an open version for the mount: the seal's latency is
// the trainer's, so the materialized copy is brought forward after the seal returns.
func tuneWriter(w VersionWriter) { w.MaterializeInBackground() }

// maybeStartStreamLocked starts a stream for a write at offset 0 of an empty file, when its
// tree has a writer and the writer takes the stream (one that takes none says so, and the
// file is staged). Caller holds the tree's mu (shared) and f.mu.
func (f *openFile) maybeStartStreamLocked() {
	if f.stream != nil || f.size != 0 || f.broken != nil || f.detached || f.t.number == 0 {
		return
	}
	sw := f.t.writer
	if sw == nil || f.isDoneMarker() {
		return
	}
	hint := f.Path(f.t.dir.EmbeddedInode())
	st, err := sw.StreamFile(hint)
	if err != nil {
		f.t.m.log.Debug("no stream: staging the file", "file", f.where(), "err", err)
		return
	}
	f.stream = st
}

// stagingSink writes the bytes a stream gives back to the start of the staging file, and
// remembers a failure of its own (a full disk), which leaves the stream usable for another
// try, apart from a failure of the stream (which loses the file).
type stagingSink struct {
	f   *os.File
	off int64
	err error
}

func (s *stagingSink) Write(p []byte) (int, error) {
	n, err := s.f.WriteAt(p, s.off)
	s.off += int64(n)
	if err != nil {
		s.err = err
	}
	return n, err
}

// unstreamLocked switches the file from its stream to its staging file: the stream's bytes
// are written to the staging file and the stream is dropped. If the staging file cannot take
// them (a full disk), the stream stays for another try and the errno is returned; if the
// stream cannot give them back, the file is lost (EIO from now on). Caller holds f.mu.
func (f *openFile) unstreamLocked(why string) syscall.Errno {
	st := f.stream
	if err := f.file.Truncate(0); err != nil {
		return f.t.m.fail(err, "switch %s to its staging file", f.where())
	}
	sink := &stagingSink{f: f.file}
	err := st.Replay(sink)
	if err == nil && sink.off != f.size {
		err = fmt.Errorf("the stream gave back %d bytes, %d were written", sink.off, f.size)
	}
	switch {
	case err != nil && sink.err != nil:
		_ = f.file.Truncate(0)
		return f.t.m.fail(sink.err, "switch %s to its staging file (%s)", f.where(), why)
	case err != nil:
		f.dropStreamLocked()
		f.broken = fmt.Errorf("%s: %w: %w", f.where(), errFileLost, err)
		return f.t.m.fail(f.broken, "switch %s to its staging file (%s)", f.where(), why)
	}
	f.dropStreamLocked()
	f.t.m.log.Debug("the file goes on in its staging file: "+why, "file", f.where(), "bytes", f.size)
	return 0
}

// dropStreamLocked aborts the file's stream, if any.
func (f *openFile) dropStreamLocked() {
	if f.stream != nil {
		f.stream.Abort()
		f.stream = nil
	}
}

// writeStreamLocked takes a write in streaming mode. handled is false when the write is to go
// to the staging file (the file left streaming mode, or never was in it).
func (f *openFile) writeStreamLocked(data []byte, off int64) (handled bool, errno syscall.Errno) {
	if off == 0 && f.size == 0 {
		f.maybeStartStreamLocked()
	}
	if f.stream == nil {
		return false, 0
	}
	why := "a write out of order"
	if off == f.size {
		_, err := f.stream.Write(data)
		if err == nil {
			f.size += int64(len(data))
			f.attr.modified()
			f.noteWriteLocked(off, len(data), len(data), nil)
			return true, 0
		}
		why = fmt.Sprintf("the stream stopped (%v)", err)
	}
	errno = f.unstreamLocked(why)
	if errno != 0 {
		// The write was not taken: the file misses its bytes until they come again.
		f.noteWriteLocked(off, len(data), 0, errno)
	}
	return false, errno
}

// closeStreamLocked ends the stream of a file nobody has open any more, so that the seal only
// adds it. A stream that fails to close switches the file to its staging file; if that fails
// too (a full disk), the errno is returned for close(2) to report, and the whole file counts
// as a failed write until it is written again: the stream hands its work to the store in
// batches, so a failure (ENOSPC from the store) can come after the last write was taken, and
// the writer, told at close, must not find the version sealed with the file anyway.
func (f *openFile) closeStreamLocked() syscall.Errno {
	if f.stream == nil || f.detached || f.addedAs != "" {
		return 0 // no stream, or one a seal has taken (and may have ended)
	}
	err := f.stream.Close()
	if err == nil {
		return 0
	}
	errno := f.unstreamLocked(fmt.Sprintf("closing its stream failed (%v)", err))
	if errno != 0 && f.broken == nil {
		f.failed.add(0, f.size, errno)
	}
	return errno
}

// addStreamLocked adds a streamed file to the version at the seal. handled is false when the
// file has no stream (any more): it is added from its staging file.
func (f *openFile) addStreamLocked(w VersionWriter, p string, mode iofs.FileMode) (handled bool, err error) {
	if f.stream == nil {
		return false, nil
	}
	if sp, ok := w.(*sealedPart); ok {
		// The stream went into a part sealed already, and ended with its Writer: it is
		// compared, not closed again.
		if err = sp.AddStream(p, f.stream, mode); err == nil {
			f.addedAs = p
		}
		return true, err
	}
	if err = f.stream.Close(); err == nil {
		if err = w.AddStream(p, f.stream, mode); err == nil {
			f.addedAs = p
			return true, nil
		}
	}
	// The stream cannot be added (a failed close, an AddStream that failed): add the file
	// through the batch path.
	if errno := f.unstreamLocked(fmt.Sprintf("the seal could not add its stream (%v)", err)); errno != 0 {
		return true, fmt.Errorf("%s: %w", p, errno)
	}
	return false, nil
}

// readStreamLocked serves a read of a file whose bytes are not in its staging file: after the
// seal from the sealed version, from a closed stream's objects, else (a read of a file still
// being written) by switching to the staging file. handled is false when the read is to be
// served from the staging file. Caller holds the tree's mu (shared) and f.mu.
func (f *openFile) readStreamLocked(dest []byte, off int64) (n int, handled bool, errno syscall.Errno) {
	if f.storedIn != 0 {
		if f.sealed == nil {
			sf, err := f.t.m.openHeld(f.storedIn, f.addedAs)
			if err != nil {
				return 0, true, f.t.m.fail(err, "read %s from sealed version %d", f.where(), f.storedIn)
			}
			f.sealed = sf
		}
		n, err := readSome(f.sealed, dest, off, f.size)
		if err != nil {
			return 0, true, f.t.m.fail(err, "read %s at %d from sealed version %d", f.where(), off, f.storedIn)
		}
		return n, true, 0
	}
	if f.stream == nil {
		return 0, false, 0
	}
	n, err := readSome(f.stream, dest, off, f.size)
	switch {
	case err == nil:
		return n, true, 0
	case !errors.Is(err, store.ErrStreamStopped):
		return 0, true, f.t.m.fail(err, "read %s at %d", f.where(), off)
	}
	// The stream is still open: its bytes are not readable until they are staged.
	if errno := f.unstreamLocked("a read of the unfinished file"); errno != 0 {
		return 0, true, errno
	}
	return 0, false, 0
}

// readSome reads what there is of dest at off in r, a file of size bytes.
func readSome(r interface {
	ReadAt([]byte, int64) (int, error)
}, dest []byte, off, size int64) (int, error) {
	if off >= size {
		return 0, nil
	}
	want := int(min(int64(len(dest)), size-off))
	n, err := r.ReadAt(dest[:want], off)
	if n == want {
		return n, nil
	}
	if err == nil {
		err = fmt.Errorf("short read: %d of %d bytes", n, want)
	}
	return n, err
}
