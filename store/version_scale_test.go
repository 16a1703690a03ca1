package store

import (
	"fmt"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// tinyTensorManifest is a manifest of version v: one safetensors file of n tensors of four
// BF16 elements each (the shape of the 10^6-tensor file that made commit quadratic).
func tinyTensorManifest(v uint64, n int) *manifest {
	f := manifestFile{Path: "model.safetensors", Kind: kindSafetensors, Header: ID{1}, HeaderLen: 8}
	f.Tensors = make([]manifestTensor, n)
	for i := range f.Tensors {
		f.Tensors[i] = manifestTensor{Name: fmt.Sprintf("w%d", i), DType: delta.DTypeBF16, Shape: []int64{4},
			Begin: int64(8 * i), End: int64(8*i + 8), ID: ID{byte(i), byte(i >> 8), byte(i >> 16), 2}}
	}
	f.Size = f.HeaderLen + int64(8*n)
	return &manifest{Version: v, Files: []manifestFile{f}}
}

// TestFindBaseIsLinear finds the base of each of 10^5 tensors in a version of 10^5 (what a
// commit of the next version does) and counts the tensor entries findBase looks at: a small
// constant per lookup, not a scan of the file's tensors (which made such a commit take 46 s).
func TestFindBaseIsLinear(t *testing.T) {
	const n = 100_000
	ver := newVersion(tinyTensorManifest(1, n))
	for _, path := range []string{"model.safetensors", "renamed.safetensors"} {
		ver.probes.Store(0)
		for i := range n {
			ref, ok := ver.findBase(path, fmt.Sprintf("w%d", i), delta.DTypeBF16, []int64{4})
			if !ok || ref.tensor.Name != fmt.Sprintf("w%d", i) {
				t.Fatalf("%s: base of w%d: %v %v", path, i, ref.tensor, ok)
			}
		}
		if _, ok := ver.findBase(path, "w1", delta.DTypeBF16, []int64{5}); ok {
			t.Fatalf("%s: a base of another shape was found", path)
		}
		if got, limit := ver.probes.Load(), int64(4*n); got > limit {
			t.Errorf("%s: findBase looked at %d tensor entries for %d lookups (limit %d): not linear", path, got, n, limit)
		}
	}
}

// tinyTensorFile is a safetensors file of n tensors of four BF16 elements, of which about
// one in a hundred differs from step to step.
func tinyTensorFile(t testing.TB, n, step int) []byte {
	tensors := make([]testTensor, n)
	for i := range tensors {
		data := []byte{byte(i), byte(i >> 8), byte(i >> 16), 1, 2, 3, 4, 5}
		if i%100 == 0 {
			data[7] += byte(step)
		}
		tensors[i] = testTensor{fmt.Sprintf("w%d", i), delta.DTypeBF16, []int64{4}, data}
	}
	return safetensorsFile(t, tensors...)
}

// TestVersionMemoryIsBounded counts the tensors parsed from manifests: listing the versions
// (every open, `log`) parses none, and a reader going through the files of every version
// parses each version once, however many times it opens them and even when one version alone
// is beyond the bound of parsed versions kept (it was parsed again on every open: a
// read-only mount of a 10^6-tensor version used 2.8 GB).
func TestVersionMemoryIsBounded(t *testing.T) {
	const n, versions = 2000, 3
	s, root := newStore(t, Options{})
	files := map[uint64][]byte{}
	for v := uint64(1); v <= versions; v++ {
		files[v] = tinyTensorFile(t, n, int(v))
		commitTree(t, s, v, map[string][]byte{"model.safetensors": files[v]})
	}
	r := openStore(t, root, Options{ReadOnly: true})
	if got := len(r.Versions()); got != versions {
		t.Fatalf("%d versions listed, want %d", got, versions)
	}
	if got := r.versions.manifests.decoded.Load(); got != 0 {
		t.Errorf("listing the versions parsed %d tensors, want 0", got)
	}
	// Parsed versions kept: less than one version's worth.
	r.versions.manifests = newVersionCache(1)
	for v := uint64(1); v <= versions; v++ {
		for range 10 {
			if _, err := r.Entries(v); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, fmt.Sprintf("version %d", v), readWhole(t, r, v, "model.safetensors"), files[v])
		}
	}
	if got, limit := r.versions.manifests.decoded.Load(), int64(versions*n); got > limit {
		t.Errorf("reading every version 10 times parsed %d tensors, want at most %d (each version once)", got, limit)
	}
}

// FuzzManifestSummary: the summary decoder accepts what decodeManifest accepts and agrees
// with it (it may accept more: it does not validate the files it skips).
func FuzzManifestSummary(f *testing.F) {
	for _, m := range []*manifest{tinyTensorManifest(3, 4), {Version: 7, Previous: 5, Stats: manifestStats{LogicalBytes: 9, TotalElems: 4}}} {
		b, err := encodeManifest(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, serr := decodeManifestSummary(b)
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		if serr != nil {
			t.Fatalf("decodeManifest accepts, the summary refuses: %v", serr)
		}
		if want := summarize(m); !got.Created.Equal(want.Created) || func() bool { got.Created = want.Created; return got != want }() {
			t.Fatalf("summary %+v, want %+v", got, want)
		}
	})
}

// TestMetasInMemoryAreBounded: the object metas kept in front of the index stay under
// maxMetas however many objects a process touches, and every one is still found (in the
// index).
func TestMetasInMemoryAreBounded(t *testing.T) {
	s, _ := newStore(t, Options{})
	const n = maxMetas + maxMetas/4
	id := func(i int) ID { return ID{byte(i), byte(i >> 8), byte(i >> 16), 7} }
	for i := range n {
		s.objects.putMeta(id(i), objMeta{Kind: kindFull, Width: 2, ContentLen: int64(i)})
	}
	s.objects.metaMu.Lock()
	held := len(s.objects.metas)
	s.objects.metaMu.Unlock()
	if held >= maxMetas {
		t.Errorf("%d metas held in memory after %d were put, want fewer than %d", held, n, maxMetas)
	}
	s.objects.flushMetas()
	for i := 0; i < n; i += 97 {
		if m, ok := s.objects.cachedMeta(id(i)); !ok || m.ContentLen != int64(i) {
			t.Fatalf("meta %d: %+v %v", i, m, ok)
		}
	}
}
