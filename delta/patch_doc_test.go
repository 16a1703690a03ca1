package delta

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// The worked examples of docs/format.md (Part III), pinned byte for byte: a BF16 tensor "w" of
// shape [2,2] holding 1.0 2.0 3.0 4.0, whose elements 1 and 3 become 2.0078125 and 4.03125.
var (
	docPatchHeader = docHexBytes("4000000000000000") + `{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}       `
	docPatchBase   = []byte(docPatchHeader + docHexBytes("803f004040408040"))
	docPatchResult = []byte(docPatchHeader + docHexBytes("803f014040408140"))
)

func docHexBytes(s string) string {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestDocPatchExample(t *testing.T) {
	var out memTarget
	_, err := BuildPatchWith(&out, 2, 1, []PatchSource{{Name: "model.safetensors",
		Base: bytes.NewReader(docPatchBase), BaseSize: int64(len(docPatchBase)),
		Result: bytes.NewReader(docPatchResult), ResultSize: int64(len(docPatchResult))}}, PatchBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"__metadata__":{"base_sha256:model.safetensors":"255ac236ecd498c4133eb92e040adaa9839aa03b9bd525d2671da5e5963d8490","base_version":"1","base_xxh3:model.safetensors":"a5e125f92ea14a6badca1f685f0d9042","changed_params":"[\"w\"]","encoding":"raw","files":"[\"model.safetensors\"]","format":"sparse_weight_patch","model_version":"2","num_changed_params":"1","params:model.safetensors":"{\"w\":{\"dtype\":\"BF16\",\"elements\":4,\"xxh3\":\"69b81da6cd3f4d4da9a9caec21020684\"}}","result_sha256:model.safetensors":"f67a92b891169de3bd0ee1dfc29c1a3a2520cc3f78cf24904936516dfddde9d2","result_xxh3:model.safetensors":"984bb8aa4db2f7cc3071ded2969a55a1","sparse":"True","sparsity":"0.5","total_changed_elements":"2","total_elements":"4","version":"1","whole_files":"[]"},"w.indices":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"w.values":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}       `
	want := docHexBytes("7803000000000000") + wantJSON + docHexBytes("01000000 03000000 0140 8140")
	if string(out.b) != want {
		t.Errorf("patch bytes\n%q\nwant\n%q", out.b, want)
	}
	if len(out.b) != 908 {
		t.Errorf("patch is %d bytes, the document says 908", len(out.b))
	}
	// The document shows these bytes; keep it in step.
	doc, err := os.ReadFile("../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{strings.TrimRight(wantJSON, " "), "is 908 bytes long", "`78 03 00 00 00 00 00 00`: `N` = 888",
		"(881 bytes plus seven spaces of padding)", "(file offset 896)", "00000380  01 00 00 00 03 00 00 00"} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/format.md (Part III) lacks %q", s)
		}
	}
	// The document's hashes of the two files, by the one-shot functions.
	for _, c := range []struct {
		file       []byte
		sha, xxh3_ string
	}{
		{docPatchBase, "255ac236ecd498c4133eb92e040adaa9839aa03b9bd525d2671da5e5963d8490", "a5e125f92ea14a6badca1f685f0d9042"},
		{docPatchResult, "f67a92b891169de3bd0ee1dfc29c1a3a2520cc3f78cf24904936516dfddde9d2", "984bb8aa4db2f7cc3071ded2969a55a1"},
	} {
		sha, x := patchSHA(c.file), xxh3.Hash128(c.file).Bytes()
		if hex.EncodeToString(sha[:]) != c.sha || hex.EncodeToString(x[:]) != c.xxh3_ {
			t.Errorf("hashes %x %x, want %s %s", sha, x, c.sha, c.xxh3_)
		}
	}
}

func TestDocSlimeExample(t *testing.T) {
	var spool bytes.Buffer
	w, err := NewSlimeWriter(2, 0, func(int) (io.Writer, error) { return &spool, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddDiff("w", docPatchBase[72:], docPatchResult[72:]); err != nil {
		t.Fatal(err)
	}
	d, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	frame := docHexBytes("28b52ffd 24 0e 710000 02000000 02000000 06000000 01 81 53a69e65")
	if spool.String() != frame {
		t.Errorf("frame % x", spool.Bytes())
	}
	wantHeader := docHexBytes("7000000000000000") + `{"__metadata__":{"w":"69b81da6cd3f4d4da9a9caec21020684"},"w":{"dtype":"U8","shape":[27],"data_offsets":[0,27]}} `
	if len(d.Shards) != 1 || d.Shards[0].Name != "model-00000-of-00001.safetensors" || string(d.Shards[0].Header) != wantHeader {
		t.Errorf("shard %+v", d.Shards)
	}
}
