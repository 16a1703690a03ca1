package store

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/weightfs/weightfs/delta"
)

// version is a parsed manifest with lookups.
type version struct {
	m      *manifest
	files  map[string]*manifestFile
	byName map[string][]tensorRef // tensor name -> every tensor of that name, in file order
}

type tensorRef struct {
	file   *manifestFile
	tensor *manifestTensor
}

func newVersion(m *manifest) *version {
	ver := &version{m: m, files: make(map[string]*manifestFile, len(m.Files)), byName: map[string][]tensorRef{}}
	for i := range m.Files {
		f := &m.Files[i]
		ver.files[f.Path] = f
		for j := range f.Tensors {
			t := &f.Tensors[j]
			ver.byName[t.Name] = append(ver.byName[t.Name], tensorRef{f, t})
		}
	}
	return ver
}

// findBase returns the tensor of this version a new tensor is diffed against: the tensor of
// that name, dtype and shape in the same file, else in any file.
func (ver *version) findBase(path, name string, dtype delta.DType, shape []int64) (tensorRef, bool) {
	if f := ver.files[path]; f != nil {
		for j := range f.Tensors {
			t := &f.Tensors[j]
			if t.Name == name {
				if t.DType == dtype && sameShape(t.Shape, shape) {
					return tensorRef{f, t}, true
				}
				break
			}
		}
	}
	for _, ref := range ver.byName[name] {
		if ref.tensor.DType == dtype && sameShape(ref.tensor.Shape, shape) {
			return ref, true
		}
	}
	return tensorRef{}, false
}

// objectAt returns the identity this version has for the object a hint describes: the
// tensor of that name in that file, or the file's header or blob object.
func (ver *version) objectAt(h objHint) (ID, bool) {
	f := ver.files[h.path]
	if f == nil {
		return ID{}, false
	}
	switch {
	case h.header:
		return f.Header, !f.Header.IsZero()
	case h.tensor == "":
		return f.ID, !f.ID.IsZero()
	}
	for j := range f.Tensors {
		if f.Tensors[j].Name == h.tensor {
			return f.Tensors[j].ID, true
		}
	}
	return ID{}, false
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// loadVersion reads, checks and parses the manifest of version v (cached).
func (s *Store) loadVersion(v uint64) (*version, error) {
	if ver, ok := s.manifests.get(v); ok {
		return ver, nil
	}
	data, err := s.be.GetManifest(v)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("version %d: %w", v, ErrNoSuchVersion)
	}
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, s.noteDamaged(v, fmt.Errorf("manifest of version %d: %w", v, err))
	}
	if m.Version != v {
		return nil, s.noteDamaged(v, fmt.Errorf("manifest of version %d names version %d: %w", v, m.Version, ErrCorrupt))
	}
	ver := newVersion(m)
	s.manifests.add(v, ver, int64(len(data))*3)
	return ver, nil
}

// sealedVersion is loadVersion for a version the store lists as sealed.
func (s *Store) sealedVersion(v uint64) (*version, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.damagedError(v); err != nil {
		return nil, err
	}
	if !s.isSealed(v) {
		return nil, fmt.Errorf("version %d: %w", v, ErrNoSuchVersion)
	}
	return s.loadVersion(v)
}

// latestVersion returns the newest readable sealed version, or nil for an empty store. A
// damaged manifest found on the way is taken off the list (noteDamaged).
func (s *Store) latestVersion() (*version, error) {
	for {
		v, ok := s.Latest()
		if !ok {
			return nil, nil
		}
		ver, err := s.loadVersion(v)
		if err != nil && s.damagedError(v) != nil {
			continue
		}
		return ver, err
	}
}
