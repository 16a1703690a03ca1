package delta

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// memTarget is an in-memory ApplyTarget (and io.WriterAt for patch writing).
type memTarget struct {
	b     []byte
	syncs int
}

func (m *memTarget) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memTarget) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memTarget) Sync() error { m.syncs++; return nil }

// testTarget is an ApplyTarget whose bytes and syncs a test can check.
type testTarget interface {
	ApplyTarget
	bytes(t *testing.T) []byte
	syncCount() int
}

func (m *memTarget) bytes(*testing.T) []byte { return m.b }
func (m *memTarget) syncCount() int          { return m.syncs }

// fileTarget is a real file, so that the mapped write runs; it counts syncs.
type fileTarget struct {
	*os.File
	syncs int
}

func (f *fileTarget) Sync() error    { f.syncs++; return f.File.Sync() }
func (f *fileTarget) syncCount() int { return f.syncs }

func (f *fileTarget) bytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openMemTarget(_ *testing.T, data []byte) testTarget { return &memTarget{b: bytes.Clone(data)} }

func openFileTarget(t *testing.T, data []byte) testTarget {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fileTarget{File: f}
}

// mappedMethod is the method a file target is written with on this platform.
func mappedMethod() string {
	if runtime.GOOS == "linux" {
		return MethodMmap
	}
	return MethodPwrite
}

// pagesMethod is the method a file target is written with on this platform when the page
// write is asked for (it needs the mapping).
func pagesMethod() string {
	if runtime.GOOS == "linux" {
		return MethodPages
	}
	return MethodPwrite
}

// applyVariants are the paths of an apply: the scan (sequential reference, parallel, mapped)
// and the write (WriteAt reference, mapped on one or several goroutines).
var applyVariants = []struct {
	name   string
	cfg    applyConfig
	method string
	open   func(*testing.T, []byte) testTarget
}{
	{"memory-sequential", applyConfig{sequential: true}, MethodPwrite, openMemTarget},
	{"memory-parallel", applyConfig{}, MethodPwrite, openMemTarget},
	{"file-pwrite", applyConfig{noMmap: true}, MethodPwrite, openFileTarget},
	{"file-mmap", applyConfig{stores: true}, mappedMethod(), openFileTarget},
	{"file-mmap-3-writers", applyConfig{stores: true, workers: 3}, mappedMethod(), openFileTarget},
	{"file-pages", applyConfig{pages: true}, pagesMethod(), openFileTarget},
	{"file-pages-3-writers", applyConfig{pages: true, workers: 3}, pagesMethod(), openFileTarget},
}

// memJournal is an in-memory Journal.
type memJournal struct {
	rec []byte
	ok  bool
}

func (j *memJournal) Load() ([]byte, bool, error) { return bytes.Clone(j.rec), j.ok, nil }
func (j *memJournal) Store(r []byte) error        { j.rec, j.ok = bytes.Clone(r), true; return nil }
func (j *memJournal) Remove() error               { j.rec, j.ok = nil, false; return nil }

// testModel is a small safetensors file: tensors of several dtypes with random contents.
func patchTestModel(t testing.TB, seed uint64) (file []byte, h *Header) {
	t.Helper()
	tensors := []Tensor{
		{Name: "model.embed_tokens.weight", DType: DTypeBF16, Shape: []int64{13, 7}},
		{Name: "model.layers.0.mlp.up_proj.weight", DType: DTypeF32, Shape: []int64{5, 9}},
		{Name: "model.layers.0.input_layernorm.weight", DType: DTypeF16, Shape: []int64{11}},
		{Name: "model.step", DType: DTypeI64, Shape: []int64{}},
		{Name: "model.fp8.weight", DType: DTypeF8E4M3, Shape: []int64{3, 3}},
		{Name: "model.mask", DType: DTypeBool, Shape: []int64{6}},
		{Name: "model.wide", DType: DTypeF64, Shape: []int64{4}},
	}
	hdr, err := EncodeHeader(map[string]string{"format": "pt"}, tensors)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, tensors[len(tensors)-1].End)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	file = append(hdr, data...)
	h, err = ParseHeader(file, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	return file, h
}

// mutate returns a copy of file with the listed elements of tensor name given new bytes
// (each byte of the element incremented, so it surely differs).
func mutateElements(t testing.TB, file []byte, h *Header, name string, elems ...int64) []byte {
	t.Helper()
	out := bytes.Clone(file)
	tt, ok := h.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %q", name)
	}
	w := int64(tt.DType.Size())
	for _, e := range elems {
		at := h.DataStart() + tt.Begin + e*w
		out[at]++ // a change in the low byte only, as most bf16 changes are
	}
	return out
}

func patchSHA(b []byte) [32]byte { return sha256.Sum256(b) }

// buildTestPatch builds the patch between base and result files given as name -> bytes.
func buildTestPatch(t testing.TB, model, baseV uint64, base, result map[string][]byte, order []string) ([]byte, *Patch) {
	t.Helper()
	var srcs []PatchSource
	for _, name := range order {
		src := PatchSource{Name: name, Result: bytes.NewReader(result[name]), ResultSize: int64(len(result[name]))}
		if b, ok := base[name]; ok {
			src.Base, src.BaseSize = bytes.NewReader(b), int64(len(b))
		}
		srcs = append(srcs, src)
	}
	var out memTarget
	if _, err := BuildPatchWith(&out, model, baseV, srcs, PatchBuildOptions{}); err != nil {
		t.Fatalf("BuildPatch: %v", err)
	}
	p, err := OpenPatch(bytes.NewReader(out.b), int64(len(out.b)))
	if err != nil {
		t.Fatalf("OpenPatch: %v", err)
	}
	if err := p.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return out.b, p
}
