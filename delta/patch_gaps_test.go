package delta

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// gapPatch is raw rewritten in the leb128_gaps encoding, opened and verified.
func gapPatch(t testing.TB, raw []byte) ([]byte, *Patch) {
	t.Helper()
	p, err := OpenPatch(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := RewriteGaps(p)
	if err != nil {
		t.Fatal(err)
	}
	gp, err := OpenPatch(bytes.NewReader(g), int64(len(g)))
	if err != nil {
		t.Fatalf("OpenPatch of the gap patch: %v", err)
	}
	if err := gp.Verify(); err != nil {
		t.Fatal(err)
	}
	if gp.Encoding != EncodingGaps || p.Encoding != EncodingRaw {
		t.Fatalf("encodings %q %q", p.Encoding, gp.Encoding)
	}
	return g, gp
}

// pairs reads pairs [from, to) of tensor t through a range cursor.
func pairs(t *testing.T, p *Patch, pt PatchTensor, from, to int64) (idx []int64, vals []byte) {
	t.Helper()
	c := p.newCursorRange(pt, from, to)
	for c.left > 0 || c.pos < c.n {
		if c.pos == c.n {
			if err := c.fill(); err != nil {
				t.Fatal(err)
			}
		}
		i, v, _, err := c.cur()
		if err != nil {
			t.Fatal(err)
		}
		idx, vals = append(idx, i), append(vals, v...)
		c.advance()
	}
	return idx, vals
}

// TestGapsApply applies a gap patch on every path, in every chunk size, and reads pairs
// from every kind of start (before, at and after the cursor's marks) against the raw patch:
// a dense patch (a tensor of more than two marks' changes) and a sparse one (gaps of two
// and three bytes).
func TestGapsApply(t *testing.T) {
	const name = "model.safetensors"
	const every = 1000 // marks inside a small tensor
	for _, density := range []float64{0.3, 0.002} {
		base, result := syntheticVersions(t, 256<<10, density, 3)
		raw, p := buildTestPatch(t, 2, 1, map[string][]byte{name: base}, map[string][]byte{name: result}, []string{name})
		g, gp := gapPatch(t, raw)
		gp.markEvery = every
		if err := gp.indexGaps(); err != nil {
			t.Fatal(err)
		}
		if len(g) >= len(raw) {
			t.Errorf("density %v: the gap patch is %d bytes, the raw one %d", density, len(g), len(raw))
		}
		pt := p.Plan.Tensors[0]
		n := pt.Changed
		if density > 0.1 && n < 2*every+7 {
			t.Fatalf("only %d changes", n)
		}
		for _, r := range [][2]int64{{0, n}, {1, 2}, {every - 1, every + 1}, {every, 2*every + 7}, {2*every + 3, n}, {n - 1, n}} {
			if r[1] > n || r[0] >= r[1] {
				continue
			}
			wi, wv := pairs(t, p, pt, r[0], r[1])
			gi, gv := pairs(t, gp, gp.Plan.Tensors[0], r[0], r[1])
			if !slicesEqual(wi, gi) || !bytes.Equal(wv, gv) {
				t.Errorf("density %v: pairs %v differ", density, r)
			}
		}
		for _, chunk := range []int64{4097, scanChunk} {
			for _, v := range applyVariants {
				target := v.open(t, base)
				cfg := v.cfg
				cfg.chunk = chunk
				res, err := applyPatch(gp, target, int64(len(base)), name, &memJournal{}, cfg)
				if err != nil || !bytes.Equal(target.bytes(t), result) || res.ElementsWritten != p.Plan.TotalChanged() {
					t.Errorf("density %v, chunk %d %s: %+v %v", density, chunk, v.name, res, err)
				}
			}
		}
	}
	// The small patch of three files (whole files, several dtypes, an F64 tensor) too.
	b3, r3, order := threeFileVersions(t)
	raw3, _ := buildTestPatch(t, 43, 42, b3, r3, order)
	_, gp3 := gapPatch(t, raw3)
	got, err := applyPatchReference(gp3, b3[name], name)
	if err != nil || !bytes.Equal(got, r3[name]) {
		t.Errorf("three files: %v", err)
	}
	if w, err := gp3.WholeFile("config.json"); err != nil || w.Size() != int64(len(r3["config.json"])) {
		t.Errorf("whole file: %v", err)
	}
}

func slicesEqual(a, b []int64) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// docGapPatch is §2's worked example in the leb128_gaps encoding, built from the raw one.
func docGapPatch(t *testing.T, gaps []byte, values int64) []byte {
	t.Helper()
	var out memTarget
	_, err := BuildPatchWith(&out, 2, 1, []PatchSource{{Name: "model.safetensors",
		Base: bytes.NewReader(docPatchBase), BaseSize: int64(len(docPatchBase)),
		Result: bytes.NewReader(docPatchResult), ResultSize: int64(len(docPatchResult))}}, PatchBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := gapPatch(t, out.b)
	if gaps == nil {
		return g
	}
	// The same patch with other gap bytes (and values count), for the refusals.
	h, err := ParseHeader(g, int64(len(g)))
	if err != nil {
		t.Fatal(err)
	}
	ts := append([]Tensor(nil), h.Tensors...)
	ts[0].Shape, ts[1].Shape = []int64{int64(len(gaps))}, []int64{values}
	h.Metadata["total_changed_elements"] = fmt.Sprint(values)
	h.Metadata["sparsity"] = pythonFloat(sparsity(values, 4))
	hdr, err := EncodeHeader(h.Metadata, ts)
	if err != nil {
		t.Fatal(err)
	}
	vals := bytes.Repeat([]byte{0x01, 0x40}, int(values))
	return append(append(hdr, gaps...), vals...)
}

func TestDocGapsExample(t *testing.T) {
	g := docGapPatch(t, nil, 0)
	wantJSON := `{"__metadata__":{"base_sha256:model.safetensors":"255ac236ecd498c4133eb92e040adaa9839aa03b9bd525d2671da5e5963d8490","base_version":"1","base_xxh3:model.safetensors":"a5e125f92ea14a6badca1f685f0d9042","changed_params":"[\"w\"]","encoding":"leb128_gaps","files":"[\"model.safetensors\"]","format":"sparse_weight_patch","model_version":"2","num_changed_params":"1","params:model.safetensors":"{\"w\":{\"dtype\":\"BF16\",\"elements\":4,\"xxh3\":\"69b81da6cd3f4d4da9a9caec21020684\"}}","result_sha256:model.safetensors":"f67a92b891169de3bd0ee1dfc29c1a3a2520cc3f78cf24904936516dfddde9d2","result_xxh3:model.safetensors":"984bb8aa4db2f7cc3071ded2969a55a1","sparse":"True","sparsity":"0.5","total_changed_elements":"2","total_elements":"4","version":"1","whole_files":"[]"},"w.gaps":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"w.values":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}}    `
	want := docHexBytes("7803000000000000") + wantJSON + docHexBytes("01 01 0140 8140")
	if string(g) != want {
		t.Errorf("gap patch bytes\n%q\nwant\n%q", g, want)
	}
	if len(g) != 902 {
		t.Errorf("gap patch is %d bytes, the document says 902", len(g))
	}
	doc, err := os.ReadFile("../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"encoding":"leb128_gaps"`, `"w.gaps":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"w.values":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}}`,
		"It is 902 bytes long", "00000380  01 01                     w.gaps", "00000382  01 40 81 40"} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/format.md (Part III) lacks %q", s)
		}
	}
	// The varints of the section's second example: gaps of 0, 127, 128, 300 and 16384.
	if got := fmt.Sprintf("% x", AppendGaps(nil, []int64{0, 128, 257, 558, 16943})); got != "00 7f 80 01 ac 02 80 80 01" {
		t.Errorf("AppendGaps: %s", got)
	}
	if !strings.Contains(string(doc), "`00 7f 80 01 ac 02 80 80 01`") {
		t.Error("docs/format.md lacks the varint example")
	}
}

// TestGapsRefusals: every malformed stream is refused at open with ErrMalformed, naming the
// tensor; an encoding the reader does not know with ErrUnsupportedVersion.
func TestGapsRefusals(t *testing.T) {
	for _, c := range []struct {
		name   string
		gaps   []byte
		values int64
		want   string
	}{
		{"overlong", []byte{0x81, 0x00, 0x01}, 2, "overlong varint"},
		{"ten bytes", []byte{0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 1, "overlong varint"},
		{"past the end", []byte{0x01, 0x02}, 2, "runs past the tensor's 4 elements"},
		{"first past the end", []byte{0x04}, 1, "runs past"},
		{"fewer than the values", []byte{0x01}, 2, "the gaps end after 1 indices"},
		{"inside a varint", []byte{0x01, 0x81}, 2, "the gaps end after 1 indices"},
		{"more than the values", []byte{0x01, 0x01, 0x00}, 2, "hold more bytes"},
		{"no values", []byte{}, 0, "changes for 4 elements"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := docGapPatch(t, c.gaps, c.values)
			_, err := OpenPatch(bytes.NewReader(g), int64(len(g)))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("OpenPatch: %v, want ErrMalformed with %q", err, c.want)
			}
		})
	}
	g := docGapPatch(t, nil, 0)
	for _, c := range []struct {
		edit func(map[string]string, []Tensor) []Tensor
		want error
	}{
		{func(m map[string]string, ts []Tensor) []Tensor { m["encoding"] = "leb128_gaps2"; return ts }, ErrUnsupportedVersion},
		{func(m map[string]string, ts []Tensor) []Tensor { m["encoding"] = "raw"; return ts }, ErrMalformed},             // .gaps under raw
		{func(m map[string]string, ts []Tensor) []Tensor { ts[0].DType = DTypeI8; return ts }, ErrMalformed},             // not U8
		{func(m map[string]string, ts []Tensor) []Tensor { ts[0].Name = "w.indices"; return ts }, ErrMalformed},          // raw's name
		{func(m map[string]string, ts []Tensor) []Tensor { ts[1].Shape = []int64{1, 2}; return ts }, ErrMalformed},       // 2-D values
		{func(m map[string]string, ts []Tensor) []Tensor { ts[0].Shape = []int64{1, 2}; return ts }, ErrMalformed},       // 2-D gaps
		{func(m map[string]string, ts []Tensor) []Tensor { m["total_changed_elements"] = "3"; return ts }, ErrMalformed}, // counts
	} {
		b := reencodePatch(t, g, c.edit)
		if _, err := OpenPatch(bytes.NewReader(b), int64(len(b))); !errors.Is(err, c.want) {
			t.Errorf("OpenPatch: %v, want %v", err, c.want)
		}
	}
}

// FuzzGapStream decodes arbitrary streams: no panic; a stream that decodes is exactly the
// encoding of what it decodes to (one form per list of indices), which ascends inside the
// tensor; anything else is ErrMalformed.
func FuzzGapStream(f *testing.F) {
	f.Add([]byte{0x01, 0x01}, uint16(4), uint8(2))
	f.Add([]byte{0x00, 0x7f, 0x80, 0x01, 0xac, 0x02, 0x80, 0x80, 0x01}, uint16(20000), uint8(5))
	f.Add([]byte{0x81, 0x00}, uint16(300), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, uint16(1), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, elements uint16, count uint8) {
		s := &gapStream{r: bytes.NewReader(stream), end: int64(len(stream)), last: -1, elements: int64(elements), name: "w"}
		var idx []int64
		for k := 0; k < int(count); k++ {
			i, err := s.next()
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v is not ErrMalformed", err)
				}
				return
			}
			if i < 0 || i >= int64(elements) || (len(idx) > 0 && i <= idx[len(idx)-1]) {
				t.Fatalf("index %d after %v within %d", i, idx, elements)
			}
			idx = append(idx, i)
		}
		if s.done() && !bytes.Equal(AppendGaps(nil, idx), stream) {
			t.Fatalf("stream % x decodes to %v, which encodes otherwise", stream, idx)
		}
	})
}
