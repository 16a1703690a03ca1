package pack

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if n := off + int64(len(p)); n > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, n-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

// record returns a fake object file of n bytes (the pack does not parse records) whose last
// four bytes are the CRC-32C of the rest, as an object file's are.
func record(seed byte, n int) []byte {
	b := bytes.Repeat([]byte{seed}, n)
	binary.LittleEndian.PutUint32(b[n-4:], crc32.Checksum(b[:n-4], castagnoli))
	return b
}

func buildPack(t testing.TB, recs map[ID][]byte, order []ID) ([]byte, ID, []Entry) {
	t.Helper()
	m := &memFile{}
	w := NewWriter(m)
	for _, id := range order {
		if err := w.Add(id, recs[id]); err != nil {
			t.Fatal(err)
		}
	}
	id, size, entries, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(m.b)) {
		t.Fatalf("Finish says %d bytes, wrote %d", size, len(m.b))
	}
	return m.b, id, entries
}

func TestPackRoundTrip(t *testing.T) {
	ids := []ID{sha256.Sum256([]byte("c")), sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))}
	recs := map[ID][]byte{ids[0]: record(1, 100), ids[1]: record(2, 300), ids[2]: record(3, 177)}
	b, id, _ := buildPack(t, recs, ids)
	entries, got, err := ReadTrailer(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Fatalf("pack id %x, Finish said %x", got, id)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries", len(entries))
	}
	for _, want := range ids {
		e, ok := Find(entries, want)
		if !ok {
			t.Fatalf("%x not found", want[:4])
		}
		if !bytes.Equal(b[e.Offset:e.Offset+e.Length], recs[want]) {
			t.Fatalf("record of %x differs", want[:4])
		}
		if e.CRC != binary.LittleEndian.Uint32(recs[want][len(recs[want])-4:]) {
			t.Fatalf("crc of %x", want[:4])
		}
	}
	if _, ok := Find(entries, ID{}); ok {
		t.Fatal("found an id the pack lacks")
	}
	// Every single flipped byte of the table or footer is found.
	tableAt := len(b) - (3*EntryLen + FooterLen)
	for i := tableAt; i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		if _, _, err := ReadTrailer(bytes.NewReader(c), int64(len(c))); err == nil {
			t.Fatalf("flip at %d (table at %d) not found", i, tableAt)
		}
	}
	if _, _, err := ReadTrailer(bytes.NewReader(b[:len(b)-1]), int64(len(b)-1)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated pack: %v", err)
	}
}

func TestIndexRoundTrip(t *testing.T) {
	ids := []ID{sha256.Sum256([]byte("x")), sha256.Sum256([]byte("y"))}
	b, pid, entries := buildPack(t, map[ID][]byte{ids[0]: record(7, 120), ids[1]: record(8, 140)}, ids)
	x := &Index{Seq: 42, Packs: []IndexedPack{{ID: pid, Size: int64(len(b)), Entries: entries}}}
	enc := x.Encode()
	got, err := DecodeIndex(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 42 || len(got.Packs) != 1 || got.Packs[0].ID != pid || len(got.Packs[0].Entries) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	name := Name(42, enc)
	if seq, ok := ParseName(name); !ok || seq != 42 || len(name) != 33 {
		t.Fatalf("name %q: %d %v", name, seq, ok)
	}
	for _, bad := range []string{"0000000000000042-00", "x", "0000000000000042-ABCDEF0123456789", ".tmp-1"} {
		if _, ok := ParseName(bad); ok {
			t.Fatalf("ParseName(%q) accepted", bad)
		}
	}
	for i := range enc {
		c := bytes.Clone(enc)
		c[i] ^= 0x01
		if _, err := DecodeIndex(c); err == nil {
			t.Fatalf("flip at %d not found", i)
		}
	}
	// An index whose table is another pack's is refused even with a right CRC.
	x.Packs[0].ID[0] ^= 1
	if _, err := DecodeIndex(x.Encode()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("index naming another pack: %v", err)
	}
	v := bytes.Clone(enc)
	v[4] = 9
	if _, err := DecodeIndex(v); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown version: %v", err)
	}
}

func FuzzReadTrailer(f *testing.F) {
	ids := []ID{sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))}
	b, _, _ := buildPack(f, map[ID][]byte{ids[0]: record(1, 100), ids[1]: record(2, 101)}, ids)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, _, err := ReadTrailer(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Offset < 0 || e.Length < MinRecordLen || e.Offset+e.Length > int64(len(b)) {
				t.Fatalf("entry out of the pack: %+v in %d bytes", e, len(b))
			}
		}
	})
}

func FuzzDecodeIndex(f *testing.F) {
	ids := []ID{sha256.Sum256([]byte("a"))}
	b, pid, entries := buildPack(f, map[ID][]byte{ids[0]: record(1, 100)}, ids)
	f.Add((&Index{Seq: 1, Packs: []IndexedPack{{ID: pid, Size: int64(len(b)), Entries: entries}}}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeIndex(b)
		if err != nil {
			return
		}
		if again := x.Encode(); !bytes.Equal(again, b) {
			t.Fatalf("decoded index encodes to other bytes")
		}
	})
}
