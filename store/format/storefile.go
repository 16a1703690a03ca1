package format

import (
	"encoding/binary"
	"fmt"
)

// The store's format file, STORE/weightfs-store, is 16 bytes:
//
//	0  8  magic "WFSSTORE"
//	8  4  store format version, u32 little-endian (1, 2 or 3)
//	12 4  CRC-32C of bytes 0..12, u32 little-endian
//
// Open checks the magic, then the version, then the checksum (the order bbolt's meta
// validation uses: an alien file is "not a store", a newer one "unsupported", a damaged one
// "corrupt"). Format 2 is format 1 whose objects may hold version-2 delta sections (coded
// against a context, store/object_delta_context.go): a program that reads only format 1
// refuses such a store rather than taking its sections for damage. Format 3 is format 2 whose
// objects may be in packs, found through pack indexes (store/pack_layer.go), and whose
// manifests may name those indexes. This program reads all three; it creates stores of format
// 3, and a writer opening a store of format 1 or 2 rewrites its format file as format 3 before
// it writes anything (docs/format.md Part I §2); the loose objects of the old format stay
// where they are and readable, new ones go into packs.
const (
	// FormatFileName is the name of the store's format file, STORE/weightfs-store (in S3,
	// PREFIX/weightfs-store).
	FormatFileName     = "weightfs-store"
	FormatMagic        = "WFSSTORE"
	StoreFormatVersion = 3 // what Init writes and writers upgrade to
	OldestFormat       = 1 // the oldest format this program reads
	FormatFileLen      = 16
)

// EncodeFormatFile returns the format file of a store of format version v.
func EncodeFormatFile(v uint32) []byte {
	b := make([]byte, FormatFileLen)
	copy(b, FormatMagic)
	binary.LittleEndian.PutUint32(b[8:], v)
	binary.LittleEndian.PutUint32(b[12:], CRC32C(b[:12]))
	return b
}

// CheckFormatFile checks the bytes of a store's format file: magic (ErrNotAStore), length
// (ErrCorrupt), version (ErrUnsupportedVersion), checksum (ErrCorrupt), in that order.
func CheckFormatFile(b []byte) error {
	if len(b) < len(FormatMagic) || string(b[:len(FormatMagic)]) != FormatMagic {
		return fmt.Errorf("%s has no weightfs magic: %w", FormatFileName, ErrNotAStore)
	}
	if len(b) != FormatFileLen {
		return fmt.Errorf("%s is %d bytes, want %d: %w", FormatFileName, len(b), FormatFileLen, ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v < OldestFormat || v > StoreFormatVersion {
		return fmt.Errorf("%s: store format version %d (this program reads %d to %d): %w",
			FormatFileName, v, OldestFormat, StoreFormatVersion, ErrUnsupportedVersion)
	}
	if got, want := binary.LittleEndian.Uint32(b[12:]), CRC32C(b[:12]); got != want {
		return fmt.Errorf("%s: checksum %08x, want %08x: %w", FormatFileName, got, want, ErrCorrupt)
	}
	return nil
}

// FormatFileVersion checks the bytes of a store's format file (CheckFormatFile) and returns
// the store's format version.
func FormatFileVersion(b []byte) (uint32, error) {
	if err := CheckFormatFile(b); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[8:]), nil
}
