package store

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/weightfs/weightfs/store/pack"
)

// The pack layer's fallback across the copies of an object. An object can have several
// copies: records of its id in several packs (gc re-anchored it, or rewrote its pack and a
// crash left the old one; a writer stored it again), and a loose file (a store packed from
// loose objects, a test's knob). The map serves one record; when a read of it fails its
// checks (the objects part's: CRC-32C, WFSO magic, sizes, the id in the header; the layer's
// own: a record beyond its pack's end), the record is marked damaged for this process and
// the object is served by the next copy that is not: the other packs' records of its id, in
// the precedence of their indexes (pack_layer.go), then the loose file. The first damage met
// in a pack also checks the pack's own table against its name: a pack whose file holds
// another pack's bytes (swapped or copied over) is damaged as a whole. Each fallback is
// logged at WARN, once per record.
//
// Only a read's failure marks a record: an intact store pays nothing. A record whose every
// other copy is damaged or missing is still served (its damage is the error the reader
// gives, as before). What is marked stays marked until repair changes the packs
// (forgetDamage). Verify reports the damaged records and packs all the same (checkPacks
// reads the packs themselves), while the objects they hide are read from their intact copies.

// errOtherCopy marks the damage of a packed record that another copy of its object now
// serves: the read that met it reads the object again (object_reader.go, read.go, verify).
var errOtherCopy = errors.New("another copy of the object serves it now")

// maxCopyRetries bounds the reads again of one read after errOtherCopy (each marks a record
// damaged: there are never many copies).
const maxCopyRetries = 8

// recKey names one record: its pack and its offset there.
type recKey struct {
	pack ID
	off  int64
}

// recordDamage is what the objects part calls when an object file fails its checks: for a
// packed record (a packSection), the layer marks the record damaged and says whether another
// copy serves the object now (then err wraps errOtherCopy). err gains where the bytes are
// (" (in pack P at offset O)"). A loose file or a record of the open pack is left as it is.
func recordDamage(f ObjectFile, err error) error {
	err = fmt.Errorf("%w%s", err, objectFileWhere(f))
	s, ok := f.(*packSection)
	if !ok || s.c.onDamage == nil || !isVerdictDamage(err) {
		return err
	}
	if s.c.onDamage(s.id, s.loc, err) {
		return fmt.Errorf("%w (%w)", err, errOtherCopy)
	}
	return err
}

// noteDamaged marks the record of id at loc damaged (and its pack, when the pack's own table
// does not match its name) and says whether another copy of id, not known damaged, remains.
func (p *packedObjects) noteDamaged(id ID, loc packLocation, err error) bool {
	k := recKey{loc.Pack, loc.Offset}
	p.dmgMu.Lock()
	_, known := p.badRecs[k]
	if !known {
		p.badRecs[k] = err
		p.anyBad.Store(true)
	}
	_, packChecked := p.packChecked[loc.Pack]
	p.packChecked[loc.Pack] = true
	p.dmgMu.Unlock()
	if !packChecked {
		// A record fails: is the pack's file the pack its name says? (Only its table is
		// read, and once.) A pack holding another's bytes serves none of its records.
		if _, terr := readPackTable(p.packs, loc.Pack); terr != nil && errors.Is(terr, ErrCorrupt) {
			p.dmgMu.Lock()
			p.badPacks[loc.Pack] = terr
			p.anyBad.Store(true)
			p.dmgMu.Unlock()
			p.log.Warn("pack damaged: its records are read from the other copies of their objects (weightfs verify --repair)", "pack", loc.Pack, "err", terr)
		}
	}
	return p.otherCopy(id, loc)
}

// otherCopy says whether id has a copy besides the record at loc that is not known damaged.
func (p *packedObjects) otherCopy(id ID, loc packLocation) bool {
	for _, l := range p.recordsOf(id) {
		if (l.Pack != loc.Pack || l.Offset != loc.Offset) && !p.knownBad(l) {
			return true
		}
	}
	_, err := p.Backend.StatObject(id)
	return err == nil
}

// knownBad says whether the record at l was found damaged, or its pack.
func (p *packedObjects) knownBad(l packLocation) bool {
	if !p.anyBad.Load() {
		return false // an intact store's reads take no lock here
	}
	p.dmgMu.Lock()
	defer p.dmgMu.Unlock()
	if _, ok := p.badPacks[l.Pack]; ok {
		return true
	}
	_, ok := p.badRecs[recKey{l.Pack, l.Offset}]
	return ok
}

// recordsOf lists the records of id in finished packs the layer knows, best first: this
// process's packs not yet indexed, then the indexes from the highest sequence number down,
// then the packs no intact index names.
func (p *packedObjects) recordsOf(id ID) []packLocation {
	var out []packLocation
	add := func(ip packTable, seq uint64) {
		for _, e := range ip.entries {
			if ID(e.ID) == id && !slices.ContainsFunc(out, func(l packLocation) bool { return l.Pack == ip.id && l.Offset == e.Offset }) {
				out = append(out, packLocation{Pack: ip.id, Offset: e.Offset, Length: e.Length, Seq: seq})
			}
		}
	}
	p.wmu.Lock()
	for i := len(p.written) - 1; i >= 0; i-- {
		add(packTable{ID(p.written[i].ID), p.written[i].Entries}, 0)
	}
	p.wmu.Unlock()
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i := len(p.loaded) - 1; i >= 0; i-- {
		x := p.loaded[i]
		for _, ip := range x.Packs {
			add(packTable{ID(ip.ID), ip.Entries}, x.Seq)
		}
	}
	for _, ip := range p.fallback {
		add(packTable{ID(ip.ID), ip.Entries}, 0)
	}
	return out
}

type packTable struct {
	id      ID
	entries []pack.Entry
}

// openCopy opens a copy of id other than the damaged record at loc (failed: why, nil when
// it was marked before): another pack's record, else the loose file. With none intact, the
// damaged record is served all the same (its damage is the reader's error, as before), or
// failed when it cannot even be opened.
func (p *packedObjects) openCopy(id ID, loc packLocation, failed error) (ObjectFile, error) {
	for _, l := range p.recordsOf(id) {
		if p.knownBad(l) {
			continue
		}
		f, err := p.files.section(id, l)
		if err == nil {
			if p.firstFallback(id, loc) {
				p.log.Warn("damaged record of an object: read from its record in another pack", "object", id, "damaged pack", loc.Pack, "pack", l.Pack)
			}
			return f, nil
		}
		if !errors.Is(err, ErrCorrupt) {
			continue // missing or unreadable: no verdict on the record; others are tried
		}
		p.noteDamaged(id, l, err)
	}
	f, err := p.Backend.OpenObject(id)
	if err == nil {
		if p.firstFallback(id, loc) {
			p.log.Warn("damaged record of an object: read from its loose file", "object", id, "damaged pack", loc.Pack)
		}
		return f, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if failed != nil {
		return nil, failed
	}
	return p.files.section(id, loc)
}

// firstFallback says whether the fallback from the record of id at loc is the first one of
// this process (it is logged once).
func (p *packedObjects) firstFallback(id ID, loc packLocation) bool {
	p.dmgMu.Lock()
	defer p.dmgMu.Unlock()
	k := recKey{loc.Pack, loc.Offset}
	if p.fellBack[k] {
		return false
	}
	p.fellBack[k] = true
	return true
}

// forgetDamage forgets the records and packs found damaged and closes the open packs: repair
// put packs back or wrote them again (repair_packs_run.go: packsChanged).
func (p *packedObjects) forgetDamage() {
	p.dmgMu.Lock()
	p.badRecs = map[recKey]error{}
	p.badPacks = map[ID]error{}
	p.packChecked = map[ID]bool{}
	p.fellBack = map[recKey]bool{}
	p.anyBad.Store(false)
	p.dmgMu.Unlock()
	p.files.close()
}
