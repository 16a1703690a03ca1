package pack

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Writer appends object files to a pack being written and, at Finish, its table and footer.
// Records are written at the position they take in the pack, in the order they are added.
// Not safe for concurrent use.
type Writer struct {
	w       io.WriterAt
	off     int64
	entries []Entry
	seen    map[ID]bool
}

// NewWriter starts a pack at offset 0 of w.
func NewWriter(w io.WriterAt) *Writer { return &Writer{w: w, seen: map[ID]bool{}} }

// Add appends the object file record (a whole object file: header to CRC trailer) of object
// id. An id already in this pack is not added again (its first record stays).
func (p *Writer) Add(id ID, record []byte) error {
	if p.seen[id] {
		return nil
	}
	if len(record) < MinRecordLen {
		return fmt.Errorf("object %x: a record of %d bytes, shorter than an object file", id[:8], len(record))
	}
	if _, err := p.w.WriteAt(record, p.off); err != nil {
		return fmt.Errorf("write object %x into pack: %w", id[:8], err)
	}
	p.Added(id, int64(len(record)), binary.LittleEndian.Uint32(record[len(record)-4:]))
	return nil
}

// Added records an object file of length bytes whose last four bytes are crc, which the
// caller wrote itself at Offset() (a large object streamed straight into the pack's file).
func (p *Writer) Added(id ID, length int64, crc uint32) {
	p.seen[id] = true
	p.entries = append(p.entries, Entry{ID: id, Offset: p.off, Length: length, CRC: crc})
	p.off += length
}

// Has reports whether the pack holds id.
func (p *Writer) Has(id ID) bool { return p.seen[id] }

// Offset is where the next record starts: the bytes of records written so far.
func (p *Writer) Offset() int64 { return p.off }

// Len is the number of records.
func (p *Writer) Len() int { return len(p.entries) }

// Finish writes the table and footer after the records and returns the pack's id, its size
// and its entries sorted by id. A pack holds at least one record.
func (p *Writer) Finish() (ID, int64, []Entry, error) {
	if len(p.entries) == 0 {
		return ID{}, 0, nil, fmt.Errorf("pack of no records")
	}
	t := Trailer(p.entries)
	if _, err := p.w.WriteAt(t, p.off); err != nil {
		return ID{}, 0, nil, fmt.Errorf("write pack table: %w", err)
	}
	return IDOfTrailer(t), p.off + int64(len(t)), p.entries, nil
}
