package format

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
)

// The gc record (docs/format.md Part I §4.4; docs/design.md, "Telling a dropped version from
// a lost one"): STORE/dropped (S3: PREFIX/dropped) lists the version numbers gc dropped, so
// that Verify can tell a version gc dropped from one whose manifest was lost. gc writes it,
// durably, before it deletes the first manifest; the writer creates it when it opens a store
// without one. Versions at or below its Since were gone before the record existed (or before
// it was last recreated): Verify judges those by the deltas of the version after them, as
// before the record. The record is advisory to Verify alone: a damaged or missing one costs
// Verify that distinction (it says so in its report), never a read, a seal or a gc.

// The record is the backend's one RecordGC record (store.Records), GCRecordName. A backend
// without it has none: Verify then judges every gone version by the deltas after it.

// GCRecordName is the record's name in a store's layout (STORE/NAME, PREFIX/NAME in S3).
const GCRecordName = "dropped"

const (
	GCRecordMagic   = "WFSDROPS"
	GCRecordVersion = 1
	GCRecordHead    = 24 // magic, version, since, range count
	GCRecordRange   = 16 // first, last
)

// VersionRange is a closed range of version numbers.
type VersionRange struct{ First, Last uint64 }

// GCRecord is the content of the gc record.
type GCRecord struct {
	// Since: a version at or below it that is gone was gone before the record (judged the
	// old way); above it, a gone version that no range holds was not dropped by gc.
	Since uint64
	// Ranges holds every version gc dropped (and numbers between them that no version had),
	// ascending and disjoint.
	Ranges []VersionRange
}

// EncodeGCRecord lays out r (docs/format.md Part I §4.4).
func EncodeGCRecord(r GCRecord) []byte {
	b := make([]byte, GCRecordHead, GCRecordHead+GCRecordRange*len(r.Ranges)+4)
	copy(b, GCRecordMagic)
	binary.LittleEndian.PutUint32(b[8:], GCRecordVersion)
	binary.LittleEndian.PutUint64(b[12:], r.Since)
	binary.LittleEndian.PutUint32(b[20:], uint32(len(r.Ranges)))
	for _, rg := range r.Ranges {
		b = binary.LittleEndian.AppendUint64(b, rg.First)
		b = binary.LittleEndian.AppendUint64(b, rg.Last)
	}
	return binary.LittleEndian.AppendUint32(b, CRC32C(b))
}

// ParseGCRecord checks and decodes a gc record: the magic, then the version, then the size
// and the CRC, then the numbers. Any failure wraps ErrCorrupt (an unknown version wraps
// ErrUnsupportedVersion): the record is refused whole.
func ParseGCRecord(b []byte) (GCRecord, error) {
	var r GCRecord
	if len(b) < len(GCRecordMagic) || string(b[:len(GCRecordMagic)]) != GCRecordMagic {
		return r, fmt.Errorf("gc record: bad magic: %w", ErrCorrupt)
	}
	if len(b) < 12 {
		return r, fmt.Errorf("gc record: %d bytes: %w", len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != GCRecordVersion {
		return r, fmt.Errorf("gc record: format version %d (this weightfs reads %d): %w", v, GCRecordVersion, ErrUnsupportedVersion)
	}
	if len(b) < GCRecordHead+4 {
		return r, fmt.Errorf("gc record: %d bytes: %w", len(b), ErrCorrupt)
	}
	n := uint64(binary.LittleEndian.Uint32(b[20:]))
	if uint64(len(b)) != GCRecordHead+GCRecordRange*n+4 {
		return r, fmt.Errorf("gc record: %d bytes for %d ranges: %w", len(b), n, ErrCorrupt)
	}
	body := len(b) - 4
	if binary.LittleEndian.Uint32(b[body:]) != CRC32C(b[:body]) {
		return r, fmt.Errorf("gc record: CRC-32C mismatch: %w", ErrCorrupt)
	}
	r.Since = binary.LittleEndian.Uint64(b[12:])
	if r.Since > MaxVersion {
		return r, fmt.Errorf("gc record: since %d above the largest version: %w", r.Since, ErrCorrupt)
	}
	if n > 0 {
		r.Ranges = make([]VersionRange, n)
	}
	for i := range r.Ranges {
		off := GCRecordHead + GCRecordRange*i
		rg := VersionRange{binary.LittleEndian.Uint64(b[off:]), binary.LittleEndian.Uint64(b[off+8:])}
		if rg.First < 1 || rg.First > rg.Last || rg.Last > MaxVersion || (i > 0 && rg.First <= r.Ranges[i-1].Last) {
			return GCRecord{}, fmt.Errorf("gc record: range %d (%d-%d) out of order or out of bounds: %w", i, rg.First, rg.Last, ErrCorrupt)
		}
		r.Ranges[i] = rg
	}
	return r, nil
}

// Dropped reports whether gc dropped version v (a range holds it).
func (r *GCRecord) Dropped(v uint64) bool {
	i := sort.Search(len(r.Ranges), func(i int) bool { return r.Ranges[i].Last >= v })
	return i < len(r.Ranges) && r.Ranges[i].First <= v
}

// Add returns r with the versions drop added. remaining (ascending) are the versions that
// stay (manifests and the quarantine's): two ranges with none of them between are joined,
// so the record holds about as many ranges as there are kept versions, whatever gc dropped
// over time. A number between two dropped versions with no remaining version between them
// is no remaining version's previous (that is the next sealed number after it, which is
// dropped or between), so holding it hides nothing.
func (r GCRecord) Add(drop, remaining []uint64) GCRecord {
	all := slices.Clone(r.Ranges)
	for _, v := range drop {
		all = append(all, VersionRange{v, v})
	}
	slices.SortFunc(all, func(a, b VersionRange) int {
		switch {
		case a.First < b.First:
			return -1
		case a.First > b.First:
			return 1
		}
		return 0
	})
	out := GCRecord{Since: r.Since}
	for _, rg := range all {
		if n := len(out.Ranges); n > 0 {
			last := &out.Ranges[n-1]
			// The first remaining version above the last range.
			i := sort.Search(len(remaining), func(i int) bool { return remaining[i] > last.Last })
			if rg.First <= last.Last+1 || i == len(remaining) || remaining[i] >= rg.First {
				last.Last = max(last.Last, rg.Last)
				continue
			}
		}
		out.Ranges = append(out.Ranges, rg)
	}
	// A remaining version inside a range (one an earlier gc recorded and then did not delete,
	// stopped between the record and the manifest; a gc now keeps it) is cut out of it, so
	// that its manifest, if lost later, is not taken for dropped.
	var cut []VersionRange
	for _, rg := range out.Ranges {
		i := sort.Search(len(remaining), func(i int) bool { return remaining[i] >= rg.First })
		for ; i < len(remaining) && remaining[i] <= rg.Last; i++ {
			if remaining[i] > rg.First {
				cut = append(cut, VersionRange{rg.First, remaining[i] - 1})
			}
			rg.First = remaining[i] + 1
		}
		if rg.First <= rg.Last {
			cut = append(cut, rg)
		}
	}
	out.Ranges = cut
	return out
}
