package store

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/delta"
)

// version is a parsed manifest with lookups. The tensor lookups are built on first use
// (ingest's base lookups and the read path's hints need them; most readers of a version never
// do), once per version, and cost one map entry per tensor: a lookup is then O(1), so
// finding the base of every tensor of a new version is linear in its tensors (a scan of the
// file's tensors per lookup made a commit of 10^5 tensors over 10^5 take 46 s).
type version struct {
	m     *manifest
	files map[string]*manifestFile

	localOnce sync.Once
	local     map[fileTensor]*manifestTensor // (file, tensor name) -> the tensor
	anyOnce   sync.Once
	anyFile   map[string]tensorRef // name, dtype and shape -> the first such tensor in file order

	probes atomic.Int64 // map entries findBase looked at (tests: the lookup is linear)
}

type tensorRef struct {
	file   *manifestFile
	tensor *manifestTensor
}

type fileTensor struct {
	file *manifestFile
	name string
}

func newVersion(m *manifest) *version {
	ver := &version{m: m, files: make(map[string]*manifestFile, len(m.Files))}
	for i := range m.Files {
		f := &m.Files[i]
		ver.files[f.Path] = f
	}
	return ver
}

// tensors returns how many tensors the version has (its memory is about proportional).
func (ver *version) tensors() int {
	n := 0
	for i := range ver.m.Files {
		n += len(ver.m.Files[i].Tensors)
	}
	return n
}

// tensorIn returns the tensor of that name in file f (the first, should a damaged manifest
// name one twice).
func (ver *version) tensorIn(f *manifestFile, name string) *manifestTensor {
	ver.localOnce.Do(func() {
		ver.local = make(map[fileTensor]*manifestTensor, ver.tensors())
		for i := range ver.m.Files {
			f := &ver.m.Files[i]
			for j := range f.Tensors {
				k := fileTensor{f, f.Tensors[j].Name}
				if ver.local[k] == nil {
					ver.local[k] = &f.Tensors[j]
				}
			}
		}
	})
	ver.probes.Add(1)
	return ver.local[fileTensor{f, name}]
}

// shapeKey identifies a tensor by name, dtype and shape.
func shapeKey(name string, dtype delta.DType, shape []int64) string {
	b := make([]byte, 0, len(name)+len(dtype)+2+8*len(shape))
	b = append(b, name...)
	b = append(b, 0)
	b = append(b, dtype...)
	b = append(b, 0)
	for _, d := range shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
	}
	return string(b)
}

// findBase returns the tensor of this version a new tensor is diffed against: the tensor of
// that name, dtype and shape in the same file, else in any file (the first in file order).
func (ver *version) findBase(path, name string, dtype delta.DType, shape []int64) (tensorRef, bool) {
	if f := ver.files[path]; f != nil {
		if t := ver.tensorIn(f, name); t != nil && t.DType == dtype && sameShape(t.Shape, shape) {
			return tensorRef{f, t}, true
		}
	}
	// Another file (a checkpoint resharded, a file renamed): built only when first needed.
	ver.anyOnce.Do(func() {
		ver.anyFile = map[string]tensorRef{}
		for i := range ver.m.Files {
			f := &ver.m.Files[i]
			for j := range f.Tensors {
				t := &f.Tensors[j]
				k := shapeKey(t.Name, t.DType, t.Shape)
				if _, ok := ver.anyFile[k]; !ok {
					ver.anyFile[k] = tensorRef{f, t}
				}
			}
		}
	})
	ver.probes.Add(1)
	ref, ok := ver.anyFile[shapeKey(name, dtype, shape)]
	return ref, ok
}

// duplicateName returns a tensor name that two files of the version share, and the two files
// ("" when every name is in one file only).
func (ver *version) duplicateName() (name, fileA, fileB string) {
	seen := make(map[string]*manifestFile, ver.tensors())
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		for j := range f.Tensors {
			t := &f.Tensors[j]
			if g := seen[t.Name]; g != nil {
				return t.Name, g.Path, f.Path
			}
			seen[t.Name] = f
		}
	}
	return "", "", ""
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
	if t := ver.tensorIn(f, h.tensor); t != nil {
		return t.ID, true
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

// sealedVersion is loadVersion for a version the store lists as sealed.
func (vl *versionList) sealedVersion(v uint64) (*version, error) {
	if err := vl.st.checkOpen(); err != nil {
		return nil, err
	}
	if err := vl.damagedError(v); err != nil {
		return nil, err
	}
	if !vl.isSealed(v) {
		return nil, fmt.Errorf("version %d: %w", v, ErrNoSuchVersion)
	}
	return vl.loadVersion(v)
}

// latestVersion returns the newest readable sealed version, or nil for an empty store. A
// damaged manifest found on the way is taken off the list (noteDamaged).
func (vl *versionList) latestVersion() (*version, error) {
	for {
		v, ok := vl.latest()
		if !ok {
			return nil, nil
		}
		ver, err := vl.loadVersion(v)
		if err != nil && vl.damagedError(v) != nil {
			continue
		}
		return ver, err
	}
}
