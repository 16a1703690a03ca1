package store

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"syscall"
)

// Repair (weightfs verify --repair) mends what an intact source can mend, and moves aside,
// into STORE/quarantine/ (docs/format.md (Part I) §1, §8), only what is damaged and cannot be
// mended. The rule it keeps: it never moves a version that every read path serves exactly,
// and acts on no I/O error (repair_mend.go has the mending):
//
//   - an I/O error (EIO, EMFILE, EACCES, ...) is no verdict of damage: Verify reports it as
//     Unreadable, Repair verifies once more (a transient error passes), and if it stays,
//     Repair stops with that error and changes nothing;
//   - an object whose file fails its own checks, or that a version's file cannot be rebuilt
//     through, is written again whole from an intact source of its content, checked against
//     its name (the SHA-256 of the content): the materialized copy, a checked file copy
//     (each read checked against its CRC-32C sums); a damaged object gets back its link to
//     its base where the base reads, so that the deltas coded against it decode again;
//   - what is still damaged after that (Verify runs again) is moved: a version whose
//     manifest cannot be read, or one of whose files cannot be rebuilt exactly and is not
//     served exactly through any read path, leaves versions/ for quarantine/vNNNNNN; an
//     object whose own file fails its checks leaves objects/ for quarantine/objects/<id>,
//     so that the next version holding the same bytes stores them anew;
//   - a dry run (RepairOptions.DryRun) says what would be mended and moved, and changes
//     nothing.
//
// A format file older than the store's objects (Verify's finding naming weightfs-store) is not
// moved either: the writer that Repair needs rewrote it as format 2 when it opened the store
// (upgradeFormat), so Verify does not find it again.
//
// A version whose manifest is lost (Verify's "manifest lost") has nothing to move: it is
// recorded as gone in the gc record (gc_record.go), and the next gc removes the objects only
// it named (but those later versions' links decode against: liveSetWhole). What was moved or recorded is reported and logged, never silent. Versions that named a quarantined one
// as their previous version stay what they were: their objects do not depend on the
// manifest, and Verify checked each of them on its own (if it needs a damaged object it is
// quarantined too). They are listed as anchors (their previous version is gone), and their
// patches are computed from the previous version still listed. Quarantined version numbers
// are never used again. Objects that only quarantined versions named are removed by the next
// gc, like any unreferenced object.

// Quarantiner is a Backend that can move damaged files aside, out of the store's view but
// kept (store/local: under STORE/quarantine/; store/s3: under PREFIX/quarantine/). Repair
// needs one. A backend with a remote cache is asked through the cache policy, which forwards
// to it (cache_policy.go).
type Quarantiner interface {
	// QuarantineManifest moves version v's manifest aside and says where it went.
	QuarantineManifest(v uint64) (string, error)
	// QuarantineObject moves object id aside (its bytes as they are) and says where.
	QuarantineObject(id ID) (string, error)
	// ListQuarantined lists the version numbers in quarantine, ascending.
	ListQuarantined() ([]uint64, error)
	// QuarantineManifestPath and QuarantineObjectPath say where those would move a file.
	QuarantineManifestPath(v uint64) string
	QuarantineObjectPath(id ID) string
}

// RepairReport says what Repair found and did (or, for a dry run, would do).
type RepairReport struct {
	Verify             VerifyReport
	DryRun             bool     // nothing was changed: the lists say what a repair would do
	Quarantined        []uint64 // versions moved aside, ascending
	QuarantinedObjects []ID     // objects moved aside
	Moved              []string // where each went, for the report
	// Lost lists the versions whose manifest is lost (nothing to move): they are recorded as
	// gone in the gc record (gc_record.go), so that a following Verify passes.
	Lost []uint64
	// Mended lists the damaged objects written again from an intact source; Reanchored the
	// sound objects that could not be read through their damaged bases, stored whole from an
	// intact source (as gc re-anchors).
	Mended, Reanchored []ID
	// Kept lists the damaged versions that are not moved because a read path serves them
	// exactly (the materialized copy, a file copy) although their objects do not.
	Kept []uint64
	// Packs is what the check of packs and pack indexes found before the repair of packs
	// (repair_packs.go) acted; PackIndexes the index records it wrote from the packs' own
	// tables, MendedPacks the packs whose damaged table it wrote again from their index, and
	// KeptRecords where it copied the bytes of the damaged records it left in their packs.
	Packs       PackReport
	PackIndexes []string
	MendedPacks []ID
	KeptRecords []string
}

// RepairOptions are Repair's choices.
type RepairOptions struct {
	Progress func(done, total int64) // nil: none
	// DryRun verifies and says what would be mended and moved, changing nothing (it needs
	// no writer: a read-only store does).
	DryRun bool
}

// RepairWith verifies the whole store (Verify), mends every damaged object it can from an
// intact source, and moves what is still damaged into quarantine. It needs the writer (the
// store open for writing) unless it is a dry run. The error is nil when the store is
// consistent afterwards (whether or not anything was moved); it is non-nil when Verify could
// not run, could not check something (an I/O error: then nothing is changed), or found
// something a quarantine does not mend.
func (s *Store) RepairWith(opts RepairOptions) (RepairReport, error) {
	rep := RepairReport{DryRun: opts.DryRun}
	if err := s.checkOpen(); err != nil {
		return rep, err
	}
	if s.readOnly && !opts.DryRun {
		return rep, fmt.Errorf("repair: %w", ErrReadOnly)
	}
	q := s.be.quarantine
	if q == nil {
		return rep, fmt.Errorf("repair: not supported for this store's backend (it moves no file aside)")
	}
	if !opts.DryRun {
		s.writeMu.Lock()
		defer s.writeMu.Unlock()
	}
	return s.checker.repair(q, opts)
}

// repair is RepairWith on an open store, with its backend's quarantine (and the writer's
// lock, unless it is a dry run).
func (c *checker) repair(q Quarantiner, opts RepairOptions) (RepairReport, error) {
	s := c.st
	rep := RepairReport{DryRun: opts.DryRun}
	r := &repairer{c: c, s: s}
	// Packs first: an index written again from the packs' own tables makes their objects
	// found again before Verify judges the versions that need them.
	if err := r.repairPacks(opts.DryRun, &rep); err != nil {
		return rep, err
	}
	var err error
	if rep.Verify, err = r.verifyForRepair(opts.Progress); err != nil {
		return rep, err
	}
	if len(rep.Verify.Damaged) == 0 {
		return rep, r.packsLeft(&rep)
	}
	plan, err := r.planRepair(rep.Verify)
	if err != nil {
		return rep, fmt.Errorf("repair: %w", err)
	}
	rep.Lost = plan.lost
	rep.addRewrites(plan.rewrites)
	if opts.DryRun {
		rep.Quarantined, rep.QuarantinedObjects, rep.Kept = plan.versions, plan.objects, plan.kept
		for _, v := range plan.versions {
			rep.Moved = append(rep.Moved, q.QuarantineManifestPath(v))
		}
		for _, id := range plan.objects {
			rep.Moved = append(rep.Moved, q.QuarantineObjectPath(id))
		}
		return rep, nil
	}
	// Rounds: the objects read through a mended one read again, and need no rewrite; one that
	// still fails after a round (a base only a re-anchor mends) gets one in the next.
	for round := 0; round < 3 && len(plan.rewrites) > 0; round++ {
		for _, m := range plan.rewrites {
			if err := r.rewriteWhole(m); err != nil {
				return rep, fmt.Errorf("repair: write object %s again: %w", m.id, err)
			}
			s.log.Info("repair: object written again from an intact source", "object", m.id, "source", m.source, "damaged", m.damaged)
		}
		if err := s.be.SyncObjects(); err != nil {
			return rep, fmt.Errorf("repair: %w", err)
		}
		// What is still damaged is what the mends left: Verify again, and plan from that.
		after, err := s.Verify(nil)
		rep.Verify.Notes = append(rep.Verify.Notes, fmt.Sprintf("after %d objects were written again, verify found %d damaged", len(plan.rewrites), len(after.Damaged)))
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return rep, fmt.Errorf("repair: verify after the mends: %w", err)
		}
		if len(after.Unreadable) > 0 {
			return rep, fmt.Errorf("repair: verify after the mends: %w", after.unreadableError())
		}
		rewritten := map[ID]bool{}
		for _, m := range plan.rewrites {
			rewritten[m.id] = true
		}
		if plan, err = r.planRepair(after); err != nil {
			return rep, fmt.Errorf("repair: %w", err)
		}
		// An object written once from a checked source is not written again.
		plan.rewrites = slices.DeleteFunc(plan.rewrites, func(m rewrite) bool { return rewritten[m.id] })
		rep.addRewrites(plan.rewrites)
	}
	rep.Kept = plan.kept
	if err := r.applyQuarantine(q, plan, &rep); err != nil {
		return rep, err
	}
	return rep, r.packsLeft(&rep)
}

// addRewrites counts the objects written again: a damaged one mended, a sound one re-anchored.
func (rep *RepairReport) addRewrites(rewrites []rewrite) {
	for _, m := range rewrites {
		if m.damaged {
			rep.Mended = append(rep.Mended, m.id)
		} else {
			rep.Reanchored = append(rep.Reanchored, m.id)
		}
	}
}

// verifyForRepair runs Verify; when it could not check something (an I/O error), it runs
// once more: a transient error passes, one that stays stops the repair before it acts.
func (r *repairer) verifyForRepair(progress func(done, total int64)) (VerifyReport, error) {
	s := r.s
	rep, err := s.Verify(progress)
	if len(rep.Unreadable) > 0 {
		s.log.Warn("repair: verify could not check everything; verifying again", "unreadable", len(rep.Unreadable), "first", rep.Unreadable[0].String())
		rep, err = s.Verify(progress)
	}
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return rep, fmt.Errorf("repair: nothing changed: %w", err)
	}
	if len(rep.Unreadable) > 0 {
		return rep, fmt.Errorf("repair: nothing changed: %w", rep.unreadableError())
	}
	for _, d := range rep.Damaged {
		if d.Version == 0 && d.Object.IsZero() {
			// The format file (verify_format.go): nothing to quarantine. A writer rewrites it
			// as format 2 when it opens the store, so only one that does not upgrade (a rank
			// of a writer group) meets it here.
			return rep, fmt.Errorf("repair: %s: not mended by a quarantine; the store's writer rewrites it when it opens the store (weightfs verify --repair); nothing moved", d)
		}
	}
	return rep, nil
}

// applyQuarantine records the lost manifests and moves the versions and objects of plan.
func (r *repairer) applyQuarantine(q Quarantiner, plan repairPlan, rep *RepairReport) error {
	s := r.s
	if len(plan.lost) > 0 {
		// A lost manifest leaves nothing to move: the loss is recorded, as gc records what it
		// drops; the next gc removes the objects only it named (but the contexts of later
		// versions' links: gc.go).
		if err := s.collector.recordLost(plan.lost); err != nil {
			return fmt.Errorf("repair: record the lost versions %v: %w", plan.lost, err)
		}
		s.log.Info("repair: lost manifests recorded as gone in the gc record", "versions", plan.lost)
	}
	for _, v := range plan.versions {
		dst, err := q.QuarantineManifest(v)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		rep.Quarantined = append(rep.Quarantined, v)
		rep.Moved = append(rep.Moved, dst)
		s.log.Info("repair: version quarantined", "version", v, "to", dst)
	}
	for _, id := range plan.objects {
		dst, err := r.quarantineObject(q, id)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		rep.QuarantinedObjects = append(rep.QuarantinedObjects, id)
		if dst != "" { // "": a packed record cut off, nothing of it to copy
			rep.Moved = append(rep.Moved, dst)
		}
		s.objects.forgetObject(id)
		s.log.Info("repair: object quarantined", "object", id, "to", dst)
	}
	if len(rep.Moved) == 0 && len(rep.Mended)+len(rep.Reanchored) == 0 {
		return nil // (lost manifests recorded change nothing a process holds)
	}
	if err := s.ix.updateVersions(nil, rep.Quarantined); err != nil {
		s.log.Warn("index: not updated", "err", err)
	}
	for _, v := range rep.Quarantined {
		s.versions.forget(v)
	}
	s.objects.dropHeaders()
	s.objects.dropPages()
	if err := s.versions.loadVersions(); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	// The copy holds content checked against its sums, whatever the objects: it is rebuilt
	// only when its version was moved.
	if view := s.mat.view(); view != nil {
		gone := slices.Contains(rep.Quarantined, view.ver.m.Version)
		view.release()
		if gone {
			s.mat.invalidate()
			if err := s.mat.ensure(); err != nil {
				s.log.Warn("repair: materialized copy not rebuilt", "err", err)
			}
		}
	}
	return nil
}

// isDamage reports whether err says that something read is damaged or missing (rather than a
// passing failure of the machine): reads use it to try once more from the files. Verify's
// verdict is isVerdictDamage, which also refuses an I/O error.
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
