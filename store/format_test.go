package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

func TestFormatFile(t *testing.T) {
	good := encodeFormatFile()
	if len(good) != formatFileLen || string(good[:8]) != "WFSSTORE" {
		t.Fatalf("format file %x", good)
	}
	if v, err := FormatVersion(good); v != 3 || err != nil {
		t.Fatalf("a new store's format: %d, %v; want 3", v, err)
	}
	// The worked examples of docs/format.md Part I §2.
	for v, want := range map[uint32]string{1: "5746535354 4f524501000000eee61f2a", 2: "5746535354 4f524502000000d76f3d48",
		3: "5746535354 4f5245030000006fc57895"} {
		if got := fmt.Sprintf("%x", encodeFormatVersion(v)); got != strings.ReplaceAll(want, " ", "") {
			t.Errorf("format file of format %d: %s, want %s", v, got, want)
		}
	}
	version := func(v uint32) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b[8:], v)
		binary.LittleEndian.PutUint32(b[12:], crc32c(b[:12]))
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
		err := checkFormatFile(tc.b)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestOpenRefusesNonStores(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{ReadOnly: true}); !errors.Is(err, ErrNotAStore) {
		t.Fatalf("open of an empty directory: %v", err)
	}
	root := filepath.Join(t.TempDir(), "s")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	if err := Init(root); err == nil {
		t.Fatal("init of a non-empty directory succeeded")
	}
	b := encodeFormatFile()
	binary.LittleEndian.PutUint32(b[8:], 9) // a later format: refused, never guessed
	binary.LittleEndian.PutUint32(b[12:], crc32c(b[:12]))
	os.WriteFile(filepath.Join(root, formatFileName), b, 0o644)
	if _, err := Open(root, Options{}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("open of a format-9 store: %v", err)
	}
}

func validObjectHeader() objectHeader {
	return objectHeader{Kind: kindDelta, Width: 2, ID: IDOf([]byte("x")), ContentLen: 100, Base: IDOf([]byte("y")), DeltaLen: 10}
}

func TestParseObjectHeader(t *testing.T) {
	good := validObjectHeader()
	full := objectHeader{Kind: kindFull, Width: 1, ID: IDOf([]byte("x")), ContentLen: 3, FullLen: 20}
	mod := func(h objectHeader, f func(b []byte)) []byte {
		b := h.Encode()
		f(b)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		size int64
		want error
	}{
		{"delta", good.Encode(), good.FileSize(), nil},
		{"full", full.Encode(), full.FileSize(), nil},
		{"bad magic", mod(good, func(b []byte) { b[0] = 'X' }), good.FileSize(), ErrCorrupt},
		{"version 2", mod(good, func(b []byte) { b[4] = 2 }), good.FileSize(), ErrUnsupportedVersion},
		{"kind 3", mod(good, func(b []byte) { b[6] = 3 }), good.FileSize(), ErrCorrupt},
		{"width 3", mod(good, func(b []byte) { b[7] = 3 }), good.FileSize(), ErrCorrupt},
		{"content not whole elements", mod(good, func(b []byte) { b[40] = 101 }), good.FileSize(), ErrCorrupt},
		{"file longer", good.Encode(), good.FileSize() + 1, ErrCorrupt},
		{"file shorter", good.Encode(), good.FileSize() - 1, ErrCorrupt},
		{"delta without base", mod(good, func(b []byte) { clear(b[48:80]) }), good.FileSize(), ErrCorrupt},
		{"delta with full section", mod(good, func(b []byte) { b[80] = 1 }), good.FileSize() + 1, ErrCorrupt},
		{"own base", mod(good, func(b []byte) { copy(b[48:80], b[8:40]) }), good.FileSize(), ErrCorrupt},
		{"huge lengths", mod(good, func(b []byte) { binary.LittleEndian.PutUint64(b[88:], 1<<63) }), good.FileSize(), ErrCorrupt},
		{"short", good.Encode()[:50], 50, ErrCorrupt},
	} {
		_, err := parseObjectHeader(tc.b, tc.size)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func FuzzParseObjectHeader(f *testing.F) {
	h := validObjectHeader()
	f.Add(h.Encode(), h.FileSize())
	full := objectHeader{Kind: kindFull, Width: 4, ContentLen: 8, FullLen: 30}
	f.Add(full.Encode(), full.FileSize())
	f.Add([]byte("WFSO"), int64(4))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		h, err := parseObjectHeader(b, size)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to the same bytes and describes a consistent file.
		if !bytes.Equal(h.Encode(), b[:objectHeaderLen]) {
			t.Fatalf("header does not re-encode to its bytes")
		}
		if h.FileSize() != size || h.ContentLen%int64(h.Width) != 0 {
			t.Fatalf("inconsistent header accepted: %+v for %d bytes", h, size)
		}
	})
}

// FuzzReadObjectInfo feeds whole object files (header, chunk table) to the reader.
func FuzzReadObjectInfo(f *testing.F) {
	s, _ := newStore(f, Options{})
	for _, content := range [][]byte{nil, []byte("abc"), bytes.Repeat([]byte("weights"), 200_000)} {
		fw, err := newFullWriter(s.be, s.codec, 1, int64(len(content)))
		if err != nil {
			f.Fatal(err)
		}
		fw.Write(content)
		id, err := fw.finish(ID{}, ID{}, nil)
		if err != nil {
			f.Fatal(err)
		}
		fw.put(id)
		file, err := storedObject(s, id)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(file)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		info, err := readObjectInfo(memObject(file))
		if err != nil {
			return
		}
		if info.hdr.Kind == kindFull {
			last := info.table.Offsets[len(info.table.Offsets)-1]
			if last != objectHeaderLen+info.hdr.FullLen || last > int64(len(file)) {
				t.Fatalf("chunk table ends at %d in a %d-byte file", last, len(file))
			}
		}
	})
}

type memObject []byte

func (m memObject) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(m).ReadAt(p, off)
}
func (m memObject) Size() int64  { return int64(len(m)) }
func (m memObject) Close() error { return nil }

func sampleManifest() *manifest {
	return &manifest{
		Version: 43, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Previous: 42,
		Dirs: []manifestDir{{Path: "sub", Mode: 0o755}},
		Files: []manifestFile{
			{Path: "config.json", Mode: 0o644, Size: 2, SHA256: IDOf([]byte("{}")), Kind: kindBlob, ID: IDOf([]byte("{}"))},
			{Path: "sub/model.safetensors", Mode: 0o644, Size: 64 + 16, SHA256: IDOf([]byte("file")), Kind: kindSafetensors,
				Header: IDOf([]byte("header")), HeaderLen: 64, Tensors: []manifestTensor{
					{Name: "a", DType: delta.DTypeBF16, Shape: []int64{2, 2}, Begin: 0, End: 8, ID: IDOf([]byte("a")), Base: IDOf([]byte("a0")), Changed: 1},
					{Name: "b", DType: delta.DTypeF32, Shape: []int64{2}, Begin: 8, End: 16, ID: IDOf([]byte("b")), Changed: 2},
				}},
		},
		Stats: manifestStats{LogicalBytes: 82, NewObjects: 2, NewObjectBytes: 300, ChangedElems: 3, TotalElems: 6},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := sampleManifest()
	b, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := encodeManifest(got)
	if !bytes.Equal(again, b) {
		t.Fatalf("decode+encode changes the manifest bytes")
	}
}

func TestDecodeManifestRefusesBadInput(t *testing.T) {
	good, _ := encodeManifest(sampleManifest())
	reencode := func(f func(m *manifest)) []byte {
		m := sampleManifest()
		f(m)
		js, _ := encodeManifest(m)
		return js
	}
	flip := append([]byte(nil), good...)
	flip[40] ^= 0x20
	v3 := append([]byte(nil), good...)
	v3[4] = manifestIndexes + 1 // the first manifest format version no reader knows
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"magic", []byte("XXXX" + string(good[4:])), ErrCorrupt},
		{"version 4", v3, ErrUnsupportedVersion},
		{"bad index name", reencode(func(m *manifest) { m.Indexes = []string{"../x"} }), ErrCorrupt},
		{"flipped byte", flip, ErrCorrupt},
		{"truncated", good[:len(good)-1], ErrCorrupt},
		{"absolute path", reencode(func(m *manifest) { m.Files[0].Path = "/etc/passwd" }), ErrCorrupt},
		{"dot-dot path", reencode(func(m *manifest) { m.Files[0].Path = "../x" }), ErrCorrupt},
		{"duplicate path", reencode(func(m *manifest) { m.Files[0].Path = "sub/model.safetensors" }), ErrCorrupt},
		{"file below a file", reencode(func(m *manifest) { m.Files[0].Path = "sub/model.safetensors/x" }), ErrCorrupt},
		{"tensor gap", reencode(func(m *manifest) { m.Files[1].Tensors[1].Begin = 9 }), ErrCorrupt},
		{"size mismatch", reencode(func(m *manifest) { m.Files[1].Size++ }), ErrCorrupt},
		{"unknown dtype", reencode(func(m *manifest) { m.Files[1].Tensors[0].DType = "F13" }), ErrCorrupt},
		{"unknown kind", reencode(func(m *manifest) { m.Files[0].Kind = "tarball" }), ErrCorrupt},
		{"previous not below", reencode(func(m *manifest) { m.Previous = 43 }), ErrCorrupt},
		{"blob without object", reencode(func(m *manifest) { m.Files[0].ID = ID{} }), ErrCorrupt},
	} {
		if _, err := decodeManifest(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	good, _ := encodeManifest(sampleManifest())
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte("WFSM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded manifest does not validate: %v", err)
		}
		// Anything accepted must round-trip (no field silently dropped).
		again, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(again); err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
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

// FuzzSmallParsers feeds the store's small decoders: the format file, manifest names, object
// ids and index entries. None may panic; what they accept must round-trip.
func FuzzSmallParsers(f *testing.F) {
	f.Add(encodeFormatFile())
	f.Add([]byte("v000043"))
	f.Add([]byte(IDOf(nil).String()))
	m := objMeta{Kind: kindDelta, Width: 2, Base: IDOf([]byte("b")), ContentLen: 10, FileSize: 120, DeltaLen: 20, Depth: 3, ChainBytes: 60}
	f.Add(m.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkFormatFile(b) == nil && !bytes.Equal(b, encodeFormatFile()) {
			t.Fatalf("format file %x accepted", b)
		}
		if v, ok := parseManifestName(string(b)); ok && manifestName(v) != string(b) {
			t.Fatalf("manifest name %q parsed to %d", b, v)
		}
		if id, err := ParseID(string(b)); err == nil && id.String() != string(b) {
			t.Fatalf("id %q parsed to %s", b, id)
		}
		if m, ok := decodeObjMeta(b); ok && !bytes.Equal(m.Encode(), b) {
			t.Fatalf("index entry %x does not re-encode", b)
		}
	})
}

// TestFormatUpgrade: a writer opening a store of format 1 rewrites its format file as format 3
// before it writes, and then writes version-2 delta sections (and packs); a reader of a
// format-1 store changes nothing, and a program that reads only format 1 refuses the upgraded
// store. A writer keeping loose objects (the test knob) upgrades it to format 2 only.
func TestFormatUpgrade(t *testing.T) {
	root := filepath.Join(t.TempDir(), "s")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	fmtPath := filepath.Join(root, formatFileName)
	if err := os.WriteFile(fmtPath, encodeFormatVersion(1), 0o600); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	if b, _ := os.ReadFile(fmtPath); !bytes.Equal(b, encodeFormatVersion(1)) || r.objects.contextChain != 0 {
		t.Fatalf("a reader of a format-1 store: format file %x, context chain %d", b, r.objects.contextChain)
	}
	closeStore(t, r)
	l := openLoose(t, root, Options{})
	if b, _ := os.ReadFile(fmtPath); !bytes.Equal(b, encodeFormatVersion(2)) || l.objects.contextChain != maxContextChain {
		t.Fatalf("a loose writer of a format-1 store: format file %x, context chain %d", b, l.objects.contextChain)
	}
	closeStore(t, l)
	if err := os.WriteFile(fmtPath, encodeFormatVersion(1), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, root, Options{})
	b, _ := os.ReadFile(fmtPath)
	if !bytes.Equal(b, encodeFormatVersion(3)) || s.objects.contextChain != maxContextChain {
		t.Fatalf("a writer of a format-1 store: format file %x, context chain %d", b, s.objects.contextChain)
	}
	if fi, err := os.Stat(fmtPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("format file after the upgrade: %v, %v", fi.Mode(), err)
	}
	// What a program of format 1 checks (the version field against 1) now fails.
	if v := binary.LittleEndian.Uint32(b[8:]); v == 1 {
		t.Fatal("still format 1")
	}
}
