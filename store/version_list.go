package store

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"
)

// The list of sealed versions: built from the manifests (and the index's summaries of them),
// refreshed, and asked.

// versionList is the store's versions (s.versions): the list of sealed versions, the damaged
// and quarantined ones (version_damage.go), the cache of parsed manifests (version_cache.go), and
// what Refresh and Poll keep between calls (version_poll.go). The other parts of the store ask it
// (sealedVersion, loadVersion, latestVersion, checkAbove, ...) and tell it (addSealed,
// dropped, forget, noteDamaged); none touches its fields.
//
// Locking: mu is the list's own, not the store's. The store's mu guards closed alone: no
// critical section ever needed closed and the list under one lock (Close sets closed and
// touches no part of the list; checkOpen reads closed alone; a publish, a seal's addition, a
// gc's drop and noteDamaged change the list alone and ask closed, if at all, before), so the
// split orders nothing that was ordered. mu is a leaf: nothing is called and no other lock
// is taken while it is held. refreshMu (one Refresh at a time) is taken before it, never
// under it, as before.
type versionList struct {
	// st is the store, for what is set after the list is built or replaced by tests (the
	// backend st.be, the index st.ix) and for st.checkOpen.
	st       *Store
	log      *slog.Logger
	root     string
	stats    *storeStats // versionsSeen (noteSeen)
	observer Observer    // Options.Observer (nil: none)

	mu     sync.RWMutex
	sealed []VersionInfo // sealed versions, ascending; Anchor is filled on the way out (infos)
	// damaged are versions whose manifests cannot be read (not in sealed), with why;
	// quarantineTop is the highest version number in STORE/quarantine/ (version_damage.go).
	damaged       map[uint64]error
	quarantineTop uint64

	manifests *versionCache // parsed versions (version_cache.go)

	refreshMu sync.Mutex // one Refresh at a time: each publishes the list it scanned
	poll      pollState  // Poll's memory of the change hint (version_poll.go)
}

func newVersionList(s *Store) *versionList {
	return &versionList{
		st: s, log: s.log, root: s.root, stats: &s.stats, observer: s.opts.Observer,
		manifests: newVersionCache(versionCacheBytes),
	}
}

// loadVersions lists the manifests and (re)builds the version list, reading only manifests
// the index has no summary of, and the newest (so that Latest is readable). A manifest that
// cannot be read is logged and skipped (noteDamaged); it is reported by Verify, by any read
// of that version, and moved aside by Repair. Before the list is published, the remote
// cache's policy fetches what its new versions added (fetchAhead), as Refresh has it do.
func (vl *versionList) loadVersions() error {
	l, err := vl.scanVersions()
	if err != nil {
		return err
	}
	if err := vl.loadPackIndexes(l); err != nil {
		return err
	}
	if err := vl.fetchAhead(l); err != nil {
		return err
	}
	vl.publishVersions(l)
	return nil
}

// versionScan is a list of sealed versions read from the store and not yet published.
type versionScan struct {
	infos   []VersionInfo
	present map[uint64]bool // every manifest listed, readable or not
	listed  []uint64        // the listing, ascending (what the remote cache's policy is told)
	// indexes are the pack indexes the manifests read by the scan name: loaded
	// (loadPackIndexes) before the versions are published.
	indexes []string
	named   map[uint64][]string // the same names, by the version whose manifest names them
}

// top is the newest version of the scan; ok is false when it has none.
func (l versionScan) top() (uint64, bool) {
	if len(l.infos) == 0 {
		return 0, false
	}
	return l.infos[len(l.infos)-1].Number, true
}

// scanVersions is loadVersions up to the point where the list is published: the index's
// summaries are updated, and the newest version's manifest is loaded (it is readable). It
// lists and reads manifests, nothing else: no object is fetched (fetchAhead).
func (vl *versionList) scanVersions() (versionScan, error) {
	numbers, err := vl.st.be.ListManifests()
	if err != nil {
		return versionScan{}, err
	}
	if q := vl.st.be.quarantine; q != nil {
		quarantined, err := q.ListQuarantined()
		if err != nil {
			return versionScan{}, err
		}
		vl.mu.Lock()
		vl.quarantineTop = 0
		if n := len(quarantined); n > 0 {
			vl.quarantineTop = quarantined[n-1]
		}
		vl.mu.Unlock()
	}
	cached, err := vl.st.ix.versions()
	if err != nil {
		return versionScan{}, fmt.Errorf("read index: %w", err)
	}
	var add []VersionInfo
	var indexes []string
	named := map[uint64][]string{}
	infos := make([]VersionInfo, 0, len(numbers))
	present := map[uint64]bool{}
	read := map[uint64]bool{}
	for _, v := range numbers {
		present[v] = true
		if vl.damagedError(v) != nil {
			continue // logged when found; read again by Verify and Repair
		}
		if info, ok := cached[v]; ok {
			infos = append(infos, info)
			continue
		}
		info, names, err := vl.versionSummaryIndexes(v)
		if err != nil {
			if vl.damagedError(v) == nil {
				// Not damage (an I/O error, a newer format): skipped this time, said each time.
				vl.log.Warn("version skipped", "version", v, "err", err)
			}
			continue
		}
		read[v] = true
		indexes = append(indexes, names...)
		if len(names) > 0 {
			named[v] = names
		}
		infos = append(infos, info)
		add = append(add, info)
	}
	// The newest must be readable: it is what Latest names, and what the copy is built from.
	for len(infos) > 0 && !read[infos[len(infos)-1].Number] {
		v := infos[len(infos)-1].Number
		if _, err := vl.loadVersion(v); err == nil {
			break
		} else if vl.damagedError(v) == nil {
			return versionScan{}, err
		}
		infos = infos[:len(infos)-1]
	}
	var del []uint64
	for v := range cached {
		if !present[v] {
			del = append(del, v)
			vl.manifests.remove(v)
		}
	}
	if err := vl.st.ix.updateVersions(add, del); err != nil {
		return versionScan{}, fmt.Errorf("update index: %w", err)
	}
	return versionScan{infos: infos, present: present, listed: numbers, indexes: indexes, named: named}, nil
}

// loadPackIndexes has the pack layer load the pack indexes that the scan's new manifests
// name, before they are published: a version is read only once the locations of its
// objects are known (one read per index; a missing one makes the layer read them all).
func (vl *versionList) loadPackIndexes(l versionScan) error {
	p := vl.st.be.packs
	if p == nil || len(l.indexes) == 0 {
		return nil
	}
	return p.loadNamed(l.indexes)
}

// fetchAhead tells the remote cache's policy (cachePolicy: a backend with a local cache of a
// remote store) of scan l before it is published: a reader that keeps a materialized copy
// has the objects its new versions added fetched into the cache, so that bringing the copy
// forward needs no request. A failed fetch is returned: the list is then not published, and
// the next Refresh tries again. Nothing for a store without such a backend. The manifests
// the policy reads are parsed through the cache of parsed versions: the new version's is then
// parsed once for the fetch and the copy (Refresh loads it next), not twice; the packs its
// own pack indexes list are fetched meanwhile (loadPackIndexes loaded them).
func (vl *versionList) fetchAhead(l versionScan) error {
	p := vl.st.be.policy
	if p == nil {
		return nil
	}
	var packs func(vs []uint64) map[ID]int64
	if pl := vl.st.be.packs; pl != nil {
		packs = func(vs []uint64) map[ID]int64 {
			var names []string
			for _, v := range vs {
				names = append(names, l.named[v]...)
			}
			return pl.packsNamed(names)
		}
	}
	return p.prefetchListed(l.listed, vl.parsedManifest, packs)
}

// parsedManifest is the policy's manifestLoader: version v's parsed manifest from the cache
// of parsed versions (loadVersion); a version found damaged before is its error, without
// reading the manifest again.
func (vl *versionList) parsedManifest(v uint64) (*manifest, error) {
	if err := vl.damagedError(v); err != nil {
		return nil, err
	}
	ver, err := vl.loadVersion(v)
	if err != nil {
		return nil, err
	}
	return ver.m, nil
}

// publishVersions makes a scan the store's list of versions: what Latest, Versions and every
// read by version number see from now on. A version found damaged since the scan stays off.
func (vl *versionList) publishVersions(l versionScan) {
	vl.mu.Lock()
	defer vl.mu.Unlock()
	for v := range vl.damaged {
		if !l.present[v] {
			delete(vl.damaged, v) // quarantined or dropped since
		}
	}
	infos := l.infos
	if len(vl.damaged) > 0 {
		infos = slices.DeleteFunc(slices.Clone(infos), func(info VersionInfo) bool { return vl.damaged[info.Number] != nil })
	}
	vl.sealed = infos
}

// addSealed adds version m, just sealed by this process (its manifest data is durable and
// info is its summary), to the list and to the cache of parsed versions.
func (vl *versionList) addSealed(m *manifest, manifestBytes int, info VersionInfo) {
	vl.manifests.add(m.Version, newVersion(m), versionCost(manifestBytes))
	vl.mu.Lock()
	vl.sealed = append(vl.sealed, info)
	vl.mu.Unlock()
}

// dropped takes versions whose manifests this process deleted (gc) off the list.
func (vl *versionList) dropped(numbers []uint64) {
	vl.mu.Lock()
	vl.sealed = slices.DeleteFunc(slices.Clone(vl.sealed), func(info VersionInfo) bool { return slices.Contains(numbers, info.Number) })
	vl.mu.Unlock()
}

// forget drops the parsed version v from the cache: the next read of it reads its manifest.
func (vl *versionList) forget(v uint64) { vl.manifests.remove(v) }

// forgetAll empties the cache of parsed versions.
func (vl *versionList) forgetAll() { vl.manifests.clear() }

// Refresh picks up versions sealed (or dropped by gc) by another process since the last call,
// and brings the materialized copy forward if this store keeps one: a read-only store that
// keeps one shows a new latest version only once the copy holds it (or could not be made to,
// which is logged: reads of it then replay from the objects). The listing only lists; the
// remote cache's policy is then told of it (fetchAhead), before anything is published.
func (s *Store) Refresh() error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	vl := s.versions
	unlock := vl.lockRefresh()
	defer unlock()
	before := vl.sealedNumbers()
	l, err := vl.scanVersions()
	if err != nil {
		return err
	}
	if err := vl.loadPackIndexes(l); err != nil {
		return err
	}
	if err := vl.fetchAhead(l); err != nil {
		return err
	}
	if !s.readOnly || !s.opts.Materialize {
		vl.publishVersions(l)
		vl.noteSeen(before)
		return nil
	}
	// A reader that keeps a copy brings it to the new latest version before it publishes the
	// new list: a new version is seen only once its reads are preads of a checked copy, and
	// until then the previous list (and the previous latest) is served as before, never a
	// copy half way between the two (docs/design.md, "The materialized latest version").
	var target *version
	if top, ok := l.top(); ok {
		if target, err = vl.loadVersion(top); err != nil {
			// Taken off the list since the scan (damaged): publish, and let ensure pick the
			// newest readable version as before.
			target = nil
		}
	}
	err = s.mat.ensureThen(target, func() { vl.publishVersions(l) })
	vl.noteSeen(before)
	return err
}

// Versions lists sealed versions in ascending order.
func (s *Store) Versions() []VersionInfo { return s.versions.infos() }

// infos is Versions.
func (vl *versionList) infos() []VersionInfo {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	out := slices.Clone(vl.sealed)
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
func (s *Store) Latest() (v uint64, ok bool) { return s.versions.latest() }

// latest is Latest.
func (vl *versionList) latest() (v uint64, ok bool) {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	if len(vl.sealed) == 0 {
		return 0, false
	}
	return vl.sealed[len(vl.sealed)-1].Number, true
}

// Previous is the sealed version before v; ok is false when v is the first or not sealed.
func (s *Store) Previous(v uint64) (uint64, bool) { return s.versions.previous(v) }

// previous is Previous.
func (vl *versionList) previous(v uint64) (uint64, bool) {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	i := sort.Search(len(vl.sealed), func(i int) bool { return vl.sealed[i].Number >= v })
	if i == 0 || i == len(vl.sealed) || vl.sealed[i].Number != v {
		return 0, false
	}
	return vl.sealed[i-1].Number, true
}

func (vl *versionList) isSealed(v uint64) bool {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	i := sort.Search(len(vl.sealed), func(i int) bool { return vl.sealed[i].Number >= v })
	return i < len(vl.sealed) && vl.sealed[i].Number == v
}

// between reports whether an unsealed number v lies between two sealed versions.
func (vl *versionList) between(v uint64) bool {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	i := sort.Search(len(vl.sealed), func(i int) bool { return vl.sealed[i].Number >= v })
	return i > 0 && i < len(vl.sealed)
}

// sealedNumbers lists the numbers of the sealed versions, ascending.
func (vl *versionList) sealedNumbers() []uint64 {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	out := make([]uint64, len(vl.sealed))
	for i, info := range vl.sealed {
		out[i] = info.Number
	}
	return out
}

// noteSeen counts the versions in the list now that were not in before (Refresh), and tells
// the observer of them (stats.go).
func (vl *versionList) noteSeen(before []uint64) {
	vl.mu.RLock()
	var found []VersionInfo
	for _, info := range vl.sealed {
		if _, ok := slices.BinarySearch(before, info.Number); !ok {
			found = append(found, info)
		}
	}
	vl.mu.RUnlock()
	if len(found) == 0 {
		return
	}
	vl.stats.versionsSeen.Add(int64(len(found)))
	if vl.observer != nil {
		now := time.Now()
		for _, info := range found {
			vl.observer.Seen(info, now)
		}
	}
}

// newer is NewerVersions: how many sealed versions are newer than v.
func (vl *versionList) newer(v uint64) int {
	vl.mu.RLock()
	defer vl.mu.RUnlock()
	i, found := slices.BinarySearchFunc(vl.sealed, v, func(info VersionInfo, v uint64) int {
		switch {
		case info.Number < v:
			return -1
		case info.Number > v:
			return 1
		}
		return 0
	})
	if found {
		i++
	}
	return len(vl.sealed) - i
}
