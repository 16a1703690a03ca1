package format

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The change hint (docs/format.md Part I §4.3): PREFIX/latest in an S3 store, 32 bytes the
// writer rewrites after every change of the list of manifests, which readers ask for with
// If-None-Match and list versions/ only when it moved (store/s3/hint.go keeps it). Its layout:
// magic, format version, the newest version the writer knew of, the time of the write (which
// also makes every write's bytes, and so its ETag, new), CRC-32C:
//
//	0   8  magic "WFSLATST"
//	8   4  hint format version, u32 LE (1)
//	12  8  the newest version the writer knew of (0: none), u64 LE
//	20  8  the write's time, Unix nanoseconds, u64 LE
//	28  4  CRC-32C of bytes 0..28, u32 LE
const (
	// HintName is the hint's key under an S3 store's prefix.
	HintName    = "latest"
	HintMagic   = "WFSLATST"
	HintVersion = 1
	HintSize    = 32
)

// Errors of ParseHint. A refused hint is not damage of the store (a reader lists instead),
// so they wrap no ErrCorrupt.
var (
	ErrHintMagic   = errors.New("not a weightfs change hint (bad magic)")
	ErrHintVersion = errors.New("change hint of an unknown format version")
	ErrHintCRC     = errors.New("change hint is corrupt (CRC-32C mismatch)")
	ErrHintSize    = errors.New("change hint has the wrong size")
)

// ChangeHint is the content of the change hint.
type ChangeHint struct {
	Latest  uint64 // the newest sealed version when it was written (0: none)
	Written int64  // Unix nanoseconds of the write
}

// EncodeHint returns the 32 bytes of h.
func EncodeHint(h ChangeHint) []byte {
	b := make([]byte, HintSize)
	copy(b, HintMagic)
	binary.LittleEndian.PutUint32(b[8:], HintVersion)
	binary.LittleEndian.PutUint64(b[12:], h.Latest)
	binary.LittleEndian.PutUint64(b[20:], uint64(h.Written))
	binary.LittleEndian.PutUint32(b[28:], CRC32C(b[:28]))
	return b
}

// ParseHint checks the magic, then the version, then the size and the CRC, as the format
// file's reader does.
func ParseHint(b []byte) (ChangeHint, error) {
	if len(b) < len(HintMagic) || string(b[:len(HintMagic)]) != HintMagic {
		return ChangeHint{}, ErrHintMagic
	}
	if len(b) < 12 {
		return ChangeHint{}, ErrHintSize
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != HintVersion {
		return ChangeHint{}, fmt.Errorf("%w (%d; this weightfs reads %d)", ErrHintVersion, v, HintVersion)
	}
	if len(b) != HintSize {
		return ChangeHint{}, fmt.Errorf("%w (%d bytes, want %d)", ErrHintSize, len(b), HintSize)
	}
	if binary.LittleEndian.Uint32(b[28:]) != CRC32C(b[:28]) {
		return ChangeHint{}, ErrHintCRC
	}
	return ChangeHint{Latest: binary.LittleEndian.Uint64(b[12:]), Written: int64(binary.LittleEndian.Uint64(b[20:]))}, nil
}
