package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/weightfs/weightfs/store"
)

// openFile is a regular file of an open tree. Its bytes live in a stream (stream.go) while
// they arrive in order, else in a staging file: the reference write path (any offset, any
// order).
//
// Lock order: the tree's mu (shared, via begin) before f.mu.
type openFile struct {
	gofs.Inode
	t *openTree

	mu       sync.Mutex
	file     *os.File // the staging file; nil once closed
	diskPath string   // its name on disk; "" once unlinked
	handles  int      // open FUSE handles
	detached bool     // no longer part of an open tree: close at the last release
	size     int64
	attr     nodeAttr

	stream   *store.FileStream // the file's bytes while it is streamed; nil: the staging file
	broken   error             // the bytes were lost (a stream that could not give them back)
	failed   failedWrites      // ranges whose writes failed: no seal until written again (writefail.go)
	addedAs  string            // the path its stream was added as at the last seal attempt
	storedIn uint64            // after the seal: the version that holds its streamed bytes
	sealed   store.File        // that file, opened for reads through handles still open

	marker       bool // the DONE a seal of its tree left out (done.go)
	markerLogged bool // a line said that DONE's bytes are not stored
}

// openHandle is one open of an openFile. The node does the work; the handle exists so the
// kernel's RELEASE reaches us and we can count opens.
type openHandle struct{}

func newOpenFile(ctx context.Context, t *openTree, f *os.File, mode uint32) *openFile {
	return &openFile{t: t, file: f, diskPath: f.Name(), attr: newNodeAttr(ctx, mode)}
}

func (f *openFile) where() string {
	return f.Path(nil)
}

func (f *openFile) fillAttr(out *fuse.Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = syscall.S_IFREG
	f.attr.fill(out)
	out.Size = uint64(f.size)
	out.Nlink = 1
}

func (f *openFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fillAttr(&out.Attr)
	return 0
}

func (f *openFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if f.isDoneMarker() && onlyTimes(in) {
		// touch(1) reopens DONE on its stdin and closes the first descriptor, which seals,
		// before it sets the times. DONE is not part of the version: its times may change.
		f.mu.Lock()
		f.attr.apply(in)
		f.mu.Unlock()
		f.fillAttr(&out.Attr)
		return 0
	}
	if changesAnything(in) {
		done, errno := f.t.begin("setattr " + f.where())
		if errno != 0 {
			return errno
		}
		defer done()
		f.mu.Lock()
		if sz, ok := in.GetSize(); ok {
			if errno := f.truncateLocked(int64(sz)); errno != 0 {
				f.mu.Unlock()
				return errno
			}
		}
		f.attr.apply(in)
		f.mu.Unlock()
	}
	f.fillAttr(&out.Attr)
	return 0
}

func (f *openFile) truncateLocked(size int64) syscall.Errno {
	if f.file == nil {
		return syscall.ESTALE
	}
	if f.stream != nil {
		switch {
		case size == f.size:
			f.failed.truncate(size)
			f.attr.modified()
			return 0
		case size == 0:
			f.dropStreamLocked() // start over: the next write at 0 streams again
		default:
			if errno := f.unstreamLocked(fmt.Sprintf("a truncate to %d bytes", size)); errno != 0 {
				return errno
			}
		}
	}
	if size == 0 {
		f.broken = nil // nothing left to lose
	}
	if err := f.file.Truncate(size); err != nil {
		return f.t.m.fail(err, "truncate %s to %d", f.where(), size)
	}
	f.size = size
	f.failed.truncate(size)
	f.attr.modified()
	return 0
}

// openFileFlags are the open flags of every handle of a file of an open version or a staging
// directory: direct I/O, where the kernel lets such files still be mapped shared. A writer's
// bytes then go from its own buffer to the request the daemon reads, instead of first into the
// page cache of the FUSE file, where they would fill as many fresh pages as the checkpoint is
// large (the costliest memory on the VMs measured, docs/benchmarks.md) to be read by no one:
// an open version is read rarely, and a sealed one is served from other inodes. Reads go to the
// daemon too, which answers them from the stream or the staging file.
//
// A kernel that did not grant CAP_DIRECT_IO_ALLOW_MMAP (before 6.6) would refuse shared maps
// of direct-I/O files (ENODEV), which programs may use to write weights: there the files
// keep the page cache.
func openFileFlags(kernelFlags uint64) uint32 {
	if kernelFlags&fuse.CAP_DIRECT_IO_ALLOW_MMAP != 0 {
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}

func (f *openFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		done, errno := f.t.begin("open for writing " + f.where())
		if errno != 0 {
			return nil, 0, errno
		}
		defer done()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		// Released after a seal or unlink: ESTALE makes the kernel look the path up again,
		// which finds the sealed version.
		return nil, 0, syscall.ESTALE
	}
	if flags&syscall.O_TRUNC != 0 && (f.size != 0 || f.failed.pending()) {
		if errno := f.truncateLocked(0); errno != 0 {
			return nil, 0, errno
		}
	}
	f.handles++
	return &openHandle{}, f.t.m.openFlags.Load(), 0
}

func (f *openFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off < 0 {
		return nil, syscall.EINVAL
	}
	f.mu.Lock()
	notStaged := f.stream != nil || f.storedIn != 0 || f.broken != nil
	f.mu.Unlock()
	if notStaged {
		// The tree's lock first (a seal must not run meanwhile), then the file's.
		f.t.mu.RLock()
		f.mu.Lock()
		var n int
		handled, errno := true, syscall.EIO
		if f.broken == nil {
			n, handled, errno = f.readStreamLocked(dest, off)
		}
		f.mu.Unlock()
		f.t.mu.RUnlock()
		if errno != 0 {
			return nil, errno
		}
		if handled {
			return fuse.ReadResultData(dest[:n]), 0
		}
	}
	f.mu.Lock()
	file, size := f.file, f.size
	f.mu.Unlock()
	if file == nil {
		return nil, syscall.EBADF
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), size-off)
	got, err := file.ReadAt(dest[:n], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, f.t.m.fail(err, "read %s at %d", f.where(), off)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (f *openFile) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if n, dropped := f.dropMarkerWrite(len(data)); dropped {
		return n, 0
	}
	done, errno := f.t.begin("write " + f.where())
	if errno != 0 {
		return 0, errno
	}
	defer done()
	if off < 0 {
		return 0, syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return 0, syscall.EBADF
	}
	if f.broken != nil {
		return 0, f.t.m.refuse(syscall.EIO, "write %s: %v (truncate it to start again)", f.where(), f.broken)
	}
	if handled, errno := f.writeStreamLocked(data, off); errno != 0 {
		return 0, errno
	} else if handled {
		return uint32(len(data)), 0
	}
	n, err := f.file.WriteAt(data, off)
	if end := off + int64(n); end > f.size {
		f.size = end
	}
	f.attr.modified()
	f.noteWriteLocked(off, len(data), n, err)
	if err != nil {
		return uint32(n), f.t.m.fail(err, "write %s at %d+%d (the version cannot be sealed until these bytes are written again)", f.where(), off, len(data))
	}
	return uint32(n), 0
}

func (f *openFile) Allocate(ctx context.Context, fh gofs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	done, errno := f.t.begin("fallocate " + f.where())
	if errno != 0 {
		return errno
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return syscall.EBADF
	}
	if f.stream != nil {
		if mode == unix.FALLOC_FL_KEEP_SIZE {
			return 0 // reserving space changes no byte, and the stream needs none
		}
		if errno := f.unstreamLocked("a fallocate"); errno != 0 {
			return errno
		}
	}
	if err := unix.Fallocate(int(f.file.Fd()), mode, int64(off), int64(size)); err != nil {
		return f.t.m.fail(err, "fallocate %s", f.where())
	}
	if end := int64(off + size); mode&unix.FALLOC_FL_KEEP_SIZE == 0 && end > f.size {
		f.size = end
	}
	f.attr.modified()
	return 0
}

// Fsync succeeds without syncing the staging file: an open version is not durable until it
// is sealed, and the seal makes it durable in the store.
func (f *openFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

// Flush is close(2). Closing a file named DONE at the top of an open version seals it; the
// close returns the seal's outcome.
func (f *openFile) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if !f.isDoneMarker() {
		// The close of the last handle ends the file's stream now, not at the RELEASE that
		// follows asynchronously: a read right after close(2) then finds it closed.
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.handles <= 1 {
			return f.closeStreamLocked()
		}
		return 0
	}
	return f.t.m.sealOpenVersion(f.t)
}

// isDoneMarker reports whether f is the file DONE at the top of an open version.
func (f *openFile) isDoneMarker() bool {
	if f.t.number == 0 {
		return false
	}
	name, parent := f.Parent()
	return name == doneName && parent == f.t.dir.EmbeddedInode()
}

func (f *openFile) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.handles > 0 {
		f.handles--
	}
	if f.handles == 0 {
		// Nobody writes it now: end its stream, so that the seal only adds it.
		f.closeStreamLocked()
	}
	if f.detached && f.handles == 0 {
		f.closeLocked()
	}
	return 0
}

func (f *openFile) OnForget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.detached {
		f.closeLocked()
	}
}

// addTo hands the file to the store's writer: its stream, or its staging file. Caller holds
// the tree's mu exclusively.
func (f *openFile) addTo(w VersionWriter, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return fmt.Errorf("staging file of %s is closed", p)
	}
	if f.broken != nil {
		return f.broken
	}
	f.addedAs = ""
	mode := iofs.FileMode(f.attr.perm & 0o777)
	if handled, err := f.addStreamLocked(w, p, mode); handled || err != nil {
		return err
	}
	return w.AddFile(p, f.file, f.size, mode)
}

// markStored records, after a successful seal as version v, that a streamed file's bytes are
// in v (handles still open read them from there).
func (f *openFile) markStored(v uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addedAs != "" {
		f.storedIn = v
	}
}

// detach takes the file out of its tree: its staging file is unlinked now and closed once no
// handle is left (an unlinked file stays readable through the handles open on it).
func (f *openFile) detach() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stream != nil {
		if f.handles > 0 && f.t.state == treeOpen {
			// Unlinked or replaced while open: the handles keep reading and writing it,
			// which its staging file can serve.
			f.unstreamLocked("unlinked while open")
		}
		f.dropStreamLocked()
	}
	if f.diskPath != "" {
		if err := os.Remove(f.diskPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.t.m.log.Warn("remove staging file", "path", f.diskPath, "err", err)
		}
		f.diskPath = ""
	}
	f.detached = true
	if f.handles == 0 {
		f.closeLocked()
	}
}

// closeNow closes the staging file even with handles open (unmount).
func (f *openFile) closeNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeLocked()
}

func (f *openFile) closeLocked() {
	f.dropStreamLocked()
	if f.sealed != nil {
		f.sealed.Close()
		f.sealed = nil
	}
	if f.file == nil {
		return
	}
	if err := f.file.Close(); err != nil {
		f.t.m.log.Warn("close staging file", "err", err)
	}
	f.file = nil
}
