package format

import (
	"encoding/binary"
	"errors"
	"regexp"
	"strings"
	"testing"
)

var digest = regexp.MustCompile(`"xxh3":"[0-9a-f]{32}"`)

// TestManifestTensorDigests: a manifest whose tensors carry xxh3 is written as format 4 and
// reads back with its digests; one without stays the format it was; a malformed digest is
// refused as damage; the digest is the canonical big-endian xxh3-128 of docs/format.md.
func TestManifestTensorDigests(t *testing.T) {
	if got := XXH3Of([]byte("abc")).String(); got != "06b05ab6733a618578af5f94892f3950" {
		t.Fatalf("xxh3-128 of abc: %s", got)
	}
	m := moeManifest(4, 1)
	b := mustEncode(t, m)
	if v := binary.LittleEndian.Uint16(b[4:]); v != ManifestTensorDigests {
		t.Fatalf("a manifest with tensor digests is format %d, want %d", v, ManifestTensorDigests)
	}
	back, err := DecodeManifest(b)
	if err != nil || back.Files[0].Tensors[3].XXH3 != m.Files[0].Tensors[3].XXH3 || back.Files[0].Tensors[3].XXH3.IsZero() {
		t.Fatalf("read back: %v", err)
	}
	for i := range m.Files[0].Tensors {
		m.Files[0].Tensors[i].XXH3 = XXH3{}
	}
	b = mustEncode(t, m)
	if v := binary.LittleEndian.Uint16(b[4:]); v != ManifestFormatVersion {
		t.Fatalf("a manifest without tensor digests is format %d, want %d", v, ManifestFormatVersion)
	}
	if strings.Contains(string(b), "xxh3") {
		t.Fatal("a zero digest is written")
	}
	js, _ := ManifestBody(mustEncode(t, moeManifest(2, 1)))
	for _, bad := range []string{`"0123"`, `"0123456789ABCDEF0123456789abcdef"`, `"0123456789abcdef0123456789abcdefa"`, `"0123456789abcdef0123456789abcdeg"`, `12`, `true`} {
		x := digest.ReplaceAllLiteralString(string(js), `"xxh3":`+bad)
		if !strings.Contains(x, `"xxh3":`+bad+`}`) {
			t.Fatalf("test JSON not made: %.300s", x)
		}
		frame := binary.LittleEndian.AppendUint16([]byte(ManifestMagic), ManifestTensorDigests)
		frame = binary.LittleEndian.AppendUint64(append(frame, 0, 0), uint64(len(x)))
		frame = append(frame, x...)
		frame = binary.LittleEndian.AppendUint32(frame, CRC32C(frame))
		if _, err := DecodeManifest(frame); !errors.Is(err, ErrCorrupt) {
			t.Errorf("xxh3 %s: %v, want ErrCorrupt", bad, err)
		}
	}
	// A format beyond this program's is refused as unknown, not as damage.
	b = mustEncode(t, moeManifest(1, 1))
	binary.LittleEndian.PutUint16(b[4:], ManifestTensorDigests+1)
	binary.LittleEndian.PutUint32(b[len(b)-4:], CRC32C(b[:len(b)-4]))
	if _, err := DecodeManifest(b); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("format %d: %v", ManifestTensorDigests+1, err)
	}
}
