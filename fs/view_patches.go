package fs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/store"
)

// patches/ holds weight_vNNNNNN.safetensors, the one-file sparse patch from the previous
// sealed version to NNNNNN (docs/format.md Part III §2), for every sealed version whose predecessor has the
// same tensor layout; the first version and re-anchored versions have none (ENOENT). A
// lookup gives the patch's size from the manifests (store.PatchSize: `ls -l` renders nothing);
// the patch is rendered at its first open, must come out at that size, and is served from
// the cache directory. Where the manifests cannot tell, the lookup renders.
//
// weight_vNNNNNN.from_vKKKKKK.safetensors is the catch-up patch from any earlier sealed
// version KKKKKK to NNNNNN (store.RenderPatchFrom; docs/format.md Part III §5), for a reader
// that holds KKKKKK. Such names are resolved on lookup and never listed (there is one per pair
// of versions); the lookup renders the patch, since no manifest gives its size. A pair with
// another tensor layout, or a KKKKKK gc removed, has none (ENOENT).

const patchSuffix = ".safetensors"

// patchesView is the patches/ directory.
type patchesView struct {
	viewDir
	src VersionStore

	mu      sync.Mutex
	locks   map[uint64]*sync.Mutex    // one render of a version at a time
	pairs   map[[2]uint64]*sync.Mutex // one render of a catch-up patch at a time
	renders map[uint64]patchRender    // what this mount has rendered
	has     map[uint64]patchRender    // PatchBase decisions (rf unset)

	// Patches written in (view_patches_in.go): files being written, the notes of refused
	// ones, and one seal from a patch at a time.
	uploads  map[string]*patchUpload
	notes    map[string]string
	commitMu sync.Mutex
}

// patchRender is a render (or a decision) made when the version before was base; a change
// of predecessor (gc) makes it stale.
type patchRender struct {
	base uint64
	has  bool
	rf   store.RenderedFile
}

func newPatchesView(m *mountState, name string) viewNode {
	if !m.b.RendersViews() {
		return newEmptyView(m, name)
	}
	return &patchesView{
		viewDir: viewDir{m: m, where: name},
		src:     m.b,
		locks:   map[uint64]*sync.Mutex{},
		pairs:   map[[2]uint64]*sync.Mutex{},
		renders: map[uint64]patchRender{},
		has:     map[uint64]patchRender{},
		uploads: map[string]*patchUpload{},
		notes:   map[string]string{},
	}
}

// PatchName is the name of version v's patch in patches/.
func PatchName(v uint64) string { return VersionName(v) + patchSuffix }

// CatchupPatchName is the name in patches/ of the catch-up patch from version from to v.
func CatchupPatchName(v, from uint64) string {
	return VersionName(v) + catchupInfix + strings.TrimPrefix(VersionName(from), "weight_") + patchSuffix
}

// catchupInfix separates the two versions of a catch-up patch's name.
const catchupInfix = ".from_"

// parsePatchName returns the version a name in patches/ stands for.
func parsePatchName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, patchSuffix)
	if !ok {
		return 0, false
	}
	v, isVersion, err := ParseVersionName(base)
	return v, isVersion && err == nil
}

// parseCatchupName returns the two versions a catch-up patch's name stands for.
func parseCatchupName(name string) (v, from uint64, ok bool) {
	base, ok := strings.CutSuffix(name, patchSuffix)
	if !ok {
		return 0, 0, false
	}
	to, fromName, ok := strings.Cut(base, catchupInfix)
	if !ok {
		return 0, 0, false
	}
	v, isV, err1 := ParseVersionName(to)
	from, isFrom, err2 := ParseVersionName("weight_" + fromName)
	if !isV || !isFrom || err1 != nil || err2 != nil || CatchupPatchName(v, from) != name {
		return 0, 0, false
	}
	return v, from, true
}

// lookupCatchup resolves a catch-up patch's name, rendering it.
func (p *patchesView) lookupCatchup(ctx context.Context, name string, v, from uint64, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	info, sealed := p.m.sealedInfo(v)
	if _, fromSealed := p.m.sealedInfo(from); !sealed || !fromSealed || from >= v {
		return nil, syscall.ENOENT
	}
	where := p.where + "/" + name
	perm, err := p.m.viewPerm(v, from)
	if err != nil {
		return nil, p.m.fail(err, "look up %s", where)
	}
	if from == p.m.previousSealed(v) {
		// The one-step patch under another name: the same render, and the same lock, as
		// weight_vNNNNNN.safetensors (and a render made ahead of the lookup, poll.go).
		rf, errno := p.render(v, name)
		if errno != 0 {
			return nil, errno
		}
		again := func() (store.RenderedFile, error) { return p.src.RenderPatchFrom(v, from) }
		newNode := func() *viewFile { return newViewFile(p.m, where, rf, info.Created, perm, again) }
		return lookupViewFile(ctx, p.EmbeddedInode(), name, newNode, rf, out), 0
	}
	render := func() (store.RenderedFile, error) {
		key := [2]uint64{v, from}
		p.mu.Lock()
		lock := p.pairs[key]
		if lock == nil {
			lock = &sync.Mutex{}
			p.pairs[key] = lock
		}
		p.mu.Unlock()
		lock.Lock()
		defer lock.Unlock()
		return p.src.RenderPatchFrom(v, from)
	}
	start := time.Now()
	rf, err := render()
	if isNoPatch(err) {
		return nil, syscall.ENOENT
	}
	if err != nil {
		return nil, p.m.fail(err, "render %s", where)
	}
	p.m.log.Debug("ready in "+time.Since(start).Round(time.Millisecond).String(), "file", where, "bytes", rf.Size)
	newNode := func() *viewFile { return newViewFile(p.m, where, rf, info.Created, perm, render) }
	return lookupViewFile(ctx, p.EmbeddedInode(), name, newNode, rf, out), 0
}

// previousSealed is the sealed version before v in the mount's current list (0: none).
func (m *mountState) previousSealed(v uint64) uint64 {
	prev := uint64(0)
	for _, info := range m.b.Versions() {
		if info.Number >= v {
			break
		}
		prev = info.Number
	}
	return prev
}

// isNoPatch reports the errors that mean "this version has no patch".
func isNoPatch(err error) bool {
	return errors.Is(err, store.ErrNoPrevious) || errors.Is(err, store.ErrLayoutChanged) || errors.Is(err, store.ErrNoSuchVersion)
}

func (p *patchesView) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	p.m.patchesWanted(p) // a reader of patches is here: render new versions' ahead (poll.go)
	if n := p.lookupIn(ctx, name, out); n != nil {
		return n, 0 // a patch being written, or the note of a refused one
	}
	if v, from, ok := parseCatchupName(name); ok {
		return p.lookupCatchup(ctx, name, v, from, out)
	}
	v, ok := parsePatchName(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	info, sealed := p.m.sealedInfo(v)
	if !sealed {
		return nil, syscall.ENOENT
	}
	where := p.where + "/" + name
	perm, err := p.m.viewPerm(v, p.m.previousSealed(v))
	if err != nil {
		return nil, p.m.fail(err, "look up %s", where)
	}
	again := func() (store.RenderedFile, error) { return p.src.RenderPatch(v) }
	rf, rendered := p.renderedFor(v)
	if !rendered {
		// A lookup (ls -l lists every patch) needs only the size: the manifests give it, and
		// the patch is rendered at its first open.
		size, ok, err := p.src.PatchSize(v)
		switch {
		case isNoPatch(err):
			return nil, syscall.ENOENT
		case err != nil:
			return nil, p.m.fail(err, "size of %s", where)
		case ok:
			sized := store.RenderedFile{Size: size}
			renderOnOpen := func() (store.RenderedFile, error) {
				rf, errno := p.render(v, name)
				if errno != 0 {
					return rf, errno
				}
				return rf, nil
			}
			newNode := func() *viewFile {
				return newPendingViewFile(p.m, where, sized, info.Created, perm, renderOnOpen, again)
			}
			return lookupViewFile(ctx, p.EmbeddedInode(), name, newNode, sized, out), 0
		}
		var errno syscall.Errno
		if rf, errno = p.render(v, name); errno != 0 {
			return nil, errno
		}
	}
	newNode := func() *viewFile { return newViewFile(p.m, where, rf, info.Created, perm, again) }
	return lookupViewFile(ctx, p.EmbeddedInode(), name, newNode, rf, out), 0
}

// renderedFor returns the render this mount made of v's patch against v's current
// predecessor, if any.
func (p *patchesView) renderedFor(v uint64) (store.RenderedFile, bool) {
	prev := p.m.previousSealed(v)
	p.mu.Lock()
	defer p.mu.Unlock()
	done, ok := p.renders[v]
	if ok && done.base == prev && prev != 0 {
		return done.rf, true
	}
	return store.RenderedFile{}, false
}

// render returns the patch of v, rendering it unless this mount already has, for the same
// predecessor. Concurrent lookups of one version wait for one render.
func (p *patchesView) render(v uint64, name string) (store.RenderedFile, syscall.Errno) {
	p.mu.Lock()
	lock := p.locks[v]
	if lock == nil {
		lock = &sync.Mutex{}
		p.locks[v] = lock
	}
	p.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	if rf, ok := p.renderedFor(v); ok {
		return rf, 0
	}
	prev := p.m.previousSealed(v)
	start := time.Now()
	rf, err := p.src.RenderPatch(v)
	if isNoPatch(err) {
		return store.RenderedFile{}, syscall.ENOENT
	}
	if err != nil {
		return store.RenderedFile{}, p.m.fail(err, "render %s/%s", p.where, name)
	}
	p.m.log.Debug("ready in "+time.Since(start).Round(time.Millisecond).String(), "file", p.where+"/"+name, "bytes", rf.Size)
	p.mu.Lock()
	p.renders[v] = patchRender{base: prev, has: true, rf: rf}
	p.mu.Unlock()
	return rf, 0
}

// hasPatch decides whether v is listed, remembering the decision per predecessor.
func (p *patchesView) hasPatch(v, prev uint64) bool {
	p.mu.Lock()
	d, ok := p.has[v]
	p.mu.Unlock()
	if ok && d.base == prev {
		return d.has
	}
	base, err := p.src.PatchBase(v)
	if err != nil && !isNoPatch(err) {
		p.m.log.Warn("list a patch", "file", p.where+"/"+PatchName(v), "err", err)
		return false
	}
	has := err == nil && base == prev
	p.mu.Lock()
	p.has[v] = patchRender{base: prev, has: has}
	p.mu.Unlock()
	return has
}

func (p *patchesView) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	vs := p.m.b.Versions()
	var list []fuse.DirEntry
	for i := 1; i < len(vs); i++ {
		if p.hasPatch(vs[i].Number, vs[i-1].Number) {
			list = append(list, fuse.DirEntry{Name: PatchName(vs[i].Number), Mode: syscall.S_IFREG})
		}
	}
	return gofs.NewListDirStream(p.listIn(list)), 0
}
