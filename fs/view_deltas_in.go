package fs

import (
	"context"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store"
)

// A slime delta checkpoint in (docs/format.md Part III §4, "Writing a delta in"). On a
// read-write mount, slime's disk sender (--update-weight-disk-dir MNT/deltas) writes version
// NNNNNN as it writes to any shared file system, and the version is sealed from it at delta
// cost (store.Store.CommitSlimeDelta):
//
//	mkdir deltas/weight_vNNNNNN                  a directory being written (NNNNNN above the newest)
//	deltas/weight_vNNNNNN/NAME                   any file: shards, written as NAME.tmp and renamed
//	deltas/weight_vNNNNNN/model.safetensors.index.json
//	                                             renamed into place (or written and closed): seals NNNNNN
//	deltas/weight_vNNNNNN.rejected               why the last delta for NNNNNN was refused
//
// Each file's bytes are staged in an unlinked file of the mount's staging directory (a crash
// leaves nothing, and no version). The index arrives last (rank 0 writes it after every
// rank's shard); its rename is the seal, and returns its outcome: 0 once sealed, EINVAL for a
// delta that cannot make the next version (store.ErrBadPatch), EIO for damage. A refused delta
// seals nothing, its directory goes away, and the reason is in the log and in the note beside
// it (rm removes it). Once sealed, deltas/weight_vNNNNNN/ is the version's delta as the store
// renders it. rmdir of a directory being written drops it (as slime's rmtree of its delta
// directory at the start of a run does); sealed versions stay.

// in is what deltas/ keeps of the deltas written in beside their directories (view_in.go).
func (d *deltasView) in() writesIn { return writesIn{v: &d.viewDir, mu: &d.inMu, notes: d.notes} }

func (d *deltasView) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return d.getattrIn(out)
}

// lookupIn finds a directory being written or the note of a refused delta.
func (d *deltasView) lookupIn(ctx context.Context, name string, out *fuse.EntryOut) *gofs.Inode {
	d.inMu.Lock()
	u := d.uploads[name]
	note, isNote := d.notes[name]
	d.inMu.Unlock()
	switch {
	case u != nil:
		setDirAttr(0o755, u.created, &out.Attr)
		out.SetEntryTimeout(0)
		out.SetAttrTimeout(0)
		if ch := d.GetChild(name); ch != nil && ch.Operations() == u {
			return ch
		}
		return d.NewInode(ctx, u, gofs.StableAttr{Mode: syscall.S_IFDIR})
	case isNote:
		return d.in().noteNode(ctx, name, note, out)
	}
	return nil
}

// listIn adds the directories being written and the notes to a listing.
func (d *deltasView) listIn(list []fuse.DirEntry) []fuse.DirEntry {
	return listIn(d.in(), list, d.uploads, syscall.S_IFDIR)
}

func (d *deltasView) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if why := d.takesWrites(); why != "" {
		return nil, d.m.refuse(d.m.modErrno(), "mkdir %s/%s: %s: %s", d.where, name, why, viewsAreDerived)
	}
	v, isVersion, err := ParseVersionName(name)
	if !isVersion || err != nil {
		return nil, d.m.refuse(syscall.EPERM, "mkdir %s/%s: deltas/ takes weight_vNNNNNN/ directories", d.where, name)
	}
	d.m.mu.Lock()
	errno, reason := d.m.newNumberProblemLocked(v)
	d.m.mu.Unlock()
	if errno != 0 {
		return nil, d.m.refuse(errno, "mkdir %s/%s: %s", d.where, name, reason)
	}
	u := &deltaUpload{d: d, name: name, v: v, files: map[string]*deltaFile{}, created: time.Now()}
	d.inMu.Lock()
	if d.uploads[name] != nil {
		d.inMu.Unlock()
		return nil, syscall.EEXIST
	}
	d.uploads[name] = u
	d.inMu.Unlock()
	setDirAttr(0o755, u.created, &out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	return d.NewInode(ctx, u, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (d *deltasView) Rmdir(ctx context.Context, name string) syscall.Errno {
	d.inMu.Lock()
	u := d.uploads[name]
	delete(d.uploads, name)
	d.inMu.Unlock()
	if u == nil {
		return d.refuse("rmdir", name)
	}
	u.drop()
	return 0
}

func (d *deltasView) Unlink(ctx context.Context, name string) syscall.Errno {
	d.inMu.Lock()
	_, isNote := d.notes[name]
	delete(d.notes, name)
	d.inMu.Unlock()
	if isNote {
		return 0
	}
	return d.refuse("unlink", name)
}

// commit seals u's version from its files, or notes why not; u leaves deltas/ either way.
func (d *deltasView) commit(u *deltaUpload, index []byte) syscall.Errno {
	m, v, in := d.m, u.v, d.in()
	where := d.where + "/" + u.name
	d.inMu.Lock()
	if d.uploads[u.name] == u {
		delete(d.uploads, u.name)
	}
	d.inMu.Unlock()
	defer func() {
		u.drop()
		go func() {
			d.RmChild(u.name)
			d.NotifyEntry(u.name)
		}()
	}()
	release, errno := in.reserve(u.name, v, where)
	if errno != 0 {
		return errno
	}
	defer release()
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	start := time.Now()
	var sent int64
	open := func(name string) (io.ReaderAt, int64, error) {
		f, size := u.staged(name)
		if f == nil {
			return nil, 0, fs.ErrNotExist
		}
		sent += size
		return f, size, nil
	}
	var info store.VersionInfo
	var err error
	if _, has := m.latest(); !has && m.slimeSeed != "" {
		info, err = m.b.CommitSlimeDeltaOnSeed(m.slimeSeed, index, open, v) // slime's first delta, on its seed
	} else {
		info, err = m.b.CommitSlimeDelta(index, open, v)
	}
	if err != nil {
		return in.failed(u.name, v, where, err)
	}
	in.forget(u.name)
	m.log.Info("sealed version from a slime delta", "version", info.Number, "dir", where, "delta_bytes", sent+int64(len(index)),
		"files", info.Files, "bytes", info.LogicalBytes, "stored", info.StoredBytes, "took", time.Since(start).Round(time.Millisecond))
	m.notifyEntry(VersionName(v))
	m.notifyEntry(latestName)
	return 0
}

// deltaUpload is deltas/weight_vNNNNNN/ being written: its files, each staged unlinked.
type deltaUpload struct {
	gofs.Inode
	d       *deltasView
	name    string
	v       uint64
	created time.Time

	mu      sync.Mutex
	files   map[string]*deltaFile
	dropped bool
}

// staged returns the staged file of name (nil if there is none).
func (u *deltaUpload) staged(name string) (*os.File, int64) {
	u.mu.Lock()
	f := u.files[name]
	u.mu.Unlock()
	if f == nil {
		return nil, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.file, f.size
}

// drop takes the directory out of deltas/; its files close with their last handles.
func (u *deltaUpload) drop() {
	u.mu.Lock()
	files := u.files
	u.files, u.dropped = map[string]*deltaFile{}, true
	u.mu.Unlock()
	for _, f := range files {
		f.drop()
	}
}

// Getattr of a directory whose delta was sealed or refused is ESTALE: the kernel may still
// hold its entry for the rest of the jiffy in which the index's rename returned (an entry
// timeout of 0 expires at the next tick), and stat(2) then looks the name up again, finding
// the sealed version's delta or nothing.
func (u *deltaUpload) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if u.isDropped() {
		return syscall.ESTALE
	}
	setDirAttr(0o755, u.created, &out.Attr)
	return 0
}

// Opendir is ESTALE once the delta is sealed or refused, as Getattr: open(2) looks the name
// up again.
func (u *deltaUpload) Opendir(ctx context.Context) syscall.Errno {
	if u.isDropped() {
		return syscall.ESTALE
	}
	return 0
}

func (u *deltaUpload) isDropped() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dropped
}

func (u *deltaUpload) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return u.Getattr(ctx, fh, out)
}

func (u *deltaUpload) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	u.mu.Lock()
	f := u.files[name]
	u.mu.Unlock()
	if f == nil {
		return nil, syscall.ENOENT
	}
	f.fillAttr(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	if ch := u.GetChild(name); ch != nil && ch.Operations() == f {
		return ch, 0
	}
	return u.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
}

func (u *deltaUpload) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	u.mu.Lock()
	list := make([]fuse.DirEntry, 0, len(u.files))
	for name := range u.files {
		list = append(list, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
	}
	u.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return gofs.NewListDirStream(list), 0
}

func (u *deltaUpload) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	m := u.d.m
	where := u.d.where + "/" + u.name + "/" + name
	if len(name) > 255 {
		return nil, nil, 0, syscall.ENAMETOOLONG
	}
	staged, err := os.CreateTemp(m.stagingRoot, "delta-")
	if err == nil {
		err = os.Remove(staged.Name()) // unlinked: a crash leaves nothing behind
	}
	if err != nil {
		if staged != nil {
			staged.Close()
		}
		return nil, nil, 0, m.fail(err, "create %s", where)
	}
	f := newDeltaFile(ctx, u, name, staged, mode)
	u.mu.Lock()
	if u.dropped {
		u.mu.Unlock()
		staged.Close()
		return nil, nil, 0, syscall.ENOENT
	}
	old := u.files[name]
	u.files[name] = f
	u.mu.Unlock()
	if old != nil {
		old.drop()
	}
	f.fillAttr(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	return u.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG}), &openHandle{}, m.openFlags.Load(), 0
}

func (u *deltaUpload) Unlink(ctx context.Context, name string) syscall.Errno {
	u.mu.Lock()
	f := u.files[name]
	delete(u.files, name)
	u.mu.Unlock()
	if f == nil {
		return syscall.ENOENT
	}
	f.drop()
	return 0
}

func (u *deltaUpload) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	m := u.d.m
	if newParent.EmbeddedInode() != u.EmbeddedInode() {
		return m.refuse(syscall.EXDEV, "rename %s/%s/%s to %s: a delta's files stay in its directory", u.d.where, u.name, name, newName)
	}
	if flags&(gofs.RENAME_EXCHANGE|renameWhiteout) != 0 {
		return m.refuse(syscall.EINVAL, "rename %s/%s/%s <-> %s: exchange is not supported here", u.d.where, u.name, name, newName)
	}
	u.mu.Lock()
	f, old := u.files[name], u.files[newName]
	switch {
	case f == nil:
		u.mu.Unlock()
		return syscall.ENOENT
	case name == newName:
		u.mu.Unlock()
		return 0
	case old != nil && flags&renameNoReplace != 0:
		u.mu.Unlock()
		return syscall.EEXIST
	}
	delete(u.files, name)
	u.files[newName] = f
	u.mu.Unlock()
	f.rename(newName)
	if old != nil {
		old.drop()
	}
	if newName != delta.SlimeIndexName {
		return 0
	}
	return u.seal(f)
}

// seal seals the version from the directory once its index is in place.
func (u *deltaUpload) seal(index *deltaFile) syscall.Errno {
	f, size := index.staged()
	if f == nil {
		return syscall.EBADF
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !(err == io.EOF && size == 0) {
		return u.d.m.fail(err, "read %s/%s/%s", u.d.where, u.name, delta.SlimeIndexName)
	}
	return u.d.commit(u, data)
}

// The interfaces of the nodes of deltas written in (as api_check.go lists the others').
var (
	_ = (gofs.NodeMkdirer)((*deltasView)(nil))
	_ = (gofs.NodeRmdirer)((*deltasView)(nil))
	_ = (gofs.NodeUnlinker)((*deltasView)(nil))
	_ = (gofs.NodeGetattrer)((*deltasView)(nil))

	_ = (gofs.NodeLookuper)((*deltaUpload)(nil))
	_ = (gofs.NodeReaddirer)((*deltaUpload)(nil))
	_ = (gofs.NodeCreater)((*deltaUpload)(nil))
	_ = (gofs.NodeUnlinker)((*deltaUpload)(nil))
	_ = (gofs.NodeRenamer)((*deltaUpload)(nil))
	_ = (gofs.NodeGetattrer)((*deltaUpload)(nil))
	_ = (gofs.NodeSetattrer)((*deltaUpload)(nil))

	_ = (gofs.NodeStatfser)((*deltaFile)(nil))
	_ = (gofs.NodeGetattrer)((*deltaFile)(nil))
	_ = (gofs.NodeSetattrer)((*deltaFile)(nil))
	_ = (gofs.NodeOpener)((*deltaFile)(nil))
	_ = (gofs.NodeReader)((*deltaFile)(nil))
	_ = (gofs.NodeWriter)((*deltaFile)(nil))
	_ = (gofs.NodeFsyncer)((*deltaFile)(nil))
	_ = (gofs.NodeFlusher)((*deltaFile)(nil))
	_ = (gofs.NodeReleaser)((*deltaFile)(nil))
)
