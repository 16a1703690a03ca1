package fs

import (
	"context"
	"sort"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// rootNode is the mount root: latest, the sealed versions, the views and the open trees.
// Everything under it is computed from the store and the open trees at each call.
type rootNode struct {
	gofs.Inode
	m *mountState
}

func (r *rootNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setDirAttr(0o755, r.m.latestTime(), &out.Attr)
	return 0
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	m := r.m
	if name == latestName {
		v, ok := m.latest()
		if !ok {
			return nil, syscall.ENOENT
		}
		setLinkAttr(v, m.latestTime(), &out.Attr)
		if ch := r.GetChild(name); ch != nil {
			if _, ok := ch.Operations().(*latestLink); ok {
				return ch, 0
			}
		}
		return r.NewInode(ctx, &latestLink{m: m}, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
	}
	if spec, ok := findView(name); ok {
		setDirAttr(0o555, m.started, &out.Attr)
		if ch := r.GetChild(name); ch != nil {
			if _, ok := ch.Operations().(viewNode); ok {
				return ch, 0
			}
		}
		return r.NewInode(ctx, spec.newNode(m, name), gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	m.mu.Lock()
	t := m.trees[name]
	m.mu.Unlock()
	if t != nil {
		t.dir.fillAttr(&out.Attr)
		return t.dir.EmbeddedInode(), 0
	}
	if len(name) > maxNameLen {
		return nil, syscall.ENAMETOOLONG // see openDir.Lookup
	}
	v, isVersion, err := ParseVersionName(name)
	if !isVersion || err != nil {
		return nil, syscall.ENOENT
	}
	if _, ok := m.sealedInfo(v); !ok {
		if err := m.b.VersionDamage(v); err != nil {
			return nil, m.fail(err, "look up %s", name)
		}
		return nil, syscall.ENOENT
	}
	idx, err := m.index(v)
	if err != nil {
		return nil, m.fail(err, "list %s", name)
	}
	setSealedAttr(idx, idx.entries[""], &out.Attr)
	out.SetEntryTimeout(sealedTTL)
	out.SetAttrTimeout(sealedTTL)
	if ch := r.GetChild(name); ch != nil {
		if sd, ok := ch.Operations().(*sealedDir); ok && sd.idx == idx {
			return ch, 0
		}
	}
	return r.NewInode(ctx, &sealedDir{m: m, idx: idx}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (r *rootNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	m := r.m
	var list []fuse.DirEntry
	vs := m.b.Versions()
	if len(vs) > 0 {
		list = append(list, fuse.DirEntry{Name: latestName, Mode: syscall.S_IFLNK})
	}
	for _, spec := range rootViews() {
		list = append(list, fuse.DirEntry{Name: spec.name, Mode: syscall.S_IFDIR})
	}
	for _, v := range vs {
		list = append(list, fuse.DirEntry{Name: VersionName(v.Number), Mode: syscall.S_IFDIR})
	}
	m.mu.Lock()
	for name := range m.trees {
		list = append(list, fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR})
	}
	m.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return gofs.NewListDirStream(list), 0
}

// isFixedName reports names at the root that are never trees: latest and the views.
func isFixedName(name string) bool {
	_, isView := findView(name)
	return name == latestName || isView
}

func (r *rootNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	m := r.m
	if m.readOnly {
		return nil, m.refuse(syscall.EROFS, "mkdir %s: read-only mount", name)
	}
	if isFixedName(name) {
		return nil, m.refuse(syscall.EEXIST, "mkdir %s: the name is reserved", name)
	}
	if errno := m.checkRootName("mkdir", name); errno != 0 {
		return nil, errno
	}
	v, isVersion, err := ParseVersionName(name)
	if err != nil {
		return nil, m.refuse(syscall.EINVAL, "mkdir: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.trees[name] != nil {
		return nil, m.refuse(syscall.EEXIST, "mkdir %s: already open", name)
	}
	var w VersionWriter
	if isVersion {
		if errno := m.checkNewNumberLocked(v, "mkdir "+name); errno != 0 {
			return nil, errno
		}
		if w, err = m.b.NewVersion(v); err != nil {
			return nil, m.fail(err, "mkdir %s: open version %d in the store", name, v)
		}
	}
	t, err := newOpenTree(m, name, v, w, mode)
	if err != nil {
		if w != nil {
			_ = w.Abort()
		}
		return nil, m.fail(err, "mkdir %s", name)
	}
	m.trees[name] = t
	if isVersion {
		m.log.Info("opened version", "version", v, "dir", name)
	}
	t.dir.fillAttr(&out.Attr)
	return r.NewPersistentInode(ctx, t.dir, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (r *rootNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	m := r.m
	if m.readOnly {
		return m.refuse(syscall.EROFS, "rmdir %s: read-only mount", name)
	}
	m.mu.Lock()
	t := m.trees[name]
	m.mu.Unlock()
	if t == nil {
		if isFixedName(name) || r.isSealedName(name) {
			return m.refuse(syscall.EPERM, "rmdir %s: sealed versions and views cannot be removed (weightfs gc drops old versions)", name)
		}
		return syscall.ENOENT
	}
	if errno := t.abortIfEmpty(); errno != 0 {
		return errno
	}
	m.mu.Lock()
	if m.trees[name] == t {
		delete(m.trees, name)
	}
	m.mu.Unlock()
	if t.number != 0 {
		m.log.Info("dropped open version", "version", t.number, "dir", name)
	}
	return 0
}

func (r *rootNode) isSealedName(name string) bool {
	v, ok, err := ParseVersionName(name)
	if !ok || err != nil {
		return false
	}
	_, sealed := r.m.sealedInfo(v)
	return sealed
}

func (r *rootNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if r.m.readOnly {
		return r.m.refuse(syscall.EROFS, "unlink %s: read-only mount", name)
	}
	if name == latestName {
		return r.m.refuse(syscall.EPERM, "unlink latest: it follows the newest sealed version")
	}
	return syscall.ENOENT
}

func (r *rootNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, r.refuseFile("create", name)
}

func (r *rootNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, r.refuseFile("mknod", name)
}

func (r *rootNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, r.refuseFile("symlink", name)
}

func (r *rootNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, r.refuseFile("link", name)
}

func (r *rootNode) refuseFile(op, name string) syscall.Errno {
	if r.m.readOnly {
		return r.m.refuse(syscall.EROFS, "%s %s: read-only mount", op, name)
	}
	return r.m.refuse(syscall.EPERM, "%s %s: the root holds only directories (mkdir weight_vNNNNNN, or a staging directory)", op, name)
}

func (r *rootNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return r.m.refuse(r.m.modErrno(), "setattr of the mount root")
}

// latestLink is the latest symlink; it is read afresh at every readlink (the kernel does not
// cache symlink targets of this mount), so it moves the moment a version is sealed.
type latestLink struct {
	gofs.Inode
	m *mountState
}

func setLinkAttr(v uint64, t time.Time, out *fuse.Attr) {
	out.Mode = syscall.S_IFLNK | 0o777
	out.Size = uint64(len(VersionName(v)))
	out.Nlink = 1
	setTimes(out, t)
}

func (l *latestLink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	v, ok := l.m.latest()
	if !ok {
		return nil, syscall.ENOENT
	}
	return []byte(VersionName(v)), 0
}

func (l *latestLink) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	v, ok := l.m.latest()
	if !ok {
		return syscall.ENOENT
	}
	setLinkAttr(v, l.m.latestTime(), &out.Attr)
	return 0
}

func (l *latestLink) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return l.m.refuse(l.m.modErrno(), "setattr latest: it follows the newest sealed version")
}

func setDirAttr(perm uint32, t time.Time, out *fuse.Attr) {
	out.Mode = syscall.S_IFDIR | perm
	out.Nlink = 1
	setTimes(out, t)
}
