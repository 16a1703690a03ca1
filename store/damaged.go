package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Damaged and quarantined versions (docs/format.md (Part I) §7 and §8).
//
// A manifest that fails its checks (CRC, JSON, validation) makes its version unreadable, not
// the store: the version is taken off the list of sealed versions, with a log line naming it
// and the repair command, and reads of it fail with ErrCorrupt and the same words. Latest is
// the newest readable version; a new version must still be numbered above every manifest in
// the store, damaged or quarantined, so that no number ever names two versions (a reader, a
// follower or a slime receiver may hold the old one). Repair (repair.go) moves damaged
// versions aside into STORE/quarantine/.

// noteDamaged records that version v's manifest cannot be read (err, wrapping ErrCorrupt):
// it leaves the list of versions and the index (so the next Open reads the manifest again),
// and is logged once. It returns err with the repair command added.
func (s *Store) noteDamaged(v uint64, err error) error {
	err = fmt.Errorf("%w (run weightfs verify --repair %s to move version %d aside)", err, s.root, v)
	s.mu.Lock()
	_, known := s.damaged[v]
	if s.damaged == nil {
		s.damaged = map[uint64]error{}
	}
	s.damaged[v] = err
	i, found := slices.BinarySearchFunc(s.versions, v, func(info VersionInfo, v uint64) int { return cmp.Compare(info.Number, v) })
	if found {
		s.versions = slices.Delete(slices.Clone(s.versions), i, i+1)
	}
	s.mu.Unlock()
	s.manifests.remove(v)
	if !known {
		s.log.Warn("version skipped", "version", v, "err", err)
		if s.ix != nil {
			if ierr := s.ix.updateVersions(nil, []uint64{v}); ierr != nil {
				s.log.Warn("index: not updated", "err", ierr)
			}
		}
	}
	return err
}

// damagedError is the error of a version whose manifest was found damaged, else nil.
func (s *Store) damagedError(v uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.damaged[v]
}

// VersionDamage is the error of version v when its manifest is in the store but cannot be
// read (wrapping ErrCorrupt, naming the repair command), else nil: a lookup of such a
// version is damage, not absence.
func (s *Store) VersionDamage(v uint64) error { return s.damagedError(v) }

// DamagedVersions lists the versions whose manifests are in the store but cannot be read,
// ascending, with why.
func (s *Store) DamagedVersions() map[uint64]error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[uint64]error, len(s.damaged))
	for v, err := range s.damaged {
		out[v] = err
	}
	return out
}

// highest is the number a new version must exceed: the newest sealed version, or a damaged
// or quarantined one above it. taken says whether the highest is no readable version.
func (s *Store) highest() (top uint64, taken bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if n := len(s.versions); n > 0 {
		top = s.versions[n-1].Number
	}
	for v := range s.damaged {
		if v > top {
			top, taken = v, true
		}
	}
	if s.quarantineTop > top {
		top, taken = s.quarantineTop, true
	}
	return top, taken
}

// checkAbove refuses a new version v that does not exceed every number in the store.
func (s *Store) checkAbove(v uint64) error {
	top, taken := s.highest()
	switch {
	case v > top:
		return nil
	case taken:
		return fmt.Errorf("version %d: version %d exists, damaged or quarantined (weightfs verify --repair), and numbers are never used twice: %w", v, top, ErrVersionNotAbove)
	}
	return fmt.Errorf("version %d: the latest sealed version is %d: %w", v, top, ErrVersionNotAbove)
}

// errUnreadableManifests marks a sweep that deleted nothing because some manifest cannot be
// read (its objects are unknown), or a writer group's rank is writing (groupPendingError).
var errUnreadableManifests = errors.New("a manifest cannot be read")
