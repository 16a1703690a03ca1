package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// threeFileVersions is a base and a result version: a safetensors file with scattered
// changes, a config file that changed, a tokenizer that did not, and a new file.
func threeFileVersions(t testing.TB) (base, result map[string][]byte, order []string) {
	model, h := patchTestModel(t, 1)
	changed := mutateElements(t, model, h, "model.embed_tokens.weight", 0, 1, 2, 40, 90)
	changed = mutateElements(t, changed, h, "model.layers.0.mlp.up_proj.weight", 44)
	changed = mutateElements(t, changed, h, "model.step", 0)
	changed = mutateElements(t, changed, h, "model.wide", 1, 2)
	base = map[string][]byte{
		"model.safetensors": model,
		"config.json":       []byte(`{"step": 1}`),
		"tokenizer.json":    []byte(`{"vocab": []}`),
	}
	result = map[string][]byte{
		"model.safetensors": changed,
		"config.json":       []byte(`{"step": 2, "x": 1}`),
		"tokenizer.json":    []byte(`{"vocab": []}`),
		"extra/notes.txt":   []byte("new\n"),
	}
	return base, result, []string{"config.json", "extra/notes.txt", "model.safetensors", "tokenizer.json"}
}

func TestBuildPatchPlanAndMetadata(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, p := buildTestPatch(t, 43, 42, base, result, order)
	plan := p.Plan
	if plan.ModelVersion != 43 || plan.BaseVersion != 42 {
		t.Errorf("versions %d from %d", plan.ModelVersion, plan.BaseVersion)
	}
	// Each changed tensor's digest: the xxh3-128 of its new bytes (the optional extension).
	digest := func(name string) [16]byte {
		f := result["model.safetensors"]
		h, err := ParseHeader(f, int64(len(f)))
		if err != nil {
			t.Fatal(err)
		}
		th, _ := h.Tensor(name)
		return xxh3.Hash128(f[h.DataStart()+th.Begin : h.DataStart()+th.End]).Bytes()
	}
	wantTensors := []PatchTensor{
		{File: "model.safetensors", Name: "model.embed_tokens.weight", DType: DTypeBF16, Elements: 91, Changed: 5},
		{File: "model.safetensors", Name: "model.layers.0.mlp.up_proj.weight", DType: DTypeF32, Elements: 45, Changed: 1},
		{File: "model.safetensors", Name: "model.step", DType: DTypeI64, Elements: 1, Changed: 1},
		{File: "model.safetensors", Name: "model.wide", DType: DTypeF64, Elements: 4, Changed: 2},
	}
	wantParams := map[string]map[string]any{}
	for i := range wantTensors {
		wt := &wantTensors[i]
		wt.ResultXXH3 = digest(wt.Name)
		wantParams[wt.Name] = map[string]any{"dtype": string(wt.DType), "elements": float64(wt.Elements), "xxh3": hex.EncodeToString(wt.ResultXXH3[:])}
	}
	if !reflect.DeepEqual(plan.Tensors, wantTensors) {
		t.Errorf("tensors\n%+v\nwant\n%+v", plan.Tensors, wantTensors)
	}
	x := func(b []byte) [16]byte { return xxh3.Hash128(b).Bytes() }
	wantFiles := []PatchFile{
		{Name: "config.json", BaseSHA256: patchSHA(base["config.json"]), ResultSHA256: patchSHA(result["config.json"]),
			BaseXXH3: x(base["config.json"]), ResultXXH3: x(result["config.json"]), HasXXH3: true, Whole: true, WholeSize: 19},
		{Name: "extra/notes.txt", ResultSHA256: patchSHA(result["extra/notes.txt"]), ResultXXH3: x(result["extra/notes.txt"]), HasXXH3: true, Whole: true, WholeSize: 4},
		{Name: "model.safetensors", BaseSHA256: patchSHA(base["model.safetensors"]), ResultSHA256: patchSHA(result["model.safetensors"]),
			BaseXXH3: x(base["model.safetensors"]), ResultXXH3: x(result["model.safetensors"]), HasXXH3: true},
	}
	if !reflect.DeepEqual(plan.Files, wantFiles) {
		t.Errorf("files\n%+v\nwant\n%+v", plan.Files, wantFiles)
	}
	if plan.TotalElements != 91+45+11+1+9+6+4 {
		t.Errorf("total elements %d", plan.TotalElements)
	}
	meta := p.Header.Metadata
	want := map[string]string{
		"format": "sparse_weight_patch", "version": "1", "sparse": "True", "encoding": "raw",
		"model_version": "43", "base_version": "42", "num_changed_params": "4",
		"total_changed_elements": "9", "total_elements": "167", "sparsity": "0.9461077844311377",
		"changed_params": `["model.embed_tokens.weight","model.layers.0.mlp.up_proj.weight","model.step","model.wide"]`,
		"files":          `["config.json","extra/notes.txt","model.safetensors"]`,
		"whole_files":    `["config.json","extra/notes.txt"]`,
	}
	var gotParams map[string]map[string]any
	if err := json.Unmarshal([]byte(p.Header.Metadata["params:model.safetensors"]), &gotParams); err != nil || !reflect.DeepEqual(gotParams, wantParams) {
		t.Errorf("params:model.safetensors = %v (%v), want %v", gotParams, err, wantParams)
	}
	for k, v := range want {
		if meta[k] != v {
			t.Errorf("metadata %q = %q, want %q", k, meta[k], v)
		}
	}
	if got := meta["base_sha256:model.safetensors"]; got != hex.EncodeToString(wantFiles[2].BaseSHA256[:]) {
		t.Errorf("base hash %q", got)
	}
	if got := meta["result_xxh3:model.safetensors"]; got != hex.EncodeToString(wantFiles[2].ResultXXH3[:]) {
		t.Errorf("result xxh3 %q", got)
	}
	for _, k := range []string{"base_sha256:extra/notes.txt", "base_xxh3:extra/notes.txt"} {
		if _, ok := meta[k]; ok {
			t.Errorf("a new file has a base hash %s", k)
		}
	}
	if len(meta) != len(want)+11 { // params, and of each hash: 3 result hashes, 2 base hashes
		t.Errorf("%d metadata keys: %v", len(meta), meta)
	}
	// The whole files read back exactly.
	for _, name := range []string{"config.json", "extra/notes.txt"} {
		r, err := p.WholeFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, r.Size())
		if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, result[name]) {
			t.Errorf("whole file %s = %q, %v", name, got, err)
		}
	}
	// Deterministic: a second build gives the same bytes.
	again, _ := buildTestPatch(t, 43, 42, base, result, order)
	if !bytes.Equal(raw, again) {
		t.Error("BuildPatch is not deterministic")
	}
}

func TestBuildPatchNothingChanged(t *testing.T) {
	model, _ := patchTestModel(t, 2)
	files := map[string][]byte{"model.safetensors": model}
	_, p := buildTestPatch(t, 2, 1, files, files, []string{"model.safetensors"})
	if len(p.Plan.Files) != 0 || len(p.Plan.Tensors) != 0 || p.Header.Metadata["sparsity"] != "1.0" {
		t.Errorf("plan %+v metadata %v", p.Plan, p.Header.Metadata)
	}
}

// referencePatch encodes a patch in memory the simple way: the header, then every entry.
func referencePatch(t testing.TB, plan PatchPlan, idx map[string][]int64, vals map[string][]byte, whole map[string][]byte) []byte {
	t.Helper()
	meta, err := plan.metadata()
	if err != nil {
		t.Fatal(err)
	}
	out, err := EncodeHeader(meta, plan.layout())
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range plan.Tensors {
		for _, i := range idx[pt.Name] {
			if pt.IndexDType() == DTypeI64 {
				out = binary.LittleEndian.AppendUint64(out, uint64(i))
			} else {
				out = binary.LittleEndian.AppendUint32(out, uint32(i))
			}
		}
		out = append(out, vals[pt.Name]...)
	}
	for _, f := range plan.Files {
		if f.Whole {
			out = append(out, whole[f.Name]...)
		}
	}
	return out
}

func TestPatchWriterMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	plan := PatchPlan{ModelVersion: 9, BaseVersion: 5, TotalElements: 1 << 40}
	plan.Files = []PatchFile{
		{Name: "a.safetensors", BaseSHA256: [32]byte{1}, ResultSHA256: [32]byte{2}},
		{Name: "b.bin", ResultSHA256: [32]byte{3}, Whole: true, WholeSize: 3000},
		{Name: "c.bin", BaseSHA256: [32]byte{4}, ResultSHA256: [32]byte{5}, Whole: true, WholeSize: 0},
		{Name: "d.bin", BaseSHA256: [32]byte{6}, ResultSHA256: [32]byte{7}, Whole: true, WholeSize: 17},
	}
	idx, vals, whole := map[string][]int64{}, map[string][]byte{}, map[string][]byte{}
	for i, spec := range []struct {
		dtype    DType
		elements int64
	}{{DTypeBF16, 100000}, {DTypeF32, 3}, {DTypeU8, 1 << 31}, {DTypeF64, 5000}} {
		name := "t" + string(rune('0'+i))
		var list []int64
		for e := int64(r.IntN(3)); e < spec.elements && len(list) < 30000; e += 1 + int64(r.IntN(40))*int64(1+i*i*i*1000) {
			list = append(list, e)
		}
		v := make([]byte, len(list)*spec.dtype.Size())
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		idx[name], vals[name] = list, v
		plan.Tensors = append(plan.Tensors, PatchTensor{File: "a.safetensors", Name: name, DType: spec.dtype, Elements: spec.elements, Changed: int64(len(list))})
	}
	for _, f := range plan.Files {
		if f.Whole {
			b := make([]byte, f.WholeSize)
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			whole[f.Name] = b
		}
	}
	want := referencePatch(t, plan, idx, vals, whole)

	// Fed in plan order, or in parts (PatchWriter.Parts) fed last part first.
	for _, mode := range []string{"in order", "parts"} {
		t.Run(mode, func(t *testing.T) {
			got := streamPatch(t, plan, idx, vals, whole, mode == "parts", rand.New(rand.NewPCG(8, 8)))
			checkStreamedPatch(t, got, want, plan)
		})
	}
}

// streamPatch feeds a PatchWriter the changes in random pieces, then the whole files.
func streamPatch(t *testing.T, plan PatchPlan, idx map[string][]int64, vals, whole map[string][]byte, parts bool, r *rand.Rand) []byte {
	t.Helper()
	var got memTarget
	pw, err := NewPatchWriter(&got, plan)
	if err != nil {
		t.Fatal(err)
	}
	feed := func(pw *PatchWriter, tensors []PatchTensor) {
		for _, pt := range tensors {
			list, v, w := idx[pt.Name], vals[pt.Name], pt.DType.Size()
			for len(list) > 0 { // random pieces, relative to a first index of the piece
				n := min(len(list), 1+r.IntN(5000))
				first := list[0] - int64(r.IntN(3))
				first = max(first, 0)
				rel := make([]uint32, n)
				for j := range rel {
					rel[j] = uint32(list[j] - first)
				}
				if err := pw.Add(first, rel, v[:n*w]); err != nil {
					t.Fatal(err)
				}
				list, v = list[n:], v[n*w:]
			}
		}
	}
	if !parts {
		feed(pw, plan.Tensors)
	} else {
		if _, err := pw.Parts([]int{1, 2}); err == nil {
			t.Fatal("Parts from a tensor that is not the next one")
		}
		pw.err = nil
		bounds := []int{0, 1, 3, len(plan.Tensors)}
		ps, err := pw.Parts(bounds)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(ps) - 1; i >= 0; i-- {
			if i == 1 {
				if err := ps[i].Close(); err == nil {
					t.Fatal("a part closed before it was fed")
				}
				ps[i].err = nil
			}
			feed(ps[i], plan.Tensors[bounds[i]:bounds[i+1]])
			if err := ps[i].Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"b.bin", "c.bin", "d.bin"} {
		b := whole[name]
		for len(b) > 0 {
			n := min(len(b), 1+r.IntN(1000))
			if err := pw.AddWhole(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	return got.b
}

func checkStreamedPatch(t *testing.T, got, want []byte, plan PatchPlan) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("Size %d, want %d", len(got), len(want))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("streamed patch (%d bytes) differs from the reference (%d bytes)", len(got), len(want))
	}
	p, err := OpenPatch(bytes.NewReader(got), int64(len(got)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Plan, plan) {
		t.Errorf("read plan\n%+v\nwant\n%+v", p.Plan, plan)
	}
	if p.Plan.Tensors[2].IndexDType() != DTypeI64 || p.Plan.Tensors[0].IndexDType() != DTypeI32 {
		t.Error("index dtypes not chosen by element count")
	}
}

func TestPatchWriterErrors(t *testing.T) {
	plan := PatchPlan{TotalElements: 10, Files: []PatchFile{{Name: "m", BaseSHA256: [32]byte{1}}},
		Tensors: []PatchTensor{{File: "m", Name: "w", DType: DTypeBF16, Elements: 10, Changed: 2}}}
	tests := []struct {
		name string
		feed func(pw *PatchWriter) error
		want string
	}{
		{"not ascending", func(pw *PatchWriter) error { return pw.Add(0, []uint32{3, 3}, make([]byte, 4)) }, "not ascending"},
		{"out of range", func(pw *PatchWriter) error { return pw.Add(9, []uint32{0, 1}, make([]byte, 4)) }, "not ascending within 10"},
		{"values length", func(pw *PatchWriter) error { return pw.Add(0, []uint32{1}, make([]byte, 3)) }, "3 bytes of values"},
		{"too many", func(pw *PatchWriter) error { return pw.Add(0, []uint32{1, 2, 3}, make([]byte, 6)) }, "needs 2 more"},
		{"incomplete", func(pw *PatchWriter) error { pw.Add(0, []uint32{1}, make([]byte, 2)); return pw.Close() }, "got 1 of 2"},
		{"whole before tensors", func(pw *PatchWriter) error { return pw.AddWhole([]byte{1}) }, "before tensor"},
		{"sticky", func(pw *PatchWriter) error {
			pw.Add(0, []uint32{5, 1}, make([]byte, 4))
			return pw.Add(0, []uint32{7}, make([]byte, 2))
		}, "not ascending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pw, err := NewPatchWriter(&memTarget{}, plan)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.feed(pw); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPatchPlanErrors(t *testing.T) {
	file := PatchFile{Name: "m", BaseSHA256: [32]byte{1}}
	tensor := PatchTensor{File: "m", Name: "w", DType: DTypeBF16, Elements: 10, Changed: 2}
	tests := []struct {
		name string
		plan PatchPlan
	}{
		{"tensor in unlisted file", PatchPlan{TotalElements: 10, Tensors: []PatchTensor{tensor}}},
		{"file listed twice", PatchPlan{TotalElements: 10, Files: []PatchFile{file, file}, Tensors: []PatchTensor{tensor}}},
		{"sparse file without tensors", PatchPlan{Files: []PatchFile{file}}},
		{"sparse file without base", PatchPlan{TotalElements: 10, Files: []PatchFile{{Name: "m"}}, Tensors: []PatchTensor{tensor}}},
		{"zero changes", PatchPlan{TotalElements: 10, Files: []PatchFile{file}, Tensors: []PatchTensor{{File: "m", Name: "w", DType: DTypeBF16, Elements: 10}}}},
		{"unknown dtype", PatchPlan{TotalElements: 10, Files: []PatchFile{file}, Tensors: []PatchTensor{{File: "m", Name: "w", DType: "X", Elements: 10, Changed: 1}}}},
		{"total too small", PatchPlan{TotalElements: 1, Files: []PatchFile{file}, Tensors: []PatchTensor{tensor}}},
		{"tensor in whole file", PatchPlan{TotalElements: 10, Files: []PatchFile{{Name: "m", Whole: true}}, Tensors: []PatchTensor{tensor}}},
		{"name collision", PatchPlan{TotalElements: 20, Files: []PatchFile{file}, Tensors: []PatchTensor{tensor, {File: "m", Name: "w.indices", DType: DTypeU8, Elements: 10, Changed: 1}, {File: "m", Name: "w", DType: DTypeU8, Elements: 10, Changed: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := EncodePatchHeader(tt.plan); err == nil {
				t.Error("EncodePatchHeader accepted the plan")
			}
			if _, err := NewPatchWriter(&memTarget{}, tt.plan); err == nil {
				t.Error("NewPatchWriter accepted the plan")
			}
		})
	}
}

// reencode rebuilds a patch with its metadata changed by edit (data kept as is).
func reencodePatch(t *testing.T, raw []byte, edit func(meta map[string]string, tensors []Tensor) []Tensor) []byte {
	t.Helper()
	h, err := ParseHeader(raw, int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	meta := make(map[string]string)
	for k, v := range h.Metadata {
		meta[k] = v
	}
	tensors := edit(meta, append([]Tensor(nil), h.Tensors...))
	var data []byte
	for _, tt := range tensors {
		if tt.End-tt.Begin == tt.Elements()*int64(tt.DType.Size()) && tt.End <= int64(len(raw))-h.DataStart() {
			data = append(data, raw[h.DataStart()+tt.Begin:h.DataStart()+tt.End]...)
		} else {
			data = append(data, make([]byte, tt.Elements()*int64(tt.DType.Size()))...)
		}
	}
	hdr, err := EncodeHeader(meta, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return append(hdr, data...)
}

func TestOpenPatchErrors(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	set := func(k, v string) func(map[string]string, []Tensor) []Tensor {
		return func(m map[string]string, ts []Tensor) []Tensor { m[k] = v; return ts }
	}
	del := func(k string) func(map[string]string, []Tensor) []Tensor {
		return func(m map[string]string, ts []Tensor) []Tensor { delete(m, k); return ts }
	}
	tests := []struct {
		name string
		edit func(map[string]string, []Tensor) []Tensor
		want error
		msg  string
	}{
		{"unknown format", set("format", "other"), ErrUnsupportedVersion, "patch format"},
		{"unknown version", set("version", "2"), ErrUnsupportedVersion, "patch version"},
		{"gap-delta encoding", set("encoding", "gap_delta"), ErrUnsupportedVersion, "encoding"},
		{"no format", del("format"), ErrMalformed, "not a sparse weight patch"},
		{"not sparse", set("sparse", "False"), ErrMalformed, "sparse"},
		{"no model version", del("model_version"), ErrMalformed, "model_version"},
		{"bad count", set("num_changed_params", "3"), ErrMalformed, "num_changed_params"},
		{"bad total changed", set("total_changed_elements", "10"), ErrMalformed, "total_changed_elements"},
		{"bad sparsity", set("sparsity", "0.5"), ErrMalformed, "sparsity"},
		{"bad total", set("total_elements", "5"), ErrMalformed, "exceed"},
		{"changed_params not json", set("changed_params", "[x"), ErrMalformed, "JSON list"},
		{"unknown changed param", set("changed_params", `["a","b","c","d"]`), ErrMalformed, "not in any file"},
		{"bad hash", set("result_sha256:config.json", "ABC"), ErrMalformed, "lowercase hex"},
		{"bad xxh3", set("result_xxh3:config.json", "0123456789ABCDEF0123456789abcdef"), ErrMalformed, "lowercase hex xxh3-128"},
		{"short xxh3", set("base_xxh3:model.safetensors", "0123"), ErrMalformed, "lowercase hex xxh3-128"},
		{"base xxh3 alone", del("result_xxh3:model.safetensors"), ErrMalformed, "without"},
		{"result xxh3 alone", del("base_xxh3:model.safetensors"), ErrMalformed, "without"},
		{"xxh3 base of a new file", set("base_xxh3:extra/notes.txt", "0123456789abcdef0123456789abcdef"), ErrMalformed, "without a SHA-256"},
		{"missing base hash", del("base_sha256:model.safetensors"), ErrMalformed, "lacks"},
		{"missing params", del("params:model.safetensors"), ErrMalformed, "params:"},
		{"whole file not listed", set("whole_files", `["nope"]`), ErrMalformed, ""},
		{"wrong values dtype", func(m map[string]string, ts []Tensor) []Tensor {
			for i := range ts {
				if ts[i].Name == "model.wide.values" {
					ts[i].DType = DTypeI64
				}
			}
			return ts
		}, ErrMalformed, "model.wide.values"},
		{"wide indices", func(m map[string]string, ts []Tensor) []Tensor {
			for i := range ts {
				if ts[i].Name == "model.step.indices" {
					ts[i].DType = DTypeI64
				}
			}
			return ts
		}, ErrMalformed, "model.step.indices"},
		{"extra tensor", func(m map[string]string, ts []Tensor) []Tensor {
			return append(ts, Tensor{Name: "stowaway", DType: DTypeU8, Shape: []int64{1}})
		}, ErrMalformed, "accounts for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := reencodePatch(t, raw, tt.edit)
			_, err := OpenPatch(bytes.NewReader(bad), int64(len(bad)))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("OpenPatch error %v, want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
}

func TestVerifyRefusesBadIndices(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, p := buildTestPatch(t, 43, 42, base, result, order)
	idx := p.entries["model.embed_tokens.weight.indices"]
	at := p.Header.DataStart() + idx.Begin
	tests := []struct {
		name  string
		patch func(b []byte)
	}{
		{"descending", func(b []byte) { binary.LittleEndian.PutUint32(b[at+4:], 0) }},
		{"repeated", func(b []byte) { binary.LittleEndian.PutUint32(b[at+4:], binary.LittleEndian.Uint32(b[at:])) }},
		{"out of range", func(b []byte) { binary.LittleEndian.PutUint32(b[at+16:], 91) }},
		{"negative", func(b []byte) { binary.LittleEndian.PutUint32(b[at:], 0xFFFFFFFF) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := bytes.Clone(raw)
			tt.patch(bad)
			bp, err := OpenPatch(bytes.NewReader(bad), int64(len(bad)))
			if err != nil {
				t.Fatal(err)
			}
			if err := bp.Verify(); !errors.Is(err, ErrMalformed) {
				t.Errorf("Verify = %v, want ErrMalformed", err)
			}
			target := &memTarget{b: bytes.Clone(base["model.safetensors"])}
			j := &memJournal{}
			if _, err := ApplyPatchWith(bp, target, int64(len(target.b)), "model.safetensors", j, ApplyOptions{}); !errors.Is(err, ErrMalformed) {
				t.Errorf("ApplyPatch = %v, want ErrMalformed", err)
			}
			if !bytes.Equal(target.b, base["model.safetensors"]) || j.ok {
				t.Error("a refused apply changed the target or left a journal")
			}
		})
	}
}
