package fs

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// What the two views that take writes share (patches/, view_patches_in.go; deltas/,
// view_deltas_in.go): whether the mount takes them, the notes of refused writes, and the
// reservation of the version number a seal makes.

// takesWrites says why this mount's patches/ or deltas/ takes nothing written in ("" when it
// does).
func (v *viewDir) takesWrites() string {
	switch {
	case v.m.readOnly:
		return "read-only mount"
	case v.m.b.SealedElsewhere():
		return "a rank of a writer group writes parts; its publisher seals versions"
	case v.m.stagingRoot == "":
		return "the mount has no staging directory"
	}
	return ""
}

// getattrIn is the attributes of a view that takes writes: writable when the mount takes them.
func (v *viewDir) getattrIn(out *fuse.AttrOut) syscall.Errno {
	mode := uint32(0o555)
	if v.takesWrites() == "" {
		mode = 0o755
	}
	setDirAttr(mode, v.m.started, &out.Attr)
	return 0
}

// writesIn is what a view that takes writes keeps of them beside its uploads: the notes of
// refused writes (NAME.rejected -> text), guarded by the view's lock mu (which guards its
// uploads too).
type writesIn struct {
	v     *viewDir
	mu    *sync.Mutex
	notes map[string]string
}

// noteNode is the inode of the note of a refused write, looked up as name.
func (w writesIn) noteNode(ctx context.Context, name, note string, out *fuse.EntryOut) *gofs.Inode {
	n := &rejectedNote{m: w.v.m, where: w.v.where + "/" + name, note: note}
	n.fillAttr(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	return w.v.NewInode(ctx, n, gofs.StableAttr{Mode: syscall.S_IFREG})
}

// listIn adds the uploads (entries of mode) and the notes of w to a listing, sorted.
func listIn[U any](w writesIn, list []fuse.DirEntry, uploads map[string]U, mode uint32) []fuse.DirEntry {
	w.mu.Lock()
	for name := range uploads {
		list = append(list, fuse.DirEntry{Name: name, Mode: mode})
	}
	for name := range w.notes {
		list = append(list, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
	}
	w.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

// note leaves the reason a write as name was refused in name.rejected.
func (w writesIn) note(name string, errno syscall.Errno, reason string) {
	text := fmt.Sprintf("%s\n\nrefused at %s with %s (%v); the daemon's log has the same line.\n",
		reason, time.Now().UTC().Format(time.RFC3339), errnoName(errno), errno)
	w.mu.Lock()
	w.notes[name+rejectedSuffix] = text
	w.mu.Unlock()
	go w.v.NotifyEntry(name + rejectedSuffix)
}

// noteSeen makes the kernel look name's note up again before the close(2) that refused name
// returns (note's own invalidation runs behind it): a zero entry timeout is checked only at
// the next jiffy, so a writer reading the note at once could get the previous refusal's.
// Only from a handler that holds no directory lock (FLUSH).
func (w writesIn) noteSeen(name string) {
	if e := w.v.NotifyEntry(name + rejectedSuffix); e != 0 && e != syscall.ENOENT {
		w.v.m.log.Warn("invalidate an entry in the kernel", "name", w.v.where+"/"+name+rejectedSuffix, "err", e)
	}
}

// forget drops the note of name, sealed now.
func (w writesIn) forget(name string) {
	w.mu.Lock()
	delete(w.notes, name+rejectedSuffix)
	w.mu.Unlock()
}

// reserve reserves version v for its seal from name, written at where, or refuses it (and
// notes why) when v cannot be the next version. release ends the reservation; it is nil where
// errno is not 0.
func (w writesIn) reserve(name string, v uint64, where string) (release func(), errno syscall.Errno) {
	m := w.v.m
	errno, reason := m.reserveNumber(v)
	if errno != 0 {
		what := fmt.Sprintf("seal %s from %s: %s", VersionName(v), where, reason)
		w.note(name, m.refuse(errno, "%s", what), what)
		return nil, errno
	}
	return func() { m.releaseNumber(v) }, 0
}

// failed logs and notes err, why the store did not seal v from name, written at where.
func (w writesIn) failed(name string, v uint64, where string, err error) syscall.Errno {
	what := fmt.Sprintf("seal %s from %s (nothing sealed; the store is as it was)", VersionName(v), where)
	errno := w.v.m.fail(err, "%s", what)
	w.note(name, errno, fmt.Sprintf("%s:\n%v", what, err))
	return errno
}
