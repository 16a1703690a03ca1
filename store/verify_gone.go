package store

import (
	"errors"
	"fmt"
)

// What Verify makes of a version that a later version names as its previous but whose
// manifest is gone (docs/format.md Part I §8; docs/design.md, "Telling a dropped version
// from a lost one"): gc dropped it when the gc record (gc_record.go) says so; its manifest is
// lost when the record covers it (it is above the record's Since) and does not list it;
// otherwise (gone before the record, or no usable record) the deltas of the version after
// it decide, as before the record (deltasBasedOutside), and the report's notes say that
// this is all Verify could tell.

// goneVersions is what Verify gathers, over the versions it reads, of the previous versions
// that are gone: judged once every manifest is seen (report).
type goneVersions struct {
	present     map[uint64]bool // the versions whose manifests are listed
	quarantined map[uint64]bool // moved into quarantine by Repair: gone on purpose
	rec         gcRecord
	recOK       bool           // rec is a usable gc record
	lost        []Damage       // previous versions lost rather than dropped by gc, if their deltas say so
	lostNamed   []lostPrevious // previous versions the gc record says are lost
}

// notePrevious notes ver's previous version in g if its manifest is gone (not moved into
// quarantine), as the gc record, or else ver's deltas, judge it.
func (c *checker) notePrevious(g *goneVersions, rep *VerifyReport, ver *version) {
	p := ver.m.Previous
	if p == 0 || g.present[p] || g.quarantined[p] {
		return
	}
	switch {
	case g.recOK && g.rec.Dropped(p):
		// gc dropped it (its objects may wait for a sweep: an interrupted gc).
	case g.recOK && p > g.rec.Since:
		// gc records what it drops before the first manifest goes: this one
		// was not dropped, its manifest is lost.
		g.lostNamed = append(g.lostNamed, c.lostManifest(ver))
	default:
		// Gone before the record (or without one): gc drops the oldest versions,
		// and (--keep-every, readers' pins) versions between kept ones; either
		// way it re-anchors the deltas whose bases go, so a delta based outside
		// every named object is what a lost manifest leaves.
		g.lost = append(g.lost, c.deltasBasedOutside(ver)...)
		rep.Notes = append(rep.Notes, fmt.Sprintf("version %d (the previous of version %d) is gone and no gc record says whether gc dropped it: judged by version %d's deltas alone (a lost manifest whose next version holds only whole copies is not seen)", p, ver.m.Version, ver.m.Version))
	}
}

// report adds to rep the gone versions that are damage, once named holds every object a
// manifest names. gc drops versions only after it has rewritten, as whole copies, every delta
// object of a kept version whose base no kept version names: a delta based on an object no
// version names means its version's previous was lost, not dropped.
func (g *goneVersions) report(rep *VerifyReport, named map[ID]bool) {
	reported := map[uint64]bool{}
	for _, d := range g.lost {
		if !named[d.Object] && !reported[d.Version] {
			reported[d.Version] = true
			rep.Damaged = append(rep.Damaged, Damage{Version: d.Version, Err: d.Err})
		}
	}
	for _, l := range g.lostNamed {
		if !reported[l.version] {
			reported[l.version] = true
			rep.Damaged = append(rep.Damaged, l.damage(named))
		}
	}
}

// verifyGCRecord reads the gc record for Verify. ok is false when there is no usable
// record; a damaged or unreadable one is noted in rep (it is not damage of any version: the
// record only tells gc's drops from losses, and without it Verify judges as before it).
func (c *checker) verifyGCRecord(rep *VerifyReport) (rec gcRecord, ok bool) {
	s := c.st
	rec, state, err := s.collector.readGCRecord()
	if state == gcRecordBad {
		what, then := "unreadable", ""
		switch {
		case errors.Is(err, ErrCorrupt):
			what, then = "damaged", " (the writer replaces the record when it next opens the store)"
		case errors.Is(err, ErrUnsupportedVersion):
			what, then = "of an unknown format", " (a newer weightfs's: verify with it)"
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("gc record %s: %v: whether a gone version was dropped by gc or lost cannot be told from it; each is judged by the deltas of the version after it alone%s", what, err, then))
		s.log.Warn("verify: gc record "+what+"; gone versions are judged by their next versions' deltas alone", "err", err)
	}
	return rec, state == gcRecordOK
}

// lostPrevious is a version whose manifest the gc record says is lost, with what of the
// version after it depends on it.
type lostPrevious struct {
	version uint64 // the lost version
	by      uint64 // the version that names it as its previous
	deltas  []ID   // bases of by's delta objects
	links   []ID   // bases of by's full objects' links
}

// lostManifest is the finding for ver's previous version, whose manifest is lost.
func (c *checker) lostManifest(ver *version) lostPrevious {
	s := c.st
	l := lostPrevious{version: ver.m.Previous, by: ver.m.Version}
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		for j := range f.Tensors {
			id := f.Tensors[j].ID
			s.objects.forgetMeta(id) // as the object is now (another process's gc may have rewritten it)
			m, err := s.objects.meta(id)
			if err != nil || m.DeltaLen == 0 {
				continue // damage of the object itself is reported with the object
			}
			if m.Kind == kindDelta {
				l.deltas = append(l.deltas, m.Base)
			} else {
				l.links = append(l.links, m.Base)
			}
		}
	}
	return l
}

// damage is the finding as Verify reports it, once named holds every object a manifest
// names: the objects of the version after it that lead to objects only the lost version
// named.
func (l lostPrevious) damage(named map[ID]bool) Damage {
	count := func(ids []ID) (n int) {
		for _, id := range ids {
			if !named[id] {
				n++
			}
		}
		return n
	}
	return Damage{Version: l.version, Err: fmt.Errorf(
		"manifest lost: version %d names it as its previous, and the gc record does not say that gc dropped it; %d delta objects and %d anchors' links of version %d lead to objects that no version names (version %d's): %w",
		l.by, count(l.deltas), count(l.links), l.by, l.version, ErrCorrupt)}
}
