package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/delta"
)

// The files of a delta directory being written into deltas/ (view_deltas_in.go): each one's
// bytes in an unlinked staging file; the index, renamed into place or closed, seals.

// deltaFile is a file of a delta directory being written: its bytes in an unlinked file.
type deltaFile struct {
	gofs.Inode
	u *deltaUpload

	mu      sync.Mutex
	name    string
	file    *os.File // nil once dropped and no handle is left
	size    int64
	handles int
	dirty   bool
	dropped bool
	attr    nodeAttr
}

func (f *deltaFile) fillAttr(out *fuse.Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = syscall.S_IFREG
	f.attr.fill(out)
	out.Size = uint64(f.size)
	out.Nlink = 1
}

func (f *deltaFile) stagedFile() (*os.File, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dirty = false
	return f.file, f.size
}

func (f *deltaFile) rename(name string) {
	f.mu.Lock()
	f.name = name
	f.mu.Unlock()
}

func (f *deltaFile) drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = true
	if f.handles == 0 && f.file != nil {
		f.file.Close()
		f.file = nil
	}
}

func (f *deltaFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fillAttr(&out.Attr)
	return 0
}

func (f *deltaFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	if sz, ok := in.GetSize(); ok {
		if f.file == nil || f.dropped {
			f.mu.Unlock()
			return syscall.ESTALE
		}
		if err := f.file.Truncate(int64(sz)); err != nil {
			f.mu.Unlock()
			return f.u.d.m.fail(err, "truncate %s", f.name)
		}
		f.size, f.dirty = int64(sz), true
		f.attr.modified()
	}
	f.attr.apply(in)
	f.mu.Unlock()
	f.fillAttr(&out.Attr)
	return 0
}

func (f *deltaFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil || f.dropped {
		return nil, 0, syscall.ESTALE
	}
	if flags&syscall.O_TRUNC != 0 && f.size != 0 {
		if err := f.file.Truncate(0); err != nil {
			return nil, 0, f.u.d.m.fail(err, "truncate %s", f.name)
		}
		f.size, f.dirty = 0, true
	}
	f.handles++
	return &openHandle{}, f.u.d.m.openFlags.Load(), 0
}

func (f *deltaFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
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
	n, err := file.ReadAt(dest[:min(int64(len(dest)), size-off)], off)
	if err != nil && n == 0 {
		return nil, f.u.d.m.fail(err, "read %s", f.name)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *deltaFile) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.file == nil {
		return 0, syscall.EBADF
	}
	if f.dropped {
		return 0, f.u.d.m.refuse(syscall.EPERM, "write %s: the delta was sealed or refused already (write it again)", f.name)
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	n, err := f.file.WriteAt(data, off)
	if end := off + int64(n); end > f.size {
		f.size = end
	}
	f.dirty = true
	f.attr.modified()
	if err != nil {
		return uint32(n), f.u.d.m.fail(err, "write %s at %d", f.name, off)
	}
	return uint32(n), 0
}

// Fsync succeeds: a delta is durable once its version is sealed.
func (f *deltaFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

// Flush is close(2): an index written in place (not renamed) seals the version now.
func (f *deltaFile) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	f.mu.Lock()
	ready := f.name == delta.SlimeIndexName && f.dirty && !f.dropped
	f.mu.Unlock()
	if !ready {
		return 0
	}
	u := f.u
	errno := u.seal(f)
	if e := u.NotifyEntry(delta.SlimeIndexName); e != 0 && e != syscall.ENOENT {
		u.d.m.log.Warn("invalidate an entry in the kernel", "name", u.d.where+"/"+u.name, "err", e)
	}
	return errno
}

func (f *deltaFile) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.handles > 0 {
		f.handles--
	}
	if f.handles == 0 && f.dropped && f.file != nil {
		f.file.Close()
		f.file = nil
	}
	return 0
}

func (f *deltaFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return f.u.d.m.statfs(out)
}
