package fs

import (
	"context"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// nodeAttr holds the attributes of an open-tree node that the store does not keep (owner,
// times) and the permission bits it does keep. Guarded by the owning node's mutex.
type nodeAttr struct {
	perm                uint32
	uid, gid            uint32
	atime, mtime, ctime time.Time
}

func newNodeAttr(ctx context.Context, mode uint32) nodeAttr {
	t := time.Now()
	a := nodeAttr{perm: mode & 0o7777, atime: t, mtime: t, ctime: t}
	if caller, ok := fuse.FromContext(ctx); ok {
		a.uid, a.gid = caller.Uid, caller.Gid
	}
	return a
}

func (a *nodeAttr) fill(out *fuse.Attr) {
	out.Mode |= a.perm
	out.Uid, out.Gid = a.uid, a.gid
	out.SetTimes(&a.atime, &a.mtime, &a.ctime)
}

// modified records a change of content.
func (a *nodeAttr) modified() {
	t := time.Now()
	a.mtime, a.ctime = t, t
}

// apply takes the mode, owner and times of a SETATTR.
func (a *nodeAttr) apply(in *fuse.SetAttrIn) {
	changed := false
	if m, ok := in.GetMode(); ok {
		a.perm, changed = m&0o7777, true
	}
	if uid, ok := in.GetUID(); ok {
		a.uid, changed = uid, true
	}
	if gid, ok := in.GetGID(); ok {
		a.gid, changed = gid, true
	}
	if t, ok := in.GetATime(); ok {
		a.atime, changed = t, true
	}
	if t, ok := in.GetMTime(); ok {
		a.mtime, changed = t, true
	}
	if changed {
		a.ctime = time.Now()
	}
}

// changesAnything reports whether a SETATTR asks for any change at all.
func changesAnything(in *fuse.SetAttrIn) bool {
	const changing = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_SIZE |
		fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW | fuse.FATTR_CTIME
	return in.Valid&changing != 0
}

// onlyTimes reports whether a SETATTR changes access or modification times and nothing else.
func onlyTimes(in *fuse.SetAttrIn) bool {
	const times = fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW | fuse.FATTR_CTIME
	return in.Valid&times != 0 && in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID|fuse.FATTR_SIZE) == 0
}
