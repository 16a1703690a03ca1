package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The worked example of a manifest of format version 2 in docs/format.md §4, pinned against
// the document: version 1 holding one 2-byte file, config.json, below a path of 3073 bytes
// (names of 255 bytes, the first of letters a, the next of b, ...). Its first 16 bytes must be
// the dump's, and its size the one stated; a manifest of the same version whose path is one
// byte shorter is format 1.
func TestDocManifestV2Example(t *testing.T) {
	example := func(n int) []byte {
		t.Helper()
		content := []byte("{}")
		m := &manifest{
			Version: 1,
			Created: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC),
			Dirs:    []manifestDir{},
			Files: []manifestFile{{
				Path: longPath(n, "config.json"), Mode: 0o644, Size: int64(len(content)),
				SHA256: IDOf(content), Kind: "blob", ID: IDOf(content),
			}},
			Stats: manifestStats{LogicalBytes: int64(len(content))},
		}
		b, err := encodeManifestChecked(m, maxManifestLen)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(b); err != nil {
			t.Fatalf("the example of %d bytes does not read back: %v", n, err)
		}
		return b
	}
	b := example(3073)
	if v := binary.LittleEndian.Uint16(b[4:]); v != manifestLongPaths {
		t.Fatalf("a manifest with a path of 3073 bytes is format %d, want %d", v, manifestLongPaths)
	}
	if v := binary.LittleEndian.Uint16(example(3072)[4:]); v != manifestFormatVersion {
		t.Fatalf("a manifest with a path of 3072 bytes is format %d, want %d", v, manifestFormatVersion)
	}
	section := docFormatSection(t, "### 4. Manifests", "#### 4.1")
	var found bool
	for _, d := range docDumps(t, section) {
		head, ok := d[0]
		if !ok || !bytes.HasPrefix(head, []byte("WFSM\x02")) { // format 4's example: TestDocManifestV4Example
			continue
		}
		found = true
		if !bytes.Equal(head, b[:16]) {
			t.Errorf("docs/format.md §4's format-2 example starts % x, the manifest % x", head, b[:16])
		}
	}
	if !found {
		t.Fatalf("docs/format.md §4 has no hex dump of a format-2 manifest")
	}
	for _, want := range []string{
		fmt.Sprintf("%d bytes", len(b)),
		fmt.Sprintf("L = %d", len(b)-20),
		fmt.Sprintf("CRC-32C of bytes 0..%d", len(b)-5),
	} {
		if !strings.Contains(section, want) {
			t.Errorf("docs/format.md §4's format-2 example lacks %q", want)
		}
	}
}
