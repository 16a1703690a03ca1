package delta

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// xxh3Only re-encodes a raw patch as a trainer may write it into a mount: every file's
// SHA-256 keys left out, its xxh3-128 ones kept (docs/format.md Part III §2).
func xxh3Only(t testing.TB, raw []byte) []byte {
	t.Helper()
	p, err := OpenPatch(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	plan := p.Plan
	plan.Files = append([]PatchFile(nil), plan.Files...)
	for i := range plan.Files {
		f := &plan.Files[i]
		f.XXH3Only, f.BaseSHA256, f.ResultSHA256 = true, [32]byte{}, [32]byte{}
	}
	hdr, _, err := EncodePatchHeader(plan)
	if err != nil {
		t.Fatal(err)
	}
	return append(hdr, raw[p.Header.DataStart():]...)
}

// TestDocXXH3OnlyExample pins the worked example's patch without its SHA-256 keys.
func TestDocXXH3OnlyExample(t *testing.T) {
	var out memTarget
	_, err := BuildPatchWith(&out, 2, 1, []PatchSource{{Name: "model.safetensors",
		Base: bytes.NewReader(docPatchBase), BaseSize: int64(len(docPatchBase)),
		Result: bytes.NewReader(docPatchResult), ResultSize: int64(len(docPatchResult))}}, PatchBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x := xxh3Only(t, out.b)
	wantJSON := `{"__metadata__":{"base_version":"1","base_xxh3:model.safetensors":"a5e125f92ea14a6badca1f685f0d9042","changed_params":"[\"w\"]","encoding":"raw","files":"[\"model.safetensors\"]","format":"sparse_weight_patch","model_version":"2","num_changed_params":"1","params:model.safetensors":"{\"w\":{\"dtype\":\"BF16\",\"elements\":4,\"xxh3\":\"69b81da6cd3f4d4da9a9caec21020684\"}}","result_xxh3:model.safetensors":"984bb8aa4db2f7cc3071ded2969a55a1","sparse":"True","sparsity":"0.5","total_changed_elements":"2","total_elements":"4","version":"1","whole_files":"[]"},"w.indices":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"w.values":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}`
	want := docHexBytes("b002000000000000") + wantJSON + strings.Repeat(" ", 7) + docHexBytes("01000000 03000000 0140 8140")
	if string(x) != want {
		t.Errorf("xxh3-only patch bytes\n%q\nwant\n%q", x, want)
	}
	if len(x) != 708 {
		t.Errorf("xxh3-only patch is %d bytes, the document says 708", len(x))
	}
	doc, err := os.ReadFile("../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"It is 708 bytes long", "`b0 02 00 00 00 00 00 00`: `N` = 688"} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/format.md (Part III) lacks %q", s)
		}
	}
	// It applies, checked by xxh3-128; asked to check by SHA-256, it is refused untouched.
	p, err := OpenPatch(bytes.NewReader(x), int64(len(x)))
	if err != nil {
		t.Fatal(err)
	}
	target := &memTarget{b: bytes.Clone(docPatchBase)}
	if _, err := ApplyPatchWith(p, target, int64(len(docPatchBase)), "model.safetensors", &memJournal{}, ApplyOptions{}); err != nil || !bytes.Equal(target.b, docPatchResult) {
		t.Fatalf("apply of the xxh3-only patch: %v", err)
	}
	target = &memTarget{b: bytes.Clone(docPatchBase)}
	if _, err := ApplyPatchWith(p, target, int64(len(docPatchBase)), "model.safetensors", &memJournal{}, ApplyOptions{VerifySHA256: true}); err == nil || !bytes.Equal(target.b, docPatchBase) {
		t.Fatalf("apply with VerifySHA256 of an xxh3-only patch: %v", err)
	}
}

// TestPatchXXH3Only: a patch with xxh3-128 digests and no SHA-256 opens, its new file new and
// the others not, and applies; a file with neither digest, or a kind recorded for the result
// but not for the base, is refused.
func TestPatchXXH3Only(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	x := xxh3Only(t, raw)
	p, err := OpenPatch(bytes.NewReader(x), int64(len(x)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range p.Plan.Files {
		if !f.XXH3Only || !f.HasXXH3 || f.New() != (base[f.Name] == nil) {
			t.Fatalf("file %s: XXH3Only %v HasXXH3 %v New %v", f.Name, f.XXH3Only, f.HasXXH3, f.New())
		}
	}
	model := base["model.safetensors"]
	target := &memTarget{b: bytes.Clone(model)}
	if _, err := ApplyPatchWith(p, target, int64(len(model)), "model.safetensors", &memJournal{}, ApplyOptions{}); err != nil || !bytes.Equal(target.b, result["model.safetensors"]) {
		t.Fatalf("apply: %v", err)
	}
	del := func(keys ...string) func(map[string]string, []Tensor) []Tensor {
		return func(m map[string]string, ts []Tensor) []Tensor {
			for _, k := range keys {
				delete(m, k)
			}
			return ts
		}
	}
	for _, c := range []struct {
		name string
		edit func(map[string]string, []Tensor) []Tensor
		raw  []byte
		msg  string
	}{
		{"neither digest of a file's result", del("result_sha256:config.json", "result_xxh3:config.json"), raw, "lacks"},
		{"neither digest of a new file", del("result_xxh3:extra/notes.txt"), x, "lacks"},
		{"neither digest of a base", del("base_xxh3:model.safetensors"), x, "lacks"},
		{"a SHA-256 base without its result", del("result_sha256:model.safetensors", "base_xxh3:model.safetensors"), raw, "without"},
		{"an xxh3 result without its base", del("base_sha256:model.safetensors", "result_sha256:model.safetensors", "base_xxh3:model.safetensors"), raw, "lacks"},
	} {
		bad := reencodePatch(t, c.raw, c.edit)
		if _, err := OpenPatch(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: OpenPatch error %v, want ErrMalformed containing %q", c.name, err, c.msg)
		}
	}
}
