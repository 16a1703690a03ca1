package store

import (
	"fmt"
	"slices"
	"sort"
)

// The list of sealed versions: built from the manifests (and the index's summaries of them),
// refreshed, and asked.

// loadVersions lists the manifests and (re)builds the version list, reading only manifests
// the index has no summary of, and the newest (so that Latest is readable). A manifest that
// cannot be read is logged and skipped (noteDamaged); it is reported by Verify, by any read
// of that version, and moved aside by Repair.
func (s *Store) loadVersions() error {
	l, err := s.scanVersions()
	if err != nil {
		return err
	}
	s.publishVersions(l)
	return nil
}

// versionScan is a list of sealed versions read from the store and not yet published.
type versionScan struct {
	infos   []VersionInfo
	present map[uint64]bool // every manifest listed, readable or not
}

// top is the newest version of the scan; ok is false when it has none.
func (l versionScan) top() (uint64, bool) {
	if len(l.infos) == 0 {
		return 0, false
	}
	return l.infos[len(l.infos)-1].Number, true
}

// scanVersions is loadVersions up to the point where the list is published: the index's
// summaries are updated, and the newest version's manifest is loaded (it is readable).
func (s *Store) scanVersions() (versionScan, error) {
	numbers, err := s.be.ListManifests()
	if err != nil {
		return versionScan{}, err
	}
	if q := s.be.quarantine; q != nil {
		quarantined, err := q.listQuarantined()
		if err != nil {
			return versionScan{}, err
		}
		s.mu.Lock()
		s.quarantineTop = 0
		if n := len(quarantined); n > 0 {
			s.quarantineTop = quarantined[n-1]
		}
		s.mu.Unlock()
	}
	cached, err := s.ix.versions()
	if err != nil {
		return versionScan{}, fmt.Errorf("read index: %w", err)
	}
	var add []VersionInfo
	infos := make([]VersionInfo, 0, len(numbers))
	present := map[uint64]bool{}
	read := map[uint64]bool{}
	for _, v := range numbers {
		present[v] = true
		if s.damagedError(v) != nil {
			continue // logged when found; read again by Verify and Repair
		}
		if info, ok := cached[v]; ok {
			infos = append(infos, info)
			continue
		}
		info, err := s.versionSummary(v)
		if err != nil {
			if s.damagedError(v) == nil {
				// Not damage (an I/O error, a newer format): skipped this time, said each time.
				s.log.Warn("version skipped", "version", v, "err", err)
			}
			continue
		}
		read[v] = true
		infos = append(infos, info)
		add = append(add, info)
	}
	// The newest must be readable: it is what Latest names, and what the copy is built from.
	for len(infos) > 0 && !read[infos[len(infos)-1].Number] {
		v := infos[len(infos)-1].Number
		if _, err := s.loadVersion(v); err == nil {
			break
		} else if s.damagedError(v) == nil {
			return versionScan{}, err
		}
		infos = infos[:len(infos)-1]
	}
	var del []uint64
	for v := range cached {
		if !present[v] {
			del = append(del, v)
			s.manifests.remove(v)
		}
	}
	if err := s.ix.updateVersions(add, del); err != nil {
		return versionScan{}, fmt.Errorf("update index: %w", err)
	}
	return versionScan{infos: infos, present: present}, nil
}

// publishVersions makes a scan the store's list of versions: what Latest, Versions and every
// read by version number see from now on. A version found damaged since the scan stays off.
func (s *Store) publishVersions(l versionScan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for v := range s.damaged {
		if !l.present[v] {
			delete(s.damaged, v) // quarantined or dropped since
		}
	}
	infos := l.infos
	if len(s.damaged) > 0 {
		infos = slices.DeleteFunc(slices.Clone(infos), func(info VersionInfo) bool { return s.damaged[info.Number] != nil })
	}
	s.versions = infos
}

// Refresh picks up versions sealed (or dropped by gc) by another process since the last call,
// and brings the materialized copy forward if this store keeps one: a read-only store that
// keeps one shows a new latest version only once the copy holds it (or could not be made to,
// which is logged: reads of it then replay from the objects).
func (s *Store) Refresh() error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	before := s.sealedNumbers()
	l, err := s.scanVersions()
	if err != nil {
		return err
	}
	if !s.readOnly || !s.opts.Materialize {
		s.publishVersions(l)
		s.noteSeen(before)
		return nil
	}
	// A reader that keeps a copy brings it to the new latest version before it publishes the
	// new list: a new version is seen only once its reads are preads of a checked copy, and
	// until then the previous list (and the previous latest) is served as before, never a
	// copy half way between the two (docs/design.md, "The materialized latest version").
	var target *version
	if top, ok := l.top(); ok {
		if target, err = s.loadVersion(top); err != nil {
			// Taken off the list since the scan (damaged): publish, and let ensure pick the
			// newest readable version as before.
			target = nil
		}
	}
	err = s.mat.ensureThen(target, func() { s.publishVersions(l) })
	s.noteSeen(before)
	return err
}

// Versions lists sealed versions in ascending order.
func (s *Store) Versions() []VersionInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := slices.Clone(s.versions)
	sealed := make(map[uint64]bool, len(out))
	for _, v := range out {
		sealed[v.Number] = true
	}
	for i := range out {
		out[i].Anchor = out[i].PreviousNumber == 0 || !sealed[out[i].PreviousNumber]
	}
	return out
}

// Version returns the summary of one sealed version.
func (s *Store) Version(v uint64) (VersionInfo, error) {
	for _, info := range s.Versions() {
		if info.Number == v {
			return info, nil
		}
	}
	return VersionInfo{}, fmt.Errorf("version %d: %w", v, ErrNoSuchVersion)
}

// Latest is the newest sealed version; ok is false for an empty store.
func (s *Store) Latest() (v uint64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.versions) == 0 {
		return 0, false
	}
	return s.versions[len(s.versions)-1].Number, true
}

// Previous is the sealed version before v; ok is false when v is the first or not sealed.
func (s *Store) Previous(v uint64) (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.versions), func(i int) bool { return s.versions[i].Number >= v })
	if i == 0 || i == len(s.versions) || s.versions[i].Number != v {
		return 0, false
	}
	return s.versions[i-1].Number, true
}

func (s *Store) isSealed(v uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.versions), func(i int) bool { return s.versions[i].Number >= v })
	return i < len(s.versions) && s.versions[i].Number == v
}
