package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func validObjectHeader() ObjectHeader {
	return ObjectHeader{Kind: KindDelta, Width: 2, ID: IDOf([]byte("x")), ContentLen: 100, Base: IDOf([]byte("y")), DeltaLen: 10}
}

func TestParseObjectHeader(t *testing.T) {
	good := validObjectHeader()
	full := ObjectHeader{Kind: KindFull, Width: 1, ID: IDOf([]byte("x")), ContentLen: 3, FullLen: 20}
	mod := func(h ObjectHeader, f func(b []byte)) []byte {
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
		_, err := ParseObjectHeader(tc.b, tc.size)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func FuzzParseObjectHeader(f *testing.F) {
	h := validObjectHeader()
	f.Add(h.Encode(), h.FileSize())
	full := ObjectHeader{Kind: KindFull, Width: 4, ContentLen: 8, FullLen: 30}
	f.Add(full.Encode(), full.FileSize())
	f.Add([]byte("WFSO"), int64(4))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		h, err := ParseObjectHeader(b, size)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to the same bytes and describes a consistent file.
		if !bytes.Equal(h.Encode(), b[:ObjectHeaderLen]) {
			t.Fatalf("header does not re-encode to its bytes")
		}
		if h.FileSize() != size || h.ContentLen%int64(h.Width) != 0 {
			t.Fatalf("inconsistent header accepted: %+v for %d bytes", h, size)
		}
	})
}
