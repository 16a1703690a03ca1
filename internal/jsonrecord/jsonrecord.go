// Package jsonrecord decodes the small JSON records weightfs keeps beside a store's objects
// (store/s3's lease, the store's reader pins) strictly: one object, no unknown fields, no
// trailing data, so that a record a newer program wrote is refused rather than half-read.
package jsonrecord

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Decode parses b as exactly one JSON object into v, refusing unknown fields and trailing
// data. what names the record in errors.
func Decode(b []byte, v any, what string) error {
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
