package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/weightfs/weightfs/store"
)

// sealOpenVersion seals an open version from the FLUSH of its DONE file. The kernel holds no
// directory lock during FLUSH, so the root entry is invalidated before close(2) returns: the
// next lookup of the version finds the sealed one.
func (m *mountState) sealOpenVersion(t *openTree) syscall.Errno {
	start := time.Now()
	info, err := t.seal(t.number)
	if errors.Is(err, errAlreadySealed) {
		return 0
	}
	if errors.Is(err, store.ErrGroupRefused) {
		return m.refuseSeal(t, err, fmt.Sprintf("seal %s: the writer group's publisher refused the version (remove the directory and write the save under a higher number)", t.name))
	}
	if err != nil {
		return m.refuseSeal(t, err, fmt.Sprintf("seal %s (the version stays open and writable; close DONE again to retry)", t.name))
	}
	m.finishSeal(t, t.name, info, start)
	m.notifyEntry(t.name)
	return 0
}

// refuseSeal logs a failed seal of t and leaves the reason in t's note (refused.go).
func (m *mountState) refuseSeal(t *openTree, err error, what string) syscall.Errno {
	errno := m.fail(err, "%s", what)
	t.noteRefusal(errno, fmt.Sprintf("%s:\n%v", what, err))
	return errno
}

// renameErrno is the errno a refused rename at the root answers: EINVAL becomes EPERM, since
// mv(1) reads EINVAL from rename(2) as "cannot move to a subdirectory of itself".
func renameErrno(errno syscall.Errno) syscall.Errno {
	if errno == syscall.EINVAL {
		return syscall.EPERM
	}
	return errno
}

// finishSeal drops a sealed tree from the root.
func (m *mountState) finishSeal(t *openTree, rootName string, info store.VersionInfo, start time.Time) {
	m.mu.Lock()
	if m.trees[rootName] == t {
		delete(m.trees, rootName)
	}
	m.mu.Unlock()
	m.log.Info("sealed version", "version", info.Number, "files", info.Files, "bytes", info.LogicalBytes,
		"stored", info.StoredBytes, "took", time.Since(start).Round(time.Millisecond))
	if m.b.RendersViews() {
		if note := m.b.PatchNote(info.Number); note != "" {
			m.log.Info(fmt.Sprintf("version %d: %s", info.Number, note), "version", info.Number)
		}
	}
}

// notifyEntry makes the kernel forget the root entry name. Never call it holding m.mu, or
// from a handler of an operation that holds the root directory's lock (mkdir, rmdir, rename
// at the root): the kernel takes that lock to process the notification.
func (m *mountState) notifyEntry(name string) {
	if m.root == nil {
		return
	}
	if errno := m.root.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
		m.log.Warn("invalidate an entry in the kernel", "name", name, "err", errno)
	}
}

// Rename at the root. A staging directory renamed to weight_vNNNNNN is sealed as that version
// before the rename returns; staging directories may be renamed among themselves. Everything
// else at the root keeps its name.
func (r *rootNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	m := r.m
	if m.readOnly {
		return m.refuse(syscall.EROFS, "rename %s: read-only mount", name)
	}
	if newParent.EmbeddedInode() != r.EmbeddedInode() {
		return m.refuse(syscall.EXDEV, "rename %s into %s: root entries stay at the root", name, newName)
	}
	if flags&(gofs.RENAME_EXCHANGE|renameWhiteout) != 0 {
		return m.refuse(syscall.EINVAL, "rename %s <-> %s: exchange is not supported at the root", name, newName)
	}
	m.mu.Lock()
	t, dst := m.trees[name], m.trees[newName]
	m.mu.Unlock()
	if t == nil {
		if isFixedName(name) || r.isSealedName(name) {
			return m.refuse(syscall.EPERM, "rename %s: sealed versions, latest and views keep their names", name)
		}
		return syscall.ENOENT
	}
	if name == newName {
		return 0
	}
	if t.number != 0 {
		return m.refuse(syscall.EPERM, "rename %s: an open version keeps its name (seal it by closing DONE in it, or rmdir it)", name)
	}
	if isFixedName(newName) {
		return m.refuse(syscall.EPERM, "rename %s to %s: the name is reserved", name, newName)
	}
	if errno := m.checkRootName("rename "+name+" to", newName); errno != 0 {
		return errno
	}
	v, isVersion, err := ParseVersionName(newName)
	if err != nil {
		return m.refuse(syscall.EPERM, "rename %s: %v", name, err)
	}
	if isVersion {
		return r.sealByRename(t, name, v, newName)
	}
	if dst != nil {
		if flags&renameNoReplace != 0 {
			return syscall.EEXIST
		}
		if dst.number != 0 {
			return m.refuse(syscall.EPERM, "rename %s over the open version %s", name, newName)
		}
		if errno := dst.abortIfEmpty(); errno != 0 {
			return errno
		}
	}
	m.mu.Lock()
	delete(m.trees, name)
	m.trees[newName] = t
	m.mu.Unlock()
	return 0
}

// reserveNumber reserves version v for a seal (of a staging tree, or from a patch or delta
// written in: view_in.go), or says why v cannot be the next version: the errno and reason of
// the refusal, with nothing reserved. releaseNumber ends the reservation.
func (m *mountState) reserveNumber(v uint64) (syscall.Errno, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	errno, reason := m.newNumberProblemLocked(v)
	if errno == 0 {
		m.reserved[v] = true
	}
	return errno, reason
}

func (m *mountState) releaseNumber(v uint64) {
	m.mu.Lock()
	delete(m.reserved, v)
	m.mu.Unlock()
}

// sealByRename publishes staging tree t as version v. The kernel holds the root's lock until
// we return, so the entry is invalidated afterwards, from another goroutine.
func (r *rootNode) sealByRename(t *openTree, name string, v uint64, newName string) syscall.Errno {
	m := r.m
	errno, reason := m.reserveNumber(v)
	if errno != 0 {
		what := fmt.Sprintf("rename %s to %s: %s", name, newName, reason)
		errno = m.refuse(renameErrno(errno), "%s", what)
		t.noteRefusal(errno, what+" (the directory stays as it was)")
		return errno
	}
	start := time.Now()
	info, err := t.seal(v)
	m.releaseNumber(v)
	if err != nil {
		return renameErrno(m.refuseSeal(t, err, fmt.Sprintf("seal %s as %s (the directory stays as it was)", name, newName)))
	}
	m.finishSeal(t, name, info, start)
	go m.notifyEntry(newName)
	return 0
}
