package fs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/weightfs/weightfs/store"
)

// errBadManifest marks an entry list from the store that cannot be a directory tree.
var errBadManifest = errors.New("entry list is not a tree")

// versionIndex is the immutable directory tree of one sealed version.
type versionIndex struct {
	number   uint64
	created  time.Time
	entries  map[string]*store.Entry // by slash path; "" is the version's top directory
	children map[string][]string     // directory path -> child names, sorted
}

// buildIndex checks the store's entry list and turns it into a tree. Directories that only
// appear as parents of other entries are made up with mode 0755.
func buildIndex(info store.VersionInfo, list []store.Entry) (*versionIndex, error) {
	idx := &versionIndex{
		number:   info.Number,
		created:  info.Created,
		entries:  map[string]*store.Entry{"": {Path: "", Dir: true, Mode: iofs.ModeDir | 0o755}},
		children: map[string][]string{"": nil},
	}
	for i := range list {
		e := list[i]
		if e.Dir && (e.Path == "" || e.Path == ".") {
			continue // the top directory itself
		}
		if err := checkEntryPath(e.Path); err != nil {
			return nil, fmt.Errorf("version %d: %w: %v", info.Number, errBadManifest, err)
		}
		if !e.Dir && e.Size < 0 {
			return nil, fmt.Errorf("version %d: %w: %s has size %d", info.Number, errBadManifest, e.Path, e.Size)
		}
		if err := idx.add(&e); err != nil {
			return nil, fmt.Errorf("version %d: %w: %v", info.Number, errBadManifest, err)
		}
	}
	for _, names := range idx.children {
		sort.Strings(names)
	}
	return idx, nil
}

func (idx *versionIndex) add(e *store.Entry) error {
	if prev, ok := idx.entries[e.Path]; ok {
		if prev.Dir && e.Dir {
			prev.Mode = e.Mode // an explicit entry beats a made-up parent
			return nil
		}
		return fmt.Errorf("%s listed twice", e.Path)
	}
	parent, name := splitPath(e.Path)
	if err := idx.ensureDir(parent); err != nil {
		return err
	}
	idx.entries[e.Path] = e
	idx.children[parent] = append(idx.children[parent], name)
	if e.Dir {
		if _, ok := idx.children[e.Path]; !ok {
			idx.children[e.Path] = nil
		}
	}
	return nil
}

// ensureDir makes sure directory p exists in the index, creating it and its parents.
func (idx *versionIndex) ensureDir(p string) error {
	if e, ok := idx.entries[p]; ok {
		if !e.Dir {
			return fmt.Errorf("%s is a file but has entries below it", p)
		}
		return nil
	}
	return idx.add(&store.Entry{Path: p, Dir: true, Mode: iofs.ModeDir | 0o755})
}

// lookup finds the child name of directory dir.
func (idx *versionIndex) lookup(dir, name string) (*store.Entry, bool) {
	p := name
	if dir != "" {
		p = dir + "/" + name
	}
	e, ok := idx.entries[p]
	return e, ok
}

func splitPath(p string) (parent, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// checkEntryPath accepts clean, relative, slash-separated paths only.
func checkEntryPath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if path.Clean(p) != p || strings.HasPrefix(p, "/") || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("path %q is not clean and relative", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "." || part == ".." || part == "" {
			return fmt.Errorf("path %q has a %q component", p, part)
		}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %q holds a NUL byte", p)
	}
	return nil
}

// permOf is the permission bits to show for an entry, with defaults for a zero mode.
func permOf(e *store.Entry) uint32 {
	perm := uint32(e.Mode.Perm())
	if perm == 0 {
		if e.Dir {
			return 0o755
		}
		return 0o644
	}
	return perm
}
