package format

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDecodePin(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"format":"weightfs-pin-1","version":2,"expires":"2026-01-01T00:00:00Z","host":"h","pid":1}`, true},
		{`{"format":"weightfs-pin-2","version":2,"expires":"2026-01-01T00:00:00Z","host":"h","pid":1}`, false},
		{`{"version":2,"expires":"2026-01-01T00:00:00Z"}`, false},
		{`{"format":"weightfs-pin-1","version":0,"expires":"2026-01-01T00:00:00Z"}`, false},
		{`{"format":"weightfs-pin-1","version":2}`, false},
		{`{"format":"weightfs-pin-1","version":2,"expires":"2026-01-01T00:00:00Z","extra":1}`, false},
		{`{"format":"weightfs-pin-1","version":2,"expires":"2026-01-01T00:00:00Z"} {}`, false},
		{`{"format":"weightfs-pin-1","ver`, false},
	} {
		if _, err := DecodePin([]byte(tc.in)); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.in, err)
		}
	}
	if _, err := DecodePin([]byte(`{"format":"weightfs-pin-2","version":2,"expires":"2026-01-01T00:00:00Z"}`)); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("a pin of another format: %v, want ErrUnsupportedVersion", err)
	}
}

// TestEncodePinBytes pins what a reader writes: one line of JSON, docs/format.md §4.2's
// example byte for byte, which DecodePin reads back.
func TestEncodePinBytes(t *testing.T) {
	rec := PinRecord{Format: PinFormat, Version: 2, Expires: time.Date(2026, 11, 24, 8, 12, 0, 0, time.UTC), Host: "node7", PID: 4242}
	b, err := EncodePin(rec)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"format":"weightfs-pin-1","version":2,"expires":"2026-11-24T08:12:00Z","host":"node7","pid":4242}`
	if string(b) != want+"\n" {
		t.Fatalf("EncodePin = %q, want %q and a newline", b, want)
	}
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "#### 4.2 Readers' pins")
	section, _, _ = strings.Cut(section, "#### 4.3")
	if !strings.Contains(section, "\n"+want+"\n") {
		t.Fatalf("docs/format.md Part I §4.2 does not show the record as %s", want)
	}
	if back, err := DecodePin(b); err != nil || back != rec {
		t.Fatalf("DecodePin = %+v, %v; want %+v", back, err, rec)
	}
}

func FuzzDecodePin(f *testing.F) {
	f.Add([]byte(`{"format":"weightfs-pin-1","version":2,"expires":"2026-01-01T00:00:00Z","host":"h","pid":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodePin(b)
		if err == nil && (rec.Format != PinFormat || rec.Version == 0 || rec.Expires.IsZero()) {
			t.Fatalf("accepted %+v", rec)
		}
	})
}
