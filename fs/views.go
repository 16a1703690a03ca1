package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Views are derived, read-only directories at the mount root: patches/ (one-file sparse patch
// per version) and deltas/ (slime-compatible delta checkpoints). Their content comes in a later
// issue. The extension point: give a viewSpec a newNode that returns a node serving the
// directory (a gofs.InodeEmbedder implementing Lookup, Readdir and the refusals, like
// sealedDir); it gets the mountState, so it can read m.b (the store) and m.latest(). The
// root lists every view, looks it up by name, and refuses to remove or replace it.

// viewSpec names one view and builds its node.
type viewSpec struct {
	name    string
	newNode func(m *mountState, name string) viewNode
}

// viewNode is the node of a view directory.
type viewNode interface {
	gofs.InodeEmbedder
	isView()
}

// rootViews lists the views served at the root, in listing order.
func rootViews() []viewSpec {
	return []viewSpec{
		{name: "patches", newNode: newEmptyView},
		{name: "deltas", newNode: newEmptyView},
	}
}

func findView(name string) (viewSpec, bool) {
	for _, v := range rootViews() {
		if v.name == name {
			return v, true
		}
	}
	return viewSpec{}, false
}

// emptyView is a view with no content yet.
type emptyView struct {
	gofs.Inode
	m    *mountState
	name string
}

func newEmptyView(m *mountState, name string) viewNode { return &emptyView{m: m, name: name} }

func (v *emptyView) isView() {}

func (v *emptyView) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setDirAttr(0o555, v.m.started, &out.Attr)
	return 0
}

func (v *emptyView) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.ENOENT
}

func (v *emptyView) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(nil), 0
}

func (v *emptyView) refuse(op, name string) syscall.Errno {
	return v.m.refuse(v.m.modErrno(), "%s %s/%s: %s/ is derived from sealed versions", op, v.name, name, v.name)
}

func (v *emptyView) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("mkdir", name)
}

func (v *emptyView) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, v.refuse("create", name)
}

func (v *emptyView) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("mknod", name)
}

func (v *emptyView) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("symlink", name)
}

func (v *emptyView) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("link", name)
}

func (v *emptyView) Unlink(ctx context.Context, name string) syscall.Errno {
	return v.refuse("unlink", name)
}

func (v *emptyView) Rmdir(ctx context.Context, name string) syscall.Errno {
	return v.refuse("rmdir", name)
}

func (v *emptyView) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return v.refuse("rename", name)
}

func (v *emptyView) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return v.refuse("setattr", "")
}
