package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The records of the node-local index (CACHE/index.db, bbolt; docs/format.md Part I §6). The
// index is derived from the store, and a damaged one is recreated, never trusted: so every
// value is its payload followed by the CRC-32C (u32 LE) of the key and the payload (bbolt
// checks no data page, and a flipped byte in a record would otherwise be believed), and a
// record that fails it is damage (ErrIndexDamaged). Package store keeps the file, its
// buckets and the other records' JSON (version summaries, the copy's state).

// IndexFormat is the index's own format, its meta/format value; an index of another format
// is emptied at open. 2: every value ends in a CRC-32C.
const IndexFormat = "2"

// ErrIndexDamaged marks a failure of the index file itself (bbolt's error or panic, a record
// failing its CRC): the index is recreated. It never reaches the store's callers.
var ErrIndexDamaged = errors.New("index is damaged")

// SealIndexValue returns the stored value of payload under key: the payload, then the
// CRC-32C of key and payload.
func SealIndexValue(key, payload []byte) []byte {
	crc := crc32.Update(CRC32C(key), castagnoli, payload)
	return binary.LittleEndian.AppendUint32(append(make([]byte, 0, len(payload)+4), payload...), crc)
}

// OpenIndexValue checks a stored value and returns its payload; a nil value is a miss (nil,
// nil).
func OpenIndexValue(key, v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if len(v) < 4 {
		return nil, fmt.Errorf("record %x of %d bytes: %w", key, len(v), ErrIndexDamaged)
	}
	payload := v[:len(v)-4]
	if crc32.Update(CRC32C(key), castagnoli, payload) != binary.LittleEndian.Uint32(v[len(v)-4:]) {
		return nil, fmt.Errorf("record %x fails its CRC-32C: %w", key, ErrIndexDamaged)
	}
	return payload, nil
}

// IndexObject is the index's record of an object (bucket objects, under the object's ID):
// what planning and the anchor policy need of an object without opening it.
type IndexObject struct {
	Kind       ObjectKind
	Width      int
	Base       ID // delta: its base; full: the base of its link (zero: none)
	ContentLen int64
	FileSize   int64
	DeltaLen   int64
	// Depth counts the deltas between this object and the nearest whole copy it is built
	// from (0 for a full object); ChainBytes sums their delta sections.
	Depth      int
	ChainBytes int64
}

// IndexObjectLen is the length of an IndexObject's payload: kind (1), width (1), base (32),
// content length, file size and delta length (u64 LE each), depth (u32 LE), chain bytes (u64
// LE).
const IndexObjectLen = 1 + 1 + 32 + 8 + 8 + 8 + 4 + 8

// Encode returns the record's payload (SealIndexValue adds its CRC).
func (m *IndexObject) Encode() []byte {
	b := make([]byte, 0, IndexObjectLen)
	b = append(b, byte(m.Kind), byte(m.Width))
	b = append(b, m.Base[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.ContentLen))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.FileSize))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.DeltaLen))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Depth))
	return binary.LittleEndian.AppendUint64(b, uint64(m.ChainBytes))
}

// DecodeIndexObject parses a record's payload; ok is false for one of another length or of
// an unknown kind.
func DecodeIndexObject(b []byte) (IndexObject, bool) {
	var m IndexObject
	if len(b) != IndexObjectLen {
		return m, false
	}
	m.Kind, m.Width = ObjectKind(b[0]), int(b[1])
	copy(m.Base[:], b[2:34])
	m.ContentLen = int64(binary.LittleEndian.Uint64(b[34:]))
	m.FileSize = int64(binary.LittleEndian.Uint64(b[42:]))
	m.DeltaLen = int64(binary.LittleEndian.Uint64(b[50:]))
	m.Depth = int(binary.LittleEndian.Uint32(b[58:]))
	m.ChainBytes = int64(binary.LittleEndian.Uint64(b[62:]))
	return m, m.Kind == KindFull || m.Kind == KindDelta
}
