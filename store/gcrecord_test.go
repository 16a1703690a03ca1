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
// parses back (the parser's refusals are store/format's TestParseGCRecord).
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
