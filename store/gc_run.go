package store

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// GCStats says what GC did (or, with GCOptions.DryRun, would do).
type GCStats struct {
	DroppedVersions int      // how many versions were dropped
	Dropped         []uint64 // which
	Kept            []uint64 // the versions kept, ascending
	Pinned          []uint64 // kept only because a reader's pin or an open file holds them (gc_pins.go, gc_hold.go)
	Reanchored      int      // delta objects of kept versions rewritten as whole copies
	// ReanchorBytes is what re-anchoring added to the store: the whole copies' sizes minus
	// the deltas' they replace. A dry run cannot compress, so it gives an upper bound: the
	// objects' content lengths minus the deltas' sizes.
	ReanchorBytes int64
	// ReanchorWritten is what re-anchoring wrote: the whole copies' sizes (a dry run
	// estimates each as the size of the whole copy its chain of deltas ends at, which holds
	// the same tensor compressed alike). It is the cost of the drop.
	ReanchorWritten int64
	DeletedObjects  int   // objects removed
	DeletedBytes    int64 // their stored bytes (the sizes of their files)
	// Deferred (GCOptions.Worthwhile): there were versions to drop, but dropping them now
	// would have written WouldWrite bytes of whole copies to free WouldFree bytes (less than
	// it writes): nothing was changed. A later gc, with more versions behind the kept ones,
	// frees more for the same re-anchoring.
	Deferred              bool
	WouldWrite, WouldFree int64
	// estAdded is a dry run's estimate of ReanchorBytes from ReanchorWritten's estimate
	// (ReanchorBytes is its upper bound).
	estAdded int64
}

// FreedBytes is how much smaller the store became: the deleted objects' bytes less what
// re-anchoring added (negative when re-anchoring added more: the store grew).
func (st GCStats) FreedBytes() int64 { return st.DeletedBytes - st.ReanchorBytes }

// GC drops every version but the newest keepLast, keeping each kept version readable: a
// delta object of a kept version whose base no kept version has is rewritten as a whole copy
// first (re-anchored); then the old manifests go, then every object nothing needs.
//
// A crash at any point leaves a readable store: re-anchoring replaces a delta by a whole copy
// of the same identity atomically, manifests go before objects, and objects are only deleted
// when no remaining manifest needs them.
func (s *Store) GC(keepLast int) (GCStats, error) { return s.GCWith(keepLast, GCOptions{}) }

// GCOptions are the options of GCWith.
type GCOptions struct {
	// Progress (nil: none) gets the bytes re-anchored so far of those to re-anchor (the bytes
	// gc reads and writes); it is not called when there is nothing to re-anchor.
	Progress func(done, total int64)
	// KeepEvery (0: none) also keeps every version whose number is a multiple of it
	// (milestones).
	KeepEvery int
	// DryRun changes nothing: the stats say what would be dropped, deleted and re-anchored.
	// It works on a read-only store too (no writer lock: beside a running writer, whose
	// open writers it cannot see).
	DryRun bool
	// Worthwhile (the writer's retention) drops versions only when that frees at least what
	// it writes: when the kept versions' deltas on dropped ones would be re-anchored into
	// more bytes of whole copies than the drop frees (as a dry run predicts both, with a
	// quarter more written for safety), gc changes nothing and says so (GCStats.Deferred). Dropping the oldest version of a chain
	// of deltas one seal at a time would rewrite a whole copy of the model at every seal to
	// free one delta; deferred, the versions behind the kept ones accumulate until their
	// deltas outweigh one whole copy, and one re-anchoring frees them all. With nothing to
	// drop, it sweeps nothing either (the writer's open sweeps what interrupted writers
	// left).
	Worthwhile bool
}

// GCWith is GC with options. Besides the newest keepLast versions (and the milestones of
// KeepEvery) it keeps every version named by a reader's unexpired pin (gc_pins.go), every version
// a file of this process holds open (gc_hold.go) and every version an open Writer may take
// delta bases from (the latest sealed when it opened, and all above), so that it can run in
// the writer's process while the writer ingests. It re-anchors without the store's write
// lock, which it takes only to record the drop, delete the manifests and sweep: a seal waits
// for that, not for the re-anchoring.
func (s *Store) GCWith(keepLast int, opts GCOptions) (GCStats, error) {
	var st GCStats
	if err := s.checkOpen(); err != nil {
		return st, err
	}
	if s.readOnly && !opts.DryRun {
		return st, fmt.Errorf("gc: %w", ErrReadOnly)
	}
	if keepLast < 1 {
		return st, fmt.Errorf("gc: keep at least one version (asked to keep %d)", keepLast)
	}
	if opts.KeepEvery < 0 {
		return st, fmt.Errorf("gc: --keep-every must not be negative (got %d)", opts.KeepEvery)
	}
	return s.collector.gc(keepLast, opts)
}

// gc is GCWith once its arguments are checked, in its steps: plan what goes, list the kept
// objects to re-anchor, estimate (a dry run, or retention's look at the cost), re-anchor,
// then, under the write lock, record the drop, delete the manifests and sweep
// (dropVersions). With no version to drop it only sweeps (gcSweepOnly).
func (c *collector) gc(keepLast int, opts GCOptions) (GCStats, error) {
	c.gcMu.Lock() // one gc at a time
	defer c.gcMu.Unlock()
	st, drop, keep, err := c.plan(keepLast, opts.KeepEvery)
	if err != nil {
		return st, err
	}
	if len(drop) == 0 {
		if opts.Worthwhile {
			return st, nil
		}
		c.st.writeMu.Lock()
		defer c.st.writeMu.Unlock()
		return c.gcSweepOnly(st, opts.DryRun)
	}
	jobs, err := c.reanchorJobs(keep)
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	if opts.DryRun || (opts.Worthwhile && len(jobs) > 0) {
		est, err := c.estimateGC(st, jobs, drop)
		if err != nil || opts.DryRun {
			return est, err
		}
		if deferred, ok := c.deferral(est); ok {
			return deferred, nil
		}
	}
	if st, err = c.reanchorAll(st, jobs, opts.Progress); err != nil {
		return st, err
	}
	// From here on the set of versions changes: seals wait.
	c.st.writeMu.Lock()
	defer c.st.writeMu.Unlock()
	return c.dropVersions(st, drop)
}

// plan is gc's first step: the versions it drops and those it keeps (gcPlan), beside the
// pins that readers hold now and the versions of this process's open files (gc_hold.go), with
// the stats that say so.
func (c *collector) plan(keepLast, keepEvery int) (st GCStats, drop, keep []VersionInfo, err error) {
	pins, err := c.pins.active(time.Now())
	if err != nil {
		return st, nil, nil, fmt.Errorf("gc: %w", err)
	}
	c.holds.heldVersions(pins) // open files of this process (gc_hold.go)
	drop, keep, pinned := c.gcPlan(keepLast, keepEvery, pins)
	for _, info := range keep {
		st.Kept = append(st.Kept, info.Number)
	}
	st.Pinned = pinned
	for _, info := range drop {
		st.Dropped = append(st.Dropped, info.Number)
	}
	st.DroppedVersions = len(drop)
	return st, drop, keep, nil
}

// deferral is what a worthwhile gc (GCOptions.Worthwhile) returns instead of dropping, and
// true, when est predicts that the drop frees less than its re-anchoring writes: nothing
// changes, and the stats say what it would write and free.
func (c *collector) deferral(est GCStats) (GCStats, bool) {
	// A quarter more than the estimate: the whole copy of a tensor that changed since the
	// whole copy its chain ends at may compress worse.
	free, write := est.DeletedBytes-est.estAdded, est.ReanchorWritten
	if free >= write+write/4 {
		return GCStats{}, false
	}
	deferred := GCStats{Deferred: true, WouldWrite: write, WouldFree: free}
	for _, info := range c.st.Versions() {
		deferred.Kept = append(deferred.Kept, info.Number)
	}
	return deferred, true
}

// reanchorAll re-anchors the objects of jobs, without the store's write lock, and counts
// them in st. It stops, having dropped nothing, when the store closes or a rewrite fails:
// what it re-anchored stays (the same content, whole).
func (c *collector) reanchorAll(st GCStats, jobs []reanchorJob, progress func(done, total int64)) (GCStats, error) {
	var total, done int64
	for _, j := range jobs {
		total += j.m.ContentLen
	}
	for _, j := range jobs {
		if err := c.st.checkOpen(); err != nil {
			return st, err // closing: what is re-anchored stays, nothing is dropped
		}
		before, err := c.st.be.StatObject(j.id)
		if err != nil {
			return st, fmt.Errorf("gc: re-anchor object %s: %w", j.id, err)
		}
		if err := c.reanchor(j.id, j.hint, j.m); err != nil {
			return st, fmt.Errorf("gc: re-anchor object %s: %w", j.id, err)
		}
		after, err := c.st.be.StatObject(j.id)
		if err != nil {
			return st, fmt.Errorf("gc: re-anchor object %s: %w", j.id, err)
		}
		st.Reanchored++
		st.ReanchorBytes += after - before
		st.ReanchorWritten += after
		if done += j.m.ContentLen; progress != nil {
			progress(done, total)
		}
	}
	return st, nil
}

// reanchorJob is a kept object gc rewrites whole.
type reanchorJob struct {
	id   ID
	hint objHint
	m    objMeta
}

// reanchorJobs lists, oldest kept version first, every kept delta whose base is not kept
// (re-anchored keeping its delta section as its link, in version 1), and every kept full
// object whose link is version 2 and coded against a context that goes (its base's section:
// rewritten with that link in version 1, gc_reanchor.go).
func (c *collector) reanchorJobs(keep []VersionInfo) ([]reanchorJob, error) {
	kept := map[ID]bool{}
	var keptVersions []*version
	for _, info := range keep {
		ver, err := c.st.versions.loadVersion(info.Number)
		if err != nil {
			return nil, err
		}
		manifestRoots(ver.m, kept)
		keptVersions = append(keptVersions, ver)
	}
	var jobs []reanchorJob
	listed := map[ID]bool{}
	for _, ver := range keptVersions {
		for id, hint := range objectsOf(ver) {
			m, err := c.st.objects.meta(id)
			if err != nil {
				return nil, err
			}
			if m.DeltaLen == 0 || kept[m.Base] || listed[id] {
				continue
			}
			if m.Kind == kindFull {
				if v2, err := c.sectionIsV2(id); err != nil {
					return nil, err
				} else if !v2 {
					continue
				}
			}
			listed[id] = true
			jobs = append(jobs, reanchorJob{id, hint, m})
		}
	}
	return jobs, nil
}

// estimateGC is what a dry run says: the re-anchoring's upper bounds and the objects the
// sweep would delete.
func (c *collector) estimateGC(st GCStats, jobs []reanchorJob, drop []VersionInfo) (GCStats, error) {
	dropSet := map[uint64]bool{}
	for _, info := range drop {
		dropSet[info.Number] = true
	}
	whole := map[ID]bool{}
	for _, j := range jobs {
		size, err := c.st.be.StatObject(j.id)
		if err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		whole[j.id] = true
		st.Reanchored++
		written := size // a full object whose link is re-coded: about its own size
		if j.m.Kind == kindDelta {
			st.ReanchorBytes += j.m.ContentLen - size
			written = c.wholeCopySize(j.m)
		}
		st.ReanchorWritten += written
		st.estAdded += written - size
	}
	victims, err := c.sweepVictims(dropSet, whole, c.st.groups.publisher.droppedObjects(drop))
	if errors.Is(err, errUnreadableManifests) {
		return st, nil // the real gc deletes no object either
	}
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	for _, v := range victims {
		st.DeletedObjects++
		st.DeletedBytes += v.size
	}
	return st, nil
}

// dropVersions is gc's last step, once it has re-anchored: it records the versions of drop
// as dropped, keeps those a reader pinned or a file of this process opened since the plan,
// deletes the manifests of the others and sweeps the objects nothing needs
// (deleteDropped). Caller holds writeMu.
func (c *collector) dropVersions(st GCStats, drop []VersionInfo) (GCStats, error) {
	// Headers read while gc re-anchored (by ingest beside it) may be those of the objects
	// before their rewrite: the sweep walks chains from fresh ones.
	c.st.objects.forgetAllMetas()
	if err := c.st.be.SyncObjects(); err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	if err := c.st.failpoint("gc-reanchored"); err != nil {
		return st, err
	}
	// What gc drops is recorded before the first manifest goes, so that Verify tells these
	// versions from lost ones, also when gc stops before its sweep (gc_record.go).
	if err := c.gcRecord.recordDropped(st.Dropped); err != nil {
		return st, fmt.Errorf("gc: record the versions it drops: %w", err)
	}
	if err := c.st.failpoint("gc-recorded"); err != nil {
		return st, err
	}
	// A reader may have pinned, or a file of this process opened, a version to drop since
	// the plan: it stays (gc_hold.go).
	drop, late, err := c.holds.beginDrop(drop)
	defer c.holds.endDrop()
	if err != nil {
		c.gcRecord.trim()
		return st, fmt.Errorf("gc: %w", err)
	}
	if len(late) > 0 {
		st = c.keptLate(st, drop, late)
	}
	if st, err = c.deleteDropped(st, drop); err != nil {
		return st, err
	}
	// Chain depths changed; they refill from object headers.
	c.st.objects.forgetAllMetas()
	if len(late) > 0 {
		c.gcRecord.trim() // the record holds the versions kept late: not dropped
	}
	c.pins.removeExpired(time.Now())
	if err := c.repackPacks(); err != nil { // packs that held what the sweep deleted (pack_repack_gc.go)
		return st, fmt.Errorf("gc: %w", err)
	}
	c.log.Info("gc: dropped versions", "dropped", st.Dropped, "reanchored", st.Reanchored, "deleted_objects", st.DeletedObjects, "deleted_bytes", st.DeletedBytes)
	return st, nil
}

// keptLate is st once the versions of late, pinned or opened since gc planned, are kept
// (pinned) and only those of drop go.
func (c *collector) keptLate(st GCStats, drop, late []VersionInfo) GCStats {
	st.Dropped = nil
	for _, info := range drop {
		st.Dropped = append(st.Dropped, info.Number)
	}
	st.DroppedVersions = len(drop)
	for _, info := range late {
		st.Kept = append(st.Kept, info.Number)
		st.Pinned = append(st.Pinned, info.Number)
	}
	slices.Sort(st.Kept)
	slices.Sort(st.Pinned)
	c.log.Info("gc: kept versions opened or pinned while it ran", "versions", st.Pinned)
	return st
}

// deleteDropped deletes the manifests of drop, takes their versions off the list and the
// index, and sweeps the objects nothing needs any more (while a writer group's rank writes,
// only objects of drop: sweepWithin). Caller holds writeMu.
func (c *collector) deleteDropped(st GCStats, drop []VersionInfo) (GCStats, error) {
	within := c.st.groups.publisher.droppedObjects(drop)
	var dropped []uint64
	for _, info := range drop {
		if err := c.st.be.DeleteManifest(info.Number); err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		dropped = append(dropped, info.Number)
		c.st.versions.forget(info.Number)
	}
	c.st.versions.dropped(dropped)
	if err := c.st.ix.updateVersions(nil, dropped); err != nil {
		c.log.Warn("index: not updated", "err", err)
	}
	if err := c.st.failpoint("gc-manifests-deleted"); err != nil {
		return st, err
	}
	n, freed, err := c.sweepWithin(within)
	st.DeletedObjects, st.DeletedBytes = n, freed
	if errors.Is(err, errUnreadableManifests) {
		c.log.Warn("gc: no object deleted", "err", err)
		err = nil
	}
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	return st, nil
}

// wholeCopySize estimates the size of a whole copy of delta object m: the size of the whole
// copy its chain of deltas ends at (the same tensor, compressed alike), or its content length
// when the chain cannot be walked.
func (c *collector) wholeCopySize(m objMeta) int64 {
	cur := m.Base
	for n := 0; n < maxWalk; n++ {
		bm, err := c.st.objects.meta(cur)
		if err != nil {
			break
		}
		if bm.Kind != kindDelta {
			return bm.FileSize
		}
		cur = bm.Base
	}
	return m.ContentLen
}
