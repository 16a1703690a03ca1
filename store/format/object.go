package format

import (
	"encoding/binary"
	"fmt"
)

// Object files (docs/format.md (Part I) has the byte-by-byte layout and a worked example):
//
//	0    4   magic "WFSO"
//	4    2   object format version, u16 LE (1)
//	6    1   kind: 1 full, 2 delta
//	7    1   element width: 1, 2, 4 or 8
//	8    32  identity: SHA-256 of the content
//	40   8   content length, u64 LE
//	48   32  base identity (delta: the base; full: the base of the link delta; zero: none)
//	80   8   full section length F, u64 LE (0 for a delta object)
//	88   8   delta section length D, u64 LE
//	96   F   full section: chunk table and zstd frames
//	96+F D   delta section: a delta.DeltaEncoder body (base -> content)
//	...  4   CRC-32C of every preceding byte, u32 LE
//
// A full object may carry a delta section, the "link": the delta from its base to it. An
// anchor keeps the link to the version before it, so a read can also walk back from an
// anchor, and the materialized copy is brought forward over an anchor by the small link.
const (
	ObjectMagic         = "WFSO"
	ObjectFormatVersion = 1
	ObjectHeaderLen     = 96
	ObjectTrailerLen    = 4

	// FullChunkSize is the content bytes per zstd frame of a full object: the unit of random
	// access. It is a multiple of every element width.
	FullChunkSize = 1 << 20
	// MaxChunkSize bounds the chunk size a reader accepts (and so the memory one frame may
	// decode to).
	MaxChunkSize = 16 << 20
	// ChunkTableHead is the fixed part of a full section: chunk size and chunk count.
	ChunkTableHead = 8
)

// ObjectKind is byte 6 of an object header.
type ObjectKind uint8

const (
	KindFull  ObjectKind = 1
	KindDelta ObjectKind = 2
)

// String names the kind as docs/format.md does.
func (k ObjectKind) String() string {
	switch k {
	case KindFull:
		return "full"
	case KindDelta:
		return "delta"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ObjectHeader is the fixed 96-byte head of an object file.
type ObjectHeader struct {
	Kind       ObjectKind
	Width      int
	ID         ID
	ContentLen int64
	Base       ID
	FullLen    int64
	DeltaLen   int64
}

// FileSize is the length of the whole object file this header describes.
func (h *ObjectHeader) FileSize() int64 {
	return ObjectHeaderLen + h.FullLen + h.DeltaLen + ObjectTrailerLen
}

// HasDelta reports whether the object carries a delta from Base (a delta object, or a full
// object with a link).
func (h *ObjectHeader) HasDelta() bool { return h.DeltaLen > 0 }

// DeltaOffset is the file offset of the delta section.
func (h *ObjectHeader) DeltaOffset() int64 { return ObjectHeaderLen + h.FullLen }

// Encode returns the 96 header bytes of h.
func (h *ObjectHeader) Encode() []byte {
	b := make([]byte, ObjectHeaderLen)
	copy(b, ObjectMagic)
	binary.LittleEndian.PutUint16(b[4:], ObjectFormatVersion)
	b[6] = byte(h.Kind)
	b[7] = byte(h.Width)
	copy(b[8:40], h.ID[:])
	binary.LittleEndian.PutUint64(b[40:], uint64(h.ContentLen))
	copy(b[48:80], h.Base[:])
	binary.LittleEndian.PutUint64(b[80:], uint64(h.FullLen))
	binary.LittleEndian.PutUint64(b[88:], uint64(h.DeltaLen))
	return b
}

// ParseObjectHeader checks and decodes the head of an object file of fileSize bytes: magic,
// then version, then every field against the others and the file size.
func ParseObjectHeader(b []byte, fileSize int64) (ObjectHeader, error) {
	var h ObjectHeader
	if len(b) < ObjectHeaderLen || fileSize < ObjectHeaderLen+ObjectTrailerLen {
		return h, fmt.Errorf("object file of %d bytes is shorter than a header: %w", fileSize, ErrCorrupt)
	}
	if string(b[:4]) != ObjectMagic {
		return h, fmt.Errorf("object file has no WFSO magic: %w", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != ObjectFormatVersion {
		return h, fmt.Errorf("object format version %d (this program reads %d): %w", v, ObjectFormatVersion, ErrUnsupportedVersion)
	}
	h.Kind = ObjectKind(b[6])
	h.Width = int(b[7])
	copy(h.ID[:], b[8:40])
	copy(h.Base[:], b[48:80])
	content := binary.LittleEndian.Uint64(b[40:])
	full := binary.LittleEndian.Uint64(b[80:])
	dlen := binary.LittleEndian.Uint64(b[88:])
	const limit = 1 << 62 // far beyond any file; keeps the sums below from overflowing
	if content > limit || full > limit || dlen > limit {
		return h, fmt.Errorf("object header lengths out of range: %w", ErrCorrupt)
	}
	h.ContentLen, h.FullLen, h.DeltaLen = int64(content), int64(full), int64(dlen)
	switch h.Width {
	case 1, 2, 4, 8:
	default:
		return h, fmt.Errorf("object element width %d: %w", h.Width, ErrCorrupt)
	}
	if h.ContentLen%int64(h.Width) != 0 {
		return h, fmt.Errorf("object content length %d is not a multiple of width %d: %w", h.ContentLen, h.Width, ErrCorrupt)
	}
	switch h.Kind {
	case KindFull:
		if h.FullLen < ChunkTableHead {
			return h, fmt.Errorf("full object with a %d-byte full section: %w", h.FullLen, ErrCorrupt)
		}
	case KindDelta:
		if h.FullLen != 0 || h.DeltaLen == 0 {
			return h, fmt.Errorf("delta object with section lengths %d/%d: %w", h.FullLen, h.DeltaLen, ErrCorrupt)
		}
	default:
		return h, fmt.Errorf("object kind %d: %w", b[6], ErrCorrupt)
	}
	if h.HasDelta() && h.Base.IsZero() {
		return h, fmt.Errorf("object with a delta section but no base: %w", ErrCorrupt)
	}
	if !h.HasDelta() && !h.Base.IsZero() {
		return h, fmt.Errorf("object with a base but no delta section: %w", ErrCorrupt)
	}
	if h.Base == h.ID && !h.Base.IsZero() {
		return h, fmt.Errorf("object is its own base: %w", ErrCorrupt)
	}
	if got := h.FileSize(); got != fileSize {
		return h, fmt.Errorf("object header says %d bytes, file has %d: %w", got, fileSize, ErrCorrupt)
	}
	return h, nil
}

// ChunkTable locates the zstd frames of a full object: frame i holds content bytes
// [i*Size, min((i+1)*Size, contentLen)) shuffled at the object's width, and sits at file
// offsets [Offsets[i], Offsets[i+1]).
type ChunkTable struct {
	Size    int64
	Offsets []int64
}

// Count is the number of frames.
func (t *ChunkTable) Count() int { return len(t.Offsets) - 1 }

// ChunkCount is the number of chunks of content bytes at size bytes a chunk.
func ChunkCount(contentLen, size int64) int64 { return (contentLen + size - 1) / size }

// ChunkTableLen is the byte length of the table of a full section with n chunks.
func ChunkTableLen(n int64) int64 { return ChunkTableHead + 4*n }

// EncodeChunkTable writes the table head and the compressed frame sizes.
func EncodeChunkTable(size int64, frameSizes []uint32) []byte {
	b := make([]byte, ChunkTableLen(int64(len(frameSizes))))
	binary.LittleEndian.PutUint32(b, uint32(size))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(frameSizes)))
	for i, s := range frameSizes {
		binary.LittleEndian.PutUint32(b[ChunkTableHead+4*i:], s)
	}
	return b
}

// ReadChunkTableHead decodes the first 8 bytes of a full section: chunk size and count,
// checked against the header.
func ReadChunkTableHead(b []byte, h *ObjectHeader) (size, n int64, err error) {
	size = int64(binary.LittleEndian.Uint32(b))
	n = int64(binary.LittleEndian.Uint32(b[4:]))
	if size <= 0 || size > MaxChunkSize || size%8 != 0 {
		return 0, 0, fmt.Errorf("full object chunk size %d: %w", size, ErrCorrupt)
	}
	if n != ChunkCount(h.ContentLen, size) {
		return 0, 0, fmt.Errorf("full object has %d chunks, %d content bytes need %d: %w", n, h.ContentLen, ChunkCount(h.ContentLen, size), ErrCorrupt)
	}
	if ChunkTableLen(n) > h.FullLen {
		return 0, 0, fmt.Errorf("full object chunk table runs past its section: %w", ErrCorrupt)
	}
	return size, n, nil
}

// ParseChunkSizes turns the frame sizes (table bytes after the head) into file offsets and
// checks that the frames fill the full section exactly.
func ParseChunkSizes(b []byte, size, n int64, h *ObjectHeader) (ChunkTable, error) {
	t := ChunkTable{Size: size, Offsets: make([]int64, n+1)}
	off := ObjectHeaderLen + ChunkTableLen(n)
	t.Offsets[0] = off
	for i := int64(0); i < n; i++ {
		s := int64(binary.LittleEndian.Uint32(b[4*i:]))
		if s == 0 {
			return t, fmt.Errorf("full object chunk %d has an empty frame: %w", i, ErrCorrupt)
		}
		off += s
		t.Offsets[i+1] = off
	}
	if end := ObjectHeaderLen + h.FullLen; off != end {
		return t, fmt.Errorf("full object frames end at %d, section ends at %d: %w", off, end, ErrCorrupt)
	}
	return t, nil
}

// ChunkLen is the content length of chunk i.
func (t *ChunkTable) ChunkLen(i int, contentLen int64) int64 {
	return min(t.Size, contentLen-int64(i)*t.Size)
}
