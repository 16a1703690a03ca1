package fs

import (
	"context"
	"fmt"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/store"
)

// sealedDir is a directory of a sealed version (or, with Options.Version, the mount root).
// Its children come from the version's immutable index.
type sealedDir struct {
	gofs.Inode
	m    *mountState
	idx  *versionIndex
	path string // slash path inside the version; "" is the version's top directory
}

// sealedFile is a file of a sealed version; its bytes are read from the store.
type sealedFile struct {
	gofs.Inode
	m     *mountState
	idx   *versionIndex
	entry *store.Entry
}

// sealedHandle is one open of a sealed file.
type sealedHandle struct {
	f store.File
}

func (d *sealedDir) where(name string) string {
	p := d.path
	if name != "" {
		if p != "" {
			p += "/"
		}
		p += name
	}
	return fmt.Sprintf("%s/%s", VersionName(d.idx.number), p)
}

func setSealedAttr(idx *versionIndex, e *store.Entry, out *fuse.Attr) {
	out.Mode = permOf(e)
	if e.Dir {
		out.Mode |= syscall.S_IFDIR
	} else {
		out.Mode |= syscall.S_IFREG
		out.Size = uint64(e.Size)
	}
	// One link: tells find(1) not to count subdirectories from the link count.
	out.Nlink = 1
	setTimes(out, idx.created)
}

func setTimes(out *fuse.Attr, t time.Time) {
	out.SetTimes(&t, &t, &t)
}

func (d *sealedDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setSealedAttr(d.idx, d.idx.entries[d.path], &out.Attr)
	out.SetTimeout(sealedTTL)
	return 0
}

func (d *sealedDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return lookupSealed(ctx, d.EmbeddedInode(), d.m, d.idx, d.path, name, out)
}

func (d *sealedDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return listSealed(d.idx, d.path), 0
}

// lookupSealed finds name in directory dir of a sealed version and returns its inode as a
// child of parent: a sealedDir, or a directory of an open tree that has been sealed since
// (a process may still have it as its working directory).
func lookupSealed(ctx context.Context, parent *gofs.Inode, m *mountState, idx *versionIndex, dir, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, ok := idx.lookup(dir, name)
	if !ok {
		return nil, syscall.ENOENT
	}
	setSealedAttr(idx, e, &out.Attr)
	out.SetEntryTimeout(sealedTTL)
	out.SetAttrTimeout(sealedTTL)
	// The version never changes, so a node we already made for this entry is the right one.
	if ch := parent.GetChild(name); ch != nil {
		switch n := ch.Operations().(type) {
		case *sealedDir:
			if n.idx == idx && n.path == e.Path {
				return ch, 0
			}
		case *sealedFile:
			if n.idx == idx && n.entry == e {
				return ch, 0
			}
		}
	}
	if e.Dir {
		return parent.NewInode(ctx, &sealedDir{m: m, idx: idx, path: e.Path}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	return parent.NewInode(ctx, &sealedFile{m: m, idx: idx, entry: e}, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
}

// listSealed lists directory dir of a sealed version.
func listSealed(idx *versionIndex, dir string) gofs.DirStream {
	names := idx.children[dir]
	list := make([]fuse.DirEntry, 0, len(names))
	for _, name := range names {
		e, _ := idx.lookup(dir, name)
		mode := uint32(syscall.S_IFREG)
		if e.Dir {
			mode = syscall.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: name, Mode: mode})
	}
	return gofs.NewListDirStream(list)
}

// Every modification of a sealed version is refused.

func (d *sealedDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.m.refuse(d.m.modErrno(), "mkdir %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, d.m.refuse(d.m.modErrno(), "create %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.m.refuse(d.m.modErrno(), "mknod %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.m.refuse(d.m.modErrno(), "symlink %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.m.refuse(d.m.modErrno(), "link %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.m.refuse(d.m.modErrno(), "unlink %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.m.refuse(d.m.modErrno(), "rmdir %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return d.m.refuse(d.m.modErrno(), "rename %s: sealed versions are immutable", d.where(name))
}

func (d *sealedDir) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !changesAnything(in) {
		return d.Getattr(ctx, fh, out)
	}
	return d.m.refuse(d.m.modErrno(), "setattr %s: sealed versions are immutable", d.where(""))
}

func (f *sealedFile) where() string {
	return fmt.Sprintf("%s/%s", VersionName(f.idx.number), f.entry.Path)
}

func (f *sealedFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setSealedAttr(f.idx, f.entry, &out.Attr)
	out.SetTimeout(sealedTTL)
	return 0
}

func (f *sealedFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !changesAnything(in) {
		return f.Getattr(ctx, fh, out)
	}
	return f.m.refuse(f.m.modErrno(), "setattr %s: sealed versions are immutable", f.where())
}

// writeFlags are the open flags that ask to change a file.
const writeFlags = syscall.O_WRONLY | syscall.O_RDWR | syscall.O_TRUNC | syscall.O_APPEND

func (f *sealedFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, f.m.refuse(f.m.modErrno(), "open %s for writing: sealed versions are immutable", f.where())
	}
	sf, err := f.m.openHeld(f.idx.number, f.entry.Path)
	if err != nil {
		return nil, 0, f.m.fail(err, "open %s", f.where())
	}
	if sf.Size() != f.entry.Size {
		_ = sf.Close()
		return nil, 0, f.m.fail(fmt.Errorf("store file is %d bytes, the version lists %d", sf.Size(), f.entry.Size), "open %s", f.where())
	}
	// The bytes never change: keep the page cache across opens.
	return &sealedHandle{f: sf}, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *sealedFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*sealedHandle)
	if !ok {
		return nil, syscall.EBADF
	}
	size := f.entry.Size
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := int64(len(dest))
	if n > size-off {
		n = size - off
	}
	buf := dest[:n]
	if sr, ok := h.f.(store.SliceReader); ok {
		parts, release, got, err := sr.ReadSlices(buf, off)
		if int64(got) < n {
			release()
			if err == nil {
				err = fmt.Errorf("short read: %d of %d bytes", got, n)
			}
			return nil, f.m.fail(err, "read %s at %d+%d", f.where(), off, n)
		}
		f.m.countRead(f.idx.number, got)
		return &slicesResult{parts: parts, release: release, size: got}, 0
	}
	got, err := h.f.ReadAt(buf, off)
	if int64(got) < n {
		if err == nil {
			err = fmt.Errorf("short read: %d of %d bytes", got, n)
		}
		return nil, f.m.fail(err, "read %s at %d+%d", f.where(), off, n)
	}
	f.m.countRead(f.idx.number, got)
	return fuse.ReadResultData(buf), 0
}

// slicesResult is a read answered with parts of the store's cached pages (store.SliceReader):
// go-fuse writes them to the kernel with one writev and calls Done after, which lets go of
// the pages.
type slicesResult struct {
	parts   [][]byte
	release func()
	size    int
}

func (r *slicesResult) Size() int { return r.size }

// Slices is what go-fuse's vectored write looks for.
func (r *slicesResult) Slices() ([][]byte, fuse.Status) { return r.parts, fuse.OK }

// Bytes joins the parts into buf, for the writes that take one buffer.
func (r *slicesResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, p := range r.parts {
		buf = append(buf, p...)
	}
	return buf, fuse.OK
}

func (r *slicesResult) Done() { r.release() }

func (f *sealedFile) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if h, ok := fh.(*sealedHandle); ok {
		h.close(f.m, f.where())
	}
	return 0
}

func (h *sealedHandle) close(m *mountState, where string) {
	if err := h.f.Close(); err != nil {
		m.log.Warn("close", "file", where, "err", err)
	}
}
