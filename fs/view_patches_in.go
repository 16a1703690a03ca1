package fs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// A patch in (docs/format.md Part III §5, "Writing a patch in"). On a read-write mount a
// trainer that diffs its own weights writes the one-file patch from the latest version
// (Part III §2) into patches/, and the version is sealed from it at delta cost
// (store.Store.CommitPatch): no full copy is written.
//
//	patches/weight_vNNNNNN.safetensors           written and closed: seals NNNNNN at close(2)
//	patches/NAME.tmp, patches/.NAME              written, then renamed to weight_vNNNNNN.safetensors:
//	                                             seals NNNNNN at rename(2) (os.replace)
//	patches/weight_vNNNNNN.safetensors.rejected  why the last patch for NNNNNN was refused
//
// The bytes are staged in an unlinked file of the mount's staging directory (a crash leaves
// nothing), and the seal runs at the close of a file named as a patch (the first close after
// bytes were written: a close with nothing written, as a shell's redirection makes, does
// nothing), or at the rename onto such a name. Its outcome is the errno of that close or
// rename: 0 once the version is sealed; EINVAL for a patch that cannot make the next version
// (store.ErrBadPatch: its base is not the latest version, a base identity or checksum fails,
// a tensor the base lacks or of another dtype or shape, truncated, a position outside its
// tensor; or a number not above the newest version), EIO for damage of the store. A refused
// patch seals nothing, leaves the store as it was, and its name goes away (write it again);
// the reason, naming the file and the tensor, is in the log and in the note
// weight_vNNNNNN.safetensors.rejected beside it, which the writer reads without the daemon's
// log, and which rm removes and a sealed patch of that version replaces. Once sealed, the name
// is the version's patch as the store renders it (an open handle on the bytes written keeps
// reading them). A read-only mount refuses every change (EROFS), as does a rank of a writer
// group (EPERM: its publisher seals versions).

// rejectedSuffix names the note of a refused patch.
const rejectedSuffix = ".rejected"

// isUploadName reports a name a patch may be written under before it is renamed into place.
func isUploadName(name string) bool {
	if _, ok := parsePatchName(name); ok {
		return false
	}
	return strings.HasSuffix(name, ".tmp") || strings.HasPrefix(name, ".") && name != "." && name != ".."
}

// in is what patches/ keeps of the patches written in beside their uploads (view_in.go).
func (p *patchesView) in() writesIn { return writesIn{v: &p.viewDir, mu: &p.mu, notes: p.notes} }

func (p *patchesView) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return p.getattrIn(out)
}

// lookupIn finds a patch being written or the note of a refused one.
func (p *patchesView) lookupIn(ctx context.Context, name string, out *fuse.EntryOut) *gofs.Inode {
	p.mu.Lock()
	u := p.uploads[name]
	note, isNote := p.notes[name]
	p.mu.Unlock()
	switch {
	case u != nil:
		u.fillAttr(&out.Attr)
		out.SetEntryTimeout(0)
		out.SetAttrTimeout(0)
		if ch := p.GetChild(name); ch != nil && ch.Operations() == u {
			return ch
		}
		return p.NewInode(ctx, u, gofs.StableAttr{Mode: syscall.S_IFREG})
	case isNote:
		return p.in().noteNode(ctx, name, note, out)
	}
	return nil
}

// listIn adds the patches being written and the notes to a listing.
func (p *patchesView) listIn(list []fuse.DirEntry) []fuse.DirEntry {
	return listIn(p.in(), list, p.uploads, syscall.S_IFREG)
}

func (p *patchesView) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if why := p.takesWrites(); why != "" {
		return nil, nil, 0, p.m.refuse(p.m.modErrno(), "create %s/%s: %s: %s", p.where, name, why, viewsAreDerived)
	}
	if errno := p.checkUploadName("create", name); errno != 0 {
		return nil, nil, 0, errno
	}
	f, err := os.CreateTemp(p.m.stagingRoot, "patch-")
	if err == nil {
		err = os.Remove(f.Name()) // unlinked: a crash leaves nothing behind
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, nil, 0, p.m.fail(err, "create %s/%s", p.where, name)
	}
	u := newPatchUpload(ctx, p, name, f, mode)
	p.mu.Lock()
	if p.uploads[name] != nil {
		p.mu.Unlock()
		f.Close()
		return nil, nil, 0, syscall.EEXIST
	}
	p.uploads[name] = u
	p.mu.Unlock()
	u.fillAttr(&out.Attr)
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(0)
	// Direct I/O where the kernel allows, as for the files of open versions (openFileFlags):
	// the patch's bytes do not fill the FUSE file's page cache on their way in.
	return p.NewInode(ctx, u, gofs.StableAttr{Mode: syscall.S_IFREG}), &openHandle{}, p.m.openFlags.Load(), 0
}

// checkUploadName refuses a name a patch cannot be written under.
func (p *patchesView) checkUploadName(op, name string) syscall.Errno {
	if isUploadName(name) {
		return 0
	}
	v, ok := parsePatchName(name)
	if !ok {
		return p.m.refuse(syscall.EPERM, "%s %s/%s: patches/ takes weight_vNNNNNN.safetensors, or NAME.tmp renamed to it", op, p.where, name)
	}
	p.m.mu.Lock()
	errno, reason := p.m.newNumberProblemLocked(v)
	p.m.mu.Unlock()
	if errno != 0 {
		what := fmt.Sprintf("%s %s/%s: %s", op, p.where, name, reason)
		errno = p.m.refuse(errno, "%s", what)
		p.in().note(name, errno, what)
	}
	return errno
}

func (p *patchesView) Unlink(ctx context.Context, name string) syscall.Errno {
	p.mu.Lock()
	u := p.uploads[name]
	_, isNote := p.notes[name]
	delete(p.uploads, name)
	delete(p.notes, name)
	p.mu.Unlock()
	switch {
	case u != nil:
		u.drop()
		return 0
	case isNote:
		return 0
	}
	return p.refuse("unlink", name)
}

func (p *patchesView) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	p.mu.Lock()
	u := p.uploads[name]
	p.mu.Unlock()
	if u == nil {
		return p.refuse("rename", name)
	}
	if newParent.EmbeddedInode() != p.EmbeddedInode() {
		return p.m.refuse(syscall.EXDEV, "rename %s/%s to %s: a patch stays in patches/", p.where, name, newName)
	}
	if flags&(gofs.RENAME_EXCHANGE|renameWhiteout) != 0 {
		return p.m.refuse(syscall.EINVAL, "rename %s/%s <-> %s: exchange is not supported here", p.where, name, newName)
	}
	if name == newName {
		return 0
	}
	if errno := p.checkUploadName("rename "+name+" to", newName); errno != 0 {
		return errno
	}
	p.mu.Lock()
	old := p.uploads[newName]
	if old != nil && flags&renameNoReplace != 0 {
		p.mu.Unlock()
		return syscall.EEXIST
	}
	p.mu.Unlock()
	if v, ok := parsePatchName(newName); ok {
		if errno := p.commit(u, newName, v); errno != 0 {
			return errno // the written file keeps its name
		}
		p.mu.Lock()
		delete(p.uploads, name)
		if p.uploads[newName] == old {
			delete(p.uploads, newName) // replaced by the rename
		}
		p.mu.Unlock()
		u.drop()
		if old != nil {
			old.drop()
		}
		// The kernel moves its entry of the written file to newName when we return: make
		// it look newName up again, to find the sealed version's patch.
		go p.NotifyEntry(newName)
		return 0
	}
	p.mu.Lock()
	delete(p.uploads, name)
	p.uploads[newName] = u
	p.mu.Unlock()
	u.rename(newName)
	if old != nil {
		old.drop()
	}
	return 0
}

// commit seals version v from the bytes of u, written as name, or notes why not.
func (p *patchesView) commit(u *patchUpload, name string, v uint64) syscall.Errno {
	m, in := p.m, p.in()
	where := p.where + "/" + name
	release, errno := in.reserve(name, v, where)
	if errno != 0 {
		return errno
	}
	defer release()
	p.commitMu.Lock()
	defer p.commitMu.Unlock()
	start := time.Now()
	f, size := u.staged()
	if f == nil {
		return syscall.EBADF
	}
	info, err := m.b.CommitPatch(f, size, v)
	if err != nil {
		return in.failed(name, v, where, err)
	}
	in.forget(name)
	m.log.Info("sealed version from a patch", "version", info.Number, "file", where, "patch_bytes", size,
		"files", info.Files, "bytes", info.LogicalBytes, "stored", info.StoredBytes, "took", time.Since(start).Round(time.Millisecond))
	m.notifyEntry(VersionName(v))
	m.notifyEntry(latestName)
	return 0
}

// rejectedNote is the note of a refused patch, served from memory as it was when looked up.
type rejectedNote struct {
	gofs.Inode
	m     *mountState
	where string
	note  string
}

func (n *rejectedNote) fillAttr(out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = uint64(len(n.note))
	out.Nlink = 1
	out.SetTimes(nil, &n.m.started, &n.m.started)
}

func (n *rejectedNote) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	out.SetTimeout(0)
	return 0
}

func (n *rejectedNote) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, n.m.refuse(syscall.EPERM, "open %s for writing: the note of a refused patch is the mount's (rm removes it)", n.where)
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *rejectedNote) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if off >= int64(len(n.note)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData([]byte(n.note[off:min(int64(len(n.note)), off+int64(len(dest)))])), 0
}

func (n *rejectedNote) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return n.m.statfs(out)
}

func (n *rejectedNote) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (n *rejectedNote) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if changesAnything(in) {
		return n.m.refuse(syscall.EPERM, "setattr %s: the note of a refused patch is the mount's (rm removes it)", n.where)
	}
	return n.Getattr(ctx, fh, out)
}

// The interfaces of the nodes of patches written in (as api_check.go lists the others').
var (
	_ = (gofs.NodeCreater)((*patchesView)(nil))
	_ = (gofs.NodeUnlinker)((*patchesView)(nil))
	_ = (gofs.NodeRenamer)((*patchesView)(nil))
	_ = (gofs.NodeGetattrer)((*patchesView)(nil))

	_ = (gofs.NodeStatfser)((*patchUpload)(nil))
	_ = (gofs.NodeGetattrer)((*patchUpload)(nil))
	_ = (gofs.NodeSetattrer)((*patchUpload)(nil))
	_ = (gofs.NodeOpener)((*patchUpload)(nil))
	_ = (gofs.NodeReader)((*patchUpload)(nil))
	_ = (gofs.NodeWriter)((*patchUpload)(nil))
	_ = (gofs.NodeFsyncer)((*patchUpload)(nil))
	_ = (gofs.NodeFlusher)((*patchUpload)(nil))
	_ = (gofs.NodeReleaser)((*patchUpload)(nil))

	_ = (gofs.NodeStatfser)((*rejectedNote)(nil))
	_ = (gofs.NodeGetattrer)((*rejectedNote)(nil))
	_ = (gofs.NodeSetattrer)((*rejectedNote)(nil))
	_ = (gofs.NodeOpener)((*rejectedNote)(nil))
	_ = (gofs.NodeReader)((*rejectedNote)(nil))
	_ = (gofs.NodeFsyncer)((*rejectedNote)(nil))
)
