package fs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Why a seal was refused, for the trainer. An errno says little (EIO, ENOSPC, ENODATA, EPERM),
// and the daemon's log is often out of a trainer's reach (another container, another user).
// So a refused seal leaves its reason and what to do in a file named RefusedName in the top
// directory of the open version (or the staging directory) it was refused for:
//
//	cat weight_v000002/.refused
//
// The file is the mount's, not the version's: it is listed and readable while the tree is
// open and its last seal was refused, never stored, replaced by the next refusal, gone with
// the seal that succeeds, and removable (rm -rf of the directory removes it like any file). A
// file of the writer's own named .refused takes precedence: the note then stays hidden.

// RefusedName is the name of the note a refused seal leaves at the top of its directory.
const RefusedName = ".refused"

// errNoFiles marks a seal of a tree that holds no file: nothing to seal (ENODATA).
var errNoFiles = errors.New("nothing to seal: the version holds no files")

// noteRefusal records why a seal of t was refused.
func (t *openTree) noteRefusal(errno syscall.Errno, reason string) {
	note := fmt.Sprintf("%s\n\nrefused at %s with %s (%v); the daemon's log has the same line.\n",
		reason, time.Now().UTC().Format(time.RFC3339), errnoName(errno), errno)
	t.refusal.Store(&note)
}

// refusalNote is the note of the last refused seal, if any.
func (t *openTree) refusalNote() (string, bool) {
	if p := t.refusal.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// checkNotEmpty refuses a seal of a tree that holds no file (the DONE of an open version
// does not count). Caller holds t.mu.
func (t *openTree) checkNotEmpty() error {
	files := 0
	t.walk(t.dir.EmbeddedInode(), "", func(p string, n *gofs.Inode) {
		if _, ok := n.Operations().(*openFile); ok && !(p == doneName && t.number != 0) {
			files++
		}
	})
	if files > 0 {
		return nil
	}
	what := "DONE alone is no checkpoint"
	if t.number == 0 {
		what = "the directory is empty"
	}
	return fmt.Errorf("%s: %w (%s): write the checkpoint's files into it, then seal it again, or remove it", t.name, errNoFiles, what)
}

// refusedFile is the note of a refused seal (RefusedName), served from memory.
type refusedFile struct {
	gofs.Inode
	t *openTree
}

// lookupRefused returns the note's node if name is RefusedName at the top of a tree whose last
// seal was refused.
func (d *openDir) lookupRefused(ctx context.Context, name string, out *fuse.EntryOut) *gofs.Inode {
	if name != RefusedName || d != d.t.dir {
		return nil
	}
	if _, ok := d.t.refusalNote(); !ok {
		return nil
	}
	f := &refusedFile{t: d.t}
	f.fillAttr(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	return d.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG})
}

// listRefused adds the note to a listing of the top of a tree whose last seal was refused.
func (d *openDir) listRefused(list []fuse.DirEntry) []fuse.DirEntry {
	if d != d.t.dir || d.GetChild(RefusedName) != nil {
		return list
	}
	if _, ok := d.t.refusalNote(); !ok {
		return list
	}
	list = append(list, fuse.DirEntry{Name: RefusedName, Mode: syscall.S_IFREG})
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

func (f *refusedFile) fillAttr(out *fuse.Attr) {
	note, _ := f.t.refusalNote()
	f.t.dir.fillAttr(out) // the owner and times of the directory it explains
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = uint64(len(note))
	out.Nlink = 1
}

func (f *refusedFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fillAttr(&out.Attr)
	out.SetTimeout(0)
	return 0
}

func (f *refusedFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if changesAnything(in) {
		return f.t.m.refuse(syscall.EPERM, "setattr %s/%s: the note of a refused seal is the mount's (rm removes it)", f.t.name, RefusedName)
	}
	return f.Getattr(ctx, fh, out)
}

func (f *refusedFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, f.t.m.refuse(syscall.EPERM, "open %s/%s for writing: the note of a refused seal is the mount's (rm removes it)", f.t.name, RefusedName)
	}
	// Each read sees the note of the moment: a later refusal replaces it.
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *refusedFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	note, _ := f.t.refusalNote()
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if off >= int64(len(note)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData([]byte(note[off:min(int64(len(note)), off+int64(len(dest)))])), 0
}

// describeFiles lists the files of an open tree (up to a few) and their count and bytes, for
// the log line of a tree dropped at unmount.
func (t *openTree) describeFiles() (files int, bytes int64, names string) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var list []string
	t.walk(t.dir.EmbeddedInode(), "", func(p string, n *gofs.Inode) {
		f, ok := n.Operations().(*openFile)
		if !ok || (p == doneName && t.number != 0) {
			return
		}
		files++
		f.mu.Lock()
		bytes += f.size
		f.mu.Unlock()
		if len(list) < 20 {
			list = append(list, p)
		}
	})
	names = strings.Join(list, ", ")
	if files > len(list) {
		names += fmt.Sprintf(", and %d more", files-len(list))
	}
	return files, bytes, names
}
