package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

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
	v3[4] = manifestTensorDigests + 1 // the first manifest format version no reader knows
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"magic", []byte("XXXX" + string(good[4:])), ErrCorrupt},
		{"version 5", v3, ErrUnsupportedVersion},
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
