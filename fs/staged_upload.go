package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// stagedUpload is a file being written into a view that takes writes: a patch in patches/
// (view_patches_upload.go) or a file of a delta directory in deltas/ (view_deltas_upload.go).
// Its bytes are in an unlinked file of the staging directory; the view seals a version from
// them, and each kind adds its own Flush (what close(2) seals).
type stagedUpload struct {
	gofs.Inode
	m       *mountState
	dir     string // what messages put before name: "patches/" or "" (a delta's files go by name)
	refused string // why a write after the drop is refused, for the message

	mu      sync.Mutex
	name    string
	file    *os.File // nil once dropped and no handle is left
	size    int64
	handles int
	dirty   bool // written since the last seal attempt
	dropped bool // sealed, refused or removed: no longer in its view
	attr    nodeAttr
}

func (s *stagedUpload) fillAttr(out *fuse.Attr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out.Mode = syscall.S_IFREG
	s.attr.fill(out)
	out.Size = uint64(s.size)
	out.Nlink = 1
}

// staged returns the staged file and its size, and marks the upload as seen by a seal.
func (s *stagedUpload) staged() (*os.File, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirty = false
	return s.file, s.size
}

func (s *stagedUpload) rename(name string) {
	s.mu.Lock()
	s.name = name
	s.mu.Unlock()
}

// drop takes the upload out of its view; its file closes with its last handle.
func (s *stagedUpload) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped = true
	if s.handles == 0 && s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// Getattr of an upload that is no longer in its view and that no handle holds is ESTALE, as
// its Open is: the kernel may still hold the name's dentry (from the create, moved by the
// rename) and would otherwise give stat(2) the upload's size while open(2), looking the name
// up again, reads what the view serves there now (the sealed version's patch:
// TestDroppedUploadStatIsStale). With ESTALE the kernel looks the name up again for the stat
// too. While a handle holds it (a writer that keeps its descriptor past the rename, or past
// an unlink), it answers: Linux's fstat sends no handle, so the open count decides.
func (s *stagedUpload) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s.mu.Lock()
	stale := s.dropped && s.handles == 0
	s.mu.Unlock()
	if stale {
		return syscall.ESTALE
	}
	s.fillAttr(&out.Attr)
	return 0
}

func (s *stagedUpload) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	s.mu.Lock()
	if sz, ok := in.GetSize(); ok {
		if s.file == nil || s.dropped {
			s.mu.Unlock()
			return syscall.ESTALE
		}
		if err := s.file.Truncate(int64(sz)); err != nil {
			s.mu.Unlock()
			return s.m.fail(err, "truncate %s%s", s.dir, s.name)
		}
		s.size, s.dirty = int64(sz), true
		s.attr.modified()
	}
	s.attr.apply(in)
	s.mu.Unlock()
	s.fillAttr(&out.Attr)
	return 0
}

func (s *stagedUpload) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil || s.dropped {
		return nil, 0, syscall.ESTALE // the kernel looks the name up again
	}
	if flags&syscall.O_TRUNC != 0 && s.size != 0 {
		if err := s.file.Truncate(0); err != nil {
			return nil, 0, s.m.fail(err, "truncate %s%s", s.dir, s.name)
		}
		s.size, s.dirty = 0, true
	}
	s.handles++
	return &openHandle{}, s.m.openFlags.Load(), 0
}

func (s *stagedUpload) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	s.mu.Lock()
	f, size := s.file, s.size
	s.mu.Unlock()
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
		return nil, s.m.fail(err, "read %s%s", s.dir, s.name)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (s *stagedUpload) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return 0, syscall.EBADF
	}
	if s.dropped {
		return 0, s.m.refuse(syscall.EPERM, "write %s%s: %s", s.dir, s.name, s.refused)
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	n, err := s.file.WriteAt(data, off)
	if end := off + int64(n); end > s.size {
		s.size = end
	}
	s.dirty = true
	s.attr.modified()
	if err != nil {
		return uint32(n), s.m.fail(err, "write %s%s at %d", s.dir, s.name, off)
	}
	return uint32(n), 0
}

// Fsync succeeds: the bytes are durable once their version is sealed.
func (s *stagedUpload) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (s *stagedUpload) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handles > 0 {
		s.handles--
	}
	if s.handles == 0 && s.dropped && s.file != nil {
		s.file.Close()
		s.file = nil
	}
	return 0
}

func (s *stagedUpload) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return s.m.statfs(out)
}
