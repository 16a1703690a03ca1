package fs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/weightfs/weightfs/store"
)

// treeState is the life cycle of an open tree: open -> sealed, or open -> aborted.
type treeState int

const (
	treeOpen treeState = iota
	treeSealed
	treeAborted
)

// errAlreadySealed tells a second DONE that the first one already sealed the version.
var errAlreadySealed = errors.New("version already sealed")

// openTree is an open version (mkdir weight_vNNNNNN) or a staging directory (any other name):
// an in-memory tree of openDir and openFile nodes whose bytes live in staging files.
type openTree struct {
	m      *mountState
	name   string // the root name at creation (open versions keep theirs)
	number uint64 // the version number of an open version; 0 for a staging directory
	disk   string // directory of this tree's staging files

	// mu is held shared by every change to the tree and exclusively by seal and abort, so a
	// seal sees no half-done write and nothing changes once it has started.
	mu       sync.RWMutex
	state    treeState
	sealedAs uint64        // the version the tree became, once sealed
	writer   VersionWriter // the store's writer; nil until needed again after a failed seal
	dir      *openDir      // the top directory

	filesMu sync.Mutex
	files   map[*openFile]struct{} // files whose staging file is not yet released

	refusal atomic.Pointer[string] // why the last seal was refused (refused.go)
}

func newOpenTree(m *mountState, name string, number uint64, w VersionWriter, mode uint32) (*openTree, error) {
	disk := filepath.Join(m.stagingRoot, fmt.Sprintf("tree-%d", m.nextSeqLocked()))
	if err := os.Mkdir(disk, 0o700); err != nil {
		return nil, fmt.Errorf("create staging directory: %w", err)
	}
	if w != nil {
		tuneWriter(w)
	}
	t := &openTree{m: m, name: name, number: number, disk: disk, writer: w, files: map[*openFile]struct{}{}}
	t.dir = newOpenDir(t, mode)
	return t, nil
}

// begin starts a change to the tree; call the returned function when it is done. A sealed
// tree refuses with EPERM (it is a sealed version now), an aborted one with ENOENT.
func (t *openTree) begin(op string) (func(), syscall.Errno) {
	t.mu.RLock()
	switch t.state {
	case treeOpen:
		return t.mu.RUnlock, 0
	case treeSealed:
		t.mu.RUnlock()
		return nil, t.m.refuse(syscall.EPERM, "%s: %s is sealed now, and sealed versions are immutable", op, t.name)
	default:
		t.mu.RUnlock()
		return nil, syscall.ENOENT
	}
}

// newStagingFile creates an empty staging file for a new file of the tree.
func (t *openTree) newStagingFile() (*os.File, error) {
	p := filepath.Join(t.disk, fmt.Sprintf("f%d", t.m.nextSeq()))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create staging file: %w", err)
	}
	return f, nil
}

func (t *openTree) track(f *openFile) {
	t.filesMu.Lock()
	t.files[f] = struct{}{}
	t.filesMu.Unlock()
}

func (t *openTree) untrack(f *openFile) {
	t.filesMu.Lock()
	delete(t.files, f)
	t.filesMu.Unlock()
}

// seal writes every file and directory of the tree into the store as version number and
// seals it; it returns only once the store says the version is durable. On failure the tree
// stays open and writable, and the next seal starts over with a fresh writer.
func (t *openTree) seal(number uint64) (store.VersionInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.state {
	case treeSealed:
		return store.VersionInfo{}, errAlreadySealed
	case treeAborted:
		return store.VersionInfo{}, fmt.Errorf("seal %s: the tree was removed", t.name)
	}
	w := t.writer
	t.writer = nil
	if w == nil {
		var err error
		if w, err = t.m.b.NewVersion(number); err != nil {
			return store.VersionInfo{}, fmt.Errorf("open version %d in the store: %w", number, err)
		}
		tuneWriter(w)
	}
	info, err := t.writeTo(w)
	if err != nil {
		// A writer that can start over keeps what the files' streams stored (their bytes
		// are nowhere else); another is dropped, and the next seal starts afresh.
		if number == t.number {
			if rerr := w.Reset(); rerr == nil {
				t.writer = w
				return store.VersionInfo{}, err
			}
		}
		if aerr := w.Abort(); aerr != nil {
			t.m.log.Warn("abort after a failed seal", "version", number, "err", aerr)
		}
		return store.VersionInfo{}, err
	}
	t.state, t.sealedAs = treeSealed, number
	t.filesMu.Lock()
	for f := range t.files {
		f.markStored(number)
	}
	t.filesMu.Unlock()
	t.markSealedPaths()
	t.releaseStaging()
	return info, nil
}

func (t *openTree) writeTo(w VersionWriter) (store.VersionInfo, error) {
	if err := t.checkNotEmpty(); err != nil {
		return store.VersionInfo{}, err
	}
	if err := t.checkFailedWrites(); err != nil {
		return store.VersionInfo{}, err
	}
	var walkErr error
	t.walk(t.dir.EmbeddedInode(), "", func(p string, n *gofs.Inode) {
		if walkErr != nil {
			return
		}
		switch node := n.Operations().(type) {
		case *openDir:
			if err := w.AddDir(p, iofs.ModeDir|iofs.FileMode(node.perm())); err != nil {
				walkErr = fmt.Errorf("add directory %s: %w", p, err)
			}
		case *openFile:
			if p == doneName {
				node.skipAsMarker() // the seal marker is not part of the version
				return
			}
			if err := node.addTo(w, p); err != nil {
				walkErr = fmt.Errorf("add file %s: %w", p, err)
			}
		}
	})
	if walkErr != nil {
		return store.VersionInfo{}, walkErr
	}
	info, err := w.Seal()
	if err != nil {
		return store.VersionInfo{}, fmt.Errorf("seal: %w", err)
	}
	return info, nil
}

// walk visits every node below n (parents before children, names in byte order) with its
// slash path relative to the tree.
func (t *openTree) walk(n *gofs.Inode, prefix string, visit func(p string, n *gofs.Inode)) {
	children := n.Children()
	names := make([]string, 0, len(children))
	for name := range children {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := name
		if prefix != "" {
			p = prefix + "/" + name
		}
		ch := children[name]
		visit(p, ch)
		if ch.IsDir() {
			t.walk(ch, p, visit)
		}
	}
}

// markSealedPaths tells every directory of the tree where it sits in the sealed version, so
// that one still in use (a working directory, a path cached by the kernel) serves the sealed
// version's entries. Caller holds t.mu.
func (t *openTree) markSealedPaths() {
	t.dir.setSealedPath("")
	t.walk(t.dir.EmbeddedInode(), "", func(p string, n *gofs.Inode) {
		if d, ok := n.Operations().(*openDir); ok {
			d.setSealedPath(p)
		}
	})
}

// releaseStaging unlinks every staging file (open descriptors keep reading until released)
// and lets go-fuse drop the tree's inodes once the kernel forgets them. Caller holds t.mu.
func (t *openTree) releaseStaging() {
	t.filesMu.Lock()
	files := make([]*openFile, 0, len(t.files))
	for f := range t.files {
		files = append(files, f)
	}
	t.files = map[*openFile]struct{}{}
	t.filesMu.Unlock()
	for _, f := range files {
		f.detach()
	}
	t.releaseNodes()
	if err := os.RemoveAll(t.disk); err != nil {
		t.m.log.Warn("remove staging directory", "dir", t.disk, "err", err)
	}
}

// abortIfEmpty drops an empty tree (rmdir at the root). The check and the drop happen under
// one lock, so a file created meanwhile is never lost.
func (t *openTree) abortIfEmpty() syscall.Errno {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ch := range t.dir.Children() {
		if _, note := ch.Operations().(*refusedFile); !note {
			return syscall.ENOTEMPTY
		}
	}
	t.abortLocked(false)
	return 0
}

// abort drops the tree and its writer. With force (unmount), staging files are closed even
// if the kernel still has them open: nobody will read them again.
func (t *openTree) abort(force bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.abortLocked(force)
}

func (t *openTree) abortLocked(force bool) {
	if t.state != treeOpen {
		return
	}
	t.state = treeAborted
	if t.writer != nil {
		if err := t.writer.Abort(); err != nil {
			t.m.log.Warn("abort open version", "version", t.number, "err", err)
		}
		t.writer = nil
	}
	t.filesMu.Lock()
	files := t.files
	t.files = map[*openFile]struct{}{}
	t.filesMu.Unlock()
	for f := range files {
		f.detach()
		if force {
			f.closeNow()
		}
	}
	t.releaseNodes()
	if err := os.RemoveAll(t.disk); err != nil {
		t.m.log.Warn("remove staging directory", "dir", t.disk, "err", err)
	}
}

// releaseNodes drops the persistence of every inode of the tree, children first, so go-fuse
// frees each one as soon as the kernel has forgotten it.
func (t *openTree) releaseNodes() {
	var nodes []*gofs.Inode
	t.walk(t.dir.EmbeddedInode(), "", func(_ string, n *gofs.Inode) { nodes = append(nodes, n) })
	for i := len(nodes) - 1; i >= 0; i-- {
		nodes[i].ForgetPersistent()
	}
	t.dir.ForgetPersistent()
}
