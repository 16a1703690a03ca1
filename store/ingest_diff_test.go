package store

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// countDiff is the reference: elements that differ bytewise at width.
func countDiff(a, b []byte, width int) int64 {
	var n int64
	for i := 0; i+width <= len(a); i += width {
		if string(a[i:i+width]) != string(b[i:i+width]) {
			n++
		}
	}
	return n
}

func TestDiffAnyTwoVersions(t *testing.T) {
	s, _ := newStore(t, Options{MaxChain: 2})
	rng := rand.New(rand.NewPCG(19, 20))
	var ws [][]byte
	w := bf16Like(rng, 40_000)
	for v := uint64(1); v <= 5; v++ {
		if v > 1 {
			w = perturb(rng, w, 2, 0.02)
		}
		ws = append(ws, w)
		files := map[string][]byte{"m.safetensors": safetensorsFile(t,
			testTensor{"w", delta.DTypeBF16, []int64{40_000}, w},
			testTensor{"fixed", delta.DTypeU8, []int64{8}, []byte("12345678")})}
		switch v {
		case 3:
			files["notes.txt"] = []byte("three")
		case 4:
			files["notes.txt"] = []byte("four")
		}
		commitTree(t, s, v, files)
	}
	for _, pair := range [][2]uint64{{1, 2}, {2, 1}, {1, 5}, {2, 4}, {5, 3}, {3, 3}} {
		rows, err := s.Diff(pair[0], pair[1])
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]TensorDiff{}
		for _, r := range rows {
			got[r.File+"/"+r.Tensor] = r
		}
		want := countDiff(ws[pair[0]-1], ws[pair[1]-1], 2)
		if r := got["m.safetensors/w"]; r.Changed != want || r.Elements != 40_000 || r.Status != "" {
			t.Errorf("diff %v: tensor w %+v, want %d changed", pair, r, want)
		}
		if r := got["m.safetensors/fixed"]; r.Changed != 0 || r.Status != "" {
			t.Errorf("diff %v: unchanged tensor %+v", pair, r)
		}
		notes, hasNotes := got["notes.txt/"]
		switch {
		case pair == [2]uint64{2, 4}:
			if notes.Status != DiffAdded {
				t.Errorf("diff %v: notes.txt %+v, want added", pair, notes)
			}
		case pair == [2]uint64{5, 3}:
			if notes.Status != DiffAdded {
				t.Errorf("diff %v: notes.txt %+v, want added (present in 3 only)", pair, notes)
			}
		case hasNotes && (notes.Changed != 0 || notes.Status != ""):
			t.Errorf("diff %v: unexpected row %+v", pair, notes)
		}
	}
	rows, _ := s.Diff(3, 4)
	for _, r := range rows {
		if r.File == "notes.txt" && r.Status != DiffReplaced {
			t.Errorf("notes.txt 3->4: %+v, want replaced", r)
		}
	}
	// TensorChanges streams the same changes, with b's values.
	var n int64
	err := s.TensorChanges(1, 5, "m.safetensors", "w", func(first int64, c *delta.Changes) error {
		for k, i := range c.Index {
			e := first + int64(i)
			if string(c.Values[2*k:2*k+2]) != string(ws[4][2*e:2*e+2]) {
				t.Fatalf("change at %d carries a value that is not version 5's", e)
			}
		}
		n += int64(len(c.Index))
		return nil
	})
	if err != nil || n != countDiff(ws[0], ws[4], 2) {
		t.Fatalf("TensorChanges 1->5: %d changes (%v), want %d", n, err, countDiff(ws[0], ws[4], 2))
	}
	infos, err := s.Tensors(5, "m.safetensors")
	if err != nil || len(infos) != 2 || infos[0].Name != "w" || infos[0].ID != IDOf(ws[4]) || infos[0].Size != 80_000 {
		t.Fatalf("Tensors: %+v, %v", infos, err)
	}
	if _, err := s.Diff(1, 9); !errors.Is(err, ErrNoSuchVersion) {
		t.Fatalf("diff with a missing version: %v", err)
	}
}

func TestWritePatchAppliesToThePreviousVersion(t *testing.T) {
	s, _ := newStore(t, Options{})
	versions := modelVersions(t, 3, 21)
	for i, files := range versions {
		commitTree(t, s, uint64(i*2+1), files) // 1, 3, 5
	}
	if _, err := s.WritePatch(1, nil); !errors.Is(err, ErrNoPrevious) {
		t.Fatalf("patch of the first version: %v", err)
	}
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "patch.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	size, err := s.WritePatch(5, out)
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(out.Name()); st.Size() != size {
		t.Fatalf("WritePatch says %d bytes, file has %d", size, st.Size())
	}
	if size*5 > int64(len(versions[2]["model.safetensors"])) {
		t.Fatalf("patch of %d bytes is not sparse", size)
	}
	target := filepath.Join(dir, "model.safetensors")
	os.WriteFile(target, versions[1]["model.safetensors"], 0o644)
	if _, err := delta.ApplyPatchFileWith(out.Name(), target, delta.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target)
	mustEqualBytes(t, "version 3 patched to 5", got, versions[2]["model.safetensors"])
}
