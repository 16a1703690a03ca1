package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestPatchSizeMatchesRender commits versions that change in every way a patch distinguishes
// and requires PatchSize, worked out from the manifests, to equal the size of the patch
// rendered from the bytes.
func TestPatchSizeMatchesRender(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	s, _ := newStore(t, Options{})
	big := bf16Like(rng, 1<<16)       // 65536 elements
	small := randomBytes(rng, 4*3000) // F32
	huge := bf16Like(rng, 70000)      // another file
	model := func() []byte {
		return safetensorsFile(t,
			testTensor{"a.weight", delta.DTypeBF16, []int64{256, 256}, big},
			testTensor{"b.bias", delta.DTypeF32, []int64{3000}, small})
	}
	other := func() []byte {
		return safetensorsFile(t, testTensor{"c", delta.DTypeBF16, []int64{70000}, huge})
	}
	files := map[string][]byte{"model.safetensors": model(), "part/other.safetensors": other(), "config.json": []byte(`{"a": 1}`)}
	commitTree(t, s, 1, files)

	steps := []struct {
		name   string
		change func()
	}{
		{"one tensor changes a little", func() { big = perturb(rng, big, 2, 0.02); files["model.safetensors"] = model() }},
		{"every tensor changes", func() {
			big, small, huge = perturb(rng, big, 2, 0.01), perturb(rng, small, 4, 0.3), perturb(rng, huge, 2, 0.05)
			files["model.safetensors"], files["part/other.safetensors"] = model(), other()
		}},
		{"a blob changes size", func() { files["config.json"] = []byte(`{"a": 12, "b": [1, 2, 3]}`) }},
		{"a new blob and a tensor", func() {
			files["tokenizer.json"] = bytes.Repeat([]byte("tok "), 5000)
			small = perturb(rng, small, 4, 0.001)
			files["model.safetensors"] = model()
		}},
		{"a blob removed, a blob of equal size", func() {
			delete(files, "tokenizer.json")
			files["config.json"] = []byte(`{"a": 13, "b": [1, 2, 4]}`)
		}},
		{"nothing changes", func() {}},
		{"a header that grew", func() {
			files["model.safetensors"] = withMetadata(t, model(), `{"format":"pt"}`)
		}},
		{"a header-only change of equal size", func() {
			// Same tensors at the same places, the metadata edited in place.
			files["model.safetensors"] = withMetadata(t, model(), `{"format":"tf"}`)
		}},
		{"a header-only change and a tensor", func() {
			big = perturb(rng, big, 2, 0.01)
			files["model.safetensors"] = withMetadata(t, model(), `{"format":"np"}`)
		}},
		{"all elements of a tensor change", func() {
			huge = perturb(rng, huge, 2, 1)
			files["part/other.safetensors"] = other()
		}},
	}
	for i, step := range steps {
		v := uint64(i + 2)
		step.change()
		commitTree(t, s, v, files)
		want, werr := s.RenderPatch(v)
		got, ok, err := s.PatchSize(v)
		switch {
		case werr != nil || err != nil:
			if !errors.Is(err, ErrNoPrevious) || !errors.Is(werr, ErrNoPrevious) {
				t.Fatalf("v%d (%s): render %v, size %v", v, step.name, werr, err)
			}
		case !ok:
			t.Errorf("v%d (%s): PatchSize could not tell (render: %d bytes)", v, step.name, want.Size)
		case got != want.Size:
			t.Errorf("v%d (%s): PatchSize %d, rendered %d bytes", v, step.name, got, want.Size)
		}
		note := s.PatchNote(v)
		switch {
		case step.name == "a header that grew" && !strings.Contains(note, "model.safetensors (file size changed)"),
			strings.Contains(step.name, "header-only") && strings.Contains(note, "model.safetensors"),
			step.name == "a blob changes size" && !strings.Contains(note, "config.json (not safetensors)"),
			step.name == "nothing changes" && note != "":
			t.Errorf("v%d (%s): PatchNote %q", v, step.name, note)
		}
		if werr == nil && strings.Contains(step.name, "header") {
			p, err := delta.OpenPatch(bytes.NewReader(readFile(t, want.Path)), want.Size)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := p.File("model.safetensors")
			if headerOnly := strings.Contains(step.name, "header-only"); (f.NewHeader != nil) != headerOnly || f.Whole == headerOnly {
				t.Errorf("v%d (%s): model.safetensors whole %v, new header %d bytes", v, step.name, f.Whole, len(f.NewHeader))
			}
		}
	}
	if _, _, err := s.PatchSize(1); !errors.Is(err, ErrNoPrevious) {
		t.Errorf("PatchSize of the first version: %v, want ErrNoPrevious", err)
	}
}

// withMetadata re-encodes a safetensors file's header with __metadata__ meta (a JSON object),
// keeping its tensors and data.
func withMetadata(t *testing.T, file []byte, meta string) []byte {
	t.Helper()
	h, err := delta.ParseHeader(file, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(meta), &m); err != nil {
		t.Fatal(err)
	}
	tensors := make([]delta.Tensor, len(h.Tensors))
	for i, tn := range h.Tensors {
		tensors[i] = delta.Tensor{Name: tn.Name, DType: tn.DType, Shape: tn.Shape}
	}
	hdr, err := delta.EncodeHeader(m, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return append(hdr, file[h.DataStart():]...)
}
