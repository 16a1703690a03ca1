package fs

import (
	"context"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/weightfs/weightfs/delta"
)

// The files of a delta directory being written into deltas/ (view_deltas_in.go): each one's
// bytes in an unlinked staging file (stagedUpload); the index, renamed into place or closed,
// seals.

// deltaFile is a file of a delta directory being written: its bytes in an unlinked file.
type deltaFile struct {
	stagedUpload
	u *deltaUpload
}

// newDeltaFile is the file name of u, staged in file.
func newDeltaFile(ctx context.Context, u *deltaUpload, name string, file *os.File, mode uint32) *deltaFile {
	return &deltaFile{u: u, stagedUpload: stagedUpload{m: u.d.m, refused: "the delta was sealed or refused already (write it again)",
		name: name, file: file, handles: 1, attr: newNodeAttr(ctx, mode)}}
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
	if errno != 0 {
		u.d.in().noteSeen(u.name)
	}
	return errno
}
