package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The file of a patch being written into patches/ (view_patches_in.go): its bytes in an
// unlinked staging file, sealed as its version at the close of a file named as a patch.

// patchUpload is a patch being written into patches/: its bytes in an unlinked staging file.
type patchUpload struct {
	gofs.Inode
	p *patchesView

	mu      sync.Mutex
	name    string
	file    *os.File // nil once dropped and no handle is left
	size    int64
	handles int
	dirty   bool // written since the last seal attempt
	dropped bool // sealed, refused or removed: no longer in patches/
	attr    nodeAttr
}

func (u *patchUpload) fillAttr(out *fuse.Attr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	out.Mode = syscall.S_IFREG
	u.attr.fill(out)
	out.Size = uint64(u.size)
	out.Nlink = 1
}

func (u *patchUpload) staged() (*os.File, int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dirty = false
	return u.file, u.size
}

func (u *patchUpload) rename(name string) {
	u.mu.Lock()
	u.name = name
	u.mu.Unlock()
}

// drop takes the upload out of patches/; its file closes with its last handle.
func (u *patchUpload) drop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dropped = true
	if u.handles == 0 && u.file != nil {
		u.file.Close()
		u.file = nil
	}
}

func (u *patchUpload) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	u.fillAttr(&out.Attr)
	return 0
}

func (u *patchUpload) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	u.mu.Lock()
	if sz, ok := in.GetSize(); ok {
		if u.file == nil || u.dropped {
			u.mu.Unlock()
			return syscall.ESTALE
		}
		if err := u.file.Truncate(int64(sz)); err != nil {
			u.mu.Unlock()
			return u.p.m.fail(err, "truncate %s/%s", u.p.where, u.name)
		}
		u.size, u.dirty = int64(sz), true
		u.attr.modified()
	}
	u.attr.apply(in)
	u.mu.Unlock()
	u.fillAttr(&out.Attr)
	return 0
}

func (u *patchUpload) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.file == nil || u.dropped {
		return nil, 0, syscall.ESTALE // the kernel looks the name up again
	}
	if flags&syscall.O_TRUNC != 0 && u.size != 0 {
		if err := u.file.Truncate(0); err != nil {
			return nil, 0, u.p.m.fail(err, "truncate %s/%s", u.p.where, u.name)
		}
		u.size, u.dirty = 0, true
	}
	u.handles++
	return &openHandle{}, u.p.m.openFlags.Load(), 0
}

func (u *patchUpload) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	u.mu.Lock()
	f, size := u.file, u.size
	u.mu.Unlock()
	if f == nil {
		return nil, syscall.EBADF
	}
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n, err := f.ReadAt(dest[:min(int64(len(dest)), size-off)], off)
	if err != nil && n == 0 {
		return nil, u.p.m.fail(err, "read %s/%s", u.p.where, u.name)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (u *patchUpload) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.file == nil {
		return 0, syscall.EBADF
	}
	if u.dropped {
		return 0, u.p.m.refuse(syscall.EPERM, "write %s/%s: the patch was sealed or refused already (write it again under its name)", u.p.where, u.name)
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	n, err := u.file.WriteAt(data, off)
	if end := off + int64(n); end > u.size {
		u.size = end
	}
	u.dirty = true
	u.attr.modified()
	if err != nil {
		return uint32(n), u.p.m.fail(err, "write %s/%s at %d", u.p.where, u.name, off)
	}
	return uint32(n), 0
}

// Fsync succeeds: a patch is durable once its version is sealed.
func (u *patchUpload) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

// Flush is close(2): the bytes of a file named as a patch are sealed as its version now, and
// the close returns the outcome.
func (u *patchUpload) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	u.mu.Lock()
	name, ready := u.name, u.dirty && u.size > 0 && !u.dropped
	u.mu.Unlock()
	v, isPatch := parsePatchName(name)
	if !isPatch || !ready {
		return 0
	}
	p := u.p
	errno := p.commit(u, name, v)
	p.mu.Lock()
	if p.uploads[name] == u {
		delete(p.uploads, name)
	}
	p.mu.Unlock()
	u.drop()
	p.RmChild(name)
	// FLUSH holds no directory lock: the kernel forgets the entry before close(2) returns,
	// and the next lookup finds the sealed version's patch (or nothing).
	if e := p.NotifyEntry(name); e != 0 && e != syscall.ENOENT {
		p.m.log.Warn("invalidate an entry in the kernel", "name", p.where+"/"+name, "err", e)
	}
	return errno
}

func (u *patchUpload) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.handles > 0 {
		u.handles--
	}
	if u.handles == 0 && u.dropped && u.file != nil {
		u.file.Close()
		u.file = nil
	}
	return 0
}

func (u *patchUpload) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return u.p.m.statfs(out)
}
