package pack

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Index says where the objects of some packs are: each pack's id, size and its own table.
// Seq orders indexes: for an object in the packs of several, the highest Seq's entry serves.
type Index struct {
	Seq   uint64
	Packs []IndexedPack
}

// IndexedPack is one pack of an index.
type IndexedPack struct {
	ID      ID
	Size    int64
	Entries []Entry // sorted by id, as in the pack's table
}

// MaxIndexLen bounds an index's bytes (a reader refuses larger).
const MaxIndexLen = 1 << 30

// Encode returns the bytes of x (docs/format.md Part I §3.6). Each pack's entries must be
// sorted by id (ReadTrailer's and Writer.Finish's order).
func (x *Index) Encode() []byte {
	n := indexHeadLen + 4
	for _, p := range x.Packs {
		n += indexPackHead + len(p.Entries)*EntryLen
	}
	b := make([]byte, 0, n)
	b = append(b, IndexMagic...)
	b = binary.LittleEndian.AppendUint16(b, IndexVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, x.Seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.Packs)))
	var e [EntryLen]byte
	for _, p := range x.Packs {
		b = append(b, p.ID[:]...)
		b = binary.LittleEndian.AppendUint64(b, uint64(p.Size))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p.Entries)))
		for _, en := range p.Entries {
			en.encode(e[:])
			b = append(b, e[:]...)
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Name is the name an index of these bytes is stored under: its sequence number as 16
// decimal digits, a dash, and the first 16 hex digits of the SHA-256 of its bytes.
func Name(seq uint64, encoded []byte) string {
	sum := sha256.Sum256(encoded)
	return fmt.Sprintf("%016d-%s", seq, hex.EncodeToString(sum[:8]))
}

// ParseName returns the sequence number of an index name, and false for a name that is not
// an index's (a temporary file).
func ParseName(name string) (uint64, bool) {
	seq, sum, ok := strings.Cut(name, "-")
	if !ok || len(seq) != 16 || len(sum) != 16 || strings.ToLower(sum) != sum {
		return 0, false
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return 0, false
	}
	s, err := strconv.ParseUint(seq, 10, 64)
	return s, err == nil
}

// DecodeIndex parses and checks index bytes: magic, version, CRC, and for each pack its
// entries sorted by id, tiling the pack's records, and its id equal to the SHA-256 of the
// table they make (so an index names exactly the pack whose table it copied).
func DecodeIndex(b []byte) (*Index, error) {
	if len(b) < 4 || string(b[:4]) != IndexMagic {
		return nil, fmt.Errorf("pack index has no index magic: %w", ErrCorrupt)
	}
	if len(b) < indexHeadLen+4 {
		return nil, fmt.Errorf("pack index of %d bytes: %w", len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != IndexVersion {
		return nil, fmt.Errorf("pack index format version %d (this program reads %d): %w", v, IndexVersion, ErrUnsupported)
	}
	if len(b) > MaxIndexLen {
		return nil, fmt.Errorf("pack index of %d bytes, over the %d a reader reads: %w", len(b), MaxIndexLen, ErrCorrupt)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("pack index checksum %08x, want %08x: %w", got, want, ErrCorrupt)
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 {
		return nil, fmt.Errorf("pack index: reserved bytes not zero: %w", ErrCorrupt)
	}
	x := &Index{Seq: binary.LittleEndian.Uint64(b[8:])}
	count := int(binary.LittleEndian.Uint32(b[16:]))
	rest := body[indexHeadLen:]
	if count < 1 || count > len(rest)/indexPackHead {
		return nil, fmt.Errorf("pack index claims %d packs in %d bytes: %w", count, len(rest), ErrCorrupt)
	}
	x.Packs = make([]IndexedPack, count)
	for i := range x.Packs {
		if len(rest) < indexPackHead {
			return nil, fmt.Errorf("pack index ends inside pack %d: %w", i, ErrCorrupt)
		}
		p := &x.Packs[i]
		copy(p.ID[:], rest)
		p.Size = int64(binary.LittleEndian.Uint64(rest[32:]))
		n := int64(binary.LittleEndian.Uint32(rest[40:]))
		rest = rest[indexPackHead:]
		if n < 1 || n*EntryLen > int64(len(rest)) {
			return nil, fmt.Errorf("pack index: pack %x claims %d entries: %w", p.ID[:8], n, ErrCorrupt)
		}
		var err error
		if p.Entries, err = decodeEntries(rest[:n*EntryLen]); err != nil {
			return nil, fmt.Errorf("pack index, pack %x: %w", p.ID[:8], err)
		}
		if err := checkTiling(p.Entries, p.Size-n*EntryLen-FooterLen); err != nil {
			return nil, fmt.Errorf("pack index, pack %x: %w", p.ID[:8], err)
		}
		if id := IDOfTrailer(Trailer(p.Entries)); id != p.ID {
			return nil, fmt.Errorf("pack index: the table it holds for pack %x is that of pack %x: %w", p.ID[:8], id[:8], ErrCorrupt)
		}
		rest = rest[n*EntryLen:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("pack index: %d bytes after the last pack: %w", len(rest), ErrCorrupt)
	}
	return x, nil
}
