package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestFormatFile(t *testing.T) {
	good := EncodeFormatFile(StoreFormatVersion)
	if len(good) != FormatFileLen || string(good[:8]) != "WFSSTORE" {
		t.Fatalf("format file %x", good)
	}
	if v, err := FormatFileVersion(good); v != 3 || err != nil {
		t.Fatalf("a new store's format: %d, %v; want 3", v, err)
	}
	// The worked examples of docs/format.md Part I §2.
	for v, want := range map[uint32]string{1: "5746535354 4f524501000000eee61f2a", 2: "5746535354 4f524502000000d76f3d48",
		3: "5746535354 4f5245030000006fc57895"} {
		if got := fmt.Sprintf("%x", EncodeFormatFile(v)); got != strings.ReplaceAll(want, " ", "") {
			t.Errorf("format file of format %d: %s, want %s", v, got, want)
		}
	}
	version := func(v uint32) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b[8:], v)
		binary.LittleEndian.PutUint32(b[12:], CRC32C(b[:12]))
		return b
	}
	older, newer, zero := version(1), version(4), version(0)
	flipped := append([]byte(nil), good...)
	flipped[13] ^= 1
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"good", good, nil},
		{"format 1", older, nil},
		{"format 2", version(2), nil},
		{"format 0", zero, ErrUnsupportedVersion},
		{"alien", []byte("hello world, not a store"), ErrNotAStore},
		{"empty", nil, ErrNotAStore},
		{"newer version", newer, ErrUnsupportedVersion},
		{"flipped checksum", flipped, ErrCorrupt},
		{"truncated", good[:12], ErrCorrupt},
	} {
		err := CheckFormatFile(tc.b)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzSmallParsers feeds the store's small decoders: the format file, manifest names, object
// ids and the index's object records. None may panic; what they accept must round-trip.
func FuzzSmallParsers(f *testing.F) {
	f.Add(EncodeFormatFile(StoreFormatVersion))
	f.Add([]byte("v000043"))
	f.Add([]byte(IDOf(nil).String()))
	m := IndexObject{Kind: KindDelta, Width: 2, Base: IDOf([]byte("b")), ContentLen: 10, FileSize: 120, DeltaLen: 20, Depth: 3, ChainBytes: 60}
	f.Add(m.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := FormatFileVersion(b); err == nil && string(b) != string(EncodeFormatFile(v)) {
			t.Fatalf("format file %x accepted", b)
		}
		if v, ok := ParseManifestName(string(b)); ok && ManifestName(v) != string(b) {
			t.Fatalf("manifest name %q parsed to %d", b, v)
		}
		if id, err := ParseID(string(b)); err == nil && id.String() != string(b) {
			t.Fatalf("id %q parsed to %s", b, id)
		}
		if m, ok := DecodeIndexObject(b); ok && string(m.Encode()) != string(b) {
			t.Fatalf("index entry %x does not re-encode", b)
		}
	})
}

func TestParseID(t *testing.T) {
	id := IDOf([]byte("x"))
	got, err := ParseID(id.String())
	if err != nil || got != id {
		t.Fatalf("ParseID(String()) = %s, %v", got, err)
	}
	for _, bad := range []string{"", "abc", id.String()[:63] + "G", "AB" + id.String()[2:]} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

// TestManifestNames: a manifest's name is "v" and at least six digits, and nothing else
// parses as one (leading zeros beyond six digits, version 0, numbers above MaxVersion).
func TestManifestNames(t *testing.T) {
	for v, want := range map[uint64]string{1: "v000001", 43: "v000043", 1234567: "v1234567", MaxVersion: "v999999999999"} {
		if got := ManifestName(v); got != want {
			t.Errorf("ManifestName(%d) = %s, want %s", v, got, want)
		}
		if back, ok := ParseManifestName(want); !ok || back != v {
			t.Errorf("ParseManifestName(%s) = %d, %v", want, back, ok)
		}
	}
	for _, bad := range []string{"", "v", "v00001", "v000000", "v0000043", "V000043", "v000043.tmp", "v+00043", "v1000000000000"} {
		if v, ok := ParseManifestName(bad); ok {
			t.Errorf("ParseManifestName(%q) = %d", bad, v)
		}
	}
}
