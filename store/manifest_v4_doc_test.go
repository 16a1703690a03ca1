package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// docManifestV4 is the worked example of a manifest of format 4 in docs/format.md §4:
// version 1 holding Part III §1's base file (one BF16 tensor w, [2,2], 1.0 2.0 3.0 4.0) as
// model.safetensors, its tensor carrying the xxh3-128 of its 8 raw bytes.
func docManifestV4(t *testing.T) (*manifest, []byte) {
	t.Helper()
	head := []byte("@\x00\x00\x00\x00\x00\x00\x00" + `{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}       `)
	data := []byte{0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 0x80, 0x40}
	file := append(append([]byte(nil), head...), data...)
	m := &manifest{
		Version: 1,
		Created: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC),
		Dirs:    []manifestDir{},
		Files: []manifestFile{{
			Path: "model.safetensors", Mode: 0o644, Size: int64(len(file)), SHA256: IDOf(file), Kind: kindSafetensors,
			Header: IDOf(head), HeaderLen: int64(len(head)),
			Tensors: []manifestTensor{{Name: "w", DType: delta.DTypeBF16, Shape: []int64{2, 2}, Begin: 0, End: 8,
				ID: IDOf(data), Changed: 4, XXH3: xxh3Of(data)}},
		}},
		Stats: manifestStats{LogicalBytes: int64(len(file)), NewObjects: 2, NewObjectBytes: 0, ChangedElems: 4, TotalElems: 4},
	}
	b, err := encodeManifestChecked(m, maxManifestLen)
	if err != nil {
		t.Fatal(err)
	}
	return m, b
}

// TestDocManifestV4Example pins docs/format.md §4's format-4 example: its first 16 bytes,
// its JSON verbatim, its length and the tensor's digest (the xxh3-128 of the 8 data bytes).
func TestDocManifestV4Example(t *testing.T) {
	m, b := docManifestV4(t)
	if v := binary.LittleEndian.Uint16(b[4:]); v != manifestTensorDigests {
		t.Fatalf("the example is format %d, want %d", v, manifestTensorDigests)
	}
	back, err := decodeManifest(b)
	if err != nil || back.Files[0].Tensors[0].XXH3 != m.Files[0].Tensors[0].XXH3 {
		t.Fatalf("the example does not read back: %v", err)
	}
	section := docFormatSection(t, "### 4. Manifests", "#### 4.1")
	found := false
	for _, d := range docDumps(t, section) {
		if head, ok := d[0]; ok && bytes.HasPrefix(head, []byte("WFSM\x04")) {
			found = true
			if !bytes.Equal(head, b[:16]) {
				t.Errorf("docs/format.md §4's format-4 example starts % x, the manifest % x", head, b[:16])
			}
		}
	}
	if !found {
		t.Fatal("docs/format.md §4 has no hex dump of a format-4 manifest")
	}
	js := string(b[16 : len(b)-4])
	for _, want := range []string{
		js,
		fmt.Sprintf("%d bytes", len(b)),
		fmt.Sprintf("L = %d", len(js)),
		fmt.Sprintf("CRC-32C of bytes 0..%d", len(b)-5),
		fmt.Sprintf("%08x", binary.LittleEndian.Uint32(b[len(b)-4:])),
		m.Files[0].Tensors[0].XXH3.String(),
	} {
		if !strings.Contains(section, want) {
			t.Errorf("docs/format.md §4's format-4 example lacks %q", want)
		}
	}
}
