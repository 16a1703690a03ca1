package store

import (
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// The end of a gc, for packs: the pack layer rewrites the packs whose objects the sweep
// deleted (packRepacker, rewritePacks), then packs that no index names are removed once they
// are old enough that no writer can still be about to index them (sweepOrphanPacks).

// packRepacker is the store's pack layer as the collector sees it: repack rewrites the packs
// holding objects deleted since it last ran (rewritePacks). A backend without packs has none.
type packRepacker interface {
	repack(mayDrop func(ID) bool) error
}

// packAger is the optional part of a PackBackend that tells when a pack was written (the
// local backend: the file's modification time). Without it no orphan pack is removed: its
// age is unknown.
type packAger interface {
	PackModTime(id ID) (time.Time, error)
}

// orphanPackAge is how old a pack no index names must be before gc removes it. A writer puts
// its packs before the index that names them (at its SyncObjects; a rank of a writer group
// at its part's end), so a young unnamed pack may be about to be named; one an hour old was
// left by a writer that died, or by a gc stopped between its new index and its deletions.
const orphanPackAge = time.Hour

// sweepOrphanPacks removes the packs that none of indexes (every index of the store, none
// damaged) names and that were written at least olderThan ago, and logs each. It returns how
// many it removed. A backend that cannot tell a pack's age (no packAger) keeps them all.
func sweepOrphanPacks(env packEnv, indexes []namedIndex, olderThan time.Duration) (int, error) {
	ager, ok := env.packs.(packAger)
	if !ok {
		return 0, nil
	}
	named := map[ID]bool{}
	for _, x := range indexes {
		for _, p := range x.Packs {
			named[ID(p.ID)] = true
		}
	}
	type orphan struct {
		id   ID
		size int64
	}
	var orphans []orphan
	if err := env.packs.ListPacks(func(id ID, size int64) error {
		if !named[id] {
			orphans = append(orphans, orphan{id, size})
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("orphan packs: %w", err)
	}
	now := time.Now()
	removed := 0
	for _, o := range orphans {
		at, err := ager.PackModTime(o.id)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("orphan packs: %w", err)
		}
		if env.serves != nil && env.serves(o.id) {
			env.log.Warn("gc: a pack no intact index names is kept: it holds live objects (weightfs verify --repair indexes it)", "pack", o.id)
			continue
		}
		if age := now.Sub(at); age < olderThan {
			env.log.Info("gc: a pack no index names is kept: a writer may be about to index it", "pack", o.id, "age", age.Round(time.Second))
			continue
		}
		if err := env.packs.DeletePack(o.id); err != nil {
			return removed, fmt.Errorf("orphan packs: %w", err)
		}
		removed++
		env.log.Info("gc: removed a pack no index names", "pack", o.id, "bytes", o.size, "written", at.UTC().Format(time.RFC3339))
	}
	return removed, nil
}

// repackPacks is the last step of a gc that deleted (or could have deleted) objects: the pack
// layer, when the store has one, rewrites the packs those objects were in, then the packs no
// index names are swept.
func (c *collector) repackPacks() error {
	if r, ok := c.st.be.Backend.(packRepacker); ok {
		// A record is dropped only when its object is dead in the layer AND no kept version,
		// open writer or writer group needs it now (the sweep's own victims, computed again
		// here): a dead mark alone lost objects that versions sealed beside gc use.
		live, err := c.liveNow()
		if err != nil {
			return fmt.Errorf("repack: %w", err)
		}
		if err := r.repack(func(id ID) bool { return live != nil && !live[id] }); err != nil {
			return fmt.Errorf("repack: %w", err)
		}
	}
	packs, ok := c.st.be.given.(PackBackend)
	rec := c.st.be.records
	if !ok || rec == nil {
		return nil
	}
	// A writer of this process, or a rank of a writer group, may have put packs it has not
	// indexed yet, however long ago (a long ingest): no pack is an orphan while one writes.
	if n := len(c.st.ingest.openWriters()); n > 0 {
		c.log.Info("gc: packs no index names are kept: writers are open", "writers", n)
		return nil
	}
	if writing, err := c.st.groups.publisher.roots(map[ID]bool{}); writing != "" || err != nil {
		c.log.Info("gc: packs no index names are kept: a writer group may be writing", "writing", writing, "err", err)
		return nil
	}
	indexes, damaged, err := loadIndexes(rec)
	if err != nil {
		return fmt.Errorf("orphan packs: %w", err)
	}
	if len(damaged) > 0 {
		// The packs a damaged index names are not known: none is an orphan until repaired.
		c.log.Warn("gc: packs no index names are kept: a damaged pack index may name them (run weightfs verify --repair)",
			"index", damaged[0].Name, "err", damaged[0].Err, "damaged_indexes", len(damaged))
		return nil
	}
	env := packEnv{be: c.st.be.Backend, packs: packs, records: rec, log: c.log}
	if l, ok := c.st.be.Backend.(interface{ servesLive(ID) bool }); ok {
		env.serves = l.servesLive
	}
	_, err = sweepOrphanPacks(env, indexes, orphanPackAge)
	return err
}

// liveNow is every object a kept version, an open writer or a writer group's unpublished
// part needs now, with the bases and contexts their chains walk (the sweep's live set,
// computed again at the end of gc). nil: a group is writing or a manifest is unreadable, and
// nothing may be dropped.
func (c *collector) liveNow() (map[ID]bool, error) {
	numbers, err := c.st.be.ListManifests()
	if err != nil {
		return nil, err
	}
	roots := map[ID]bool{}
	for _, v := range numbers {
		ver, err := c.st.versions.loadVersion(v)
		if err != nil {
			return nil, nil
		}
		manifestRoots(ver.m, roots)
	}
	if err := c.pendingStored(roots); err != nil {
		return nil, err
	}
	writing, err := c.st.groups.publisher.roots(roots)
	if err != nil || writing != "" {
		return nil, err
	}
	return c.liveSetWhole(roots, nil)
}
