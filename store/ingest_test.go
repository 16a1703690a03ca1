package store

import (
	"errors"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// objectCount counts the object files of a store by kind.
func objectKinds(t testing.TB, s *Store) map[objectKind]int {
	t.Helper()
	out := map[objectKind]int{}
	err := s.be.ListObjects(func(id ID, _ int64) error {
		info, err := s.objects.objectInfoOf(id)
		if err != nil {
			return err
		}
		out[info.hdr.Kind]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tensorEntry(t testing.TB, s *Store, v uint64, path, name string) manifestTensor {
	t.Helper()
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	tt := findTensor(ver, path, name)
	if tt == nil {
		t.Fatalf("version %d has no tensor %s in %s", v, name, path)
	}
	return *tt
}

func TestUnchangedStoredOnceChangedAsDelta(t *testing.T) {
	s, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	a, b := bf16Like(rng, 50_000), bf16Like(rng, 50_000)
	file := func(a, b []byte) []byte {
		return safetensorsFile(t,
			testTensor{"a", delta.DTypeBF16, []int64{50_000}, a},
			testTensor{"b", delta.DTypeBF16, []int64{50_000}, b})
	}
	commitTree(t, s, 1, map[string][]byte{"m.safetensors": file(a, b), "config.json": []byte("{}")})
	before := objectKinds(t, s)
	if before[kindFull] != 4 || before[kindDelta] != 0 { // header, a, b, config.json
		t.Fatalf("after v1: %v objects, want 4 full", before)
	}
	a2 := perturb(rng, a, 2, 0.01)
	info, _ := commitTree(t, s, 2, map[string][]byte{"m.safetensors": file(a2, b), "config.json": []byte("{}")})
	after := objectKinds(t, s)
	if after[kindFull] != 4 || after[kindDelta] != 1 {
		t.Fatalf("after v2: %v objects, want 4 full and 1 delta (only a changed)", after)
	}
	ta, tb := tensorEntry(t, s, 2, "m.safetensors", "a"), tensorEntry(t, s, 2, "m.safetensors", "b")
	if ta.ID != IDOf(a2) || ta.Base != IDOf(a) || ta.Changed == 0 {
		t.Fatalf("tensor a of v2: %+v", ta)
	}
	if tb.ID != IDOf(b) || tb.Changed != 0 {
		t.Fatalf("tensor b of v2 (unchanged): %+v", tb)
	}
	if info.ChangedElems != ta.Changed || info.TotalElems != 100_000 {
		t.Fatalf("v2 stats: %+v", info)
	}
	// Committing identical content again stores nothing new.
	info3, _ := commitTree(t, s, 3, map[string][]byte{"m.safetensors": file(a2, b), "config.json": []byte("{}")})
	if info3.StoredBytes != 0 || info3.ChangedElems != 0 {
		t.Fatalf("identical version stored %d bytes, %d changed", info3.StoredBytes, info3.ChangedElems)
	}
	// A tensor moved to another file is still diffed against its old self.
	a4 := perturb(rng, a2, 2, 0.01)
	commitTree(t, s, 4, map[string][]byte{
		"m-1.safetensors": safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{50_000}, a4}),
		"m-2.safetensors": safetensorsFile(t, testTensor{"b", delta.DTypeBF16, []int64{50_000}, b}),
	})
	if ta4 := tensorEntry(t, s, 4, "m-1.safetensors", "a"); ta4.Base != IDOf(a2) {
		t.Fatalf("moved tensor not diffed against its previous self: base %s", ta4.Base)
	}
	// A changed shape or dtype is stored whole.
	commitTree(t, s, 5, map[string][]byte{
		"m-1.safetensors": safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{250, 200}, a4}),
		"m-2.safetensors": safetensorsFile(t, testTensor{"b", delta.DTypeF16, []int64{50_000}, b}),
	})
	for _, name := range []string{"a", "b"} {
		p := map[string]string{"a": "m-1.safetensors", "b": "m-2.safetensors"}[name]
		if tt := tensorEntry(t, s, 5, p, name); !tt.Base.IsZero() || tt.Changed != tt.Elements() {
			t.Fatalf("reshaped tensor %s: base %s changed %d", name, tt.Base, tt.Changed)
		}
	}
}

func TestAnchorsAtTheChainBound(t *testing.T) {
	const maxChain = 3
	s, _ := newStore(t, Options{MaxChain: maxChain})
	rng := rand.New(rand.NewPCG(9, 10))
	w := bf16Like(rng, 20_000)
	var ids []ID
	want := map[uint64][]byte{}
	for v := uint64(1); v <= 9; v++ {
		if v > 1 {
			w = perturb(rng, w, 2, 0.01)
		}
		file := safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{20_000}, w})
		want[v] = file
		commitTree(t, s, v, map[string][]byte{"m.safetensors": file})
		ids = append(ids, IDOf(w))
	}
	// v1 full; v2..v4 deltas (depth 1..3); v5 anchor; v6..v8 deltas; v9 anchor.
	wantKinds := []objectKind{kindFull, kindDelta, kindDelta, kindDelta, kindFull, kindDelta, kindDelta, kindDelta, kindFull}
	for i, id := range ids {
		m, err := s.objects.meta(id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != wantKinds[i] || m.Depth > maxChain {
			t.Errorf("v%d: %s object at depth %d, want %s", i+1, m.Kind, m.Depth, wantKinds[i])
		}
		if i == 4 && (m.Base != ids[3] || m.DeltaLen == 0) {
			t.Errorf("anchor v5 carries no link back to v4")
		}
	}
	// Every version reads back exactly from a reader without a materialized copy, whose
	// reads walk forward from an anchor or back from the next one.
	r := openStore(t, s.Root(), Options{ReadOnly: true})
	for v, file := range want {
		mustEqualBytes(t, fmt.Sprintf("v%d", v), readWhole(t, r, v, "m.safetensors"), file)
	}
	// v4 is nearer to the anchor v5 (one step back) than to v1 (three forward).
	ver, _ := r.versions.sealedVersion(4)
	f := ver.files["m.safetensors"]
	pw := planWalker{s: r.objects, cache: newPageCache(0)}
	p, _, err := pw.planFor(f.Tensors[0].ID, objHint{path: "m.safetensors", tensor: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if p.start != ids[4] || len(p.steps) != 1 || p.steps[0].dir != delta.Backward {
		t.Errorf("plan for v4 starts at %s with %d steps, want one step back from the anchor v5", p.start, len(p.steps))
	}
}

func TestAnchorWhenDeltasOutgrowTheTensor(t *testing.T) {
	s, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(11, 12))
	w := randomBytes(rng, 4000)
	commitTree(t, s, 1, map[string][]byte{"m.safetensors": safetensorsFile(t, testTensor{"w", delta.DTypeU8, []int64{4000}, w})})
	// 40% of random bytes change every version: deltas add up to the tensor's size fast.
	full := 0
	for v := uint64(2); v <= 10; v++ {
		w = perturb(rng, w, 1, 0.4)
		commitTree(t, s, v, map[string][]byte{"m.safetensors": safetensorsFile(t, testTensor{"w", delta.DTypeU8, []int64{4000}, w})})
		m, _ := s.objects.meta(IDOf(w))
		if m.Kind == kindFull {
			full++
		}
		t.Logf("v%d: %s, depth %d, chain %d bytes", v, m.Kind, m.Depth, m.ChainBytes)
		if m.Kind == kindDelta && m.ChainBytes >= 4000 {
			t.Fatalf("v%d: delta chain of %d bytes for a 4000-byte tensor", v, m.ChainBytes)
		}
	}
	if full == 0 {
		t.Fatal("no anchor although the deltas outgrew the tensor")
	}
}

func TestReadsAtRandomOffsets(t *testing.T) {
	s, _ := newStore(t, Options{MaxChain: 4})
	versions := modelVersions(t, 7, 2)
	commitAll(t, s, versions)
	r := openStore(t, s.Root(), Options{ReadOnly: true, Materialize: true})
	cold := openStore(t, s.Root(), Options{ReadOnly: true, CacheBytes: 1})
	rng := rand.New(rand.NewPCG(13, 14))
	for _, st := range []*Store{s, r, cold} {
		for i, files := range versions {
			v := uint64(i + 1)
			for path, want := range files {
				f, err := st.OpenFile(v, path)
				if err != nil {
					t.Fatal(err)
				}
				if f.Size() != int64(len(want)) {
					t.Fatalf("v%d %s: size %d, want %d", v, path, f.Size(), len(want))
				}
				// Table: the start, page and tensor boundaries, the end.
				offsets := []int{0, 1, 7, 8, pageSize - 1, pageSize, pageSize + 1, len(want) - 1, len(want)}
				for k := 0; k < 30; k++ {
					offsets = append(offsets, rng.IntN(len(want)+1))
				}
				for _, off := range offsets {
					if off > len(want) {
						continue
					}
					n := rng.IntN(3 * pageSize)
					buf := make([]byte, n)
					got, err := f.ReadAt(buf, int64(off))
					wantN := min(n, len(want)-off)
					if got != wantN || (got < n && err == nil) || (got == n && err != nil) {
						t.Fatalf("v%d %s: ReadAt(%d bytes at %d) = %d, %v", v, path, n, off, got, err)
					}
					mustEqualBytes(t, fmt.Sprintf("v%d %s [%d:+%d]", v, path, off, n), buf[:got], want[off:off+got])
				}
				f.Close()
			}
		}
	}
	if _, err := s.OpenFile(3, "missing.bin"); !errors.Is(err, ErrNoSuchFile) {
		t.Fatalf("open of a missing file: %v", err)
	}
	if _, err := s.OpenFile(99, "config.json"); !errors.Is(err, ErrNoSuchVersion) {
		t.Fatalf("open in a missing version: %v", err)
	}
}

func TestConcurrentReads(t *testing.T) {
	s, _ := newStore(t, Options{MaxChain: 4})
	versions := modelVersions(t, 4, 3)
	commitAll(t, s, versions)
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for k := 0; k < 40; k++ {
				v := rng.IntN(len(versions))
				want := versions[v]["model.safetensors"]
				f, err := s.OpenFile(uint64(v+1), "model.safetensors")
				if err != nil {
					errs <- err
					return
				}
				off := rng.IntN(len(want))
				buf := make([]byte, min(len(want)-off, 300_000))
				if _, err := f.ReadAt(buf, int64(off)); err != nil {
					errs <- err
					return
				}
				if string(buf) != string(want[off:off+len(buf)]) {
					errs <- fmt.Errorf("goroutine %d: wrong bytes of v%d at %d", g, v+1, off)
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInputIsStoredWhole(t *testing.T) {
	good := rawSafetensors(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"b":{"dtype":"BF16","shape":[8],"data_offsets":[64,80]}}`, make([]byte, 80))
	headerPastEnd := make([]byte, 100)
	headerPastEnd[0] = 0x40
	headerPastEnd[2] = 0x0f
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		blob  bool // model.safetensors is stored as an opaque file
	}{
		{"truncated safetensors", map[string][]byte{"model.safetensors": good[:len(good)-30]}, true},
		{"header length past the end", map[string][]byte{"model.safetensors": headerPastEnd}, true},
		{"offsets past the end", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,640]}}`, make([]byte, 64))}, true},
		{"overlapping tensors", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"b":{"dtype":"F32","shape":[4,4],"data_offsets":[32,96]}}`, make([]byte, 96))}, true},
		{"invalid JSON", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"F32",`, make([]byte, 64))}, true},
		{"tiny file", map[string][]byte{"model.safetensors": []byte("abc")}, true},
		{"empty file", map[string][]byte{"model.safetensors": {}}, true},
		{"dtype and shape changed", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"BF16","shape":[32],"data_offsets":[0,64]},"b":{"dtype":"BF16","shape":[2,4],"data_offsets":[64,80]}}`, make([]byte, 80))}, false},
		{"subdirectories and other files", map[string][]byte{
			"model.safetensors": good, "config.json": []byte(`{"model_type":"llama"}`),
			"tokenizer.json": []byte(`{"version":"1.0"}`), "sub/dir/notes.txt": []byte("hello\n"), "sub/empty.bin": {},
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs []string
			s, _ := newStore(t, Options{Logger: logtest.New(func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })})
			_, base := commitTree(t, s, 1, map[string][]byte{"model.safetensors": good, "config.json": []byte("{}")})
			_, dir := commitTree(t, s, 2, tc.files)
			sameTree(t, "bad input round trip", exportHashes(t, s, 2), treeHashes(t, dir))
			sameTree(t, "v1 after bad input", exportHashes(t, s, 1), treeHashes(t, base))
			ver, _ := s.versions.sealedVersion(2)
			if got := ver.files["model.safetensors"].Kind == kindBlob; got != tc.blob {
				t.Fatalf("model.safetensors stored as blob: %v, want %v", got, tc.blob)
			}
			if tc.blob && !strings.Contains(strings.Join(logs, "\n"), "model.safetensors") {
				t.Errorf("no log line says why model.safetensors is stored whole: %q", logs)
			}
			if _, err := s.Verify(nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEmptyDirectoriesRoundTrip(t *testing.T) {
	s, _ := newStore(t, Options{})
	dir := writeTree(t, t.TempDir(), map[string][]byte{"a/b/file": []byte("x")})
	os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o755)
	os.MkdirAll(filepath.Join(dir, "a", "also-empty"), 0o755)
	if _, err := s.Commit(dir, CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "tree with empty directories", exportHashes(t, s, 1), treeHashes(t, dir))
	entries, err := s.Entries(1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s:%v", e.Path, e.Dir))
	}
	want := "a:true a/also-empty:true a/b:true a/b/file:false empty:true empty/deeper:true"
	if strings.Join(got, " ") != want {
		t.Fatalf("entries %q, want %q", strings.Join(got, " "), want)
	}
}

func TestCommitRefusals(t *testing.T) {
	s, _ := newStore(t, Options{})
	empty := t.TempDir()
	if _, err := s.Commit(empty, CommitOptions{}); !errors.Is(err, ErrEmptyVersion) {
		t.Fatalf("commit of an empty directory: %v", err)
	}
	os.MkdirAll(filepath.Join(empty, "only", "dirs"), 0o755)
	if _, err := s.Commit(empty, CommitOptions{}); !errors.Is(err, ErrEmptyVersion) {
		t.Fatalf("commit of a tree of empty directories: %v", err)
	}
	if _, err := s.Commit(filepath.Join(empty, "missing"), CommitOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("commit of a missing directory: %v", err)
	}
	commitTree(t, s, 5, map[string][]byte{"x": []byte("1")})
	for _, v := range []uint64{5, 3} {
		_, err := s.Commit(writeTree(t, t.TempDir(), map[string][]byte{"x": []byte("2")}), CommitOptions{Version: v})
		if !errors.Is(err, ErrVersionNotAbove) || !strings.Contains(err.Error(), "5") {
			t.Fatalf("commit of version %d after 5: %v", v, err)
		}
	}
	if len(s.Versions()) != 1 {
		t.Fatalf("a refused commit left a version")
	}
	info, _ := commitTree(t, s, 0, map[string][]byte{"x": []byte("3")})
	if info.Number != 6 {
		t.Fatalf("version 0 means latest+1: got %d", info.Number)
	}
	w, err := s.NewVersion(7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewVersion(7); !errors.Is(err, ErrVersionBusy) {
		t.Fatalf("second writer of version 7: %v", err)
	}
	if _, err := w.Seal(); !errors.Is(err, ErrEmptyVersion) {
		t.Fatalf("seal of an empty version: %v", err)
	}
	if err := w.AddFile("../evil", strings.NewReader("x"), 1, 0o644); !errors.Is(err, ErrBadPath) {
		t.Fatalf("add of ../evil: %v", err)
	}
	w.Abort()
	if err := w.AddFile("x", strings.NewReader("x"), 1, 0o644); !errors.Is(err, ErrWriterDone) {
		t.Fatalf("add after abort: %v", err)
	}
}

func TestWriterAddFileAndSeal(t *testing.T) {
	s, _ := newStore(t, Options{})
	w, err := s.NewVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(15, 16))
	model := safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{1000}, bf16Like(rng, 1000)})
	if err := w.AddFile("model.safetensors", strings.NewReader("replaced below"), 14, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("model.safetensors", strings.NewReader(string(model)), int64(len(model)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.AddDir("logs", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("logs", strings.NewReader("x"), 1, 0o644); !errors.Is(err, ErrBadPath) {
		t.Fatalf("file over a directory: %v", err)
	}
	// Not visible before the seal.
	if _, ok := s.Latest(); ok {
		t.Fatal("an open version is visible")
	}
	info, err := w.Seal()
	if err != nil {
		t.Fatal(err)
	}
	if info.Files != 1 || info.Number != 1 {
		t.Fatalf("sealed %+v", info)
	}
	mustEqualBytes(t, "sealed file", readWhole(t, s, 1, "model.safetensors"), model)
	entries, _ := s.Entries(1)
	if len(entries) != 2 || entries[0].Path != "logs" || !entries[0].Dir || entries[1].Mode != 0o600 {
		t.Fatalf("entries %+v", entries)
	}
	if _, err := w.Seal(); !errors.Is(err, ErrWriterDone) {
		t.Fatalf("second seal: %v", err)
	}
}

func TestReadOnlyStoreRefusesWrites(t *testing.T) {
	s, root := newStore(t, Options{})
	commitTree(t, s, 1, map[string][]byte{"x": []byte("1")})
	r := openStore(t, root, Options{ReadOnly: true})
	if _, err := r.NewVersion(2); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("new version on a read-only store: %v", err)
	}
	if _, err := r.GC(1); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("gc on a read-only store: %v", err)
	}
	// Versions sealed by the writer appear after Refresh.
	commitTree(t, s, 2, map[string][]byte{"x": []byte("2")})
	if v, _ := r.Latest(); v != 1 {
		t.Fatalf("reader sees version %d before Refresh", v)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Latest(); v != 2 {
		t.Fatalf("reader sees version %d after Refresh", v)
	}
	mustEqualBytes(t, "v2 via reader", readWhole(t, r, 2, "x"), []byte("2"))
}

// TestIngestMemoryIsBounded adds a 48 MiB tensor (whole, then as a delta): the allocations
// of AddFile stay a small fraction of the file, whatever its size.
func TestIngestMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 48 MiB file")
	}
	const elems = 24 << 20 // bf16: 48 MiB
	rng := rand.New(rand.NewPCG(23, 24))
	data := bf16Like(rng, elems)
	dir := t.TempDir()
	s, _ := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	for v := uint64(1); v <= 2; v++ {
		if v == 2 {
			data = perturb(rng, data, 2, 0.01)
		}
		p := filepath.Join(dir, fmt.Sprint(v))
		if err := os.WriteFile(p, safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{elems}, data}), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(p)
		st, _ := f.Stat()
		w, err := s.NewVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		s.mat.ensure() // the copy is brought up to date outside the measurement
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := w.AddFile("model.safetensors", f, st.Size(), 0o644); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		f.Close()
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("v%d: AddFile of %d bytes allocated %d bytes", v, st.Size(), alloc)
		if alloc > uint64(st.Size())/2 {
			t.Errorf("v%d: AddFile of a %d-byte file allocated %d bytes", v, st.Size(), alloc)
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
	}
}
