package format

import (
	"errors"
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

// TestEncodePinBytes pins what a reader writes: one line of JSON, in the order and spelling
// docs/format.md §4.2 shows, which DecodePin reads back.
func TestEncodePinBytes(t *testing.T) {
	rec := PinRecord{Format: PinFormat, Version: 2, Expires: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Host: "h", PID: 1}
	b, err := EncodePin(rec)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"format":"weightfs-pin-1","version":2,"expires":"2026-01-01T00:00:00Z","host":"h","pid":1}` + "\n"
	if string(b) != want {
		t.Fatalf("EncodePin = %q, want %q", b, want)
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
