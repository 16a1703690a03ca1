package store

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// decodeRecord parses b as exactly one JSON object into v, refusing unknown fields and
// trailing data: the small records the store keeps beside its objects (the S3 lease, reader
// pins) are refused rather than half-read when a newer program wrote them. what names the
// record in errors.
func decodeRecord(b []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: data after the JSON object", what)
	}
	return nil
}
