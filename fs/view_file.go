package fs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/store"
)

// viewFile is a file under a view: a render in the process's cache directory, or a few
// bytes in memory (the index of an empty delta). Its bytes never change, so the kernel keeps
// its pages across opens (FOPEN_KEEP_CACHE) and caches its attributes; a render of other
// bytes (after gc changed a version's predecessor) gets another node.
type viewFile struct {
	gofs.Inode
	m     *mountState
	where string // path from the mount root, for log lines
	mtime time.Time
	perm  uint32 // read bits only: the most restrictive of its sources' (view_perm.go)
	// again renders the file anew when its cache file has gone (pruned, or removed by
	// hand); nil when the bytes are in memory.
	again func() (store.RenderedFile, error)

	mu sync.Mutex
	rf store.RenderedFile
	// pending: rf holds only the size; the file is rendered by first (and must come out at
	// that size) at its first open.
	pending bool
	first   func() (store.RenderedFile, error)
}

// viewHandle is one open of a viewFile. Every read is checked against the render's sums
// (store.RenderedFile.ReadAt); a damaged render is dropped by the store and rendered again,
// and the handle moves to the new render's file.
type viewHandle struct {
	mu   sync.Mutex
	f    *os.File           // nil when the bytes are in memory
	rf   store.RenderedFile // what f holds and is checked against
	old  []*os.File         // files of dropped renders, closed at release (a read may be on one)
	data []byte
}

func (h *viewHandle) current() (*os.File, store.RenderedFile) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.f, h.rf
}

func newViewFile(m *mountState, where string, rf store.RenderedFile, mtime time.Time, perm uint32, again func() (store.RenderedFile, error)) *viewFile {
	return &viewFile{m: m, where: where, rf: rf, mtime: mtime, perm: perm, again: again}
}

// newPendingViewFile is a view file known by its size alone, rendered by first at its first
// open (and by again if its cache file goes later).
func newPendingViewFile(m *mountState, where string, sized store.RenderedFile, mtime time.Time, perm uint32, first, again func() (store.RenderedFile, error)) *viewFile {
	return &viewFile{m: m, where: where, rf: sized, mtime: mtime, perm: perm, again: again, pending: true, first: first}
}

func (f *viewFile) isPending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending
}

func (f *viewFile) rendered() store.RenderedFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rf
}

func (f *viewFile) fillAttr(out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | f.perm&0o444
	out.Size = uint64(f.rendered().Size)
	out.Nlink = 1
	setTimes(out, f.mtime)
}

func (f *viewFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fillAttr(&out.Attr)
	out.SetTimeout(sealedTTL)
	return 0
}

func (f *viewFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !changesAnything(in) {
		return f.Getattr(ctx, fh, out)
	}
	return f.m.refuse(f.m.modErrno(), "setattr %s: %s", f.where, viewsAreDerived)
}

func (f *viewFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, f.m.refuse(f.m.modErrno(), "open %s for writing: %s", f.where, viewsAreDerived)
	}
	rf := f.rendered()
	if f.isPending() {
		file, rf, err := f.renderAgain(rf, f.first)
		if err != nil {
			return nil, 0, f.m.fail(err, "open %s", f.where)
		}
		return &viewHandle{f: file, rf: rf}, fuse.FOPEN_KEEP_CACHE, 0
	}
	if rf.Path == "" {
		return &viewHandle{data: rf.Data}, fuse.FOPEN_KEEP_CACHE, 0
	}
	file, err := os.Open(rf.Path)
	if errors.Is(err, fs.ErrNotExist) && f.again != nil {
		file, rf, err = f.renderAgain(rf, f.again)
	}
	if err != nil {
		return nil, 0, f.m.fail(err, "open %s", f.where)
	}
	return &viewHandle{f: file, rf: rf}, fuse.FOPEN_KEEP_CACHE, 0
}

// renderAgain renders a file whose cache file has gone, or a pending file; the render must have
// the size the kernel already knows (the same key gives the same bytes; a pending file's size
// was worked out for exactly these bytes).
func (f *viewFile) renderAgain(old store.RenderedFile, render func() (store.RenderedFile, error)) (*os.File, store.RenderedFile, error) {
	rf, err := render()
	if err != nil {
		return nil, rf, err
	}
	if rf.Size != old.Size || rf.Path == "" {
		return nil, rf, fmt.Errorf("rendered again as %d bytes, served as %d: %w", rf.Size, old.Size, store.ErrCorrupt)
	}
	f.mu.Lock()
	f.rf = rf
	wasPending := f.pending
	f.pending = false
	f.mu.Unlock()
	if !wasPending {
		f.m.log.Warn("rendered again (the cached file had gone or failed its check)", "file", f.where)
	}
	file, err := os.Open(rf.Path)
	return file, rf, err
}

func (f *viewFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*viewHandle)
	if !ok {
		return nil, syscall.EBADF
	}
	size := f.rendered().Size
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), size-off)
	if h.f == nil {
		return fuse.ReadResultData(h.data[off : off+n]), 0
	}
	buf := dest[:n]
	file, rf := h.current()
	got, err := rf.ReadAt(file, buf, off)
	if errors.Is(err, store.ErrDamagedRender) && f.again != nil {
		// The store logged and dropped the damaged render: serve from a new one.
		f.m.log.Warn("rendering it again", "file", f.where, "err", err)
		if file, rf, err = f.swapRender(h, file, rf); err == nil {
			got, err = rf.ReadAt(file, buf, off)
		}
	}
	if err == nil && int64(got) < n {
		err = fmt.Errorf("short read: %d of %d bytes: %w", got, n, store.ErrCorrupt)
	}
	if err != nil {
		if errors.Is(err, store.ErrDamagedRender) {
			err = fmt.Errorf("%w (%w)", err, store.ErrCorrupt)
		}
		return nil, f.m.fail(err, "read %s at %d+%d", f.where, off, n)
	}
	return fuse.ReadResultData(buf), 0
}

// swapRender moves handle h from the dropped render had (open as hadFile) to a new one,
// rendered once for all the handle's readers: one that finds it moved uses the new file.
func (f *viewFile) swapRender(h *viewHandle, hadFile *os.File, had store.RenderedFile) (*os.File, store.RenderedFile, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f != hadFile {
		return h.f, h.rf, nil
	}
	file, rf, err := f.renderAgain(had, f.again)
	if err != nil {
		return nil, rf, err
	}
	h.old = append(h.old, h.f)
	h.f, h.rf = file, rf
	return file, rf, nil
}

func (f *viewFile) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if h, ok := fh.(*viewHandle); ok && h.f != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, old := range h.old {
			old.Close()
		}
		if err := h.f.Close(); err != nil {
			f.m.log.Warn("close", "file", f.where, "err", err)
		}
	}
	return 0
}

func (f *viewFile) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return f.m.statfs(out)
}

func (f *viewFile) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (v *viewDir) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return v.m.statfs(out)
}

func (v *viewDir) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

// lookupViewFile returns the node of a view file as a child of parent, reusing the node made
// for the same render (same cache path or same bytes), so its page cache survives.
func lookupViewFile(ctx context.Context, parent *gofs.Inode, name string, newNode func() *viewFile, rf store.RenderedFile, out *fuse.EntryOut) *gofs.Inode {
	vf := newNode()
	if ch := parent.GetChild(name); ch != nil {
		if old, ok := ch.Operations().(*viewFile); ok && old.perm == vf.perm {
			have := old.rendered()
			if have.Size == rf.Size && have.Path == rf.Path && string(have.Data) == string(rf.Data) {
				old.fillAttr(&out.Attr)
				out.SetEntryTimeout(dynamicTTL)
				out.SetAttrTimeout(sealedTTL)
				return ch
			}
		}
	}
	vf.fillAttr(&out.Attr)
	out.SetEntryTimeout(dynamicTTL)
	out.SetAttrTimeout(sealedTTL)
	return parent.NewInode(ctx, vf, gofs.StableAttr{Mode: syscall.S_IFREG})
}
