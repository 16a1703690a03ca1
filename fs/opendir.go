package fs

import (
	"context"
	"sort"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// renameat2 flags (RENAME_EXCHANGE is gofs.RENAME_EXCHANGE). Whiteouts are for overlay file
// systems and are refused.
const (
	renameNoReplace = 0x1
	renameWhiteout  = 0x4
)

// openDir is a directory of an open tree (its top directory included). Its children are the
// go-fuse inode tree itself: Lookup and Readdir serve them, and the bridge applies unlink,
// rmdir and rename to the tree once we return success.
type openDir struct {
	gofs.Inode
	t *openTree

	mu   sync.Mutex
	attr nodeAttr
	// sealedPath is where the directory sits in the version its tree was sealed as; valid
	// when inSealed is set.
	sealedPath string
	inSealed   bool
}

func newOpenDir(t *openTree, mode uint32) *openDir {
	return &openDir{t: t, attr: newNodeAttr(context.Background(), mode)}
}

func newOpenDirFor(ctx context.Context, t *openTree, mode uint32) *openDir {
	return &openDir{t: t, attr: newNodeAttr(ctx, mode)}
}

func (d *openDir) perm() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.attr.perm & 0o777
}

func (d *openDir) fillAttr(out *fuse.Attr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out.Mode = syscall.S_IFDIR
	d.attr.fill(out)
	out.Nlink = 1
}

func (d *openDir) touch() {
	d.mu.Lock()
	d.attr.modified()
	d.mu.Unlock()
}

func (d *openDir) where(name string) string {
	p := d.Path(nil)
	if name == "" {
		return p
	}
	return p + "/" + name
}

func (d *openDir) setSealedPath(p string) {
	d.mu.Lock()
	d.sealedPath, d.inSealed = p, true
	d.mu.Unlock()
}

// sealedView reports the sealed version and path this directory became, if its tree has been
// sealed and it was part of it.
func (d *openDir) sealedView() (*versionIndex, string, bool) {
	t := d.t
	t.mu.RLock()
	sealed, number := t.state == treeSealed, t.sealedAs
	t.mu.RUnlock()
	if !sealed {
		return nil, "", false
	}
	d.mu.Lock()
	p, in := d.sealedPath, d.inSealed
	d.mu.Unlock()
	if !in {
		return nil, "", false
	}
	idx, err := t.m.index(number)
	if err != nil {
		t.m.log.Warn("list a sealed version for a directory sealed in use", "version", number, "err", err)
		return nil, "", false
	}
	return idx, p, true
}

// Lookup serves the tree's own children while it is open, and the sealed version's entries
// once it is sealed.
func (d *openDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if idx, p, ok := d.sealedView(); ok {
		return lookupSealed(ctx, d.EmbeddedInode(), d.t.m, idx, p, name, out)
	}
	ch := d.GetChild(name)
	if ch == nil {
		if n := d.lookupRefused(ctx, name, out); n != nil {
			return n, 0
		}
		if len(name) > maxNameLen {
			// No such name can exist here; the kernel's create, mkdir, rename, link and
			// symlink look the name up first and stop at this answer.
			return nil, syscall.ENAMETOOLONG
		}
		return nil, syscall.ENOENT
	}
	switch n := ch.Operations().(type) {
	case *openFile:
		n.fillAttr(&out.Attr)
	case *openDir:
		n.fillAttr(&out.Attr)
	case *refusedFile:
		if _, ok := n.t.refusalNote(); !ok {
			return nil, syscall.ENOENT // the seal succeeded since
		}
		n.fillAttr(&out.Attr)
	}
	return ch, 0
}

func (d *openDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	if idx, p, ok := d.sealedView(); ok {
		return listSealed(idx, p), 0
	}
	children := d.Children()
	list := make([]fuse.DirEntry, 0, len(children))
	for name, ch := range children {
		list = append(list, fuse.DirEntry{Name: name, Mode: ch.Mode()})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return gofs.NewListDirStream(d.listRefused(list)), 0
}

func (d *openDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fillAttr(&out.Attr)
	return 0
}

func (d *openDir) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok {
		return syscall.EISDIR
	}
	if changesAnything(in) {
		done, errno := d.t.begin("setattr " + d.where(""))
		if errno != 0 {
			return errno
		}
		defer done()
		d.mu.Lock()
		d.attr.apply(in)
		d.mu.Unlock()
	}
	d.fillAttr(&out.Attr)
	return 0
}

// beginNew begins op (mkdir, create) of a new entry name: the tree is open, the name is free
// and may be stored. done ends the operation; it is nil where errno is not 0.
func (d *openDir) beginNew(op, name string) (done func(), errno syscall.Errno) {
	done, errno = d.t.begin(op + " " + d.where(name))
	if errno != 0 {
		return nil, errno
	}
	if d.GetChild(name) != nil {
		done()
		return nil, syscall.EEXIST
	}
	if errno := d.checkNewName(op, name); errno != 0 {
		done()
		return nil, errno
	}
	return done, 0
}

// beginOn begins op (unlink, rmdir, rename) on the entry name, which exists in an open tree.
// done ends the operation; it is nil where errno is not 0.
func (d *openDir) beginOn(op, name string) (ch *gofs.Inode, done func(), errno syscall.Errno) {
	done, errno = d.t.begin(op + " " + d.where(name))
	if errno != 0 {
		return nil, nil, errno
	}
	ch = d.GetChild(name)
	if ch == nil {
		done()
		return nil, nil, syscall.ENOENT
	}
	return ch, done, 0
}

func (d *openDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	done, errno := d.beginNew("mkdir", name)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	child := newOpenDirFor(ctx, d.t, mode)
	child.fillAttr(&out.Attr)
	d.touch()
	return d.NewPersistentInode(ctx, child, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (d *openDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ch, errno := d.newFile(ctx, name, mode, 1, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, &openHandle{}, d.t.m.openFlags.Load(), 0
}

// Mknod makes regular files only (some programs create files that way); the store holds no
// devices, fifos or sockets.
func (d *openDir) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFREG && mode&syscall.S_IFMT != 0 {
		if errno := d.checkNewName("mknod", name); errno != 0 {
			return nil, errno
		}
		return nil, d.t.m.refuse(syscall.EPERM, "mknod %s: only regular files and directories can be stored", d.where(name))
	}
	return d.newFile(ctx, name, mode, 0, out)
}

func (d *openDir) newFile(ctx context.Context, name string, mode uint32, handles int, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	done, errno := d.beginNew("create", name)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	sf, err := d.t.newStagingFile()
	if err != nil {
		return nil, d.t.m.fail(err, "create %s", d.where(name))
	}
	f := newOpenFile(ctx, d.t, sf, mode)
	f.handles = handles
	d.t.track(f)
	f.fillAttr(&out.Attr)
	d.touch()
	return d.NewPersistentInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
}

func (d *openDir) Unlink(ctx context.Context, name string) syscall.Errno {
	ch, done, errno := d.beginOn("unlink", name)
	if errno != 0 {
		return errno
	}
	defer done()
	if _, ok := ch.Operations().(*refusedFile); ok {
		d.t.refusal.Store(nil) // read, and removed: rm -rf of a refused version works
		return 0
	}
	f, ok := ch.Operations().(*openFile)
	if !ok {
		return syscall.EISDIR
	}
	d.t.untrack(f)
	f.detach()
	ch.ForgetPersistent()
	d.touch()
	return 0
}

func (d *openDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	ch, done, errno := d.beginOn("rmdir", name)
	if errno != 0 {
		return errno
	}
	defer done()
	if _, ok := ch.Operations().(*openDir); !ok {
		return syscall.ENOTDIR
	}
	if len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	ch.ForgetPersistent()
	d.touch()
	return 0
}

func (d *openDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*openDir)
	if !ok || np.t != d.t {
		return d.t.m.refuse(syscall.EXDEV, "rename %s: across open versions or staging directories (copy instead)", d.where(name))
	}
	if flags&renameWhiteout != 0 {
		return syscall.EINVAL
	}
	src, done, errno := d.beginOn("rename", name)
	if errno != 0 {
		return errno
	}
	defer done()
	if _, ok := src.Operations().(*refusedFile); ok {
		return d.t.m.refuse(syscall.EPERM, "rename %s: the note of a refused seal is the mount's (rm removes it)", d.where(name))
	}
	dst := np.GetChild(newName)
	if flags&gofs.RENAME_EXCHANGE != 0 {
		if dst == nil {
			return syscall.ENOENT
		}
		// Both names exist already; each directory's tree moves below the other's parent.
		if errno := np.checkNewName("rename", newName); errno != 0 {
			return errno
		}
		if errno := d.checkNewName("rename", name); errno != 0 {
			return errno
		}
		d.touch()
		np.touch()
		return 0 // the bridge swaps the two entries
	}
	if errno := np.checkNewName("rename", newName); errno != 0 {
		return errno
	}
	if dst != nil && dst != src {
		if flags&renameNoReplace != 0 {
			return syscall.EEXIST
		}
		if errno := d.t.replaceable(src, dst); errno != 0 {
			return errno
		}
		if f, ok := dst.Operations().(*openFile); ok {
			d.t.untrack(f)
			f.detach()
		}
		dst.ForgetPersistent()
	}
	d.touch()
	np.touch()
	return 0 // the bridge moves the entry
}

// replaceable checks rename(2)'s rules for overwriting dst with src.
func (t *openTree) replaceable(src, dst *gofs.Inode) syscall.Errno {
	switch {
	case src.IsDir() && !dst.IsDir():
		return syscall.ENOTDIR
	case !src.IsDir() && dst.IsDir():
		return syscall.EISDIR
	case dst.IsDir() && len(dst.Children()) > 0:
		return syscall.ENOTEMPTY
	}
	return 0
}

func (d *openDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := d.checkNewName("symlink", name); errno != 0 {
		return nil, errno
	}
	return nil, d.t.m.refuse(syscall.EPERM, "symlink %s: only regular files and directories can be stored", d.where(name))
}

func (d *openDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if errno := d.checkNewName("link", name); errno != 0 {
		return nil, errno
	}
	return nil, d.t.m.refuse(syscall.EPERM, "link %s: hard links cannot be stored", d.where(name))
}
