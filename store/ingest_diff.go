package store

import (
	"fmt"
	"slices"

	"github.com/weightfs/weightfs/delta"
)

// Diff statuses of rows that are not a plain count of changed elements.
const (
	DiffAdded    = "added"    // only in b: every element counts as changed
	DiffRemoved  = "removed"  // only in a: every element counts as changed
	DiffReshaped = "reshaped" // dtype or shape differ: every element counts as changed
	DiffReplaced = "replaced" // a non-safetensors file whose bytes differ
)

// TensorDiff is one row of Diff: a tensor of a safetensors file, or a whole other file
// (Tensor empty; Elements is its size in bytes, Changed that size when it differs at all).
type TensorDiff struct {
	File     string
	Tensor   string
	DType    delta.DType // of b (of a if removed)
	Shape    []int64
	Elements int64
	Changed  int64
	// Status is empty when Changed counts the elements that differ between two tensors of the
	// same dtype and shape (0: unchanged); otherwise one of the Diff* constants.
	Status string
}

// TensorInfo describes one tensor of a sealed version's safetensors file.
type TensorInfo struct {
	Name     string
	DType    delta.DType
	Shape    []int64
	Offset   int64 // of its first byte in the file
	Size     int64 // bytes
	Elements int64
	ID       ID // SHA-256 of its bytes
	// Base is the tensor of the previous version it was diffed against (zero: none) and
	// Changed the elements that differ from it (all of them without a base).
	Base    ID
	Changed int64
}

// Tensors lists the tensors of a safetensors file of version v in file order (nil for
// another kind of file).
func (s *Store) Tensors(v uint64, path string) ([]TensorInfo, error) {
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		return nil, err
	}
	f := ver.files[path]
	if f == nil {
		return nil, fmt.Errorf("%s in version %d: %w", path, v, ErrNoSuchFile)
	}
	out := make([]TensorInfo, 0, len(f.Tensors))
	for _, t := range f.Tensors {
		out = append(out, TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Offset: f.HeaderLen + t.Begin,
			Size: t.End - t.Begin, Elements: t.Elements(), ID: t.ID, Base: t.Base, Changed: t.Changed})
	}
	return out, nil
}

// Diff counts, per tensor, the elements that differ between versions a and b (any two, in
// either order). Rows come in b's file and tensor order, then what only a has.
func (s *Store) Diff(a, b uint64) ([]TensorDiff, error) {
	va, err := s.versions.sealedVersion(a)
	if err != nil {
		return nil, err
	}
	vb, err := s.versions.sealedVersion(b)
	if err != nil {
		return nil, err
	}
	var out []TensorDiff
	for i := range vb.m.Files {
		fb := &vb.m.Files[i]
		fa := va.files[fb.Path]
		rows, err := s.ingest.diffFile(va, vb, fa, fb)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	for i := range va.m.Files {
		fa := &va.m.Files[i]
		if vb.files[fa.Path] != nil {
			continue
		}
		if fa.Kind == kindBlob {
			out = append(out, TensorDiff{File: fa.Path, Elements: fa.Size, Changed: fa.Size, Status: DiffRemoved})
			continue
		}
		for _, t := range fa.Tensors {
			out = append(out, TensorDiff{File: fa.Path, Tensor: t.Name, DType: t.DType, Shape: t.Shape, Elements: t.Elements(), Changed: t.Elements(), Status: DiffRemoved})
		}
	}
	return out, nil
}

func (in *ingester) diffFile(va, vb *version, fa, fb *manifestFile) ([]TensorDiff, error) {
	if fb.Kind == kindBlob || (fa != nil && fa.Kind == kindBlob) {
		row := TensorDiff{File: fb.Path, Elements: fb.Size}
		switch {
		case fa == nil:
			row.Status, row.Changed = DiffAdded, fb.Size
		case fa.SHA256 == fb.SHA256:
		default:
			row.Status, row.Changed = DiffReplaced, fb.Size
		}
		rows := []TensorDiff{row}
		if fa != nil && fa.Kind == kindSafetensors {
			for _, t := range fa.Tensors {
				rows = append(rows, TensorDiff{File: fa.Path, Tensor: t.Name, DType: t.DType, Shape: t.Shape, Elements: t.Elements(), Changed: t.Elements(), Status: DiffRemoved})
			}
		}
		if fb.Kind == kindSafetensors {
			rows = rows[1:]
			for _, t := range fb.Tensors {
				rows = append(rows, TensorDiff{File: fb.Path, Tensor: t.Name, DType: t.DType, Shape: t.Shape, Elements: t.Elements(), Changed: t.Elements(), Status: DiffAdded})
			}
		}
		return rows, nil
	}
	var rows []TensorDiff
	seen := map[string]bool{}
	for j := range fb.Tensors {
		tb := &fb.Tensors[j]
		seen[tb.Name] = true
		row := TensorDiff{File: fb.Path, Tensor: tb.Name, DType: tb.DType, Shape: tb.Shape, Elements: tb.Elements()}
		var ta *manifestTensor
		if fa != nil {
			ta = va.tensorIn(fa, tb.Name)
		}
		switch {
		case ta == nil:
			row.Status, row.Changed = DiffAdded, row.Elements
		case ta.DType != tb.DType || !sameShape(ta.Shape, tb.Shape):
			row.Status, row.Changed = DiffReshaped, row.Elements
		case ta.ID == tb.ID:
		default:
			n, err := in.countChanged(ta, tb, objHint{path: fa.Path, tensor: ta.Name}, objHint{path: fb.Path, tensor: tb.Name})
			if err != nil {
				return nil, fmt.Errorf("diff %s %s: %w", fb.Path, tb.Name, err)
			}
			row.Changed = n
		}
		rows = append(rows, row)
	}
	if fa != nil {
		for _, t := range fa.Tensors {
			if !seen[t.Name] {
				rows = append(rows, TensorDiff{File: fa.Path, Tensor: t.Name, DType: t.DType, Shape: t.Shape, Elements: t.Elements(), Changed: t.Elements(), Status: DiffRemoved})
			}
		}
	}
	return rows, nil
}

// countChanged counts differing elements of two tensors of equal dtype and shape: from the
// delta object when one is the other's direct delta, else by comparing their bytes.
func (in *ingester) countChanged(ta, tb *manifestTensor, ha, hb objHint) (int64, error) {
	for _, pair := range [][2]ID{{tb.ID, ta.ID}, {ta.ID, tb.ID}} {
		if m, err := in.st.objects.meta(pair[0]); err == nil && m.DeltaLen > 0 && m.Base == pair[1] {
			d, err := in.st.objects.loadDelta(pair[0])
			if err != nil {
				return 0, err
			}
			return d.info.Changed, nil
		}
	}
	var n int64
	err := in.compareObjects(ta.ID, tb.ID, ha, hb, tb.End-tb.Begin, tb.DType.Size(), func(first int64, c *delta.Changes) error {
		n += int64(len(c.Index))
		return nil
	})
	return n, err
}

// diffPages diffs the same page of objects a and b into ch.
func (in *ingester) diffPages(a, b ID, pa, pb []byte, width int, ch *delta.Changes) error {
	if len(pa) != len(pb) {
		return fmt.Errorf("objects %s and %s differ in size: %w", a, b, ErrCorrupt)
	}
	if err := in.diff.Diff(pa, pb, width, ch); err != nil {
		return fmt.Errorf("diff (%s): %w", in.diff.Name(), err)
	}
	return nil
}

// compareObjects reads two objects of equal size page by page and calls fn with the changed
// elements of each page (indices relative to element first).
func (in *ingester) compareObjects(a, b ID, ha, hb objHint, size int64, width int, fn func(first int64, c *delta.Changes) error) error {
	var ch delta.Changes
	for off := int64(0); off < size; off += pageSize {
		pa, err := in.st.objects.page(a, ha, off/pageSize, readOpts{})
		if err != nil {
			return err
		}
		pb, err := in.st.objects.page(b, hb, off/pageSize, readOpts{})
		if err != nil {
			pa.release()
			return err
		}
		ch.Reset()
		err = in.diffPages(a, b, pa.b, pb.b, width, &ch)
		pa.release()
		pb.release()
		if err != nil {
			return err
		}
		if len(ch.Index) > 0 {
			if err := fn(off/int64(width), &ch); err != nil {
				return err
			}
		}
	}
	return nil
}

// TensorChanges streams the elements of tensor name in file path that differ from version a
// to version b (same dtype and shape in both): fn gets, page by page, the indices relative to
// element first and the new values (b's). It is what a sparse patch from a to b holds.
func (s *Store) TensorChanges(a, b uint64, path, name string, fn func(first int64, c *delta.Changes) error) error {
	va, err := s.versions.sealedVersion(a)
	if err != nil {
		return err
	}
	vb, err := s.versions.sealedVersion(b)
	if err != nil {
		return err
	}
	h := objHint{path: path, tensor: name}
	ta, tb := findTensor(va, path, name), findTensor(vb, path, name)
	if ta == nil || tb == nil {
		return fmt.Errorf("tensor %s of %s in versions %d and %d: %w", name, path, a, b, ErrNoSuchFile)
	}
	if ta.DType != tb.DType || !sameShape(ta.Shape, tb.Shape) {
		return fmt.Errorf("tensor %s of %s: dtype or shape differ between versions %d and %d", name, path, a, b)
	}
	if ta.ID == tb.ID {
		return nil
	}
	return s.ingest.compareObjects(ta.ID, tb.ID, h, h, tb.End-tb.Begin, tb.DType.Size(), fn)
}

func findTensor(ver *version, path, name string) *manifestTensor {
	f := ver.files[path]
	if f == nil {
		return nil
	}
	return ver.tensorIn(f, name)
}
