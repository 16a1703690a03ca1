package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"slices"

	"github.com/weightfs/weightfs/store/pack"
)

// gc of packs (docs/format.md Part I §3.5, §3.6 and §7). A pack is immutable: when gc deletes
// some of the objects a pack holds, the pack is rewritten with the others, in prune's order
// (restic's): the new packs are made durable, then one index naming every live pack, then the
// old index records go, then the old packs. At every point each kept object is named by an
// index that remains, in a pack that remains: a crash leaves either the old index and its
// packs, or the new index and its packs, or both (the new one has the highest sequence number
// and wins); what a crash leaves behind unnamed is an orphan pack (sweepOrphanPacks).

// packEnv is what the gc of packs works with: the backend under the pack layer (its temporary
// files and SyncObjects), its packs and records, the store's log, and the source of index
// sequence numbers (the pack layer's: each call returns one above every index it knows).
type packEnv struct {
	be      Backend
	packs   PackBackend
	records Records
	log     *slog.Logger
	nextSeq func() uint64
	// serves, when set, says whether the pack layer serves a live object from pack id (one no
	// intact index names is read from its own table: pack_fallback.go); the orphan sweep
	// keeps such a pack, whatever its age (its index was lost, its objects are not).
	serves func(id ID) bool
}

// repackTarget is the size at which a pack being rewritten is finished and the next begun:
// the pack layer's target (docs/format.md §3.5: large units, fetched whole or in ranges). A
// variable: tests lower it.
var repackTarget int64 = 64 << 20

// repackCopyBuf is the buffer a record is copied through: large records stream, they are
// never held whole in memory.
const repackCopyBuf = 1 << 20

// packPlan is what rewritePacks does with one pack the indexes name.
type packPlan struct {
	pack.IndexedPack
	live []pack.Entry // its records kept: keep accepts the id and this pack serves it
	last int          // its last place among the packs the indexes name, in their order
	kept bool         // left as it is although it holds dead records (it cannot be read)
}

// rewritePacks is gc's rewrite of the packs that indexes name (in loadIndexes' order: an id in
// several packs is served by the last, the entry of the highest sequence number). A record is
// live when keep accepts its id and its pack is the one that serves the id; a record another
// pack shadows is dead (a re-anchored object's old delta, a copy a crash left twice). Every
// pack that holds a dead record is rewritten: its live records are copied (each checked
// against its CRC-32C on the way; one that fails is copied as it is and logged, never
// dropped) into new packs of about repackTarget bytes; a pack with no live record is not
// copied at all. Then, in this order: the new packs are made durable (PutPack, SyncObjects);
// one consolidated index of every live pack (the untouched ones and the new ones, each with
// its own table) is written durably, under a sequence number above every index it replaces;
// the old index records are deleted; the packs no longer named are deleted.
//
// It returns the name of the consolidated index, or "" when it wrote none: nothing to rewrite
// and at most one index (nothing to do), or no live record left (the old indexes and packs
// are deleted). With nothing to rewrite but several indexes it consolidates them into one:
// readers list and fetch fewer index files, and it costs one write of the index gc has just
// read, at a gc (docs/format.md §3.6).
//
// A pack that cannot be opened, or whose size is not the one its index gives, is left as it
// is, named again by the new index (what it holds is verify's to report); it is deleted only
// when it holds no live record.
func rewritePacks(env packEnv, indexes []namedIndex, keep func(ID) bool) (newIndex string, err error) {
	if len(indexes) == 0 {
		return "", nil
	}
	ordered := slices.Clone(indexes)
	slices.SortStableFunc(ordered, func(a, b namedIndex) int { return compareIndexNames(a.Name, b.Name) })
	plans, order := planPacks(ordered, keep)
	var rewrite, untouched []*packPlan
	var dropped int
	for _, id := range order {
		p := plans[id]
		switch {
		case len(p.live) == len(p.Entries):
			untouched = append(untouched, p)
		case len(p.live) == 0:
			dropped++
		default:
			if reason := packUnreadable(env, p); reason != nil {
				env.log.Warn("gc: pack left as it is, its objects dropped stay in it", "pack", ID(p.ID), "err", reason)
				p.kept = true
				untouched = append(untouched, p)
				continue
			}
			rewrite = append(rewrite, p)
		}
	}
	if len(rewrite) == 0 && dropped == 0 && len(ordered) == 1 {
		return "", nil
	}

	// 1. The new packs, durable.
	written, err := copyLivePacks(env, rewrite)
	if err != nil {
		for _, np := range written { // unnamed yet: removed now, or by a later orphan sweep
			_ = env.packs.DeletePack(ID(np.ID))
		}
		return "", err
	}
	if len(written) > 0 {
		if err := env.be.SyncObjects(); err != nil {
			return "", fmt.Errorf("repack: sync the new packs: %w", err)
		}
	}

	// 2. One index of every live pack, durable. Packs left as they are with dead records
	// come first, in the order that made them serve what they serve: where one of their
	// dead records shares an id with a live one, the later pack in the index serves it.
	live := make([]pack.IndexedPack, 0, len(untouched)+len(written))
	named := map[pack.ID]bool{}
	var sound []pack.IndexedPack
	slices.SortFunc(untouched, func(a, b *packPlan) int { return cmp.Compare(a.last, b.last) })
	for _, p := range untouched {
		if p.kept {
			live = append(live, p.IndexedPack)
		} else {
			sound = append(sound, p.IndexedPack)
		}
		named[p.ID] = true
	}
	for _, np := range written {
		if !named[np.ID] {
			sound = append(sound, np)
			named[np.ID] = true
		}
	}
	slices.SortFunc(sound, func(a, b pack.IndexedPack) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	live = append(live, sound...)
	if len(live) > 0 {
		seq := env.nextSeq()
		if top := ordered[len(ordered)-1].Seq; seq <= top {
			seq = top + 1 // it must win over every index it replaces
		}
		data := (&pack.Index{Seq: seq, Packs: live}).Encode()
		newIndex = pack.Name(seq, data)
		if err := env.records.PutRecord(RecordIndex, newIndex, data); err != nil {
			return "", fmt.Errorf("repack: write the consolidated index %s: %w", newIndex, err)
		}
	}

	// 3. The old index records.
	for _, x := range ordered {
		if x.Name == newIndex {
			continue
		}
		if err := env.records.DeleteRecord(RecordIndex, x.Name); err != nil {
			return newIndex, fmt.Errorf("repack: delete index %s: %w", x.Name, err)
		}
	}

	// 4. The packs no index names any more.
	var freed int64
	var gone int
	for _, id := range order {
		if named[id] {
			continue
		}
		if err := env.packs.DeletePack(ID(id)); err != nil {
			return newIndex, fmt.Errorf("repack: %w", err)
		}
		freed += plans[id].Size
		gone++
	}
	env.log.Info("gc: packs rewritten", "rewritten", len(rewrite), "new_packs", len(written),
		"deleted_packs", gone, "deleted_pack_bytes", freed, "indexes_replaced", len(ordered), "index", newIndex)
	return newIndex, nil
}

// planPacks lists the packs that ordered names, each once (a pack two indexes name has the
// same table in both: its id is that table's hash), in the order first named, with its live
// records.
func planPacks(ordered []namedIndex, keep func(ID) bool) (map[pack.ID]*packPlan, []pack.ID) {
	plans := map[pack.ID]*packPlan{}
	var order []pack.ID
	server := map[ID]pack.ID{} // which pack serves each id: the last to name it
	place := 0
	for _, x := range ordered {
		for _, p := range x.Packs {
			if _, ok := plans[p.ID]; !ok {
				plans[p.ID] = &packPlan{IndexedPack: p}
				order = append(order, p.ID)
			}
			plans[p.ID].last = place
			place++
			for _, e := range p.Entries {
				server[ID(e.ID)] = p.ID
			}
		}
	}
	for _, id := range order {
		p := plans[id]
		for _, e := range p.Entries {
			if server[ID(e.ID)] == id && keep(ID(e.ID)) {
				p.live = append(p.live, e)
			}
		}
	}
	return plans, order
}

// packUnreadable says why pack p cannot be rewritten (it is missing, or not the size its index
// gives), or nil.
func packUnreadable(env packEnv, p *packPlan) error {
	size, err := env.packs.StatPack(ID(p.ID))
	if err != nil {
		return err
	}
	if size != p.Size {
		return fmt.Errorf("pack %s is %d bytes, its index says %d: %w", ID(p.ID), size, p.Size, ErrCorrupt)
	}
	return nil
}

// copyLivePacks copies the live records of rewrite into new packs, each finished once it
// passes repackTarget, and puts them (durable once SyncObjects returns). It returns the packs
// put, also on error.
func copyLivePacks(env packEnv, rewrite []*packPlan) ([]pack.IndexedPack, error) {
	var written []pack.IndexedPack
	var tmp *os.File
	var w *pack.Writer
	finish := func() error {
		if w == nil || w.Len() == 0 {
			return nil
		}
		id, size, entries, err := w.Finish()
		if err != nil {
			env.be.RemoveTemp(tmp)
			return fmt.Errorf("repack: %w", err)
		}
		t := tmp
		tmp, w = nil, nil
		if err := env.packs.PutPack(ID(id), t); err != nil {
			return fmt.Errorf("repack: %w", err)
		}
		written = append(written, pack.IndexedPack{ID: id, Size: size, Entries: entries})
		return nil
	}
	buf := make([]byte, repackCopyBuf)
	for _, p := range rewrite {
		f, err := env.packs.OpenPack(ID(p.ID))
		if err != nil {
			if tmp != nil {
				env.be.RemoveTemp(tmp)
			}
			return written, fmt.Errorf("repack: %w", err)
		}
		// Records in the order they lie in the old pack: one sequential read of it.
		live := slices.Clone(p.live)
		slices.SortFunc(live, func(a, b pack.Entry) int { return cmp.Compare(a.Offset, b.Offset) })
		for _, e := range live {
			if tmp == nil {
				if tmp, err = env.be.CreateTemp(); err != nil {
					f.Close()
					return written, fmt.Errorf("repack: %w", err)
				}
				w = pack.NewWriter(tmp)
			}
			if w.Has(e.ID) {
				continue
			}
			if err := copyRecord(env, f, ID(p.ID), e, tmp, w, buf); err != nil {
				f.Close()
				env.be.RemoveTemp(tmp)
				return written, err
			}
			if w.Offset() >= repackTarget {
				if err := finish(); err != nil {
					f.Close()
					return written, err
				}
			}
		}
		f.Close()
	}
	return written, finish()
}

// copyRecord appends record e of pack from (open as f) to the pack being written in tmp,
// checking its CRC-32C on the way: the record's trailer must be the CRC of the bytes before it
// and the entry's CRC. A record that fails is copied as it is, and logged with its object
// and pack: gc never drops a kept object, and the damage stays for verify to name (it is not
// laundered into a record that checks).
func copyRecord(env packEnv, f ObjectFile, from ID, e pack.Entry, tmp *os.File, w *pack.Writer, buf []byte) error {
	at := w.Offset()
	body := e.Length - objectTrailerLen
	var crc uint32
	var trailer [objectTrailerLen]byte
	for off := int64(0); off < e.Length; {
		n := min(int64(len(buf)), e.Length-off)
		if err := readFull(f, buf[:n], e.Offset+off); err != nil {
			return fmt.Errorf("repack: object %s in pack %s: %w", ID(e.ID), from, err)
		}
		if off < body {
			crc = crc32.Update(crc, castagnoli, buf[:min(n, body-off)])
		}
		if off+n > body { // the trailer, or its part in this chunk
			s := max(0, body-off)
			copy(trailer[off+s-body:], buf[s:n])
		}
		if _, err := tmp.WriteAt(buf[:n], at+off); err != nil {
			return fmt.Errorf("repack: write object %s into a new pack: %w", ID(e.ID), err)
		}
		off += n
	}
	stored := binary.LittleEndian.Uint32(trailer[:])
	if stored != crc || stored != e.CRC {
		env.log.Warn("gc: a kept object fails its checksum: copied as it is into the new pack (run weightfs verify)",
			"object", ID(e.ID), "pack", from, "crc", fmt.Sprintf("%08x", crc), "stored", fmt.Sprintf("%08x", stored),
			"entry", fmt.Sprintf("%08x", e.CRC), "err", ErrCorrupt)
	}
	w.Added(e.ID, e.Length, stored)
	return nil
}
