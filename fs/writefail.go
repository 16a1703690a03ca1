package fs

import (
	"fmt"
	"strings"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// A write into a file of an open version that fails (a full disk under the staging files or
// the store, any I/O error) leaves the file without bytes its writer meant it to hold. The
// writer got the error, but a trainer that retries its save by closing DONE again, or a shell
// script that goes on to `touch DONE`, would seal what happened to be written: a truncated
// checkpoint that reads back without an error. So each file remembers the ranges whose writes
// failed until they are written again (a retried write, a rewrite of the file, a truncate
// below them) or the file is removed, and no seal stores a tree while any file has such a
// range: the close of DONE (or the rename) fails with EIO and names the files.

// failedWrites are the byte ranges of a file whose writes failed and were not written since.
type failedWrites struct {
	spans []byteSpan // disjoint, in order
	cause error      // the last failure, for the message
}

type byteSpan struct{ off, end int64 }

// add records that the write of [off, end) failed with err.
func (w *failedWrites) add(off, end int64, err error) {
	if end <= off {
		return
	}
	w.cause = err
	w.clear(off, end)
	i := 0
	for i < len(w.spans) && w.spans[i].off < off {
		i++
	}
	w.spans = append(w.spans[:i], append([]byteSpan{{off, end}}, w.spans[i:]...)...)
}

// clear records that [off, end) was written.
func (w *failedWrites) clear(off, end int64) {
	if len(w.spans) == 0 || end <= off {
		return
	}
	out := w.spans[:0:0]
	for _, s := range w.spans {
		if s.end <= off || s.off >= end {
			out = append(out, s)
			continue
		}
		if s.off < off {
			out = append(out, byteSpan{s.off, off})
		}
		if s.end > end {
			out = append(out, byteSpan{end, s.end})
		}
	}
	w.spans = out
}

// truncate records that the file was cut to size bytes: failed ranges beyond it are gone.
func (w *failedWrites) truncate(size int64) {
	w.clear(size, 1<<62)
}

func (w *failedWrites) pending() bool { return len(w.spans) > 0 }

// describe says which bytes are missing and why.
func (w *failedWrites) describe() string {
	var n int64
	for _, s := range w.spans {
		n += s.end - s.off
	}
	s := w.spans[0]
	more := ""
	if len(w.spans) > 1 {
		more = fmt.Sprintf(" and %d more ranges", len(w.spans)-1)
	}
	cause := "a write error"
	if w.cause != nil {
		cause = errnoName(toErrno(w.cause))
	}
	return fmt.Sprintf("%d bytes not written (%s at bytes %d-%d%s)", n, cause, s.off, s.end-1, more)
}

// noteWriteLocked records the outcome of a write of n bytes at off that wrote written of them
// and failed with err (nil: it wrote them all). Caller holds f.mu.
func (f *openFile) noteWriteLocked(off int64, n, written int, err error) {
	if err == nil {
		f.failed.clear(off, off+int64(n))
		return
	}
	f.failed.clear(off, off+int64(written))
	f.failed.add(off+int64(written), off+int64(n), err)
}

// checkFailedWrites refuses a seal of the tree while a file misses bytes whose write failed,
// naming every such file and what to do. Caller holds t.mu exclusively.
func (t *openTree) checkFailedWrites() error {
	var bad []string
	t.walk(t.dir.EmbeddedInode(), "", func(p string, n *gofs.Inode) {
		f, ok := n.Operations().(*openFile)
		if !ok || (p == doneName && t.number != 0) {
			return
		}
		f.mu.Lock()
		if f.failed.pending() {
			bad = append(bad, fmt.Sprintf("%s/%s: %s", t.name, p, f.failed.describe()))
		}
		f.mu.Unlock()
	})
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; write it again (the failed bytes, or the whole file) or remove it, "+
		"or remove the version directory and save again", errWriteFailed, strings.Join(bad, "; "))
}
