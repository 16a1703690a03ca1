package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// gcRecordExample is docs/format.md Part I §4.4's example: since 0, ranges 1-2 and 4-4
// (store's TestGCRecordFormat checks that a gc writes it and that the document shows it).
const gcRecordExample = "57 46 53 44 52 4f 50 53 01 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 7c f9 4c d2"

// TestParseGCRecord: the example encodes to the document's bytes and parses back, and the
// parser refuses every record that fails a check.
func TestParseGCRecord(t *testing.T) {
	good := EncodeGCRecord(GCRecord{Since: 0, Ranges: []VersionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}})
	if got := strings.TrimSpace(fmt.Sprintf("% x", good)); got != gcRecordExample {
		t.Fatalf("gc record of 1-2 and 4\n got %s\nwant %s", got, gcRecordExample)
	}
	r, err := ParseGCRecord(good)
	if err != nil || r.Since != 0 || fmt.Sprint(r.Ranges) != "[{1 2} {4 4}]" {
		t.Fatalf("parse: %+v, %v", r, err)
	}
	for v, want := range map[uint64]bool{1: true, 2: true, 3: false, 4: true, 5: false, 6: false} {
		if r.Dropped(v) != want {
			t.Errorf("dropped(%d) = %v", v, !want)
		}
	}
	// withCRC sets the CRC of a changed record, so that the later checks are reached.
	withCRC := func(b []byte) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[len(b)-4:], CRC32C(b[:len(b)-4]))
		return b
	}
	set := func(off int, v uint64) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint64(b[off:], v)
		return withCRC(b)
	}
	flip := bytes.Clone(good)
	flip[30] ^= 1
	v2 := bytes.Clone(good)
	v2[8] = 2
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"other magic", append([]byte("WFSSTORE"), good[8:]...), ErrCorrupt},
		{"magic only", []byte(GCRecordMagic), ErrCorrupt},
		{"version 2", withCRC(v2), ErrUnsupportedVersion},
		{"short", good[:len(good)-1], ErrCorrupt},
		{"long", append(bytes.Clone(good), 0), ErrCorrupt},
		{"count", func() []byte { b := bytes.Clone(good); b[20] = 3; return withCRC(b) }(), ErrCorrupt},
		{"flipped", flip, ErrCorrupt},
		{"since too high", set(12, MaxVersion+1), ErrCorrupt},
		{"first zero", set(24, 0), ErrCorrupt},
		{"first above last", set(24, 3), ErrCorrupt},
		{"overlap", set(40, 2), ErrCorrupt},
		{"last too high", set(48, MaxVersion+1), ErrCorrupt},
	} {
		if _, err := ParseGCRecord(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzParseGCRecord(f *testing.F) {
	f.Add(EncodeGCRecord(GCRecord{Since: 0, Ranges: []VersionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}}))
	f.Add(EncodeGCRecord(GCRecord{Since: 7}))
	f.Add([]byte(GCRecordMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseGCRecord(b)
		if err != nil {
			return
		}
		// A record that parses is exactly the encoding of what it says.
		if again := EncodeGCRecord(r); !bytes.Equal(again, b) {
			t.Fatalf("parsed %+v from %x, which encodes to %x", r, b, again)
		}
	})
}

// TestGCRecordAdd: dropped versions become ranges, joined where no remaining version lies
// between.
func TestGCRecordAdd(t *testing.T) {
	for _, c := range []struct {
		old       []VersionRange
		drop      []uint64
		remaining []uint64
		want      string
	}{
		{nil, []uint64{1, 2, 4}, []uint64{3, 5, 6}, "[{1 2} {4 4}]"},
		{nil, []uint64{1, 5, 9}, []uint64{10}, "[{1 9}]"}, // numbers with gaps
		{[]VersionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}, []uint64{5}, []uint64{3, 6, 7}, "[{1 2} {4 5}]"},
		{[]VersionRange{{First: 1, Last: 2}}, []uint64{3, 4}, []uint64{5}, "[{1 4}]"},
		{[]VersionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}, []uint64{3}, []uint64{5}, "[{1 4}]"}, // the milestone goes
		{[]VersionRange{{First: 1, Last: 4}}, nil, []uint64{5}, "[{1 4}]"},
		{nil, []uint64{2}, []uint64{1, 3}, "[{2 2}]"},                                                // a pinned oldest version stays
		{[]VersionRange{{First: 1, Last: 6}}, []uint64{7}, []uint64{3, 6, 8}, "[{1 2} {4 5} {7 7}]"}, // recorded, then kept
		{[]VersionRange{{First: 1, Last: 6}}, nil, []uint64{1, 6, 8}, "[{2 5}]"},
	} {
		got := GCRecord{Since: 9, Ranges: c.old}.Add(c.drop, c.remaining)
		if fmt.Sprint(got.Ranges) != c.want || got.Since != 9 {
			t.Errorf("%v + drop %v (remaining %v): %+v, want ranges %s", c.old, c.drop, c.remaining, got, c.want)
		}
	}
}
