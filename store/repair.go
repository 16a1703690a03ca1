package store

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"
)

// Repair (weightfs verify --repair) moves damaged versions and objects aside, into
// STORE/quarantine/ (docs/format.md (Part I) §1, §8):
//
//   - a version whose manifest cannot be read, or one of whose files cannot be rebuilt from
//     its objects exactly, leaves versions/ for quarantine/vNNNNNN (its bytes as they were);
//   - an object whose file fails its checks leaves objects/ for quarantine/objects/<id>, so
//     that the next version holding the same bytes stores them anew rather than refer to
//     the damaged file.
//
// A format file older than the store's objects (Verify's finding naming weightfs-store) is not
// moved either: the writer that Repair needs rewrote it as format 2 when it opened the store
// (upgradeFormat), so Verify does not find it again.
//
// A version whose manifest is lost (Verify's "manifest lost") has nothing to move: it is
// recorded as gone in the gc record (gcrecord.go), and the next gc removes the objects only
// it named (but those later versions' links decode against: liveSetWhole). What was moved or recorded is reported and logged, never silent. Versions that named a quarantined one
// as their previous version stay what they were: their objects do not depend on the
// manifest, and Verify checked each of them on its own (if it needs a damaged object it is
// quarantined too). They are listed as anchors (their previous version is gone), and their
// patches are computed from the previous version still listed. Quarantined version numbers
// are never used again. Objects that only quarantined versions named are removed by the next
// gc, like any unreferenced object.

// quarantiner is a backend that can move damaged files aside (the local one).
type quarantiner interface {
	quarantineManifest(v uint64) (string, error)
	quarantineObject(id ID) (string, error)
	// listQuarantined lists the version numbers in quarantine, ascending.
	listQuarantined() ([]uint64, error)
}

// RepairReport says what Repair found and did.
type RepairReport struct {
	Verify             VerifyReport
	Quarantined        []uint64 // versions moved aside, ascending
	QuarantinedObjects []ID     // objects moved aside
	Moved              []string // where each went, for the report
	// Lost lists the versions whose manifest is lost (nothing to move): they are recorded as
	// gone in the gc record (gcrecord.go), so that a following Verify passes.
	Lost []uint64
}

// Repair verifies the whole store (Verify) and moves every damaged version and object into
// quarantine. It needs the writer (the store open for writing). The error is nil when the
// store is consistent afterwards (whether or not anything was moved); it is non-nil when
// Verify could not run, or found something a quarantine does not mend (an I/O error that
// is not damage), and then nothing is moved.
func (s *Store) Repair(progress func(done, total int64)) (RepairReport, error) {
	var rep RepairReport
	if err := s.checkOpen(); err != nil {
		return rep, err
	}
	if s.readOnly {
		return rep, fmt.Errorf("repair: %w", ErrReadOnly)
	}
	q, ok := s.be.(quarantiner)
	if !ok {
		return rep, fmt.Errorf("repair: not supported for this store's backend (local stores only)")
	}
	var err error
	rep.Verify, err = s.Verify(progress)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return rep, fmt.Errorf("repair: %w", err)
	}
	versions := map[uint64]bool{}
	objects := map[ID]bool{}
	for _, d := range rep.Verify.Damaged {
		if d.Version == 0 && d.Object.IsZero() {
			// The format file (verify_format.go): nothing to quarantine. A writer rewrites it
			// as format 2 when it opens the store, so only one that does not upgrade (a rank
			// of a writer group) meets it here.
			return rep, fmt.Errorf("repair: %s: not mended by a quarantine; the store's writer rewrites it when it opens the store (weightfs verify --repair); nothing moved", d)
		}
		if !isDamage(d.Err) {
			return rep, fmt.Errorf("repair: %s: not damage a quarantine mends; nothing moved", d)
		}
		if d.Version != 0 {
			versions[d.Version] = true
		} else {
			objects[d.Object] = true
		}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for _, v := range slices.Sorted(mapKeys(versions)) {
		if _, err := s.be.GetManifest(v); errors.Is(err, fs.ErrNotExist) {
			rep.Lost = append(rep.Lost, v)
			delete(versions, v)
		}
	}
	if len(rep.Lost) > 0 {
		// A lost manifest leaves nothing to move: the loss is recorded, as gc records what it
		// drops; the next gc removes the objects only it named (but the contexts of later
		// versions' links: gc.go).
		if err := s.recordDropped(rep.Lost); err != nil {
			return rep, fmt.Errorf("repair: record the lost versions %v: %w", rep.Lost, err)
		}
		s.log.Info("repair: lost manifests recorded as gone in the gc record", "versions", rep.Lost)
	}
	for _, v := range slices.Sorted(mapKeys(versions)) {
		dst, err := q.quarantineManifest(v)
		if err != nil {
			return rep, fmt.Errorf("repair: %w", err)
		}
		rep.Quarantined = append(rep.Quarantined, v)
		rep.Moved = append(rep.Moved, dst)
		s.log.Info("repair: version quarantined", "version", v, "to", dst)
	}
	ids := slices.SortedFunc(mapKeys(objects), func(a, b ID) int { return strings.Compare(a.String(), b.String()) })
	for _, id := range ids {
		dst, err := q.quarantineObject(id)
		if err != nil {
			return rep, fmt.Errorf("repair: %w", err)
		}
		rep.QuarantinedObjects = append(rep.QuarantinedObjects, id)
		rep.Moved = append(rep.Moved, dst)
		s.forgetMeta(id)
		s.crcChecked.Delete(id)
		s.log.Info("repair: object quarantined", "object", id, "to", dst)
	}
	if len(rep.Moved) == 0 {
		return rep, nil // (lost manifests recorded change nothing a process holds)
	}
	if err := s.ix.updateVersions(nil, rep.Quarantined); err != nil {
		s.log.Warn("index: not updated", "err", err)
	}
	for _, v := range rep.Quarantined {
		s.manifests.remove(v)
	}
	s.objInfos.clear()
	s.deltas.clear()
	if err := s.loadVersions(); err != nil {
		return rep, fmt.Errorf("repair: %w", err)
	}
	// The copy may hold a version or object that is gone: it is rebuilt at the newest
	// readable version.
	s.mat.invalidate()
	if err := s.mat.ensure(); err != nil {
		s.log.Warn("repair: materialized copy not rebuilt", "err", err)
	}
	return rep, nil
}

// isDamage reports whether a finding of Verify is damage in the store (a failed check, a
// missing file, an unreadable sector) rather than a passing failure of the machine.
func isDamage(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EIO)
}

func mapKeys[K comparable](m map[K]bool) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
