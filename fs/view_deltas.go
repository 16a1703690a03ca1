package fs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/store"
)

// deltas/ holds weight_vNNNNNN/ for every sealed version: slime's delta checkpoint layout
// (docs/format.md Part III §4), as store.PlanSlime decides it:
//   - a delta (model.safetensors.index.json and its shards), rendered at the first lookup or
//     listing inside the directory and served from the cache directory;
//   - a full checkpoint: the version's top-level files, served like the version itself;
//   - for a number between two sealed versions (looked up, never listed), the index alone
//     with an empty weight map, so a receiver stepping through every number finds each one.

// deltasView is the deltas/ directory.
type deltasView struct {
	viewDir
	src VersionStore

	// Deltas written in (view_deltas_in.go): directories being written, the notes of
	// refused ones, and one seal from a delta at a time.
	inMu     sync.Mutex
	uploads  map[string]*deltaUpload
	notes    map[string]string
	commitMu sync.Mutex
}

func newDeltasView(m *mountState, name string) viewNode {
	if !m.b.RendersViews() {
		return newEmptyView(m, name)
	}
	return &deltasView{viewDir: viewDir{m: m, where: name}, src: m.b, uploads: map[string]*deltaUpload{}, notes: map[string]string{}}
}

func (d *deltasView) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n := d.lookupIn(ctx, name, out); n != nil {
		return n, 0
	}
	v, isVersion, err := ParseVersionName(name)
	if !isVersion || err != nil {
		return nil, syscall.ENOENT
	}
	plan, err := d.src.PlanSlime(v)
	if errors.Is(err, store.ErrNoSuchVersion) {
		return nil, syscall.ENOENT
	}
	if err != nil {
		return nil, d.m.fail(err, "plan %s/%s", d.where, name)
	}
	mtime := d.m.started
	var idx *versionIndex
	if info, ok := d.m.sealedInfo(v); ok {
		mtime = info.Created
	}
	if plan.Kind == store.SlimeFull {
		if idx, err = d.m.index(v); err != nil {
			return nil, d.m.fail(err, "list %s/%s", d.where, name)
		}
	}
	// A delta's files carry bytes of the version and of its base: their mode is the most
	// restrictive of both versions' (view_perm.go). A full checkpoint's files keep their own.
	perm := uint32(0o444)
	if _, sealed := d.m.sealedInfo(v); sealed {
		if perm, err = d.m.viewPerm(v, d.m.previousSealed(v)); err != nil {
			return nil, d.m.fail(err, "look up %s/%s", d.where, name)
		}
	}
	setDirAttr(0o555, mtime, &out.Attr)
	out.SetEntryTimeout(dynamicTTL)
	out.SetAttrTimeout(dynamicTTL)
	if ch := d.GetChild(name); ch != nil {
		if dd, ok := ch.Operations().(*deltaDir); ok && dd.plan == plan && dd.idx == idx && dd.perm == perm {
			return ch, 0
		}
	}
	dd := &deltaDir{viewDir: viewDir{m: d.m, where: d.where + "/" + name}, src: d.src, plan: plan, idx: idx, mtime: mtime, perm: perm}
	return d.NewInode(ctx, dd, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (d *deltasView) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	vs := d.m.b.Versions()
	list := make([]fuse.DirEntry, 0, len(vs))
	for _, info := range vs {
		list = append(list, fuse.DirEntry{Name: VersionName(info.Number), Mode: syscall.S_IFDIR})
	}
	return gofs.NewListDirStream(d.listIn(list)), 0
}

// deltaDir is deltas/weight_vNNNNNN/.
type deltaDir struct {
	viewDir
	src   VersionStore
	plan  store.SlimePlan
	idx   *versionIndex // the version's files, for SlimeFull
	mtime time.Time
	perm  uint32 // the mode of its rendered files (view_perm.go)

	mu    sync.Mutex // held while rendering, so concurrent lookups wait for one render
	files []store.RenderedFile
}

func (d *deltaDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	setDirAttr(0o555, d.mtime, &out.Attr)
	return 0
}

// rendered returns the delta's files, rendering them on the first call.
func (d *deltaDir) rendered() ([]store.RenderedFile, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.files != nil {
		return d.files, 0
	}
	start := time.Now()
	plan, files, err := d.src.RenderSlime(d.plan.Version)
	if err != nil {
		return nil, d.m.fail(err, "render %s", d.where)
	}
	if plan != d.plan {
		// gc changed the version's predecessor since the lookup: look it up again.
		return nil, d.m.refuse(syscall.ESTALE, "%s: served as %s (base %d) at lookup, now %s (base %d)",
			d.where, d.plan.Kind, d.plan.Base, plan.Kind, plan.Base)
	}
	if d.plan.Kind == store.SlimeDelta {
		var total int64
		for _, f := range files {
			total += f.Size
		}
		d.m.log.Debug("delta ready in "+time.Since(start).Round(time.Millisecond).String(),
			"dir", d.where, "base", d.plan.Base, "files", len(files), "bytes", total)
	}
	d.files = files
	return files, 0
}

func findRendered(files []store.RenderedFile, name string) (store.RenderedFile, bool) {
	for _, f := range files {
		if f.Name == name {
			return f, true
		}
	}
	return store.RenderedFile{}, false
}

func (d *deltaDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.plan.Kind == store.SlimeFull {
		// The version's own top-level files, served as in weight_vNNNNNN/.
		if e, ok := d.idx.lookup("", name); !ok || e.Dir {
			return nil, syscall.ENOENT
		}
		return lookupSealed(ctx, d.EmbeddedInode(), d.m, d.idx, "", name, out)
	}
	files, errno := d.rendered()
	if errno != 0 {
		return nil, errno
	}
	rf, ok := findRendered(files, name)
	if !ok {
		return nil, syscall.ENOENT
	}
	v, where := d.plan.Version, d.where+"/"+name
	again := func() (store.RenderedFile, error) {
		_, files, err := d.src.RenderSlime(v)
		if err != nil {
			return store.RenderedFile{}, err
		}
		rf, _ := findRendered(files, name)
		return rf, nil
	}
	if rf.Path == "" {
		again = nil
	}
	newNode := func() *viewFile { return newViewFile(d.m, where, rf, d.mtime, d.perm, again) }
	return lookupViewFile(ctx, d.EmbeddedInode(), name, newNode, rf, out), 0
}

func (d *deltaDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var list []fuse.DirEntry
	if d.plan.Kind == store.SlimeFull {
		for _, name := range d.idx.children[""] {
			if e, _ := d.idx.lookup("", name); !e.Dir {
				list = append(list, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
			}
		}
		return gofs.NewListDirStream(list), 0
	}
	files, errno := d.rendered()
	if errno != 0 {
		return nil, errno
	}
	for _, f := range files {
		list = append(list, fuse.DirEntry{Name: f.Name, Mode: syscall.S_IFREG})
	}
	return gofs.NewListDirStream(list), 0
}

func (d *deltaDir) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !changesAnything(in) {
		return d.Getattr(ctx, fh, out)
	}
	return d.refuse("setattr", "")
}
