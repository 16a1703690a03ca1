package store

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// gapsOf is patch rewritten in the leb128_gaps index encoding (docs/format.md Part III §2,
// "Index encodings"), as a trainer's writer sends it.
func gapsOf(t *testing.T, patch []byte) []byte {
	t.Helper()
	p, err := delta.OpenPatch(bytes.NewReader(patch), int64(len(patch)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := delta.RewriteGaps(p)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestCommitPatchGaps: a patch whose indices are gap-coded seals, by the fast path and by the
// reference path, the version a full ingest seals (manifest, stats, bytes), and the version
// serves its patch raw, byte for byte the store's own render; a malformed stream is refused
// like any bad patch (ErrBadPatch naming the tensor, nothing sealed).
func TestCommitPatchGaps(t *testing.T) {
	v1, v2 := patchVersions(t)
	a, raw := renderedPatch(t, v1, v2)
	g := gapsOf(t, raw)
	if len(g) >= len(raw) {
		t.Fatalf("gap patch %d bytes, raw %d", len(g), len(raw))
	}
	for _, reference := range []bool{false, true} {
		s, _ := newStore(t, Options{})
		s.ingest.patchReference = reference
		commitTree(t, s, 1, v1)
		gp, err := delta.OpenPatch(bytes.NewReader(g), int64(len(g)))
		if err != nil {
			t.Fatal(err)
		}
		c := slices.IndexFunc(gp.Plan.Tensors, func(pt delta.PatchTensor) bool { return pt.Name == "c" })
		e, ok := gp.Header.Tensor("c.gaps")
		if c < 0 || !ok || gp.Plan.Tensors[c].Changed < 5000 {
			t.Fatalf("the test's patch has no dense tensor c: %+v", gp.Plan.Tensors)
		}
		at := gp.Header.DataStart() + e.Begin
		end := gp.Header.DataStart() + e.End
		overlong, past, merged := slices.Clone(g), slices.Clone(g), slices.Clone(g)
		overlong[at], overlong[at+1] = 0x80, 0x00
		past[end-1] = 0x7f // c's last change is near its end (half its elements change)
		merged[at] |= 0x80 // two varints become one: one index fewer than the values
		for _, bad := range []struct {
			name  string
			patch []byte
			says  string
		}{{"overlong", overlong, "overlong varint"}, {"past the end", past, "runs past the tensor's 20000 elements"},
			{"one fewer", merged, `tensor "c"`}} {
			_, err := s.CommitPatch(bytes.NewReader(bad.patch), int64(len(bad.patch)), 2)
			if !errors.Is(err, ErrBadPatch) || !strings.Contains(err.Error(), `tensor "c"`) || !strings.Contains(err.Error(), bad.says) {
				t.Fatalf("%s: got %v, want ErrBadPatch about tensor c saying %q", bad.name, err, bad.says)
			}
			if latest, _ := s.Latest(); latest != 1 {
				t.Fatalf("%s: latest %d after a refusal", bad.name, latest)
			}
		}
		before := s.ingest.patchFast.Load()
		info, err := s.CommitPatch(bytes.NewReader(g), int64(len(g)), 2)
		if err != nil {
			t.Fatal(err)
		}
		if fast := s.ingest.patchFast.Load() - before; (fast == 0) != reference {
			t.Errorf("reference %v: the fast path made %d files", reference, fast)
		}
		want, _ := a.Version(2)
		if info.StoredBytes != want.StoredBytes || info.ChangedElems != want.ChangedElems {
			t.Fatalf("sealed %+v, a full ingest sealed %+v", info, want)
		}
		ma, mb := manifestOf(t, a, 2), manifestOf(t, s, 2)
		if !reflect.DeepEqual(ma.Files, mb.Files) || ma.Stats != mb.Stats {
			t.Fatalf("manifest differs from the full ingest's")
		}
		for p, content := range v2 {
			mustEqualBytes(t, p, readWhole(t, s, 2, p), content)
		}
		var again bytes.Buffer
		if _, err := s.WritePatch(2, &writerAtBuffer{&again}); err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, "the served patch", again.Bytes(), raw)
	}
}
