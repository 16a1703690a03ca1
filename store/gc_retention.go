package store

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Retention is a policy that a writer applies after every seal, in the background: gc keeps
// the newest KeepLast versions, every version whose number is a multiple of KeepEvery, and
// what GCWith always keeps (pinned versions, versions of open files, the bases of open
// writers). KeepLast 0: none.
//
// It costs about what it frees (GCOptions.Worthwhile): versions behind the kept ones are
// dropped only once dropping them frees at least the bytes of whole copies that re-anchoring
// the kept versions' deltas on them writes. Versions that end at a whole copy (an anchor the
// ingest wrote, when a tensor's deltas outgrew it) cost nothing to drop and go at once; a
// chain of deltas waits until its deltas outweigh one whole copy. So the store holds at most
// about one more whole copy than KeepLast versions need, and retention writes at most what it
// frees (Stats.RetentionWrittenBytes, Stats.RetentionFreedBytes).
type Retention struct {
	KeepLast  int
	KeepEvery int
	// Exact drops down to KeepLast versions after every seal, whatever re-anchoring costs.
	Exact bool
}

// pinRecheck is how often the writer looks whether the versions its retention kept for pins
// or open files only are still held, so that they go once they are not, without waiting for
// the next seal. It reads the pins' directory; gc runs only when one was let go.
const pinRecheck = 5 * time.Second

// retainer runs a Store's retention gc: one at a time, and one more if a seal came while one
// ran. Seals never wait for it: it runs after the seal has returned, and gc re-anchors
// without the store's write lock (GCWith), which a seal's manifest write waits for only while
// gc records and deletes manifests and sweeps.
type retainer struct {
	mu      sync.Mutex
	running bool
	again   bool
	wg      sync.WaitGroup
	pinned  []uint64    // the versions the last run kept for pins or open files only
	recheck *time.Timer // the look at pinned (pinRecheck); nil: none due
	stopped bool        // Close: no more runs
	// done (tests) is called after each retention gc with its stats and error.
	done func(GCStats, error)
	env  retainEnv
}

// retainEnv is what the retainer needs of its store, given once when the store is built
// (newBareStore): the retainer reaches no further into the store.
type retainEnv struct {
	log   *slog.Logger
	stats *storeStats
	// open says whether the store is still open (not Closed).
	open func() bool
	// held is the set of versions pinned (gc_pins.go) or held by an open file of this process
	// (gc_hold.go).
	held func() (map[uint64]bool, error)
	// retain starts the retention gc (collector.retainAfterSeal).
	retain func()
}

// retainEnv is what collector c gives its retainer.
func (c *collector) retainEnv() retainEnv {
	s := c.st
	return retainEnv{
		log:   c.log,
		stats: &s.stats,
		open:  func() bool { return s.checkOpen() == nil },
		held: func() (map[uint64]bool, error) {
			held, err := c.pins.active(time.Now())
			if err == nil {
				c.holds.heldVersions(held)
			}
			return held, err
		},
		retain: c.retainAfterSeal,
	}
}

// retainAfterSeal starts the retention gc, or asks the running one to go once more.
func (c *collector) retainAfterSeal() {
	if c.st.opts.Retention.KeepLast < 1 || c.st.readOnly {
		return
	}
	r := &c.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.running {
		r.again = true
		return
	}
	r.running = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			st, err := c.st.GCWith(c.st.opts.Retention.KeepLast, GCOptions{KeepEvery: c.st.opts.Retention.KeepEvery, Worthwhile: !c.st.opts.Retention.Exact})
			r.note(st, err)
			if r.done != nil {
				r.done(st, err)
			}
			r.mu.Lock()
			if !r.again || errors.Is(err, ErrClosed) || r.stopped {
				r.running = false
				r.mu.Unlock()
				return
			}
			r.again = false
			r.mu.Unlock()
		}
	}()
}

// note logs and counts what a retention gc did.
func (r *retainer) note(st GCStats, err error) {
	c := r.env.stats
	switch {
	case errors.Is(err, ErrClosed):
		return
	case err != nil:
		r.env.log.Warn("retention: failed (tried again after the next seal)", "err", err)
	case st.Deferred:
		c.retentionDeferred.Add(1)
		r.env.log.Info(fmt.Sprintf("retention: versions kept for now: dropping the oldest would re-anchor %s of whole copies to free %s; they go once that frees at least what it writes",
			mib(st.WouldWrite), signedBytes(st.WouldFree)),
			"kept", st.Kept, "would_write_bytes", st.WouldWrite, "would_free_bytes", st.WouldFree)
	case st.DroppedVersions > 0:
		c.retentionRuns.Add(1)
		c.retentionDropped.Add(int64(st.DroppedVersions))
		c.retentionWritten.Add(st.ReanchorWritten)
		c.retentionFreed.Add(st.FreedBytes())
		args := []any{"kept", st.Kept, "dropped", st.Dropped, "reanchor_written_bytes", st.ReanchorWritten, "deleted_bytes", st.DeletedBytes}
		if freed := st.FreedBytes(); freed >= 0 {
			r.env.log.Info("retention: kept versions", append(args, "freed_bytes", freed)...)
		} else {
			// Re-anchoring added more than the drop deleted: say so, not "freed -N".
			r.env.log.Info(fmt.Sprintf("retention: kept versions; the store grew by %s (re-anchoring wrote whole copies of the kept versions' deltas on dropped ones)", mib(-freed)),
				append(args, "grew_bytes", -freed)...)
		}
	}
	if err == nil {
		r.scheduleRecheck(st.Pinned)
	}
}

// signedBytes says a byte count that may be negative (a store that grows) in words.
func signedBytes(n int64) string {
	if n < 0 {
		return fmt.Sprintf("nothing (the store grows by %s)", mib(-n))
	}
	return mib(n)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// scheduleRecheck notes the versions a retention gc kept for pins or open files only, and
// has them looked at after pinRecheck.
func (r *retainer) scheduleRecheck(pinned []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pinned = pinned
	if len(pinned) == 0 || r.recheck != nil || r.stopped {
		return
	}
	r.recheck = time.AfterFunc(pinRecheck, r.recheckPinned)
}

// recheckPinned runs retention once a version it kept for a pin or an open file is held no
// more, else looks again later.
func (r *retainer) recheckPinned() {
	r.mu.Lock()
	r.recheck = nil
	pinned, stopped := r.pinned, r.stopped
	r.mu.Unlock()
	if stopped || !r.env.open() {
		return
	}
	held, err := r.env.held()
	for _, v := range pinned {
		if err != nil || !held[v] {
			r.env.retain()
			return
		}
	}
	r.scheduleRecheck(pinned)
}

// idle waits for a running retention gc (tests).
func (r *retainer) idle() { r.wg.Wait() }

// wait stops the retention's rechecks and waits for a running retention gc (Close).
func (r *retainer) wait() {
	r.mu.Lock()
	r.stopped = true
	if r.recheck != nil {
		r.recheck.Stop()
		r.recheck = nil
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// removedByGC turns err, a failed read of version v that met missing or unreadable data
// (ErrCorrupt), into ErrVersionRemoved when v's manifest is gone and not in quarantine: gc
// removed the version while this process served it (a reader without a pin, a pin that
// expired, or a gc of an older program). That is not damage, and the error says what to do.
// It is logged once per version. Where the gc record (gc_record.go) says no gc dropped v, the
// version was lost some other way and err (damage, EIO) stands.
func (c *collector) removedByGC(v uint64, err error) error {
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return err
	}
	numbers, lerr := c.st.be.ListManifests()
	if lerr != nil || slices.Contains(numbers, v) {
		return err
	}
	if q := c.st.be.quarantine; q != nil {
		if qs, qerr := q.ListQuarantined(); qerr != nil || slices.Contains(qs, v) {
			return err
		}
	}
	// The gc record holds every version gc dropped since it was made: a version above its
	// Since that it does not hold went some other way, which is damage.
	if r, state, _ := c.gcRecord.read(); state == gcRecordOK && v > r.Since && !r.Dropped(v) {
		return fmt.Errorf("version %d: its manifest is gone, and no gc dropped it: %w", v, err)
	}
	if _, logged := c.removedLogged.LoadOrStore(v, true); !logged {
		c.log.Warn(fmt.Sprintf("version %d was removed by gc (weightfs gc, or a writer's --keep-last) while it was served here; its reads fail with ENOENT. Pin a version a reader needs (weightfs mount --read-only --version N pins it)", v), "version", v)
	}
	return fmt.Errorf("version %d: %w while it was read (pin a version to keep it)", v, ErrVersionRemoved)
}

// gcSweepOnly is gc when no version goes: only objects nothing needs are deleted.
func (c *collector) gcSweepOnly(st GCStats, dryRun bool) (GCStats, error) {
	var err error
	if dryRun {
		var victims []victim
		victims, err = c.sweepVictims(nil, nil, nil)
		for _, v := range victims {
			st.DeletedObjects++
			st.DeletedBytes += v.size
		}
	} else {
		c.gcRecord.trim()
		st.DeletedObjects, st.DeletedBytes, err = c.sweepLocked()
		if err == nil {
			err = c.repackPacks() // packs that held what the sweep deleted (pack_repack_gc.go)
		}
	}
	if errors.Is(err, errUnreadableManifests) {
		c.log.Warn("gc: no object deleted", "err", err)
		err = nil
	}
	return st, err
}

// gcPlan splits the sealed versions into those gc drops and those it keeps: the newest
// keepLast, the multiples of keepEvery, the pinned ones, and those open writers may use as
// bases. pinned lists the versions kept for a pin alone.
func (c *collector) gcPlan(keepLast, keepEvery int, pins map[uint64]bool) (drop, keep []VersionInfo, pinned []uint64) {
	all := c.st.Versions()
	floor := c.writerFloor()
	for i, info := range all {
		switch {
		case i >= len(all)-keepLast, keepEvery > 0 && info.Number%uint64(keepEvery) == 0,
			floor != 0 && info.Number >= floor:
			keep = append(keep, info)
		case pins[info.Number]:
			keep = append(keep, info)
			pinned = append(pinned, info.Number)
		default:
			drop = append(drop, info)
		}
	}
	return drop, keep, pinned
}

// writerFloor is the lowest version an open writer may take delta bases from (0: none open):
// bases come from the materialized copy, which holds the latest version sealed when the
// writer opened, or one before it while it is brought forward, or a later one.
func (c *collector) writerFloor() uint64 {
	floor := c.st.ingest.lowestFloor()
	if floor == 0 {
		return 0
	}
	// Without waiting: a change of the copy may be under way (then keep everything, this
	// time; the next gc will drop what this one kept).
	held, ok := c.st.mat.heldVersionNoWait()
	if !ok {
		return 1
	}
	if held != 0 {
		floor = min(floor, held)
	}
	return floor
}
