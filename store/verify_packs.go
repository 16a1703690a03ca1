package store

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"

	"github.com/weightfs/weightfs/store/pack"
)

// Verify of packs and pack indexes (store format 3, docs/format.md Part I §8): the files the
// pack layer reads objects through, checked on their own, so that a finding names the pack
// and the index as well as the object. The object checks of verify.go read the same records
// as objects (through the layer); these checks add what only the files show: an index that
// does not decode, a pack that is missing, cut, or holds another pack's bytes, a pack's table
// that is damaged, and packs no index names.

// PackDamage is one damaged pack, pack index or record of a pack that Verify found.
type PackDamage struct {
	Index  string // the pack index record it concerns, if any
	Pack   ID     // the pack it concerns, if any
	Object ID     // the object of a damaged record, if any
	Err    error
}

func (d PackDamage) String() string { return fmt.Sprintf("%s: %v", d.what(), d.Err) }

// what names what the finding concerns: the object and its pack, the pack, or the index.
func (d PackDamage) what() string {
	var s string
	switch {
	case !d.Object.IsZero():
		s = fmt.Sprintf("object %s in pack %s", d.Object, d.Pack)
	case !d.Pack.IsZero():
		s = fmt.Sprintf("pack %s", d.Pack)
	default:
		return fmt.Sprintf("pack index %s", d.Index)
	}
	if d.Index != "" {
		s += fmt.Sprintf(" (pack index %s)", d.Index)
	}
	return s
}

// PackReport is what Verify found of a store's packs and pack indexes; all zero for a store
// without packs. Plain lists, so that VerifyReport holds it as it is.
type PackReport struct {
	Indexes, Packs, Records int   // checked
	Bytes                   int64 // of the packs checked
	// Damaged are the findings of damage: an index that does not decode, a pack missing, of
	// another size than its index says, holding another pack's bytes or a damaged table, a
	// record failing its checks.
	Damaged []PackDamage
	// Unreadable could not be checked (an I/O error): no verdict either way.
	Unreadable []PackDamage
	// Orphans are the packs with an intact table that no intact index names: a writer that
	// stopped before its index, or one whose index is lost or damaged (Repair indexes them).
	Orphans []ID
	// Notes say what is not damage but worth a look (an orphan, a damaged record that
	// another pack's record serves).
	Notes []string
}

// packReport is checkPacks' report (the name the helpers' interface uses).
type packReport = PackReport

func (r *PackReport) add(d PackDamage) {
	if isVerdictDamage(d.Err) || errors.Is(d.Err, errNotRegular) {
		r.Damaged = append(r.Damaged, d)
	} else {
		r.Unreadable = append(r.Unreadable, d)
	}
}

// packSeen is what checkPacks learns of one pack.
type packSeen struct {
	size    int64
	listed  bool         // ListPacks found its file
	indexed string       // the newest intact index that names it ("" for none)
	entries []pack.Entry // from that index, else from the pack's own table
	table   error        // the pack's own table failed (nil: intact and its id is the file's name)
}

// checkPacks checks every pack index record (it decodes; the packs it names exist with the
// size it says, and their own tables are the one it holds), every pack's own table, and every
// record of every pack (its CRC-32C against its trailer and its entry, and that its header
// names the entry's object). Packs no intact index names are listed as orphans. A store
// without packs gives an empty report.
func checkPacks(env packEnv) (packReport, error) {
	var rep packReport
	if env.packs == nil {
		return rep, nil
	}
	seen := map[ID]*packSeen{}
	if err := env.packs.ListPacks(func(id ID, size int64) error {
		seen[id] = &packSeen{size: size, listed: true}
		return nil
	}); err != nil {
		return rep, fmt.Errorf("verify packs: %w", err)
	}
	good, err := checkIndexes(env.records, &rep)
	if err != nil {
		return rep, err
	}
	// Which index serves which object: the entry of the highest sequence number
	// (loadIndexes' order), as the pack layer reads it.
	serving := map[ID]ID{}
	for _, x := range good {
		rep.Indexes++
		for _, p := range x.Packs {
			s := seen[p.ID]
			if s == nil {
				s = &packSeen{}
				seen[p.ID] = s
			}
			s.indexed, s.entries = x.Name, p.Entries
			for _, e := range p.Entries {
				serving[e.ID] = p.ID
			}
			if !s.listed {
				rep.add(PackDamage{Index: x.Name, Pack: p.ID, Err: fmt.Errorf("pack missing (its %d objects cannot be read): %w", len(p.Entries), ErrCorrupt)})
			} else if s.size != p.Size {
				rep.add(PackDamage{Index: x.Name, Pack: p.ID, Err: fmt.Errorf("pack of %d bytes, its index says %d: %w", s.size, p.Size, ErrCorrupt)})
			}
		}
	}
	ids := make([]ID, 0, len(seen))
	for id, s := range seen {
		if s.listed {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		checkPack(env.packs, id, seen[id], serving, &rep)
	}
	return rep, nil
}

// checkIndexes reads every pack index record: the intact ones are returned (in loadIndexes'
// order), the others reported.
func checkIndexes(rec Records, rep *packReport) ([]namedIndex, error) {
	if rec == nil {
		return nil, nil
	}
	names, err := rec.ListRecords(RecordIndex)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("verify packs: %w", err)
	}
	slices.SortFunc(names, compareIndexNames)
	var good []namedIndex
	for _, name := range names {
		if _, ok := pack.ParseName(name); !ok {
			continue
		}
		x, err := loadIndex(rec, name)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrCorrupt):
			continue // gone since the listing (gc consolidated it)
		case errors.Is(err, ErrUnsupportedVersion):
			rep.Damaged = append(rep.Damaged, PackDamage{Index: name, Err: err})
		case err != nil:
			rep.add(PackDamage{Index: name, Err: err})
		default:
			good = append(good, x)
		}
	}
	return good, nil
}

// checkPack checks one pack's own table against its name and what its index holds, then
// each of its records.
func checkPack(packs PackBackend, id ID, s *packSeen, serving map[ID]ID, rep *packReport) {
	f, err := packs.OpenPack(id)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("pack missing: %w (%w)", ErrCorrupt, err)
		}
		rep.add(PackDamage{Index: s.indexed, Pack: id, Err: err})
		return
	}
	defer f.Close()
	rep.Packs++
	rep.Bytes += f.Size()
	entries, got, err := pack.ReadTrailer(f, f.Size())
	switch {
	case err != nil:
		err = packError(err)
	case got != id:
		err = fmt.Errorf("the file holds the table of pack %s: %w", ID(got), ErrCorrupt)
	}
	if err != nil {
		s.table = err
		if s.indexed != "" {
			err = fmt.Errorf("table: %w (its records are still found through its index)", err)
		}
		rep.add(PackDamage{Index: s.indexed, Pack: id, Err: err})
		if s.indexed == "" || !isVerdictDamage(err) {
			return // no table to check its records against
		}
	}
	if s.indexed == "" {
		s.entries = entries
		rep.Orphans = append(rep.Orphans, id)
		rep.Notes = append(rep.Notes, fmt.Sprintf("pack %s: no intact pack index names it (a writer that stopped before writing its index, or an index lost or damaged): verify --repair indexes it, gc removes it after an hour", id))
	}
	buf := make([]byte, 1<<20)
	intact := entriesIntact(f, s.entries, buf)
	for i, e := range s.entries {
		rep.Records++
		if intact[i] {
			continue
		}
		err := checkRecord(f, e, buf)
		if err == nil {
			continue
		}
		if other, ok := serving[e.ID]; ok && other != id && isVerdictDamage(err) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("object %s in pack %s: %v; not damage: pack %s serves the object (gc drops this record)", e.ID, id, err, other))
			continue
		}
		rep.add(PackDamage{Index: s.indexed, Pack: id, Object: e.ID, Err: err})
	}
}

// checkRecord checks the record of entry e in pack f: it lies inside the pack, its CRC-32C
// matches its own trailer and the entry's, and its header names the entry's object. buf (nil:
// one is made) is the buffer the CRC reads through: one for all the records of a pack, not one
// per record (100,000 tensors make 100,000 records).
func checkRecord(f ObjectFile, e pack.Entry, buf []byte) error {
	if e.Offset < 0 || e.Length < objectTrailerLen || e.Offset > f.Size()-e.Length {
		return fmt.Errorf("record at %d+%d outside the pack's %d bytes: %w", e.Offset, e.Length, f.Size(), ErrCorrupt)
	}
	r := packRecord{io.NewSectionReader(f, e.Offset, e.Length)}
	crc, stored, err := objectFileCRC(r, e.Length-objectTrailerLen, buf)
	if err != nil {
		return err
	}
	if crc != stored {
		return fmt.Errorf("CRC-32C %08x, stored %08x: %w", crc, stored, ErrCorrupt)
	}
	if stored != e.CRC {
		return fmt.Errorf("record's CRC-32C %08x, its pack entry says %08x: %w", stored, e.CRC, ErrCorrupt)
	}
	info, err := readObjectInfo(r)
	if err == nil && info.hdr.ID != e.ID {
		err = fmt.Errorf("record holds object %s: %w", info.hdr.ID, ErrCorrupt)
	}
	return err
}

// entriesIntact says of each entry's record whether it passes checkRecord's checks, read in
// the order of their offsets through packWindow (an index lists its entries in the order of
// their ids: read in that order, every record cost a read of its own window).
func entriesIntact(f ObjectFile, entries []pack.Entry, buf []byte) []bool {
	order := make([]int32, len(entries))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(entries[a].Offset, entries[b].Offset) })
	intact := make([]bool, len(entries))
	var w packWindow
	for _, i := range order {
		intact[i] = w.intact(f, entries[i], buf)
	}
	return intact
}

// packWindow is the part of a pack that checkPack read last: the records of a pack, in the
// order of their offsets, are checked from reads of 1 MiB of it (buf), not four reads of
// their own each (100,000 tensors make 100,000 records).
type packWindow struct {
	b  []byte // bytes [at, at+len(b)) of the pack
	at int64
}

// intact reports whether the record of entry e in pack f passes checkRecord's checks, read
// from the window (filled again from e's offset through buf when e lies outside it). false
// says nothing: checkRecord reads the record again and says what is wrong, if anything.
func (w *packWindow) intact(f ObjectFile, e pack.Entry, buf []byte) bool {
	if e.Offset < 0 || e.Length < objectTrailerLen || e.Length > int64(len(buf)) || e.Offset > f.Size()-e.Length {
		return false
	}
	if e.Offset < w.at || e.Offset+e.Length > w.at+int64(len(w.b)) {
		n := min(int64(len(buf)), f.Size()-e.Offset)
		if readFull(f, buf[:n], e.Offset) != nil {
			*w = packWindow{}
			return false
		}
		w.b, w.at = buf[:n], e.Offset
	}
	rec := w.b[e.Offset-w.at : e.Offset-w.at+e.Length]
	hdr, crc, ok := checkRecordBytes(rec)
	if !ok || crc != e.CRC || hdr.ID != e.ID {
		return false
	}
	if hdr.Kind == kindFull {
		_, ok = chunkTableBytes(rec, &hdr)
	}
	return ok
}

// packRecord is one record of a pack as an ObjectFile.
type packRecord struct{ *io.SectionReader }

func (packRecord) Close() error { return nil }

// packEnv is the environment of the functions over packs for this store: nothing (packs
// nil) when its backend keeps no packs or no records. The next sequence number is one above
// the highest of every index record's name, damaged ones included, so that an index Repair
// writes is laid over all of them.
func (c *checker) packEnv() packEnv {
	s := c.st
	env := packEnv{be: s.be.given, records: s.be.records, log: s.log}
	if p, ok := s.be.given.(PackBackend); ok && s.be.records != nil {
		env.packs = p
	}
	env.nextSeq = func() uint64 {
		var top uint64
		names, _ := s.be.records.ListRecords(RecordIndex)
		for _, n := range names {
			if seq, ok := pack.ParseName(n); ok {
				top = max(top, seq)
			}
		}
		return top + 1
	}
	return env
}

// verifyPacks adds checkPacks' findings to rep: the damage to rep.Packs, what could not be
// checked to rep.Unreadable as well (Repair then acts on nothing). The packs' bytes count in
// prog's total, done when the check ends.
func (c *checker) verifyPacks(rep *VerifyReport, prog *verifyProgress) error {
	env := c.packEnv()
	if env.packs == nil {
		return nil
	}
	var total int64
	if err := env.packs.ListPacks(func(_ ID, size int64) error { total += size; return nil }); err != nil {
		return err
	}
	prog.total += total
	pr, err := checkPacks(env)
	if err != nil {
		return err
	}
	prog.add(total)
	for _, d := range pr.Unreadable {
		rep.Unreadable = append(rep.Unreadable, Damage{Path: d.what(), Err: d.Err})
	}
	rep.Packs = pr
	return nil
}
