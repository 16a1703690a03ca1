package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weightfs/weightfs/delta"
)

// PatchSize is the size in bytes of version v's patch (the file RenderPatch renders) worked out
// from the manifests and the safetensors headers, without reading a tensor: the mount lists
// patches with their sizes long before anyone reads one. It mirrors delta.BuildPatchWith's plan:
// the same files carried sparsely or whole, the same changed counts (the store's, recorded
// against the same base tensor), and hashes of the same length. ok is false when the manifests
// cannot tell (a tensor was diffed against another base than the patch's); the size is then
// known only by rendering. Errors are those of PatchBase, or a failed header read.
func (s *Store) PatchSize(v uint64) (size int64, ok bool, err error) { return s.renders.patchSize(v) }

func (r *renders) patchSize(v uint64) (size int64, ok bool, err error) {
	cur, base, err := r.patchVersions(v)
	if err != nil {
		return 0, false, err
	}
	plan := delta.PatchPlan{ModelVersion: v, BaseVersion: base.m.Version}
	for i := range cur.m.Files {
		f := &cur.m.Files[i]
		old := base.files[f.Path]
		// What delta.planFile sees: the result's header (if its bytes parse as one), and
		// whether the base has the same size and the same header bytes.
		rh, rerr := delta.ReadHeader(r.st.newVersionFile(cur, f, readOpts{}), f.Size)
		if rerr == nil {
			for _, t := range rh.Tensors {
				plan.TotalElements += t.Elements()
			}
		}
		if old != nil && old.SHA256 == f.SHA256 && old.Size == f.Size {
			continue // unchanged: not in the patch
		}
		pf := delta.PatchFile{Name: f.Path, HasXXH3: true, ResultSHA256: f.SHA256, ResultXXH3: placeholderXXH3}
		if old != nil {
			pf.BaseSHA256, pf.BaseXXH3 = old.SHA256, placeholderXXH3
		}
		sparse := rerr == nil && old != nil && old.Size == f.Size && f.Kind == kindSafetensors &&
			old.Kind == kindSafetensors && old.HeaderLen == f.HeaderLen && f.HeaderLen == rh.DataStart()
		newHeader := sparse && old.Header != f.Header
		if newHeader && !sameTensorPlaces(old, f) {
			sparse = false // the header moved tensors: carried whole
		}
		if !sparse {
			if rerr == nil && old != nil && old.Size == f.Size && (f.Kind != kindSafetensors || old.Kind != kindSafetensors) {
				return 0, false, nil // planFile would compare header bytes the manifests do not name
			}
			pf.Whole, pf.WholeSize = true, f.Size
			plan.Files = append(plan.Files, pf)
			continue
		}
		byName := make(map[string]*manifestTensor, len(f.Tensors))
		for j := range f.Tensors {
			byName[f.Tensors[j].Name] = &f.Tensors[j]
		}
		oldByName := make(map[string]*manifestTensor, len(old.Tensors))
		for j := range old.Tensors {
			oldByName[old.Tensors[j].Name] = &old.Tensors[j]
		}
		var tensors []delta.PatchTensor
		for _, t := range rh.Tensors {
			mt, ot := byName[t.Name], oldByName[t.Name]
			switch {
			case mt == nil || ot == nil:
				return 0, false, nil
			case mt.ID == ot.ID:
				continue
			case mt.Base != ot.ID:
				return 0, false, nil // counted against another base
			}
			tensors = append(tensors, delta.PatchTensor{File: f.Path, Name: t.Name, DType: t.DType, Elements: t.Elements(), Changed: mt.Changed,
				Shape: append([]int64{}, t.Shape...)})
		}
		if newHeader {
			pf.NewHeader = make([]byte, f.HeaderLen) // only its length counts
		} else if len(tensors) == 0 {
			return 0, false, nil // the file differs but no tensor does: the manifests disagree
		}
		plan.Files = append(plan.Files, pf)
		plan.Tensors = append(plan.Tensors, tensors...)
	}
	_, size, err = delta.EncodePatchHeader(plan)
	if err != nil {
		return 0, false, fmt.Errorf("patch of version %d: %w", v, err)
	}
	return size, true, nil
}

// placeholderXXH3 stands for an xxh3-128 not computed: the patch's header holds its hex, whose
// length does not depend on the value.
var placeholderXXH3 = [16]byte{1}

// sameTensorPlaces reports whether two manifest files hold the same tensors (names, dtypes,
// shapes) at the same offsets: what delta.BuildPatchWith requires of a header-only change.
func sameTensorPlaces(a, b *manifestFile) bool {
	if len(a.Tensors) != len(b.Tensors) {
		return false
	}
	byName := make(map[string]*manifestTensor, len(a.Tensors))
	for i := range a.Tensors {
		byName[a.Tensors[i].Name] = &a.Tensors[i]
	}
	for i := range b.Tensors {
		t := &b.Tensors[i]
		o := byName[t.Name]
		if o == nil || o.DType != t.DType || o.Begin != t.Begin || o.End != t.End || !sameShape(o.Shape, t.Shape) {
			return false
		}
	}
	return true
}

// PatchNote says, from the manifests, when version v's patch is not purely sparse: which
// files it carries whole and why (a new file, not safetensors, the size or the header length
// changed, the header moved tensors), or why v has no patch (its tensor layout changed).
// "" when the patch is sparse throughout, or v is the first version. weightfs log and the
// mount's log print it, so that a whole-model patch is never a surprise.
func (s *Store) PatchNote(v uint64) string { return s.renders.patchNote(v) }

func (r *renders) patchNote(v uint64) string {
	cur, base, err := r.patchVersions(v)
	switch {
	case errors.Is(err, ErrLayoutChanged):
		return "no patch: " + strings.TrimPrefix(err.Error(), fmt.Sprintf("patch of version %d: ", v))
	case err != nil:
		return ""
	}
	var parts []string
	var bytes int64
	for i := range cur.m.Files {
		f := &cur.m.Files[i]
		old := base.files[f.Path]
		why := ""
		switch {
		case old != nil && old.SHA256 == f.SHA256 && old.Size == f.Size:
			continue
		case old == nil:
			why = "new file"
		case f.Kind != kindSafetensors || old.Kind != kindSafetensors:
			why = "not safetensors"
		case old.Size != f.Size:
			why = "file size changed"
		case old.HeaderLen != f.HeaderLen:
			why = "header length changed"
		case old.Header != f.Header && !sameTensorPlaces(old, f):
			why = "header moved tensors"
		default:
			continue // patched sparsely (a header-only change included)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", f.Path, why))
		bytes += f.Size
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("patch carries %d file(s) whole, %d bytes: %s", len(parts), bytes, strings.Join(parts, ", "))
}
