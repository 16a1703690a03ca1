package store

import (
	"bytes"
	"slices"
)

// sameManifest reports whether a and b encode to the same manifest bytes because they are
// the same value: the seal's round-trip check (encodeManifestChecked) uses it to skip the
// second encoding of a manifest that decodes to the manifest it was made from, the usual
// case. It may answer false for values that encode alike (the check then encodes to find
// out), never true for values that do not: every field is compared, and where the encoding
// tells a nil slice from an empty one (fields without omitempty: `null` against `[]`), so
// does the comparison. The times are compared by their JSON text, which is all of them the
// encoding keeps. TestSameManifestComparesEveryField fails when a field is added to the
// manifest's types and not here.
func sameManifest(a, b *manifest) bool {
	if a.Version != b.Version || a.Previous != b.Previous || a.Stats != b.Stats ||
		!sameJSONSlice(a.Dirs, b.Dirs) || !slices.Equal(a.Dirs, b.Dirs) || !sameJSONSlice(a.Files, b.Files) ||
		!slices.Equal(a.Indexes, b.Indexes) { // omitempty: nil and empty are both left out
		return false
	}
	ta, erra := a.Created.MarshalJSON()
	tb, errb := b.Created.MarshalJSON()
	if erra != nil || errb != nil || !bytes.Equal(ta, tb) {
		return false
	}
	for i := range a.Files {
		if !sameManifestFile(&a.Files[i], &b.Files[i]) {
			return false
		}
	}
	return true
}

// sameJSONSlice reports whether two slices without omitempty have the same length and both
// are nil or neither is (they encode as `null` or as an array); their elements are the
// caller's to compare where they are not comparable.
func sameJSONSlice[E any](a, b []E) bool {
	return len(a) == len(b) && (a == nil) == (b == nil)
}

func sameManifestFile(a, b *manifestFile) bool {
	if a.Path != b.Path || a.Mode != b.Mode || a.Size != b.Size || a.SHA256 != b.SHA256 ||
		a.Kind != b.Kind || a.ID != b.ID || a.Header != b.Header || a.HeaderLen != b.HeaderLen ||
		len(a.Tensors) != len(b.Tensors) { // omitempty: nil and empty are both left out
		return false
	}
	for i := range a.Tensors {
		x, y := &a.Tensors[i], &b.Tensors[i]
		if x.Name != y.Name || x.DType != y.DType || !sameJSONSlice(x.Shape, y.Shape) ||
			!slices.Equal(x.Shape, y.Shape) || x.Begin != y.Begin || x.End != y.End ||
			x.ID != y.ID || x.Base != y.Base || x.Changed != y.Changed || x.XXH3 != y.XXH3 {
			return false
		}
	}
	return true
}
