package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// statfs reports the file system that holds the staging files of a read-write mount, so that
// trainers that check free space before saving see the real figure. A read-only mount has
// nothing to write to and reports no free space.
func (m *mountState) statfs(out *fuse.StatfsOut) syscall.Errno {
	out.NameLen = maxNameLen
	out.Bsize = 4096
	out.Frsize = 4096
	if m.stagingRoot == "" {
		return 0
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.stagingRoot, &st); err != nil {
		return m.fail(err, "statfs of the staging directory %s", m.stagingRoot)
	}
	out.FromStatfsT(&st)
	return 0
}

func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return r.m.statfs(out)
}

func (d *sealedDir) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return d.m.statfs(out)
}

func (f *sealedFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return f.m.statfs(out)
}

func (d *openDir) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return d.t.m.statfs(out)
}

func (f *openFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return f.t.m.statfs(out)
}

func (v *emptyView) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return v.m.statfs(out)
}

// Fsync succeeds everywhere: sealed versions are durable already, and open versions become
// durable at their seal (see openFile.Fsync). Programs that fsync a directory after saving
// must not fail.

func (r *rootNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (d *sealedDir) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (f *sealedFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (d *openDir) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (v *emptyView) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}
