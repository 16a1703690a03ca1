package store

import "github.com/weightfs/weightfs/store/format"

// ID names an object: the SHA-256 of its uncompressed content (a tensor's raw bytes, a whole
// non-safetensors file, or a safetensors header), never of an encoding of it. Its bytes are
// package store/format's.
type ID = format.ID

// IDOf returns the identity of content.
func IDOf(content []byte) ID { return format.IDOf(content) }

// ParseID parses 64 lowercase hex digits.
func ParseID(s string) (ID, error) { return format.ParseID(s) }
