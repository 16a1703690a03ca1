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
)

// openFile is a regular file of an open tree. Its bytes live in a staging file: this is the
// reference write path (any offset, any order); a streaming path may later sit beside it.
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
	if err := f.file.Truncate(size); err != nil {
		return f.t.m.fail(err, "truncate %s to %d", f.where(), size)
	}
	f.size = size
	f.attr.modified()
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
	if flags&syscall.O_TRUNC != 0 && f.size != 0 {
		if errno := f.truncateLocked(0); errno != 0 {
			return nil, 0, errno
		}
	}
	f.handles++
	return &openHandle{}, 0, 0
}

func (f *openFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	file, size := f.file, f.size
	f.mu.Unlock()
	if file == nil {
		return nil, syscall.EBADF
	}
	if off < 0 {
		return nil, syscall.EINVAL
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
	n, err := f.file.WriteAt(data, off)
	if end := off + int64(n); end > f.size {
		f.size = end
	}
	f.attr.modified()
	if err != nil {
		return uint32(n), f.t.m.fail(err, "write %s at %d+%d", f.where(), off, len(data))
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

// addTo hands the file to the store's writer. Caller holds the tree's mu exclusively.
func (f *openFile) addTo(w VersionWriter, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return fmt.Errorf("staging file of %s is closed", p)
	}
	return w.AddFile(p, f.file, f.size, iofs.FileMode(f.attr.perm&0o777))
}

// detach takes the file out of its tree: its staging file is unlinked now and closed once no
// handle is left (an unlinked file stays readable through the handles open on it).
func (f *openFile) detach() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.diskPath != "" {
		if err := os.Remove(f.diskPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.t.m.logf("remove staging file %s: %v", f.diskPath, err)
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
	if f.file == nil {
		return
	}
	if err := f.file.Close(); err != nil {
		f.t.m.logf("close staging file: %v", err)
	}
	f.file = nil
}
