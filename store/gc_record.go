package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"

	"github.com/weightfs/weightfs/store/format"
)

// The gc record, STORE/dropped (S3: PREFIX/dropped): its bytes, and the operations on its
// ranges, are package store/format's (format/gcrecord.go; docs/format.md Part I §4.4);
// gcRecordKeeper below keeps it. The record is advisory to Verify alone.

// GCRecordName is the record's name in a store's layout (STORE/NAME, PREFIX/NAME in S3).
const GCRecordName = format.GCRecordName

type gcRecord = format.GCRecord

func encodeGCRecord(r gcRecord) []byte { return format.EncodeGCRecord(r) }

func parseGCRecord(b []byte) (gcRecord, error) { return format.ParseGCRecord(b) }

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
		qs, err := q.ListQuarantined()
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
	return k.put(r.Add(drop, remaining))
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
		if r.Dropped(v) {
			stale = true
			break
		}
	}
	if !stale {
		return
	}
	if err := k.put(r.Add(nil, numbers)); err != nil {
		k.log.Warn("gc record: versions it lists that the store holds not cut out", "err", err)
	}
}
