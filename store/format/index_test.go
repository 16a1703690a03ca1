package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestIndexValue: a value is its payload and the CRC-32C of key and payload; a value that
// is short, flipped, or read under another key is damage, and nil is a miss.
func TestIndexValue(t *testing.T) {
	key, payload := []byte("materialized"), []byte(`{"version":3,"clean":true}`)
	v := SealIndexValue(key, payload)
	crc := CRC32C(append(bytes.Clone(key), payload...))
	if !bytes.Equal(v, binary.LittleEndian.AppendUint32(bytes.Clone(payload), crc)) {
		t.Fatalf("sealed value %x, want the payload and CRC-32C %08x", v, crc)
	}
	if got, err := OpenIndexValue(key, v); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if got, err := OpenIndexValue(key, nil); got != nil || err != nil {
		t.Fatalf("a miss: %q, %v", got, err)
	}
	flipped := bytes.Clone(v)
	flipped[3] ^= 1
	for name, c := range map[string]struct{ key, v []byte }{
		"short": {key, v[:3]}, "flipped": {key, flipped}, "other key": {[]byte("dirty"), v},
	} {
		if _, err := OpenIndexValue(c.key, c.v); !errors.Is(err, ErrIndexDamaged) {
			t.Errorf("%s: %v, want ErrIndexDamaged", name, err)
		}
	}
}

// TestIndexObjectBytes pins an object's record: 70 bytes, as docs/format.md §6 lists them.
func TestIndexObjectBytes(t *testing.T) {
	m := IndexObject{Kind: KindDelta, Width: 2, Base: ID{0xbb}, ContentLen: 0x0102, FileSize: 0x0304, DeltaLen: 0x0506, Depth: 7, ChainBytes: 0x0809}
	b := m.Encode()
	want := append([]byte{2, 2, 0xbb}, make([]byte, 31)...)
	for _, n := range []uint64{0x0102, 0x0304, 0x0506} {
		want = binary.LittleEndian.AppendUint64(want, n)
	}
	want = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(want, 7), 0x0809)
	if len(b) != IndexObjectLen || IndexObjectLen != 70 || !bytes.Equal(b, want) {
		t.Fatalf("record % x\nwant   % x", b, want)
	}
	if back, ok := DecodeIndexObject(b); !ok || back != m {
		t.Fatalf("decode: %+v, %v", back, ok)
	}
	b[0] = 3
	if _, ok := DecodeIndexObject(b); ok {
		t.Fatal("a record of kind 3 accepted")
	}
}

// FuzzOpenIndexValue: no value panics the check, and what passes it seals back to itself.
func FuzzOpenIndexValue(f *testing.F) {
	f.Add([]byte("k"), SealIndexValue([]byte("k"), []byte("1")))
	f.Add([]byte("materialized"), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, key, v []byte) {
		p, err := OpenIndexValue(key, v)
		if err != nil || v == nil {
			return
		}
		if !bytes.Equal(SealIndexValue(key, p), v) {
			t.Fatalf("value %x opens to %x, which seals to %x", v, p, SealIndexValue(key, p))
		}
	})
}
