package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/weightfs/weightfs/store/pack"
)

// Repair of packs and pack indexes (weightfs verify --repair; the rules of repair.go). The
// packs' own tables are the truth, the indexes a copy of them (docs/format.md Part I §8):
//
//   - a pack with an intact table that no intact index names (its index lost, damaged, or
//     never written by a writer that stopped) is named by ONE new index record, written
//     from the packs' tables, durable before anything is moved;
//   - then each damaged index record (it does not decode) is moved into quarantine/index/NAME:
//     no read path uses it, and its packs are named again by the new index;
//   - a pack whose table is damaged but that an intact index names has its table written
//     again from the index (the same bytes: a pack's name is the SHA-256 of its table), when
//     its file has the size the index says; otherwise it is left, reported, and its records
//     still read through the index;
//   - a pack whose table is damaged and that no intact index names serves nothing: it is
//     moved into quarantine/packs/<id>;
//   - a damaged record (it fails its CRC-32C or names another object) has its bytes copied
//     into quarantine/objects/<id>; the pack is left as it is and keeps being reported, until
//     gc rewrites it without that record (rewritePacks, the repack helper's). The objects
//     part of repair (repair.go) meanwhile mends or quarantines the object as a loose one.
//
// An I/O error anywhere (no verdict) stops it before it changes anything.

// PackQuarantiner is the optional part of a PackBackend that can move pack files and index
// records aside and keep a damaged record's bytes (store/local).
type PackQuarantiner interface {
	// QuarantineIndex moves pack index name aside and says where it went.
	QuarantineIndex(name string) (string, error)
	// QuarantineIndexPath says where QuarantineIndex would move it.
	QuarantineIndexPath(name string) string
	// QuarantinePack moves pack id aside and says where it went.
	QuarantinePack(id ID) (string, error)
	// QuarantinePackPath says where QuarantinePack would move it.
	QuarantinePackPath(id ID) string
	// KeepQuarantinedObject writes data as quarantine/objects/<id> (an object's record that
	// stays in its pack).
	KeepQuarantinedObject(id ID, data []byte) (string, error)
}

// packRepairPlan is what a repair of packs does: what checkPacks found, in actions.
type packRepairPlan struct {
	orphans    []pack.IndexedPack // intact packs no intact index names (or one replaced): a new index names them
	badIndexes []string           // damaged index records, or ones naming a missing pack: moved aside after the new index
	badPacks   []ID               // damaged tables no intact index names: moved aside
	tables     []mendTable        // damaged tables an intact index holds: written again
	misplaced  []misplacedPack    // a pack's intact bytes at another pack's name: put back
	badRecords []PackDamage       // damaged records: bytes copied aside, pack left
}

// mendTable is a pack whose table is written again from the copy an index holds.
type mendTable struct {
	id   ID
	size int64
	ents []pack.Entry
}

// misplacedPack is the file of pack at that holds the intact bytes of pack as (two packs'
// files swapped, one copied over another), whose own file is not intact.
type misplacedPack struct{ at, as ID }

// empty reports whether the plan does nothing.
func (p packRepairPlan) empty() bool {
	return len(p.orphans)+len(p.badIndexes)+len(p.badPacks)+len(p.tables)+len(p.misplaced)+len(p.badRecords) == 0
}

// planPackRepair checks the packs (checkPacks) and plans their repair; an I/O error of the
// check is returned, and nothing is planned.
func planPackRepair(env packEnv) (packRepairPlan, packReport, error) {
	var plan packRepairPlan
	rep, err := checkPacks(env)
	if err != nil {
		return plan, rep, err
	}
	if len(rep.Unreadable) > 0 {
		return plan, rep, fmt.Errorf("repair of packs: nothing changed: %s could not be checked: %w", rep.Unreadable[0].what(), rep.Unreadable[0].Err)
	}
	good, err := checkIndexes(env.records, &packReport{})
	if err != nil {
		return plan, rep, err
	}
	sizes := map[ID]int64{}
	entries := map[ID][]pack.Entry{}
	for _, x := range good {
		for _, p := range x.Packs {
			sizes[p.ID], entries[p.ID] = p.Size, p.Entries
		}
	}
	for _, id := range rep.Orphans {
		ip, err := readPackTable(env.packs, id)
		if err != nil {
			return plan, rep, fmt.Errorf("repair of packs: nothing changed: %w", err)
		}
		plan.orphans = append(plan.orphans, ip)
	}
	missing := map[string]map[ID]bool{} // index -> the packs it names that are missing
	planned := map[ID]bool{}            // packs whose file is looked at once
	for _, d := range rep.Damaged {
		switch {
		case !d.Object.IsZero():
			plan.badRecords = append(plan.badRecords, d)
		case d.Pack.IsZero():
			plan.badIndexes = append(plan.badIndexes, d.Index)
		case d.Index == "":
			plan.badPacks = append(plan.badPacks, d.Pack)
		default:
			// A pack an intact index names, missing, cut, or with a damaged table: the
			// table is mended where the file has the size the index says; an index naming
			// a missing pack is replaced by one that names its other packs.
			st, err := env.packs.StatPack(d.Pack)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				if missing[d.Index] == nil {
					missing[d.Index] = map[ID]bool{}
				}
				missing[d.Index][d.Pack] = true
			case err == nil && !planned[d.Pack]:
				planned[d.Pack] = true
				if as, ok := misplacedAs(env.packs, d.Pack, sizes); ok {
					plan.misplaced = append(plan.misplaced, misplacedPack{at: d.Pack, as: as})
				} else if st == sizes[d.Pack] && recordsIntact(env.packs, d.Pack, entries[d.Pack]) {
					plan.tables = append(plan.tables, mendTable{id: d.Pack, size: st, ents: entries[d.Pack]})
				}
			}
		}
	}
	// The records of a pack whose bytes are put back are checked again afterwards.
	plan.badRecords = slices.DeleteFunc(plan.badRecords, func(d PackDamage) bool {
		return slices.ContainsFunc(plan.misplaced, func(m misplacedPack) bool { return m.as == d.Pack })
	})
	for _, x := range good {
		gone := missing[x.Name]
		if gone == nil {
			continue
		}
		for _, p := range x.Packs {
			if !gone[p.ID] && !slices.ContainsFunc(plan.orphans, func(o pack.IndexedPack) bool { return o.ID == p.ID }) {
				plan.orphans = append(plan.orphans, p)
			}
		}
		plan.badIndexes = append(plan.badIndexes, x.Name)
	}
	return plan, rep, nil
}

// misplacedAs reports whether the file of pack at holds the intact bytes of another pack
// that an intact index names with that size, and whose own file is not intact: a swap, or a
// copy over it.
func misplacedAs(packs PackBackend, at ID, sizes map[ID]int64) (ID, bool) {
	f, err := packs.OpenPack(at)
	if err != nil {
		return ID{}, false
	}
	defer f.Close()
	ents, got, err := pack.ReadTrailer(f, f.Size())
	as := ID(got)
	if err != nil || as == at || sizes[as] != f.Size() {
		return ID{}, false
	}
	buf := make([]byte, 1<<20)
	for _, e := range ents {
		if checkRecord(f, e, buf) != nil {
			return ID{}, false
		}
	}
	if _, err := readPackTable(packs, as); err == nil {
		return ID{}, false // its own file is intact: this one is a stray copy
	}
	return as, true
}

// recordsIntact reports whether every record of pack id passes its checks against ents.
func recordsIntact(packs PackBackend, id ID, ents []pack.Entry) bool {
	f, err := packs.OpenPack(id)
	if err != nil || len(ents) == 0 {
		return false
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for _, e := range ents {
		if checkRecord(f, e, buf) != nil {
			return false
		}
	}
	return true
}

// putBack copies each misplaced file to a temporary file first (a swap moves both ways), then
// puts each copy as the pack it holds.
func putBack(env packEnv, ms []misplacedPack) ([]ID, error) {
	tmps := make([]*os.File, 0, len(ms))
	defer func() {
		for _, t := range tmps {
			if t != nil {
				env.be.RemoveTemp(t)
			}
		}
	}()
	for _, m := range ms {
		f, err := env.packs.OpenPack(m.at)
		if err != nil {
			return nil, err
		}
		tmp, err := env.be.CreateTemp()
		if err == nil {
			tmps = append(tmps, tmp)
			_, err = io.Copy(tmp, io.NewSectionReader(f, 0, f.Size()))
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("copy the file of pack %s: %w", m.at, err)
		}
	}
	var done []ID
	for i, m := range ms {
		tmp := tmps[i]
		tmps[i] = nil // PutPack owns it
		if err := env.packs.PutPack(m.as, tmp); err != nil {
			return done, err
		}
		done = append(done, m.as)
		if env.log != nil {
			env.log.Info("repair: a pack's intact bytes found at another pack's name, put back", "pack", m.as, "found at", m.at)
		}
	}
	return done, env.be.SyncObjects()
}

// readPackTable reads the table of pack id (which must be intact) as an index holds it.
func readPackTable(packs PackBackend, id ID) (pack.IndexedPack, error) {
	f, err := packs.OpenPack(id)
	if err != nil {
		return pack.IndexedPack{}, err
	}
	defer f.Close()
	ents, got, err := pack.ReadTrailer(f, f.Size())
	if err == nil && got != id {
		err = fmt.Errorf("pack %s holds the table of pack %s: %w", id, ID(got), ErrCorrupt)
	}
	if err != nil {
		return pack.IndexedPack{}, packError(err)
	}
	return pack.IndexedPack{ID: id, Size: f.Size(), Entries: ents}, nil
}

// rebuildIndexes writes one new pack index record naming every pack with an intact table
// that no intact index names (and the other packs of an index that names a missing pack),
// from the packs' own tables, and then moves the damaged index records (and those naming a
// missing pack) into quarantine when the backend can (else they stay). It returns the names
// of the index records written (none when every pack is named).
func rebuildIndexes(env packEnv) ([]string, error) {
	plan, _, err := planPackRepair(env)
	if err != nil {
		return nil, err
	}
	q, _ := env.be.(PackQuarantiner)
	name, _, err := applyIndexRebuild(env, plan, q)
	if name == "" {
		return nil, err
	}
	return []string{name}, err
}

// applyIndexRebuild carries out the index part of plan: the new index first, durable, then
// the index records it replaces moved aside (q nil: left). It returns the new index's name
// ("" for none) and where it moved each.
func applyIndexRebuild(env packEnv, plan packRepairPlan, q PackQuarantiner) (string, []string, error) {
	name, err := writeRebuiltIndex(env, plan.orphans)
	if err != nil || q == nil {
		return name, nil, err
	}
	var moved []string
	for _, bad := range plan.badIndexes {
		dst, err := q.QuarantineIndex(bad)
		if err != nil {
			return name, moved, fmt.Errorf("repair: %w", err)
		}
		moved = append(moved, dst)
		if env.log != nil {
			env.log.Info("repair: pack index quarantined", "index", bad, "to", dst)
		}
	}
	return name, moved, nil
}

// writeRebuiltIndex writes the index record of packs (none: nothing) and returns its name.
func writeRebuiltIndex(env packEnv, packs []pack.IndexedPack) (string, error) {
	if len(packs) == 0 {
		return "", nil
	}
	x := pack.Index{Seq: env.nextSeq(), Packs: packs}
	b := x.Encode()
	name := pack.Name(x.Seq, b)
	if err := env.records.PutRecord(RecordIndex, name, b); err != nil {
		return "", fmt.Errorf("repair: write pack index %s: %w", name, err)
	}
	if env.log != nil {
		ids := make([]string, len(packs))
		for i, p := range packs {
			ids[i] = ID(p.ID).String()
		}
		env.log.Info("repair: pack index written from the packs' own tables", "index", name, "packs", strings.Join(ids, ","))
	}
	return name, nil
}

// mendPackTable writes pack m.id again: its records as they are, then the table its index
// holds, which is the pack's own (the pack's name is the SHA-256 of it).
func mendPackTable(env packEnv, m mendTable) error {
	if len(m.ents) == 0 {
		return fmt.Errorf("pack %s: no table to write", m.id)
	}
	t := pack.Trailer(slices.Clone(m.ents))
	if ID(pack.IDOfTrailer(t)) != m.id {
		return fmt.Errorf("pack %s: the index's table is another pack's: %w", m.id, ErrCorrupt)
	}
	f, err := env.packs.OpenPack(m.id)
	if err != nil {
		return err
	}
	defer f.Close()
	recs := m.size - int64(len(t))
	tmp, err := env.be.CreateTemp()
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, io.NewSectionReader(f, 0, recs)); err != nil {
		env.be.RemoveTemp(tmp)
		return fmt.Errorf("pack %s: copy its records: %w", m.id, err)
	}
	if _, err := tmp.Write(t); err != nil {
		env.be.RemoveTemp(tmp)
		return fmt.Errorf("pack %s: write its table: %w", m.id, err)
	}
	if err := env.packs.PutPack(m.id, tmp); err != nil {
		return err
	}
	return env.be.SyncObjects()
}

// recordBytes reads the record of object id in pack p (entry from its index or table).
func recordBytes(env packEnv, d PackDamage, ents []pack.Entry) ([]byte, error) {
	e, ok := pack.Find(ents, d.Object)
	if !ok {
		return nil, fmt.Errorf("%s: not in the pack's table: %w", d.what(), fs.ErrNotExist)
	}
	f, err := env.packs.OpenPack(d.Pack)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if e.Offset < 0 || e.Length < 0 || e.Offset > f.Size()-e.Length {
		return nil, fmt.Errorf("%s: record outside the pack: %w", d.what(), ErrCorrupt)
	}
	b := make([]byte, e.Length)
	if err := readFull(f, b, e.Offset); err != nil {
		return nil, err
	}
	return b, nil
}

// packEntries are the entries of every pack: from the newest intact index naming it, else
// from its own table where that is intact.
func packEntries(env packEnv) (map[ID][]pack.Entry, error) {
	out := map[ID][]pack.Entry{}
	good, err := checkIndexes(env.records, &packReport{})
	if err != nil {
		return nil, err
	}
	for _, x := range good {
		for _, p := range x.Packs {
			out[p.ID] = p.Entries
		}
	}
	err = env.packs.ListPacks(func(id ID, _ int64) error {
		if _, ok := out[id]; !ok {
			if ip, err := readPackTable(env.packs, id); err == nil {
				out[id] = ip.Entries
			}
		}
		return nil
	})
	return out, err
}
