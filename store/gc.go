package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
)

// collector is the store's gc: it plans what a gc drops (gc_run.go), re-anchors the kept
// versions' objects coded against dropped ones (gc_reanchor.go), deletes the manifests and
// sweeps the objects nothing needs, each before its base (gc_sweep_order.go). It runs the
// writer's retention after each seal (gc_retention.go) and keeps the versions of open files
// from gc (gc_hold.go). The gc record and the pins it reads are the records' (gc_record.go,
// gc_pins.go).
type collector struct {
	// st is the store it collects: its backend, its index, and the methods of the parts it
	// reads through (versions, objects, writers, groups).
	st  *Store
	log *slog.Logger

	gcMu     sync.Mutex      // one gc at a time; it takes the store's writeMu only to drop and sweep
	ret      retainer        // the background gc of Options.Retention (gc_retention.go)
	holds    holds           // the versions of open files, kept from gc (gc_hold.go)
	pins     *pinSet         // readers' pins (gc_pins.go)
	gcRecord *gcRecordKeeper // the gc record (gc_record.go)
	// removedLogged: versions whose removal by gc a read has met and logged (gc_retention.go).
	removedLogged sync.Map
}

// newCollector is the collector of store s (newBareStore). The pins and the gc record come
// first: the holds take their methods, and the retainer the holds'.
func newCollector(s *Store) *collector {
	pins := &pinSet{be: s.be, log: s.log}
	rec := &gcRecordKeeper{be: s.be, log: s.log}
	c := &collector{st: s, log: s.log, pins: pins, gcRecord: rec, holds: holds{env: newHoldEnv(s, pins, rec)}}
	c.ret.env = c.retainEnv()
	return c
}

// close stops the retention's rechecks, waits for a running retention gc (it stops between
// objects once the store is closed) and removes the pins of the holds still taken (Close).
func (c *collector) close() {
	c.ret.wait()
	c.holds.close()
}

// manifestRoots adds the objects a manifest names to set.
func manifestRoots(m *manifest, set map[ID]bool) {
	for i := range m.Files {
		f := &m.Files[i]
		if f.Kind == kindBlob {
			set[f.ID] = true
			continue
		}
		set[f.Header] = true
		for j := range f.Tensors {
			set[f.Tensors[j].ID] = true
		}
	}
}

// liveSetWhole is the closure of roots over delta bases: every object a read of them may need.
// (The link of a full object is optional: its base is not kept alive by it, unless the link
// is a delta section of version 2, whose context is its base's section: gc_reanchor.go.)
// whole names delta objects to take as whole copies (re-anchored by a dry run's gc, which
// re-codes their links in version 1).
func (c *collector) liveSetWhole(roots, whole map[ID]bool) (map[ID]bool, error) {
	live := make(map[ID]bool, len(roots))
	var links []ID // full objects with a link whose base is not (yet) live
	walk := func(id ID) error {
		for cur, n := id, 0; !live[cur]; n++ {
			live[cur] = true
			m, err := c.st.objects.meta(cur)
			if err != nil {
				return err
			}
			if m.Kind != kindDelta || whole[cur] {
				if m.DeltaLen > 0 && !whole[cur] {
					links = append(links, cur)
				}
				break
			}
			if n > maxWalk {
				return objectError(id, fmt.Errorf("delta chain longer than %d: %w", maxWalk, ErrCorrupt))
			}
			cur = m.Base
		}
		return nil
	}
	for id := range roots {
		if err := walk(id); err != nil {
			return nil, err
		}
	}
	// A kept link of version 2 needs its base's section (its context). gc re-codes in
	// version 1 every kept link whose base it drops, so in a sound store the base of such a
	// link is named; one that is not (the version before is lost, or gc stopped before it
	// re-coded) keeps its base, lest a sweep break the reads of the versions that decode
	// against the link. Only links whose base no root reaches, and is still stored, are
	// opened to see.
	for len(links) > 0 {
		id := links[len(links)-1]
		links = links[:len(links)-1]
		m, err := c.st.objects.meta(id)
		if err != nil {
			return nil, err
		}
		if live[m.Base] {
			continue
		}
		// A base already gone (the usual case: gc dropped it and swept) keeps nothing.
		if _, err := c.st.be.StatObject(m.Base); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		v2, err := c.sectionIsV2(id)
		if err != nil {
			return nil, err
		}
		if v2 {
			if err := walk(m.Base); err != nil {
				return nil, err
			}
		}
	}
	return live, nil
}

// sweep deletes the objects that no sealed manifest and no open writer needs. On any doubt
// (an unreadable manifest or object header) it deletes nothing and says why in the log.
func (c *collector) sweep() error {
	c.st.writeMu.Lock()
	defer c.st.writeMu.Unlock()
	n, freed, err := c.sweepLocked()
	if err != nil {
		c.log.Warn("clean-up of unreferenced objects skipped", "err", err)
		return nil
	}
	if n > 0 {
		c.log.Info("removed the unreferenced objects an interrupted writer left", "objects", n, "bytes", freed)
	}
	return nil
}

func (c *collector) sweepLocked() (deleted int, freed int64, err error) { return c.sweepWithin(nil) }

// sweepWithin is sweepLocked; while a writer group's rank is writing, it deletes only objects
// in within (those of the versions a gc drops), or nothing when within is nil.
func (c *collector) sweepWithin(within map[ID]bool) (deleted int, freed int64, err error) {
	c.st.groups.publisher.cleanStale()
	victims, err := c.sweepVictims(nil, nil, within)
	if err != nil {
		return 0, 0, err
	}
	var gone []ID
	for _, v := range c.sweepOrder(victims) {
		// An open writer may have taken hold of it since the roots were listed.
		held, err := c.st.ingest.unlessHeld(v.id, func() error { return c.st.be.DeleteObject(v.id) })
		if err != nil {
			return deleted, freed, err
		}
		if !held {
			gone = append(gone, v.id)
			deleted++
			freed += v.size
			if err := c.st.failpoint("gc-object-deleted"); err != nil {
				return deleted, freed, err
			}
		}
	}
	c.st.objects.forgetGone(gone)
	if c.st.ingest.swept() {
		if err := c.st.ix.setFlag(keyDirty, false); err != nil {
			c.log.Warn("index: not updated", "err", err)
		}
	}
	return deleted, freed, nil
}

// pendingStored adds to roots the objects open writers hold that are stored. An object a
// writer holds may not be written yet (it holds before it writes): there is nothing to walk,
// and it is no victim (the sweep checks the holds again before it deletes).
func (c *collector) pendingStored(roots map[ID]bool) error {
	pending := map[ID]bool{}
	c.st.ingest.pendingRoots(pending)
	for id := range pending {
		if _, err := c.st.be.StatObject(id); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		roots[id] = true
	}
	return nil
}

// victim is an object a sweep deletes.
type victim struct {
	id   ID
	size int64
}

// sweepVictims lists the objects that no manifest (but those in without) and no open writer
// needs. whole names delta objects to count as whole copies (a dry run's re-anchoring): their
// bases are not kept alive by them. The real sweep and gc's dry run share it, so that the
// prediction is what the sweep does. While a writer group's rank is writing objects no record
// names yet (group_publish.go), only objects in within are victims (nil: none, and the error
// says why).
func (c *collector) sweepVictims(without map[uint64]bool, whole, within map[ID]bool) ([]victim, error) {
	numbers, err := c.st.be.ListManifests()
	if err != nil {
		return nil, err
	}
	roots := map[ID]bool{}
	var unreadable []uint64
	for _, v := range numbers {
		if without[v] {
			continue
		}
		ver, err := c.st.versions.loadVersion(v)
		if err != nil && c.st.versions.damagedError(v) != nil {
			unreadable = append(unreadable, v)
			continue
		}
		if err != nil {
			return nil, err
		}
		manifestRoots(ver.m, roots)
	}
	if len(unreadable) > 0 {
		// What they need is unknown: nothing is deleted until they are repaired.
		return nil, fmt.Errorf("versions %v: %w (run weightfs verify --repair %s)", unreadable, errUnreadableManifests, c.st.root)
	}
	if err := c.pendingStored(roots); err != nil {
		return nil, err
	}
	writing, err := c.st.groups.publisher.roots(roots) // parts not yet published (group_publish.go)
	if err != nil {
		return nil, err
	}
	if writing != "" && within == nil {
		return nil, &groupPendingError{writing}
	}
	live, err := c.liveSetWhole(roots, whole)
	if err != nil {
		return nil, err
	}
	var victims []victim
	if err := c.st.be.ListObjects(func(id ID, size int64) error {
		if !live[id] && (writing == "" || within[id]) {
			victims = append(victims, victim{id, size})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return victims, nil
}

// objectsOf maps every object of a version to where it sits.
func objectsOf(ver *version) map[ID]objHint {
	out := map[ID]objHint{}
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		if f.Kind == kindBlob {
			out[f.ID] = objHint{path: f.Path}
			continue
		}
		out[f.Header] = objHint{path: f.Path, header: true}
		for j := range f.Tensors {
			out[f.Tensors[j].ID] = objHint{path: f.Path, tensor: f.Tensors[j].Name}
		}
	}
	return out
}

// RebuildIndex empties this process's index and refills it from the manifests (object
// entries refill as objects are used). The index is derived: this loses nothing.
func (s *Store) RebuildIndex() error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.ix.reset(); err != nil {
		return fmt.Errorf("rebuild index: %w", err)
	}
	s.objects.dropMetas()
	s.versions.forgetAll()
	s.objects.dropHeaders()
	if err := s.versions.loadVersions(); err != nil {
		return fmt.Errorf("rebuild index: %w", err)
	}
	// The copy's state was in the index: it is rebuilt when next needed.
	s.mat.invalidate()
	var errs []error
	if err := s.be.ListObjects(func(id ID, _ int64) error {
		if _, err := s.objects.meta(id); err != nil {
			errs = append(errs, err)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("rebuild index: %w", err)
	}
	s.objects.flushMetas()
	if len(errs) > 0 {
		return fmt.Errorf("rebuild index: %w", errors.Join(errs...))
	}
	return nil
}
