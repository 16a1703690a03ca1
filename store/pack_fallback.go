package store

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/weightfs/weightfs/store/pack"
)

// The pack layer's fallback to the packs' own tables. A pack index is a derived view: the
// truth of where a pack's records are is the pack's table (its trailer). So a store whose
// index is damaged or missing still opens and reads: after the intact indexes are loaded,
// the layer lists the packs (PackBackend.ListPacks) and, for every pack that no intact index
// names (and that this process did not write and has not indexed yet), reads its table and
// lays its entries under the map, at the lowest precedence. Lowest, because an intact
// index's entry must win: an id can have records in several packs (gc re-anchored an object
// as a new delta, or rewrote its pack and a crash left the old pack), and the intact index
// of the highest sequence number says which record serves it; a pack no index names is only
// a second-best witness of where the id's bytes are (every record of an id holds the same
// object, and every read checks it).
//
// It is cheap: one listing of the packs at each load of the indexes (open, reload), and a
// table read only for a pack not covered, once per process (packs are immutable; a table
// that fails is read again at the next reload: verify --repair may have mended it). A pack
// whose table is damaged and that no intact index names stays unreadable (verify names it,
// repair quarantines it).

// fallbackTable is a pack's own table as the fallback read it.
type fallbackTable struct {
	size    int64
	entries []pack.Entry
}

// uncoveredPacks returns the packs that none of indexes names and this process did not write,
// with their tables read from the packs themselves (in the listing's order). A pack whose
// table cannot be read is logged (once) and left out. A listing that fails is logged and
// yields none: the indexes still serve what they name.
func (p *packedObjects) uncoveredPacks(indexes []namedIndex) []pack.IndexedPack {
	covered := map[ID]bool{}
	for _, x := range indexes {
		for _, ip := range x.Packs {
			covered[ID(ip.ID)] = true
		}
	}
	p.wmu.Lock()
	for _, w := range p.written {
		covered[ID(w.ID)] = true
	}
	p.wmu.Unlock()
	type listed struct {
		id   ID
		size int64
	}
	var todo []listed
	err := p.packs.ListPacks(func(id ID, size int64) error {
		if !covered[id] {
			todo = append(todo, listed{id, size})
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			p.log.Warn("packs not listed: the packs no intact pack index names are not read", "err", err)
		}
		return nil
	}
	var out []pack.IndexedPack
	for _, l := range todo {
		p.fbMu.Lock()
		t, ok := p.fbTables[l.id]
		p.fbMu.Unlock()
		if !ok || t.size != l.size {
			ip, err := readPackTable(p.packs, l.id) // repair_packs.go: checks the pack's id too
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the listing (gc)
			}
			p.fbMu.Lock()
			if err != nil {
				if !p.fbLogged[l.id] {
					p.fbLogged[l.id] = true
					p.log.Warn("pack named by no intact pack index, and its own table is damaged: its objects are unreadable (weightfs verify --repair)",
						"pack", l.id, "err", fmt.Errorf("pack %s: table: %w", l.id, err))
				}
				p.fbMu.Unlock()
				continue
			}
			t = fallbackTable{size: l.size, entries: ip.Entries}
			p.fbTables[l.id] = t
			if !p.fbLogged[l.id] {
				p.fbLogged[l.id] = true
				p.log.Warn("pack named by no intact pack index: its objects are found from its own table (weightfs verify --repair writes its index again)",
					"pack", l.id, "records", len(ip.Entries))
			}
			p.fbMu.Unlock()
		}
		out = append(out, pack.IndexedPack{ID: pack.ID(l.id), Size: t.size, Entries: t.entries})
	}
	return out
}

// noteDamagedIndexes logs the damaged indexes not logged before (each once: a manifest that
// names one makes every load meet it again) and remembers them, so that loadNamed does not
// read them again.
func (p *packedObjects) noteDamagedIndexes(bad []damagedIndex) {
	p.fbMu.Lock()
	defer p.fbMu.Unlock()
	for _, d := range bad {
		if p.damagedIdx[d.Name] {
			continue
		}
		p.damagedIdx[d.Name] = true
		p.log.Warn("pack index damaged: its packs are found from their own tables (weightfs verify --repair writes it again)",
			"index", d.Name, "err", d.Err)
	}
}

// knownDamaged says whether index name was found damaged by this process.
func (p *packedObjects) knownDamaged(name string) bool {
	p.fbMu.Lock()
	defer p.fbMu.Unlock()
	return p.damagedIdx[name]
}

// servesLive says whether the layer serves a live (not deleted) object from pack id: gc's
// orphan sweep keeps such a pack (a pack whose index was lost holds what versions need).
func (p *packedObjects) servesLive(id ID) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, ok := p.packNo[id]
	if !ok {
		return false
	}
	for oid, l := range p.loc {
		if l.pack == n && !p.dead[oid] {
			return true
		}
	}
	return false
}
