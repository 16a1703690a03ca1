package format

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weightfs/weightfs/internal/jsonrecord"
)

// A reader's pin (docs/format.md Part I §4.2) is a small JSON record,
// STORE/pins/<32 hex digits>.json, one line:
//
//	{"format":"weightfs-pin-1","version":2,"expires":"2026-01-01T00:00:00Z","host":"h","pid":1}
//
// decoded strictly (one object, no unknown fields, nothing after it). A record of another
// format is refused as unsupported: what it protects is unknown, so gc must not guess.

// PinFormat names the pin record's layout; a record of another format is refused.
const PinFormat = "weightfs-pin-1"

// PinDir is the pins' directory in a local store.
const PinDir = "pins"

// PinRecord is the JSON content of a pin record.
type PinRecord struct {
	Format  string    `json:"format"`
	Version uint64    `json:"version"`
	Expires time.Time `json:"expires"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
}

// EncodePin returns the record's bytes: its JSON and a newline.
func EncodePin(rec PinRecord) ([]byte, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// DecodePin parses and checks a pin record.
func DecodePin(b []byte) (PinRecord, error) {
	var rec PinRecord
	if err := jsonrecord.Decode(b, &rec, "pin record"); err != nil {
		return PinRecord{}, err
	}
	if rec.Format != PinFormat {
		return PinRecord{}, fmt.Errorf("pin record of format %q (this program reads %q): %w", rec.Format, PinFormat, ErrUnsupportedVersion)
	}
	if rec.Version == 0 {
		return PinRecord{}, errors.New("pin record: version 0")
	}
	if rec.Expires.IsZero() {
		return PinRecord{}, errors.New("pin record: no expiry time")
	}
	return rec, nil
}
