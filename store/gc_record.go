package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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

// The record is the backend's one RecordGC record (Records), GCRecordName. A backend
// without it has none: Verify then judges every gone version by the deltas after it.

// GCRecordName is the record's name in a store's layout (STORE/NAME, PREFIX/NAME in S3).
const GCRecordName = "dropped"

const (
	gcRecordMagic   = "WFSDROPS"
	gcRecordVersion = 1
	gcRecordHead    = 24 // magic, version, since, range count
	gcRecordRange   = 16 // first, last
)

// versionRange is a closed range of version numbers.
type versionRange struct{ First, Last uint64 }

// gcRecord is the content of the gc record.
type gcRecord struct {
	// Since: a version at or below it that is gone was gone before the record (judged the
	// old way); above it, a gone version that no range holds was not dropped by gc.
	Since uint64
	// Ranges holds every version gc dropped (and numbers between them that no version had),
	// ascending and disjoint.
	Ranges []versionRange
}

// encodeGCRecord lays out r (docs/format.md Part I §4.4).
func encodeGCRecord(r gcRecord) []byte {
	b := make([]byte, gcRecordHead, gcRecordHead+gcRecordRange*len(r.Ranges)+4)
	copy(b, gcRecordMagic)
	binary.LittleEndian.PutUint32(b[8:], gcRecordVersion)
	binary.LittleEndian.PutUint64(b[12:], r.Since)
	binary.LittleEndian.PutUint32(b[20:], uint32(len(r.Ranges)))
	for _, rg := range r.Ranges {
		b = binary.LittleEndian.AppendUint64(b, rg.First)
		b = binary.LittleEndian.AppendUint64(b, rg.Last)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c(b))
}

// parseGCRecord checks and decodes a gc record: the magic, then the version, then the size
// and the CRC, then the numbers. Any failure wraps ErrCorrupt (an unknown version wraps
// ErrUnsupportedVersion): the record is refused whole.
func parseGCRecord(b []byte) (gcRecord, error) {
	var r gcRecord
	if len(b) < len(gcRecordMagic) || string(b[:len(gcRecordMagic)]) != gcRecordMagic {
		return r, fmt.Errorf("gc record: bad magic: %w", ErrCorrupt)
	}
	if len(b) < 12 {
		return r, fmt.Errorf("gc record: %d bytes: %w", len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != gcRecordVersion {
		return r, fmt.Errorf("gc record: format version %d (this weightfs reads %d): %w", v, gcRecordVersion, ErrUnsupportedVersion)
	}
	if len(b) < gcRecordHead+4 {
		return r, fmt.Errorf("gc record: %d bytes: %w", len(b), ErrCorrupt)
	}
	n := uint64(binary.LittleEndian.Uint32(b[20:]))
	if uint64(len(b)) != gcRecordHead+gcRecordRange*n+4 {
		return r, fmt.Errorf("gc record: %d bytes for %d ranges: %w", len(b), n, ErrCorrupt)
	}
	body := len(b) - 4
	if binary.LittleEndian.Uint32(b[body:]) != crc32c(b[:body]) {
		return r, fmt.Errorf("gc record: CRC-32C mismatch: %w", ErrCorrupt)
	}
	r.Since = binary.LittleEndian.Uint64(b[12:])
	if r.Since > MaxVersion {
		return r, fmt.Errorf("gc record: since %d above the largest version: %w", r.Since, ErrCorrupt)
	}
	if n > 0 {
		r.Ranges = make([]versionRange, n)
	}
	for i := range r.Ranges {
		off := gcRecordHead + gcRecordRange*i
		rg := versionRange{binary.LittleEndian.Uint64(b[off:]), binary.LittleEndian.Uint64(b[off+8:])}
		if rg.First < 1 || rg.First > rg.Last || rg.Last > MaxVersion || (i > 0 && rg.First <= r.Ranges[i-1].Last) {
			return gcRecord{}, fmt.Errorf("gc record: range %d (%d-%d) out of order or out of bounds: %w", i, rg.First, rg.Last, ErrCorrupt)
		}
		r.Ranges[i] = rg
	}
	return r, nil
}

// dropped reports whether gc dropped version v (a range holds it).
func (r *gcRecord) dropped(v uint64) bool {
	i := sort.Search(len(r.Ranges), func(i int) bool { return r.Ranges[i].Last >= v })
	return i < len(r.Ranges) && r.Ranges[i].First <= v
}

// add returns r with the versions drop added. remaining (ascending) are the versions that
// stay (manifests and the quarantine's): two ranges with none of them between are joined,
// so the record holds about as many ranges as there are kept versions, whatever gc dropped
// over time. A number between two dropped versions with no remaining version between them
// is no remaining version's previous (that is the next sealed number after it, which is
// dropped or between), so holding it hides nothing.
func (r gcRecord) add(drop, remaining []uint64) gcRecord {
	all := slices.Clone(r.Ranges)
	for _, v := range drop {
		all = append(all, versionRange{v, v})
	}
	slices.SortFunc(all, func(a, b versionRange) int {
		switch {
		case a.First < b.First:
			return -1
		case a.First > b.First:
			return 1
		}
		return 0
	})
	out := gcRecord{Since: r.Since}
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
	var cut []versionRange
	for _, rg := range out.Ranges {
		i := sort.Search(len(remaining), func(i int) bool { return remaining[i] >= rg.First })
		for ; i < len(remaining) && remaining[i] <= rg.Last; i++ {
			if remaining[i] > rg.First {
				cut = append(cut, versionRange{rg.First, remaining[i] - 1})
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

// gcRecordState is what gcRecordKeeper.read found.
type gcRecordState int

const (
	gcRecordOK          gcRecordState = iota
	gcRecordUnsupported               // the backend holds none
	gcRecordAbsent                    // none in the store
	gcRecordBad                       // unreadable or refused: the error says why
)

// gcRecordKeeper reads and writes the store's gc record: the writer at open (ensure), gc
// (recordDropped, trim), Verify and the readers that ask whether gc dropped a version
// (read).
type gcRecordKeeper struct {
	be  *backendCaps
	log *slog.Logger
}

// ensureGCRecord is the writer's at open (gcRecordKeeper.ensure).
func (c *collector) ensureGCRecord() { c.gcRecord.ensure() }

// readGCRecord reads and checks the store's gc record (Verify).
func (c *collector) readGCRecord() (gcRecord, gcRecordState, error) { return c.gcRecord.read() }

// recordLost records versions whose manifests repair found lost as gone, as gc records what
// it drops.
func (c *collector) recordLost(lost []uint64) error { return c.gcRecord.recordDropped(lost) }

// put replaces the record by r, durably.
func (k *gcRecordKeeper) put(r gcRecord) error {
	return k.be.records.PutRecord(RecordGC, GCRecordName, encodeGCRecord(r))
}

// read reads and checks the store's gc record.
func (k *gcRecordKeeper) read() (gcRecord, gcRecordState, error) {
	if k.be.records == nil {
		return gcRecord{}, gcRecordUnsupported, nil
	}
	data, err := k.be.records.GetRecord(RecordGC, GCRecordName)
	if errors.Is(err, errors.ErrUnsupported) {
		return gcRecord{}, gcRecordUnsupported, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return gcRecord{}, gcRecordAbsent, nil
	}
	if err != nil {
		return gcRecord{}, gcRecordBad, err
	}
	r, err := parseGCRecord(data)
	if err != nil {
		return gcRecord{}, gcRecordBad, err
	}
	return r, gcRecordOK, nil
}

// storedVersionNumbers lists the version numbers the store holds (manifests, readable or not) and
// those in quarantine, ascending.
func (k *gcRecordKeeper) storedVersionNumbers() ([]uint64, error) {
	numbers, err := k.be.ListManifests()
	if err != nil {
		return nil, err
	}
	if q := k.be.quarantine; q != nil {
		qs, err := q.listQuarantined()
		if err != nil {
			return nil, err
		}
		numbers = append(numbers, qs...)
		slices.Sort(numbers)
		numbers = slices.Compact(numbers)
	}
	return numbers, nil
}

// fresh is the record of a store that has none (or a damaged one): every version
// gone so far is judged the old way.
func (k *gcRecordKeeper) fresh() (gcRecord, error) {
	numbers, err := k.storedVersionNumbers()
	if err != nil {
		return gcRecord{}, err
	}
	var r gcRecord
	if n := len(numbers); n > 0 {
		r.Since = numbers[n-1]
	}
	return r, nil
}

// ensure is the writer's at open: a store without a gc record (new, or from before
// the record) gets one, and a damaged one is replaced, with a log line saying what is lost.
// It never fails the open: without a record, Verify judges as before it.
func (k *gcRecordKeeper) ensure() {
	_, state, err := k.read()
	switch state {
	case gcRecordOK:
		k.trim()
		return
	case gcRecordUnsupported:
		return
	case gcRecordBad:
		if !errors.Is(err, ErrCorrupt) {
			// Unreadable now, or written by a newer weightfs: not ours to replace.
			k.log.Warn("gc record: not read; left as it is", "err", err)
			return
		}
	}
	r, ferr := k.fresh()
	if ferr == nil {
		ferr = k.put(r)
	}
	switch {
	case ferr != nil:
		k.log.Warn("gc record: not written (verify judges gone versions by their deltas alone)", "err", ferr)
	case state == gcRecordBad:
		k.log.Warn(fmt.Sprintf("gc record: damaged, replaced by a new one: which versions at or below %d gc dropped is no longer known (verify judges those by their next versions' deltas alone)", r.Since), "err", err)
	}
}

// recordDropped adds the versions gc is about to drop to the gc record, durably. gc calls it
// before it deletes the first manifest and stops if it fails.
func (k *gcRecordKeeper) recordDropped(drop []uint64) error {
	r, state, err := k.read()
	switch state {
	case gcRecordUnsupported:
		return nil
	case gcRecordBad:
		if !errors.Is(err, ErrCorrupt) {
			// A record of a newer format is refused, not overwritten: gc stops, deleting
			// nothing (use the newer weightfs).
			return err
		}
		k.log.Warn("gc record: damaged, replaced by a new one: which versions gc dropped before is no longer known (verify judges those by their next versions' deltas alone)", "err", err)
		fallthrough
	case gcRecordAbsent:
		if r, err = k.fresh(); err != nil {
			return err
		}
	}
	numbers, err := k.storedVersionNumbers()
	if err != nil {
		return err
	}
	dropSet := map[uint64]bool{}
	for _, v := range drop {
		dropSet[v] = true
	}
	remaining := slices.DeleteFunc(numbers, func(v uint64) bool { return dropSet[v] })
	return k.put(r.add(drop, remaining))
}

// trim cuts out of the gc record the versions it lists that the store still holds:
// a gc that recorded them and stopped before deleting their manifests (a crash, a failed
// delete). Left in, they would be taken for dropped if their manifests were lost later, and
// Verify would not call that damage. The writer runs it at open and gc when it drops nothing
// (a gc that drops versions cuts them in recordDropped); no gc runs meanwhile (a gc holds the
// writer's lock, or is the writer's own under writeMu). A failure is logged, not returned:
// the record only tells Verify's findings apart.
func (k *gcRecordKeeper) trim() {
	r, state, _ := k.read()
	if state != gcRecordOK {
		return
	}
	numbers, err := k.storedVersionNumbers()
	if err != nil {
		k.log.Warn("gc record: versions it lists that the store holds not cut out", "err", err)
		return
	}
	stale := false
	for _, v := range numbers {
		if r.dropped(v) {
			stale = true
			break
		}
	}
	if !stale {
		return
	}
	if err := k.put(r.add(nil, numbers)); err != nil {
		k.log.Warn("gc record: versions it lists that the store holds not cut out", "err", err)
	}
}
