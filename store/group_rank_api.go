package store

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// What a rank's Store and its Writers ask of the rank's state (rankState, group.go): who the
// rank is, its records, the bases of its parts and the files it owns. Only these methods
// and those of group_holds.go read rankState's fields.

// newRankState is the state of rank r, whose group records are recs and whose cache
// directory is cacheDir, with the files an earlier run owned (loadOwned).
func newRankState(r Rank, recs Records, cacheDir string, log *slog.Logger) *rankState {
	g := &rankState{Rank: r, recs: recs, log: log, bases: map[uint64]uint64{}, ownFile: filepath.Join(cacheDir, ownedFileName)}
	g.loadOwned()
	return g
}

// loadOwned takes up the files an earlier run owned: the copy it left holds them, and the
// first part of this run takes it up as it is, rather than rebuilding it file by file as
// the files are owned again. The list is a cache: damaged or unreadable, it is reported and
// dropped, and the copy is rebuilt for the files this run writes.
func (g *rankState) loadOwned() {
	data, err := os.ReadFile(g.ownFile)
	if err == nil {
		var paths []string
		if err = json.Unmarshal(data, &paths); err == nil {
			for _, p := range paths {
				if err = checkPath(p); err != nil {
					break
				}
			}
		}
		if err == nil {
			g.own = map[string]bool{}
			for _, p := range paths {
				g.own[p] = true
			}
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		g.log.Warn("writer group: the list of owned files is damaged; ignored, the copy is rebuilt for the files this rank writes",
			"file", g.ownFile, "err", err)
		os.Remove(g.ownFile)
	}
}

// member is which rank of which group this is.
func (g *rankState) member() Rank { return g.Rank }

// newPart is the rank's part record of version v diffed against base, with no file, directory
// or object yet (NewPart's open marker, and SealPart's record before it is filled).
func (g *rankState) newPart(v, base uint64) *partRecord {
	return &partRecord{Group: g.Group, Version: v, Rank: g.Rank.Rank, Ranks: g.Ranks, Base: base, Writer: writerName(),
		Dirs: []manifestDir{}, Files: []manifestFile{}, Objects: []partObject{}}
}

// recordName names the rank's record of kind kind (recordOpen, recordPart) of version v.
func (g *rankState) recordName(v uint64, kind string) string {
	return recordName(g.Group, v, g.Rank.Rank, kind)
}

// putRecord stores the group record name (one of the rank's: recordName).
func (g *rankState) putRecord(name string, data []byte) error {
	return g.recs.PutRecord(RecordGroup, name, data)
}

// deleteRecord removes the group record name (one of the rank's: recordName).
func (g *rankState) deleteRecord(name string) error {
	return g.recs.DeleteRecord(RecordGroup, name)
}

// refusal is the group's refusal record of version v (nil: none).
func (g *rankState) refusal(v uint64) (*refusalRecord, error) {
	return readRefusal(g.recs, g.Group, v)
}

// partsState says, for people, what the group's records of version v say (which ranks
// sealed, which are writing, which have not begun).
func (g *rankState) partsState(v uint64) string {
	return partsState(g.recs, g.Group, v, g.Ranks)
}

// setBase notes that the rank's part of version v diffs against version base.
func (g *rankState) setBase(v, base uint64) {
	g.mu.Lock()
	g.bases[v] = base
	g.mu.Unlock()
}

// baseOf is the version the rank's part of version v diffs against (0: none, or no part
// begun).
func (g *rankState) baseOf(v uint64) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bases[v]
}

// forgetBase drops the base of the part of version v (the part is sealed).
func (g *rankState) forgetBase(v uint64) {
	g.mu.Lock()
	delete(g.bases, v)
	g.mu.Unlock()
}

// ownedPaths is a copy of the set of paths the rank owns.
func (g *rankState) ownedPaths() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.own)
}

// addOwned adds paths to the files the rank owns, and says whether that grew them: the
// scoped version is then dropped and the list kept in the cache directory (the
// materialized copy, whose caller invalidates it, must take the new files up).
func (g *rankState) addOwned(paths []string) (grew bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.own == nil {
		g.own, grew = map[string]bool{}, true
	}
	for _, p := range paths {
		if !g.own[p] {
			g.own[p], grew = true, true
		}
	}
	if grew {
		g.scopedOf, g.scoped = nil, nil
		g.saveOwned()
	}
	return grew
}

// saveOwned writes the list of owned paths (a failure costs a rebuild of the copy at the
// next run, nothing else). g.mu is held.
func (g *rankState) saveOwned() {
	paths := slices.Sorted(maps.Keys(g.own))
	data, _ := json.Marshal(paths)
	tmp := g.ownFile + ".tmp"
	err := os.WriteFile(tmp, data, 0o600)
	if err == nil {
		err = os.Rename(tmp, g.ownFile)
	}
	if err != nil {
		g.log.Warn("writer group: the list of owned files not kept", "err", err)
	}
}
