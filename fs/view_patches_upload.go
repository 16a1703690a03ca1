package fs

import (
	"context"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// The file of a patch being written into patches/ (view_patches_in.go): its bytes in an
// unlinked staging file (stagedUpload), sealed as its version at the close of a file named as
// a patch.

// patchUpload is a patch being written into patches/: its bytes in an unlinked staging file.
type patchUpload struct {
	stagedUpload
	p *patchesView
}

// newPatchUpload is the patch name being written into p, staged in file.
func newPatchUpload(ctx context.Context, p *patchesView, name string, file *os.File, mode uint32) *patchUpload {
	return &patchUpload{p: p, stagedUpload: stagedUpload{m: p.m, dir: p.where + "/",
		refused: "the patch was sealed or refused already (write it again under its name)",
		name:    name, file: file, handles: 1, attr: newNodeAttr(ctx, mode)}}
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
	if errno != 0 {
		p.in().noteSeen(name)
	}
	return errno
}
