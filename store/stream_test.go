package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// streamSeries returns versions of a tree that take every path of ingest: tensors spanning
// several chunks that change a little (deltas) or a lot (whole copies), a tensor whose dtype
// changes, a new tensor, zero-length tensors, the same tensor name in two files, and files
// that are not safetensors, or only look like it (malformed, too long, too short, tiny,
// empty).
func streamSeries(t testing.TB, n int, seed uint64) []map[string][]byte {
	rng := rand.New(rand.NewPCG(seed, 99))
	big := bf16Like(rng, 2_100_017) // 4.2 MB: crosses a 4 MiB chunk
	small := bf16Like(rng, 3000)
	shared := randomBytes(rng, 4*1000)
	ints := randomBytes(rng, 4*257)
	tiny := randomBytes(rng, 4*16) // its deltas soon add up to its size: an anchor at the end
	var out []map[string][]byte
	for v := 0; v < n; v++ {
		if v > 0 {
			big = perturb(rng, big, 2, 0.01)
			shared = perturb(rng, shared, 4, 0.02)
			tiny = append([]byte(nil), tiny...)
			tiny[4*(v%16)]++
			if v%3 == 0 {
				small = perturb(rng, small, 2, 0.4) // more than an eighth: a whole copy
			} else {
				small = perturb(rng, small, 2, 0.001)
			}
		}
		smallType := delta.DTypeBF16
		smallShape := []int64{3000}
		if v >= 2 {
			smallType, smallShape = delta.DTypeF16, []int64{3000} // dtype changed: no base
		}
		tensors := []testTensor{
			{"big", delta.DTypeBF16, []int64{2_100_017}, big},
			{"small", smallType, smallShape, small},
			{"empty", delta.DTypeF32, []int64{0, 4}, nil},
			{"ints", delta.DTypeI32, []int64{257}, ints},
			{"tiny", delta.DTypeF32, []int64{4, 4}, tiny},
		}
		if v >= 3 {
			tensors = append(tensors, testTensor{"late", delta.DTypeU8, []int64{33}, randomBytes(rng, 33)})
		}
		model := safetensorsFile(t, tensors...)
		other := safetensorsFile(t, testTensor{"shared", delta.DTypeF32, []int64{1000}, shared},
			testTensor{"empty2", delta.DTypeBF16, []int64{0}, nil})
		files := map[string][]byte{
			"model.safetensors":     model,
			"sub/other.safetensors": other,
			"config.json":           []byte(fmt.Sprintf(`{"step": %d, "hidden": 64}`, v)),
			"bad.safetensors":       rawSafetensors(`{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 9]}}`, make([]byte, 9)),
			"trailing.safetensors":  append(append([]byte(nil), other...), 1, 2, 3),
			"short.safetensors":     model[:len(model)-1000],
			"tiny":                  []byte("tiny\n"),
			"empty":                 nil,
			"headeronly":            safetensorsFile(t),
			"weird.safetensors":     rawSafetensors(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": {"k": "v"}}`, []byte{1, 2, 3, 4}),
			"junk.bin":              randomBytes(rng, 1<<20+3), // more than a chunk: the spill path
		}
		out = append(out, files)
	}
	return out
}

// streamWrites feeds b to st in writes of random sizes.
func streamWrites(t testing.TB, rng *rand.Rand, st *FileStream, b []byte) {
	t.Helper()
	for len(b) > 0 {
		n := 1 + rng.IntN(300_000)
		switch rng.IntN(10) {
		case 0:
			n = 1 + rng.IntN(9)
		case 1:
			n = 5 << 20
		}
		n = min(n, len(b))
		if got, err := st.Write(b[:n]); err != nil || got != n {
			t.Fatalf("stream write of %d bytes: %d, %v", n, got, err)
		}
		b = b[n:]
	}
}

func sortedPaths(files map[string][]byte) []string {
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// sealBatch seals files as version v through AddFile.
func sealBatch(t testing.TB, s *Store, v uint64, files map[string][]byte) {
	t.Helper()
	w, err := s.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sortedPaths(files) {
		if err := w.AddFile(p, bytes.NewReader(files[p]), int64(len(files[p])), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
}

// sealStreamed seals files as version v through streams (several at once).
func sealStreamed(t testing.TB, s *Store, v uint64, files map[string][]byte, rng *rand.Rand) {
	t.Helper()
	w, err := s.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]*FileStream{}
	for _, p := range sortedPaths(files) {
		if streams[p], err = w.StreamFile(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range sortedPaths(files) {
		streamWrites(t, rng, streams[p], files[p])
		if err := streams[p].Close(); err != nil {
			t.Fatalf("close %s: %v", p, err)
		}
		if err := w.AddStream(p, streams[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
}

// manifestJSON is the manifest of version v without its creation time.
func manifestJSON(t testing.TB, s *Store, v uint64) string {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	m := *ver.m
	m.Created = time.Time{}
	m.Indexes = nil // the names of pack indexes differ from store to store
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// reachable returns the object files every manifest of s needs (names and bytes).
func reachable(t testing.TB, s *Store) map[ID][]byte {
	t.Helper()
	out := map[ID][]byte{}
	var visit func(id ID)
	visit = func(id ID) {
		if id.IsZero() || out[id] != nil {
			return
		}
		f, err := s.be.OpenObject(id)
		if err != nil {
			t.Fatalf("object %s: %v", id, err)
		}
		b := make([]byte, f.Size())
		if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		f.Close()
		out[id] = b
		h, err := parseObjectHeader(b, int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if h.Kind == kindDelta {
			visit(h.Base)
		}
	}
	for _, info := range s.Versions() {
		ver, err := s.versions.loadVersion(info.Number)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range ver.m.Files {
			visit(f.ID)
			visit(f.Header)
			for _, tt := range f.Tensors {
				visit(tt.ID)
			}
		}
	}
	return out
}

// sameStores checks that version v has the same manifest in both stores and that both keep
// the same objects, byte for byte.
func sameStores(t testing.TB, what string, a, b *Store, v uint64) {
	t.Helper()
	if ma, mb := manifestJSON(t, a, v), manifestJSON(t, b, v); ma != mb {
		t.Fatalf("%s: manifests of version %d differ:\nbatch:  %s\nstream: %s", what, v, ma, mb)
	}
	ra, rb := reachable(t, a), reachable(t, b)
	for id, fa := range ra {
		if fb, ok := rb[id]; !ok {
			t.Errorf("%s: object %s only in the batch store", what, id)
		} else if !bytes.Equal(fa, fb) {
			t.Errorf("%s: object %s differs (%d and %d bytes)", what, id, len(fa), len(fb))
		}
	}
	for id := range rb {
		if ra[id] == nil {
			t.Errorf("%s: object %s only in the streamed store", what, id)
		}
	}
}

// TestStreamMatchesBatch ingests the same versions through AddFile and through streams fed
// in random pieces: every manifest and every object must be the same. A short chain makes
// anchors (whole copies with links) of the changing tensors. Both pipelines are run: the
// file's and the tensors' SHA-256 on one hasher (sha256x2) and on two.
func TestStreamMatchesBatch(t *testing.T) {
	for _, one := range []bool{true, false} {
		t.Run(fmt.Sprintf("one hasher %v", one), func(t *testing.T) {
			streamMatchesBatch(t, one)
		})
	}
}

// seriesTookEveryKind fails t unless the objects s's versions reach include a delta, an anchor
// with its link and a whole object: a series that tests the ways of storing a tensor took them
// all. It returns the count of each.
func seriesTookEveryKind(t *testing.T, s *Store) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	for _, file := range reachable(t, s) {
		h, _ := parseObjectHeader(file, int64(len(file)))
		switch {
		case h.Kind == kindDelta:
			kinds["delta"]++
		case h.DeltaLen > 0:
			kinds["anchor with link"]++
		default:
			kinds["whole"]++
		}
	}
	for _, k := range []string{"delta", "anchor with link", "whole"} {
		if kinds[k] == 0 {
			t.Errorf("no %s object in the series: %v", k, kinds)
		}
	}
	return kinds
}

func streamMatchesBatch(t *testing.T, oneHasher bool) {
	b := streamAndBatch(t, streamSeries(t, 6, 1), 5, func(s *Store) { s.ingest.hashInOnePass = oneHasher })
	// The series took every way of storing a tensor.
	seriesTookEveryKind(t, b)
}

// streamAndBatch seals the versions into two stores, through the batch path and streamed in
// random writes, calling before (if not nil) with each store before each version, and
// requires the same versions and objects; it returns the streamed store, verified.
func streamAndBatch(t *testing.T, versions []map[string][]byte, seed uint64, before func(*Store)) *Store {
	t.Helper()
	opts := Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})}
	a, _ := newStore(t, opts)
	b, _ := newStore(t, opts)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i, files := range versions {
		v := uint64(i + 1)
		if before != nil {
			before(a)
		}
		sealBatch(t, a, v, files)
		if before != nil {
			before(b)
		}
		sealStreamed(t, b, v, files, rng)
		sameStores(t, fmt.Sprintf("v%d", v), a, b, v)
	}
	if _, err := b.Verify(nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStreamClassifiesLikeBatch pins the classification of the series' odd files.
func TestStreamClassifiesLikeBatch(t *testing.T) {
	files := streamSeries(t, 1, 3)[0]
	var rebuilt []string
	s, _ := newStore(t, Options{Logger: logtest.New(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); strings.Contains(msg, "rebuilt") {
			rebuilt = append(rebuilt, msg)
		}
	})})
	sealStreamed(t, s, 1, files, rand.New(rand.NewPCG(1, 1)))
	// The first version's copy is made of the files as they were streamed.
	if err := s.mat.ensure(); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("(%d of %d files as streamed)", len(files), len(files)); len(rebuilt) != 1 || !strings.Contains(rebuilt[0], want) {
		t.Errorf("rebuild said %q, want %q", rebuilt, want)
	}
	for p, data := range files {
		mustEqualBytes(t, "materialized "+p, readMaterialized(t, s, p), data)
	}
	ver, err := s.versions.loadVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"model.safetensors": kindSafetensors, "sub/other.safetensors": kindSafetensors,
		"headeronly": kindSafetensors, "weird.safetensors": kindSafetensors,
		"config.json": kindBlob, "bad.safetensors": kindBlob, "trailing.safetensors": kindBlob,
		"short.safetensors": kindBlob, "tiny": kindBlob, "empty": kindBlob, "junk.bin": kindBlob,
	} {
		if f := ver.files[p]; f == nil || f.Kind != want {
			t.Errorf("%s: stored as %v, want %s", p, f, want)
		}
		mustEqualBytes(t, p, readWhole(t, s, 1, p), files[p])
	}
}
