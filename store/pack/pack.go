// Package pack owns the bytes of store format 3's packs and pack indexes (docs/format.md
// Part I §3.5 and §3.6): a pack holds many object files back to back with a table of them at
// its end, so that a version costs a few files and requests, not one per tensor; an index
// names where each object of some packs is, so a reader learns a version's locations in one
// request. It knows nothing of what an object holds (package store checks each record as the
// object file it is) and does no I/O beyond the io.ReaderAt and io.WriterAt it is given.
//
// The layout is restic's (records first, table last, so a pack is written in one pass as
// objects come, and nothing is rewritten once the table is known) with git's sorted table and
// per-record checksum, so a lookup is a binary search and a damaged record is named alone.
package pack

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
)

// ID is a 32-byte identity: an object's (the store's ID) or a pack's (SHA-256 of its table
// and footer).
type ID = [32]byte

// Sizes and magics of the format (docs/format.md Part I §3.5).
const (
	EntryLen      = 52 // id [32] | offset u64 | length u64 | crc u32
	FooterLen     = 20 // count u32 | version u16 | zero u16 | crc u32 | magic [8]
	Magic         = "WFSPACK\x00"
	Version       = 1
	MinRecordLen  = 100 // the smallest object file: header 96 + CRC 4
	MaxEntries    = 1 << 24
	IndexMagic    = "WFSX"
	IndexVersion  = 1
	indexHeadLen  = 20 // magic 4 | version 2 | zero 2 | sequence 8 | pack count 4
	indexPackHead = 44 // pack id 32 | size 8 | count 4
)

// ErrCorrupt is returned (wrapped, with what failed) for bytes that break a rule of the
// format; ErrUnsupported for a version this package does not read. Package store maps them to
// its own sentinels.
var (
	ErrCorrupt     = errors.New("corrupt")
	ErrUnsupported = errors.New("unsupported format version")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one record of a pack: the object id, where its file starts in the pack, its length
// and the CRC-32C trailer of the object file (its last four bytes, little-endian).
type Entry struct {
	ID     ID
	Offset int64
	Length int64
	CRC    uint32
}

func (e Entry) encode(b []byte) {
	copy(b[:32], e.ID[:])
	binary.LittleEndian.PutUint64(b[32:], uint64(e.Offset))
	binary.LittleEndian.PutUint64(b[40:], uint64(e.Length))
	binary.LittleEndian.PutUint32(b[48:], e.CRC)
}

func decodeEntry(b []byte) Entry {
	var e Entry
	copy(e.ID[:], b[:32])
	e.Offset = int64(binary.LittleEndian.Uint64(b[32:]))
	e.Length = int64(binary.LittleEndian.Uint64(b[40:]))
	e.CRC = binary.LittleEndian.Uint32(b[48:])
	return e
}

// Trailer returns the table and footer of a pack holding entries (which Trailer sorts by id):
// the bytes that follow its records. Its SHA-256 is the pack's id.
func Trailer(entries []Entry) []byte {
	sort.Slice(entries, func(i, j int) bool { return bytes.Compare(entries[i].ID[:], entries[j].ID[:]) < 0 })
	b := make([]byte, len(entries)*EntryLen+FooterLen)
	for i, e := range entries {
		e.encode(b[i*EntryLen:])
	}
	f := b[len(entries)*EntryLen:]
	binary.LittleEndian.PutUint32(f, uint32(len(entries)))
	binary.LittleEndian.PutUint16(f[4:], Version)
	binary.LittleEndian.PutUint32(f[8:], crc32.Checksum(b[:len(entries)*EntryLen+8], castagnoli))
	copy(f[12:], Magic)
	return b
}

// IDOfTrailer is the pack id of a pack whose trailer (table and footer) is t.
func IDOfTrailer(t []byte) ID { return sha256.Sum256(t) }

// ReadTrailer reads and checks the table of the pack r of size bytes: the footer's magic,
// version and CRC, ids strictly ascending, records at least MinRecordLen bytes tiling the
// bytes before the table exactly. It returns the entries (sorted by id) and the pack's id. It
// does not read the records.
func ReadTrailer(r io.ReaderAt, size int64) ([]Entry, ID, error) {
	if size < FooterLen+EntryLen+MinRecordLen {
		return nil, ID{}, fmt.Errorf("pack of %d bytes, shorter than the smallest pack: %w", size, ErrCorrupt)
	}
	var f [FooterLen]byte
	if _, err := r.ReadAt(f[:], size-FooterLen); err != nil {
		return nil, ID{}, fmt.Errorf("read pack footer: %w", err)
	}
	if string(f[12:]) != Magic {
		return nil, ID{}, fmt.Errorf("pack footer has no pack magic: %w", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(f[4:]); v != Version {
		return nil, ID{}, fmt.Errorf("pack format version %d (this program reads %d): %w", v, Version, ErrUnsupported)
	}
	n := int64(binary.LittleEndian.Uint32(f[:]))
	if n < 1 || n > MaxEntries || n*EntryLen+FooterLen > size-n*MinRecordLen {
		return nil, ID{}, fmt.Errorf("pack of %d bytes claims %d records: %w", size, n, ErrCorrupt)
	}
	t := make([]byte, n*EntryLen+FooterLen)
	if _, err := r.ReadAt(t, size-int64(len(t))); err != nil {
		return nil, ID{}, fmt.Errorf("read pack table: %w", err)
	}
	if got, want := crc32.Checksum(t[:n*EntryLen+8], castagnoli), binary.LittleEndian.Uint32(t[n*EntryLen+8:]); got != want || binary.LittleEndian.Uint16(t[n*EntryLen+6:]) != 0 {
		return nil, ID{}, fmt.Errorf("pack table checksum %08x, footer says %08x: %w", got, want, ErrCorrupt)
	}
	entries, err := decodeEntries(t[:n*EntryLen])
	if err != nil {
		return nil, ID{}, err
	}
	if err := checkTiling(entries, size-int64(len(t))); err != nil {
		return nil, ID{}, err
	}
	return entries, IDOfTrailer(t), nil
}

// decodeEntries decodes a table and checks that its ids ascend strictly.
func decodeEntries(b []byte) ([]Entry, error) {
	entries := make([]Entry, len(b)/EntryLen)
	for i := range entries {
		entries[i] = decodeEntry(b[i*EntryLen:])
		if i > 0 && bytes.Compare(entries[i-1].ID[:], entries[i].ID[:]) >= 0 {
			return nil, fmt.Errorf("pack table: object ids out of order at entry %d: %w", i, ErrCorrupt)
		}
	}
	return entries, nil
}

// checkTiling checks that the records of entries cover [0, recordsLen) exactly, each at least
// MinRecordLen bytes.
func checkTiling(entries []Entry, recordsLen int64) error {
	byOffset := make([]Entry, len(entries))
	copy(byOffset, entries)
	sort.Slice(byOffset, func(i, j int) bool { return byOffset[i].Offset < byOffset[j].Offset })
	var next int64
	for _, e := range byOffset {
		if e.Offset != next || e.Length < MinRecordLen || e.Length > recordsLen-e.Offset {
			return fmt.Errorf("pack table: record of %x at %d+%d does not follow the record ending at %d (records end at %d): %w",
				e.ID[:8], e.Offset, e.Length, next, recordsLen, ErrCorrupt)
		}
		next = e.Offset + e.Length
	}
	if next != recordsLen {
		return fmt.Errorf("pack table: records end at %d, table starts at %d: %w", next, recordsLen, ErrCorrupt)
	}
	return nil
}

// Find returns the entry of id in entries sorted by id (ReadTrailer's order).
func Find(entries []Entry, id ID) (Entry, bool) {
	i := sort.Search(len(entries), func(i int) bool { return bytes.Compare(entries[i].ID[:], id[:]) >= 0 })
	if i < len(entries) && entries[i].ID == id {
		return entries[i], true
	}
	return Entry{}, false
}
