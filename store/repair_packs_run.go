package store

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/weightfs/weightfs/store/pack"
)

// Repair's part for packs, as the repairer runs it (the rules: repair_packs.go).

// repairPacks carries out the repair of packs for Repair (or, for a dry run, says what it
// would do): the index first, then the moves. It adds to rep what it wrote and moved; the
// error says what stays damaged (a damaged record left in its pack) or what failed.
func (r *repairer) repairPacks(dryRun bool, rep *RepairReport) error {
	env := r.c.packEnv()
	if env.packs == nil {
		return nil
	}
	plan, found, err := planPackRepair(env)
	rep.Packs = found
	if err != nil || plan.empty() {
		return err
	}
	q, _ := env.be.(PackQuarantiner)
	defer r.packsChanged()
	if dryRun {
		for _, p := range plan.orphans {
			rep.PackIndexes = append(rep.PackIndexes, "(new) for pack "+ID(p.ID).String())
		}
		for _, m := range plan.tables {
			rep.MendedPacks = append(rep.MendedPacks, m.id)
		}
		for _, m := range plan.misplaced {
			rep.MendedPacks = append(rep.MendedPacks, m.as)
		}
		if q != nil {
			for _, n := range plan.badIndexes {
				rep.Moved = append(rep.Moved, q.QuarantineIndexPath(n))
			}
			for _, id := range plan.badPacks {
				rep.Moved = append(rep.Moved, q.QuarantinePackPath(id))
			}
		}
		return nil
	}
	name, moved, err := applyIndexRebuild(env, plan, q)
	if name != "" {
		rep.PackIndexes = append(rep.PackIndexes, name)
	}
	rep.Moved = append(rep.Moved, moved...)
	if err != nil {
		return err
	}
	back, err := putBack(env, plan.misplaced)
	rep.MendedPacks = append(rep.MendedPacks, back...)
	if err != nil {
		return fmt.Errorf("repair: put a pack's bytes back: %w", err)
	}
	for _, m := range plan.tables {
		if err := mendPackTable(env, m); err != nil {
			return fmt.Errorf("repair: pack %s: write its table again: %w", m.id, err)
		}
		rep.MendedPacks = append(rep.MendedPacks, m.id)
		r.s.log.Info("repair: pack table written again from its index", "pack", m.id)
	}
	if q == nil {
		if len(plan.badIndexes)+len(plan.badPacks)+len(plan.badRecords) > 0 {
			r.s.log.Warn("repair: this store's backend moves no pack or pack index aside: the damaged ones stay, and are reported", "indexes", len(plan.badIndexes), "packs", len(plan.badPacks), "records", len(plan.badRecords))
		}
		return nil
	}
	for _, id := range plan.badPacks {
		dst, err := q.QuarantinePack(id)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		rep.Moved = append(rep.Moved, dst)
		r.s.log.Info("repair: pack with a damaged table that no index names quarantined", "pack", id, "to", dst)
	}
	return r.keepDamagedRecords(env, q, plan.badRecords, rep)
}

// keepDamagedRecords copies the bytes of each damaged record into quarantine/objects/<id>
// and leaves its pack: the pack is rewritten without it by gc (rewritePacks), not here; what
// stays is said at the end of the repair (packsLeft).
func (r *repairer) keepDamagedRecords(env packEnv, q PackQuarantiner, bad []PackDamage, rep *RepairReport) error {
	if len(bad) == 0 {
		return nil
	}
	ents, err := packEntries(env)
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	for _, d := range bad {
		b, err := recordBytes(env, d, ents[d.Pack])
		if errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) {
			// A record cut off (a pack cut short) or gone with its pack: nothing of it to
			// keep. The repair goes on: the object part mends what it can from intact
			// copies (a new copy, in a new pack, serves the id), and packsLeft says what
			// stays damaged.
			rep.Verify.Notes = append(rep.Verify.Notes, fmt.Sprintf("%s: nothing of the record to copy into quarantine: %v", d.what(), err))
			r.s.log.Warn("repair: damaged record not copied into quarantine: nothing of it can be read", "object", d.Object, "pack", d.Pack, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		dst, err := q.KeepQuarantinedObject(d.Object, b)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		rep.KeptRecords = append(rep.KeptRecords, dst)
		r.s.log.Warn("repair: damaged record's bytes copied into quarantine; its pack is left as it is until gc rewrites it", "object", d.Object, "pack", d.Pack, "to", dst)
	}
	return nil
}

// packsChanged tells the store's pack layer that index records and packs changed under it
// (it reads the indexes again), and drops what the objects part holds of objects' headers.
func (r *repairer) packsChanged() {
	if l, ok := r.s.be.Backend.(interface{ forgetDamage() }); ok {
		// A pack put back under its name is another file now: the pack layer opens it
		// again, and judges its records again (pack_copies.go).
		l.forgetDamage()
	}
	if l, ok := r.s.be.Backend.(interface{ reload() error }); ok {
		if err := l.reload(); err != nil {
			r.s.log.Warn("repair: pack indexes not read again", "err", err)
		}
	}
	r.s.objects.dropHeaders()
}

// packsLeft is Repair's error for the damage of packs that the repair leaves (a damaged
// record that no other pack serves stays in its pack until gc rewrites it; a pack cut short
// that its index names): it checks the packs again, after the object part mended what it
// could (a mended object is served by a new pack). nil after a dry run, when the first
// check found no damage of packs, or when none is left.
func (r *repairer) packsLeft(rep *RepairReport) error {
	if rep.DryRun || len(rep.Verify.Packs.Damaged) == 0 {
		return nil
	}
	after, err := checkPacks(r.c.packEnv())
	if err != nil {
		return fmt.Errorf("repair: check the packs after the repair: %w", err)
	}
	rep.Verify.Notes = append(rep.Verify.Notes, fmt.Sprintf("after the repair, the check of packs found %d damaged", len(after.Damaged)))
	if len(after.Damaged) == 0 {
		return nil
	}
	lines := make([]string, len(after.Damaged))
	for i, d := range after.Damaged {
		lines[i] = d.String()
	}
	return fmt.Errorf("repair: %d damaged in packs stay (a damaged record is left in its pack, its bytes copied into quarantine, until gc rewrites the pack without it): %s: %w",
		len(lines), strings.Join(lines, "; "), ErrCorrupt)
}

// quarantineObject moves object id aside (repair.go's applyQuarantine): a loose object's file
// is moved, a packed object's record is copied (its pack is left to gc, which rewrites it
// without the record once no version names it). A record cut off (its pack cut short) has
// nothing to copy: "" and no error.
func (r *repairer) quarantineObject(q Quarantiner, id ID) (string, error) {
	env := r.c.packEnv()
	pq, ok := env.be.(PackQuarantiner)
	if env.packs == nil || !ok {
		return q.QuarantineObject(id)
	}
	if _, err := env.be.StatObject(id); !errors.Is(err, fs.ErrNotExist) {
		return q.QuarantineObject(id)
	}
	ents, err := packEntries(env)
	if err != nil {
		return "", err
	}
	for p, es := range ents {
		if _, ok := pack.Find(es, id); ok {
			b, err := recordBytes(env, PackDamage{Pack: p, Object: id}, es)
			if errors.Is(err, ErrCorrupt) {
				// Cut off: nothing of the record to keep ("": nothing moved).
				r.s.log.Warn("repair: damaged record not copied into quarantine: nothing of it can be read", "object", id, "pack", p, "err", err)
				return "", nil
			}
			if err != nil {
				return "", err
			}
			return pq.KeepQuarantinedObject(id, b)
		}
	}
	return q.QuarantineObject(id)
}
