package delta

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// reheader returns file with its header re-encoded with meta (the same tensors, dtypes,
// shapes and data); it fails the test unless the new header's length is want (0: any).
func reheader(t *testing.T, file []byte, h *Header, meta map[string]string) []byte {
	t.Helper()
	tensors := make([]Tensor, len(h.Tensors))
	for i, tn := range h.Tensors {
		tensors[i] = Tensor{Name: tn.Name, DType: tn.DType, Shape: tn.Shape}
	}
	hdr, err := EncodeHeader(meta, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return append(hdr, file[h.DataStart():]...)
}

// TestPatchHeaderOnlyChange: a safetensors file whose header changes but not its length nor
// its tensors' places is patched sparsely, carrying the new header bytes (HeaderPrefix), not
// the whole file; with or without changed elements, every apply path gives the result, a
// second apply changes nothing, and an apply interrupted at any step finishes when run again.
// A header whose length changed still carries the file whole.
func TestPatchHeaderOnlyChange(t *testing.T) {
	base, h := patchTestModel(t, 7)
	sameLen := reheader(t, base, h, map[string]string{"format": "tf"})
	if len(sameLen) != len(base) {
		t.Fatalf("test setup: the new header changed the file's length")
	}
	changed := mutateElements(t, sameLen, h, "model.embed_tokens.weight", 3, 50)
	longer := reheader(t, base, h, map[string]string{"format": "pt", "note": "a header that grew past its padding"})

	for _, tc := range []struct {
		name   string
		result []byte
		whole  bool
	}{
		{"header only", sameLen, false},
		{"header and elements", changed, false},
		{"header grew", longer, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, p := buildTestPatch(t, 2, 1, map[string][]byte{"model.safetensors": base},
				map[string][]byte{"model.safetensors": tc.result}, []string{"model.safetensors"})
			f, ok := p.File("model.safetensors")
			if !ok || f.Whole != tc.whole {
				t.Fatalf("plan %+v: want whole=%v", p.Plan.Files, tc.whole)
			}
			if tc.whole {
				return
			}
			if !bytes.Equal(f.NewHeader, tc.result[:h.DataStart()]) {
				t.Fatalf("the patch's new header is not the result's")
			}
			// The data section is the new header and the changes, nothing else.
			want := int64(len(f.NewHeader))
			for _, pt := range p.Plan.Tensors {
				want += pt.Changed * int64(pt.IndexDType().Size()+pt.DType.Size())
			}
			if got := int64(len(raw)) - p.Header.DataStart(); got != want {
				t.Errorf("patch data section of %d bytes, want %d (new header and changes)", got, want)
			}
			for _, path := range applyVariants {
				t.Run(path.name, func(t *testing.T) {
					tgt := path.open(t, base)
					var j memJournal
					if _, err := applyPatch(p, tgt, int64(len(base)), "model.safetensors", &j, path.cfg); err != nil {
						t.Fatal(err)
					}
					mustEqual(t, tgt.bytes(t), tc.result)
					res, err := applyPatch(p, tgt, int64(len(base)), "model.safetensors", &j, path.cfg)
					if err != nil || !res.AlreadyApplied {
						t.Fatalf("second apply: %+v, %v", res, err)
					}
				})
			}
			for _, step := range []applyStep{stepMarked, stepWroteRun, stepWritten, stepRestored} {
				tgt := openMemTarget(t, base)
				var j memJournal
				crash := errors.New("crash")
				cfg := applyConfig{failpoint: func(s string) error {
					if s == string(step) {
						return crash
					}
					return nil
				}}
				_, err := applyPatch(p, tgt, int64(len(base)), "model.safetensors", &j, cfg)
				crashed := errors.Is(err, crash)
				if err != nil && !crashed {
					t.Fatalf("crash at %s: %v", step, err)
				}
				res, err := applyPatch(p, tgt, int64(len(base)), "model.safetensors", &j, applyConfig{})
				if err != nil {
					t.Fatalf("after a crash at %s: %v", step, err)
				}
				mustEqual(t, tgt.bytes(t), tc.result)
				if crashed && !res.Recovered {
					t.Errorf("after a crash at %s: not recovered: %+v", step, res)
				}
			}
			// The file apply and the reference agree; the patch reads back the same.
			dir := t.TempDir()
			pp, target := filepath.Join(dir, "p.safetensors"), filepath.Join(dir, "model.safetensors")
			os.WriteFile(pp, raw, 0o644)
			os.WriteFile(target, base, 0o644)
			if _, err := ApplyPatchFileWith(pp, target, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(target)
			mustEqual(t, got, tc.result)
			ref, err := applyPatchReference(p, base, "model.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			mustEqual(t, ref, tc.result)
		})
	}
}

func mustEqual(t *testing.T, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("bytes differ (%d vs %d bytes)", len(got), len(want))
	}
}
