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

	"github.com/weightfs/weightfs/internal/logtest"
)

// gcRecordExample is docs/format.md Part I §4.4's example: since 0, ranges 1-2 and 4-4.
const gcRecordExample = "57 46 53 44 52 4f 50 53 01 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 7c f9 4c d2"

func spacedHex(b []byte) string { return strings.TrimSpace(fmt.Sprintf("% x", b)) }

// TestGCRecordFormat: the record a gc writes is the document's example byte for byte, and
// the parser refuses every record that fails a check.
func TestGCRecordFormat(t *testing.T) {
	s, root, _ := anchorStore(t)
	if _, err := s.GCWith(2, GCOptions{KeepEvery: 3}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(root, GCRecordName))
	if err != nil {
		t.Fatal(err)
	}
	if got := spacedHex(good); got != gcRecordExample {
		t.Fatalf("gc record after dropping 1, 2 and 4\n got %s\nwant %s", got, gcRecordExample)
	}
	if !strings.Contains(docFormatSection(t, "#### 4.4 The gc record", "### 5."), "`"+gcRecordExample+"`") {
		t.Fatal("docs/format.md Part I §4.4 does not give the example as the gc writes it")
	}
	r, err := parseGCRecord(good)
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
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32c(b[:len(b)-4]))
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
		{"magic only", []byte(gcRecordMagic), ErrCorrupt},
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
		if _, err := parseGCRecord(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzParseGCRecord(f *testing.F) {
	f.Add(encodeGCRecord(gcRecord{Since: 0, Ranges: []versionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}}))
	f.Add(encodeGCRecord(gcRecord{Since: 7}))
	f.Add([]byte(gcRecordMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseGCRecord(b)
		if err != nil {
			return
		}
		// A record that parses is exactly the encoding of what it says.
		if again := encodeGCRecord(r); !bytes.Equal(again, b) {
			t.Fatalf("parsed %+v from %x, which encodes to %x", r, b, again)
		}
	})
}

// TestGCRecordAdd: dropped versions become ranges, joined where no remaining version lies
// between.
func TestGCRecordAdd(t *testing.T) {
	for _, c := range []struct {
		old       []versionRange
		drop      []uint64
		remaining []uint64
		want      string
	}{
		{nil, []uint64{1, 2, 4}, []uint64{3, 5, 6}, "[{1 2} {4 4}]"},
		{nil, []uint64{1, 5, 9}, []uint64{10}, "[{1 9}]"}, // numbers with gaps
		{[]versionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}, []uint64{5}, []uint64{3, 6, 7}, "[{1 2} {4 5}]"},
		{[]versionRange{{First: 1, Last: 2}}, []uint64{3, 4}, []uint64{5}, "[{1 4}]"},
		{[]versionRange{{First: 1, Last: 2}, {First: 4, Last: 4}}, []uint64{3}, []uint64{5}, "[{1 4}]"}, // the milestone goes
		{[]versionRange{{First: 1, Last: 4}}, nil, []uint64{5}, "[{1 4}]"},
		{nil, []uint64{2}, []uint64{1, 3}, "[{2 2}]"},                                                // a pinned oldest version stays
		{[]versionRange{{First: 1, Last: 6}}, []uint64{7}, []uint64{3, 6, 8}, "[{1 2} {4 5} {7 7}]"}, // recorded, then kept
		{[]versionRange{{First: 1, Last: 6}}, nil, []uint64{1, 6, 8}, "[{2 5}]"},
	} {
		got := gcRecord{Since: 9, Ranges: c.old}.Add(c.drop, c.remaining)
		if fmt.Sprint(got.Ranges) != c.want || got.Since != 9 {
			t.Errorf("%v + drop %v (remaining %v): %+v, want ranges %s", c.old, c.drop, c.remaining, got, c.want)
		}
	}
}

// TestGCRecordAcrossGCs: a second gc adds to the record the first wrote.
func TestGCRecordAcrossGCs(t *testing.T) {
	s, root, _ := anchorStore(t)
	if _, err := s.GCWith(2, GCOptions{KeepEvery: 3}); err != nil {
		t.Fatal(err)
	}
	files := modelVersions(t, 8, 23)
	commitTree(t, s, 7, files[6])
	commitTree(t, s, 8, files[7])
	if _, err := s.GCWith(2, GCOptions{KeepEvery: 3}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, GCRecordName))
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseGCRecord(b)
	if err != nil || fmt.Sprint(r.Ranges) != "[{1 2} {4 5}]" {
		t.Fatalf("record after two gcs (kept 3, 6, 7, 8): %+v, %v", r, err)
	}
}

// TestVerifyWithoutAGoodGCRecord: a store whose gc record is gone (a store from before the
// record) or damaged, after a gc that stopped before its sweep, is not called damaged: the
// gone version is judged by the deltas after it, as before the record, and the report says
// that this is all it could tell. The writer's next open replaces the record (since: the
// highest version), and gc run again finishes.
func TestVerifyWithoutAGoodGCRecord(t *testing.T) {
	for _, how := range []string{"deleted", "damaged"} {
		t.Run(how, func(t *testing.T) {
			s, root, want := anchorStore(t)
			s.hook = func(p string) error {
				if p == "gc-manifests-deleted" {
					return errInjected
				}
				return nil
			}
			if _, err := s.GCWith(2, GCOptions{KeepEvery: 3}); !errors.Is(err, errInjected) {
				t.Fatalf("gc with a failure after the manifests: %v", err)
			}
			crash(s)
			rec := filepath.Join(root, GCRecordName)
			if how == "deleted" {
				if err := os.Remove(rec); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(rec)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0x10
				if err := os.WriteFile(rec, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := openStore(t, root, Options{ReadOnly: true})
			rep, err := r.Verify(nil)
			if err != nil {
				t.Fatalf("verify with the gc record %s: %v (%v)", how, err, rep.Damaged)
			}
			notes := strings.Join(rep.Notes, "\n")
			if !strings.Contains(notes, "version 4 (the previous of version 5) is gone") ||
				(how == "damaged") != strings.Contains(notes, "gc record damaged") {
				t.Fatalf("notes with the gc record %s:\n%s", how, notes)
			}
			closeStore(t, r)

			logs := &logLines{t: t}
			s = openStore(t, root, Options{Logger: logtest.New(logs.logf)})
			b, err := os.ReadFile(rec)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := parseGCRecord(b); err != nil || got.Since != 6 || len(got.Ranges) != 0 {
				t.Fatalf("record after the writer opened: %+v, %v", got, err)
			}
			if (how == "damaged") != logs.has("gc record: damaged, replaced") {
				t.Errorf("log with the record %s:\n%s", how, logs.String())
			}
			if _, err := s.GCWith(2, GCOptions{KeepEvery: 3}); err != nil {
				t.Fatal(err)
			}
			for _, v := range []uint64{3, 5, 6} {
				sameTree(t, fmt.Sprintf("v%d", v), exportHashes(t, s, v), want[v])
			}
		})
	}
}

// TestGCRecordOfANewerFormat: a record of an unknown format version (a newer weightfs's) is
// neither read nor replaced: the writer's open leaves it, Verify notes it, and gc stops
// before it deletes anything.
func TestGCRecordOfANewerFormat(t *testing.T) {
	s, root, _ := anchorStore(t)
	closeStore(t, s)
	rec := filepath.Join(root, GCRecordName)
	newer := encodeGCRecord(gcRecord{})
	binary.LittleEndian.PutUint32(newer[8:], 2)
	binary.LittleEndian.PutUint32(newer[len(newer)-4:], crc32c(newer[:len(newer)-4]))
	if err := os.WriteFile(rec, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	w := openStore(t, root, Options{})
	if b, _ := os.ReadFile(rec); !bytes.Equal(b, newer) {
		t.Fatal("the writer's open replaced a gc record of a newer format")
	}
	rep, err := w.Verify(nil)
	if err != nil || !strings.Contains(strings.Join(rep.Notes, "\n"), "format version 2") {
		t.Fatalf("verify with a gc record of a newer format: %v, notes %q", err, rep.Notes)
	}
	if _, err := w.GC(2); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("gc with a gc record of a newer format: %v", err)
	}
	if len(w.Versions()) != 6 {
		t.Fatalf("gc that stopped dropped versions: %v", numbers(w.Versions()))
	}
}
