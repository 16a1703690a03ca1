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
func (vl *versionList) noteDamaged(v uint64, err error) error {
	err = fmt.Errorf("%w (run weightfs verify --repair %s to move version %d aside)", err, vl.root, v)
	vl.mu.Lock()
	_, known := vl.damaged[v]
	if vl.damaged == nil {
		vl.damaged = map[uint64]error{}
	}
	vl.damaged[v] = err
	i, found := slices.BinarySearchFunc(vl.sealed, v, func(info VersionInfo, v uint64) int { return cmp.Compare(info.Number, v) })
	if found {
		vl.sealed = slices.Delete(slices.Clone(vl.sealed), i, i+1)
	}
	vl.mu.Unlock()
	vl.manifests.remove(v)
	if !known {
		vl.log.Warn("version skipped", "version", v, "err", err)
		if ix := vl.st.ix; ix != nil {
			if ierr := ix.updateVersions(nil, []uint64{v}); ierr != nil {
				vl.log.Warn("index: not updated", "err", ierr)
			}
		}
	}
	return err
}

// damagedError is the error of a version whose manifest was found damaged, else nil.
func (vl *versionList) damagedError(v uint64) error {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	return vl.damaged[v]
}

// VersionDamage is the error of version v when its manifest is in the store but cannot be
// read (wrapping ErrCorrupt, naming the repair command), else nil: a lookup of such a
// version is damage, not absence.
func (s *Store) VersionDamage(v uint64) error { return s.versions.damagedError(v) }

// DamagedVersions lists the versions whose manifests are in the store but cannot be read,
// ascending, with why.
func (s *Store) DamagedVersions() map[uint64]error { return s.versions.damagedVersions() }

// damagedVersions is DamagedVersions.
func (vl *versionList) damagedVersions() map[uint64]error {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	out := make(map[uint64]error, len(vl.damaged))
	for v, err := range vl.damaged {
		out[v] = err
	}
	return out
}

// highest is the number a new version must exceed: the newest sealed version, or a damaged
// or quarantined one above it. taken says whether the highest is no readable version.
func (vl *versionList) highest() (top uint64, taken bool) {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	if n := len(vl.sealed); n > 0 {
		top = vl.sealed[n-1].Number
	}
	for v := range vl.damaged {
		if v > top {
			top, taken = v, true
		}
	}
	if vl.quarantineTop > top {
		top, taken = vl.quarantineTop, true
	}
	return top, taken
}

// checkAbove refuses a new version v that does not exceed every number in the store.
func (vl *versionList) checkAbove(v uint64) error {
	top, taken := vl.highest()
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
