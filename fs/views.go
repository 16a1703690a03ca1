package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Views are derived, read-only directories at the mount root, made from sealed versions on
// every mount, read-write or read-only (docs/format.md Part III §5); the one way in is a patch
// written into patches/ on a read-write mount, which seals the next version from it
// (view_patches_in.go):
//
//	patches/weight_vNNNNNN.safetensors   one-file sparse patch, previous version -> NNNNNN
//	deltas/weight_vNNNNNN/               slime-compatible delta checkpoint (or a full one)
//
// Their bytes are rendered by the store on first access into the process's cache directory
// (store.RenderPatch, store.RenderSlime: temp file, fsync, rename), so every read returns the
// same bytes and the size is known at lookup; a version's files are then served like sealed
// files (FOPEN_KEEP_CACHE, random offsets). A render that fails (a corrupt store object) is
// EIO with a log line, never wrong bytes. Every read is checked against the render's sums
// (store.RenderedFile.ReadAt); a damaged render is dropped by the store, rendered again and
// the read served from the new one (view_file.go). Details are in view_patches.go and
// view_deltas.go.
//
// The extension point: a viewSpec's newNode returns the node serving the directory (a
// gofs.InodeEmbedder implementing Lookup, Readdir and the refusals); it gets the
// mountState, so it can read m.b (the store) and m.latest(). The root lists every view,
// looks it up by name, and refuses to remove or replace it. A version store that cannot render
// (VersionStore.RendersViews false, as the tests' fake) gets empty views.

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
		{name: "patches", newNode: newPatchesView},
		{name: "deltas", newNode: newDeltasView},
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

// viewDir is what every directory under a view shares: attributes and the refusal of every
// change. where is its path from the mount root ("patches", "deltas/weight_v000043").
type viewDir struct {
	gofs.Inode
	m     *mountState
	where string
}

func (v *viewDir) isView() {}

func (v *viewDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setDirAttr(0o555, v.m.started, &out.Attr)
	return 0
}

func (v *viewDir) refuse(op, name string) syscall.Errno {
	p := v.where
	if name != "" {
		p += "/" + name
	}
	return v.m.refuse(v.m.modErrno(), "%s %s: %s", op, p, viewsAreDerived)
}

// viewsAreDerived is the reason given for every refused change under a view.
const viewsAreDerived = "patches/ and deltas/ are derived from sealed versions"

func (v *viewDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("mkdir", name)
}

func (v *viewDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, v.refuse("create", name)
}

func (v *viewDir) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("mknod", name)
}

func (v *viewDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("symlink", name)
}

func (v *viewDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, v.refuse("link", name)
}

func (v *viewDir) Unlink(ctx context.Context, name string) syscall.Errno {
	return v.refuse("unlink", name)
}

func (v *viewDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	return v.refuse("rmdir", name)
}

func (v *viewDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return v.refuse("rename", name)
}

func (v *viewDir) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !changesAnything(in) {
		return v.Getattr(ctx, fh, out)
	}
	return v.refuse("setattr", "")
}

// emptyView is a view with no content: what a version store that cannot render gets.
type emptyView struct {
	viewDir
}

func newEmptyView(m *mountState, name string) viewNode {
	return &emptyView{viewDir{m: m, where: name}}
}

func (v *emptyView) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.ENOENT
}

func (v *emptyView) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(nil), 0
}
