package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"
)

// A rank's wait ends in success only if the version that appeared holds the rank's part: a
// version of that number may be another group's (a rank started with a mistyped group name
// waits on its own group's number, which the real group publishes) or another writer's. The
// manifest records no group, so the rank checks what matters: every file of its part is in the
// version exactly as its part has it (the whole manifest entry: path, mode, size, SHA-256, the
// objects), and every directory it created, with its mode. Two groups whose ranks wrote the
// very same bytes pass: those files are in the version.

// WaitPublished waits, refreshing the list of versions every poll, until this rank's group
// has published version v (a rank waits so once it sealed its part: DONE's close returns
// then), and returns it. A version v that does not hold this rank's part exactly (another
// group's, a rank started with a mistyped group name) fails it with ErrGroupMismatch, naming
// both groups (checkHolds). It fails with ErrGroupRefused (the publisher's reason, naming the
// ranks) if the publisher refused v, with ErrGroupMismatch if a version above v appeared
// instead, and when ctx ends with ctx's error and what the version's records say (which
// ranks sealed, which are writing, which have not begun).
func (s *Store) WaitPublished(ctx context.Context, v uint64, poll time.Duration) (VersionInfo, error) {
	g := s.groups.rank
	if g == nil {
		return VersionInfo{}, fmt.Errorf("wait for version %d: this store is not open as a rank: %w", v, ErrGroupRank)
	}
	if poll <= 0 {
		poll = time.Second
	}
	var noted time.Time
	for {
		if err := s.Refresh(); err != nil {
			return VersionInfo{}, err
		}
		for _, info := range s.Versions() {
			if info.Number != v {
				continue
			}
			// The number is sealed; it must hold this rank's part (group_holds.go).
			ver, err := s.versions.loadVersion(v)
			if err != nil {
				return VersionInfo{}, fmt.Errorf("%s: version %d appeared, but its manifest cannot be read to check that it holds this rank's part: %w", g.member(), v, err)
			}
			if err := g.checkHolds(ver); err != nil {
				return VersionInfo{}, err
			}
			g.forget(v)
			return info, nil
		}
		if latest, ok := s.Latest(); ok && latest > v {
			return VersionInfo{}, fmt.Errorf("%s: version %d: the group published version %d above it instead: %w", g.member(), v, latest, ErrGroupMismatch)
		}
		// An unreadable refusal is asked again at the next poll (S3 may be away).
		if ref, err := g.refusal(v); err == nil && ref != nil {
			g.forget(v)
			return VersionInfo{}, fmt.Errorf("%s: %w", g.member(), refusalErr(ref))
		}
		// Whoever writes version v meanwhile: named if it publishes v without this rank (a
		// listing of every group's records, at most once a second).
		if time.Since(noted) >= time.Second {
			g.noteOtherGroups(v)
			noted = time.Now()
		}
		select {
		case <-ctx.Done():
			return VersionInfo{}, fmt.Errorf("%s: version %d not published yet (%s): %w", g.member(), v, g.partsState(v), ctx.Err())
		case <-time.After(poll):
		}
	}
}

// sealedPart is what WaitPublished compares a published version with: the files and
// directories of the rank's part of a version, as this process sealed it (or, sealed by an
// earlier process, as its part record says while the record is there).
type sealedPart struct {
	files map[string][]byte // path -> the manifest entry, JSON
	sums  map[string]ID     // path -> SHA-256, for the error
	dirs  map[string]uint32
}

func newSealedPart(rec *partRecord) (*sealedPart, error) {
	p := &sealedPart{files: map[string][]byte{}, sums: map[string]ID{}, dirs: map[string]uint32{}}
	for i := range rec.Files {
		f := &rec.Files[i]
		js, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		p.files[f.Path], p.sums[f.Path] = js, f.SHA256
	}
	for _, d := range rec.Dirs {
		p.dirs[d.Path] = d.Mode
	}
	return p, nil
}

// rememberPart keeps the part this process sealed of version v until its wait ends.
func (g *rankState) rememberPart(v uint64, rec *partRecord) {
	p, err := newSealedPart(rec)
	if err != nil {
		return // read back from the record instead
	}
	g.mu.Lock()
	if g.sealed == nil {
		g.sealed = map[uint64]*sealedPart{}
	}
	g.sealed[v] = p
	g.mu.Unlock()
}

// partOf returns the rank's part of version v: the one this process sealed, else its part
// record. nil, nil: neither is there.
func (g *rankState) partOf(v uint64) (*sealedPart, error) {
	g.mu.Lock()
	p := g.sealed[v]
	g.mu.Unlock()
	if p != nil {
		return p, nil
	}
	name := recordName(g.Group, v, g.Rank.Rank, recordPart)
	data, err := g.recs.GetRecord(RecordGroup, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	key, _ := parseRecordName(name)
	rec, err := decodePart(data, key)
	if err != nil {
		return nil, fmt.Errorf("this rank's part record groups/%s: %w", name, err)
	}
	return newSealedPart(rec)
}

// noteOtherGroups remembers the other groups that have records of version v (a rank waiting
// on v looks at every poll): the group that published v is among them, if it wrote v while
// this rank waited.
func (g *rankState) noteOtherGroups(v uint64) {
	keys, err := listRecords(g.recs, "")
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range keys {
		if k.v != v || k.group == g.Group {
			continue
		}
		if g.others == nil {
			g.others = map[uint64]map[string]bool{}
		}
		if g.others[v] == nil {
			g.others[v] = map[string]bool{}
		}
		g.others[v][k.group] = true
	}
}

// forget drops what the rank kept for its wait on version v (the wait has its answer).
func (g *rankState) forget(v uint64) {
	g.mu.Lock()
	delete(g.sealed, v)
	delete(g.others, v)
	g.mu.Unlock()
}

// checkHolds returns nil if version ver holds the rank's part of it, else an error
// (ErrGroupMismatch) naming the rank's group, the group that published (as far as the
// records seen say), what is missing and what to do.
func (g *rankState) checkHolds(ver *version) error {
	v := ver.m.Version
	part, err := g.partOf(v)
	if err != nil {
		return fmt.Errorf("%s: version %d appeared, but whether it holds this rank's part cannot be told: %w", g.Rank, v, err)
	}
	if part == nil {
		return fmt.Errorf("%s: version %d appeared, but this rank has no sealed part of it to compare (none sealed by this process, and no part record): whether it holds this rank's files cannot be told: %w",
			g.Rank, v, ErrGroupMismatch)
	}
	var why string
	for _, p := range slices.Sorted(maps.Keys(part.files)) {
		f := ver.files[p]
		if f == nil {
			why = fmt.Sprintf("file %s of this rank's part is not in it", p)
			break
		}
		js, err := json.Marshal(f)
		if err != nil || !bytes.Equal(js, part.files[p]) {
			if f.SHA256 != part.sums[p] {
				why = fmt.Sprintf("file %s has other bytes there (SHA-256 %s; this rank's: %s)", p, f.SHA256, part.sums[p])
			} else {
				why = fmt.Sprintf("file %s is stored otherwise there (mode or objects)", p)
			}
			break
		}
	}
	if why == "" {
		for _, d := range slices.Sorted(maps.Keys(part.dirs)) {
			if !slices.Contains(ver.m.Dirs, manifestDir{Path: d, Mode: part.dirs[d]}) {
				why = fmt.Sprintf("directory %s (mode %o) of this rank's part is not in it", d, part.dirs[d])
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%s: version %d was published without this rank's part: %s; %s; this rank's files of version %d are in no version. "+
		"Check that every rank was started with its publisher's --group (this rank's: %s), then write the save again under a version above %d: %w",
		g.Rank, v, why, g.whoPublished(v), v, g.Group, v, ErrGroupMismatch)
}

// whoPublished says, for a rank's error, which group published version v (the other groups
// whose records of v the rank saw while it waited) and what its own group's records of v say.
func (g *rankState) whoPublished(v uint64) string {
	g.noteOtherGroups(v)
	g.mu.Lock()
	others := slices.Sorted(maps.Keys(g.others[v]))
	g.mu.Unlock()
	var by string
	switch len(others) {
	case 0:
		by = "it was published by another group or writer (this rank saw no other group's records of it)"
	case 1:
		by = "it was published by group " + others[0] + " (this rank saw its records of version " + fmt.Sprint(v) + ")"
	default:
		by = "it was published by one of the groups " + strings.Join(others, ", ") + " (this rank saw their records of version " + fmt.Sprint(v) + ")"
	}
	return fmt.Sprintf("%s, not by group %s, whose version %d is not published (%s)", by, g.Group, v, partsState(g.recs, g.Group, v, g.Ranks))
}
