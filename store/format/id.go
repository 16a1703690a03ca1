package format

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// ID names an object: the SHA-256 of its uncompressed content (a tensor's raw bytes, a whole
// non-safetensors file, or a safetensors header), never of an encoding of it.
type ID [32]byte

// IDOf returns the identity of content.
func IDOf(content []byte) ID { return sha256.Sum256(content) }

// String is the lowercase hex spelling used in object file names and manifests.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero value (no object).
func (id ID) IsZero() bool { return id == ID{} }

// MarshalText spells id in hex (for JSON manifests).
func (id ID) MarshalText() ([]byte, error) {
	out := make([]byte, hex.EncodedLen(len(id)))
	hex.Encode(out, id[:])
	return out, nil
}

// UnmarshalText parses the hex spelling of MarshalText.
func (id *ID) UnmarshalText(text []byte) error {
	parsed, err := ParseID(string(text))
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// ParseID parses 64 lowercase hex digits.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("object id %q: want %d hex digits, got %d", s, 2*len(id), len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return id, fmt.Errorf("object id %q: not lowercase hex", s)
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("object id %q: %w", s, err)
	}
	return id, nil
}
