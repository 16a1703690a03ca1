package delta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// tensorInfoPatch builds the patch of the three-file versions, with shapes when asked.
func tensorInfoPatch(t *testing.T, shapes bool) (raw []byte, result map[string][]byte) {
	t.Helper()
	base, result, order := threeFileVersions(t)
	var srcs []PatchSource
	for _, name := range order {
		src := PatchSource{Name: name, Result: bytes.NewReader(result[name]), ResultSize: int64(len(result[name]))}
		if b, ok := base[name]; ok {
			src.Base, src.BaseSize = bytes.NewReader(b), int64(len(b))
		}
		srcs = append(srcs, src)
	}
	var out memTarget
	if _, err := BuildPatchWith(&out, 43, 42, srcs, PatchBuildOptions{Shapes: shapes}); err != nil {
		t.Fatal(err)
	}
	return out.b, result
}

// TestPatchTensorInfo: every changed tensor of a patch records the xxh3-128 of its new full
// bytes, and with Shapes its full shape; both read back into the plan, and the plan encodes
// to the same header again.
func TestPatchTensorInfo(t *testing.T) {
	for _, shapes := range []bool{false, true} {
		raw, result := tensorInfoPatch(t, shapes)
		p, err := OpenPatch(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Plan.Tensors) == 0 {
			t.Fatal("no changed tensors")
		}
		for _, pt := range p.Plan.Tensors {
			file := result[pt.File]
			h, err := ParseHeader(file, int64(len(file)))
			if err != nil {
				t.Fatal(err)
			}
			th, _ := h.Tensor(pt.Name)
			want := xxh3.Hash128(file[h.DataStart()+th.Begin : h.DataStart()+th.End]).Bytes()
			if pt.ResultXXH3 != want {
				t.Errorf("%s: digest %x, want %x", pt.Name, pt.ResultXXH3, want)
			}
			switch {
			case shapes && !slices.Equal(pt.Shape, th.Shape), shapes && pt.Shape == nil:
				t.Errorf("%s: shape %v, want %v", pt.Name, pt.Shape, th.Shape)
			case !shapes && pt.Shape != nil:
				t.Errorf("%s: shape %v recorded without Shapes", pt.Name, pt.Shape)
			}
		}
		header, _, err := EncodePatchHeader(p.Plan)
		if err != nil || !bytes.Equal(header, raw[:len(header)]) {
			t.Errorf("shapes=%v: the read plan does not encode to the patch's header (%v)", shapes, err)
		}
		if err := p.Verify(); err != nil {
			t.Error(err)
		}
	}
}

// TestDocTensorInfoExample pins the digest the document gives for its worked example.
func TestDocTensorInfoExample(t *testing.T) {
	d := xxh3.Hash128(docPatchResult[72:]).Bytes()
	if got := hex.EncodeToString(d[:]); got != "69b81da6cd3f4d4da9a9caec21020684" {
		t.Errorf("digest %s", got)
	}
}

// rewriteParams re-encodes a patch with its params:FILE metadata edited by edit.
func rewriteParams(t *testing.T, raw []byte, edit func(file, js string) string) []byte {
	t.Helper()
	h, err := ParseHeader(raw, int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	meta := make(map[string]string, len(h.Metadata))
	for k, v := range h.Metadata {
		if name, ok := strings.CutPrefix(k, metaParamsPrefix); ok {
			v = edit(name, v)
		}
		meta[k] = v
	}
	tensors := slices.Clone(h.Tensors)
	header, err := EncodeHeader(meta, tensors)
	if err != nil {
		t.Fatal(err)
	}
	return append(header, raw[h.DataStart():]...)
}

// TestPatchTensorInfoMalformed: a reader refuses a broken extension, and reads a patch
// without it (as written before it existed) as before.
func TestPatchTensorInfoMalformed(t *testing.T) {
	raw, _ := tensorInfoPatch(t, true)
	p, err := OpenPatch(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	first := p.Plan.Tensors[0]
	digest := hex.EncodeToString(first.ResultXXH3[:])
	fieldOf := func(s string) func(string, string) string {
		return func(file, js string) string {
			if file != first.File {
				return js
			}
			return strings.Replace(js, `"xxh3":"`+digest+`"`, s, 1)
		}
	}
	cases := []struct {
		name string
		edit func(file, js string) string
	}{
		{"upper-case digest", fieldOf(`"xxh3":"` + strings.ToUpper(digest) + `"`)},
		{"short digest", fieldOf(`"xxh3":"` + digest[2:] + `"`)},
		{"one tensor without digest", fieldOf(`"xxh3":""`)},
		{"shape of other size", func(file, js string) string {
			if file != first.File {
				return js
			}
			return strings.Replace(js, `"shape":[13,7]`, `"shape":[13,8]`, 1)
		}},
		{"negative dimension", func(file, js string) string {
			return strings.Replace(js, `"shape":[13,7]`, `"shape":[-13,-7]`, 1)
		}},
	}
	if !strings.Contains(p.Header.Metadata[metaParamsPrefix+first.File], `"shape":[13,7]`) {
		t.Fatalf("the first file's params lack the shape [13,7]: %s", p.Header.Metadata[metaParamsPrefix+first.File])
	}
	for _, c := range cases {
		bad := rewriteParams(t, raw, c.edit)
		if bytes.Equal(bad, raw) {
			t.Fatalf("%s: the edit changed nothing", c.name)
		}
		if _, err := OpenPatch(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: OpenPatch: %v, want ErrMalformed", c.name, err)
		}
	}

	// Without the extension (every "xxh3" and "shape" removed) the patch reads as before.
	old := rewriteParams(t, raw, func(_, js string) string {
		var out strings.Builder
		for _, part := range strings.Split(js, `,"shape":`) {
			if i := strings.IndexAny(part, "]"); i >= 0 && out.Len() > 0 {
				part = part[i+1:]
			}
			out.WriteString(part)
		}
		s := out.String()
		for {
			i := strings.Index(s, `,"xxh3":"`)
			if i < 0 {
				return s
			}
			s = s[:i] + s[i+len(`,"xxh3":"`)+33:]
		}
	})
	q, err := OpenPatch(bytes.NewReader(old), int64(len(old)))
	if err != nil {
		t.Fatalf("a patch without the extension: %v", err)
	}
	for i, pt := range q.Plan.Tensors {
		want := p.Plan.Tensors[i]
		want.Shape, want.ResultXXH3 = nil, [16]byte{}
		if !reflect.DeepEqual(pt, want) {
			t.Errorf("without the extension: %+v, want %+v", pt, want)
		}
	}
	if strings.Contains(string(old[:q.Header.DataStart()]), `xxh3\":`) || strings.Contains(string(old[:q.Header.DataStart()]), `shape\":`) {
		t.Errorf("the stripped header still has the extension")
	}
}
