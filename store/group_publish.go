package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// The publisher's side of a writer group (group.go): collecting the parts, sealing them as
// one version, and the records' clean-up.

// groupPublisher is the publisher's side of the store's writer groups: it reads every
// group's records on the backend, collects and checks the parts, refuses versions, cleans
// the records up, and tells gc what unpublished parts need. (A rank's side is rankState,
// group.go.)
type groupPublisher struct {
	root string
	be   *backendCaps
	log  *slog.Logger
	// st is the store, for the versions (highest, Latest, loadVersion) and the objects
	// (liveSetWhole).
	st *Store
}

// records returns the store's backend as a holder of group records.
func (p *groupPublisher) records() (Records, error) {
	if gr := p.be.records; gr != nil {
		return gr, nil
	}
	return nil, fmt.Errorf("store %s: %w", p.root, ErrGroupUnsupported)
}

// listRecords lists the parsed records of group ("": every group).
func listRecords(gr Records, group string) ([]recordKey, error) {
	names, err := gr.ListRecords(RecordGroup)
	if err != nil {
		return nil, err
	}
	var keys []recordKey
	for _, n := range names {
		if k, ok := parseRecordName(n); ok && (group == "" || k.group == group) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// rankList is "rank 1" or "ranks 1, 3".
func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	if len(ranks) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}

// collectParts reads and checks the parts of version v of group, one per rank 0..ranks-1,
// whose base must be latest.
func (p *groupPublisher) collectParts(gr Records, group string, v uint64, ranks int, latest uint64) ([]*partRecord, error) {
	keys, err := listRecords(gr, group)
	if err != nil {
		return nil, fmt.Errorf("publish version %d of group %s: %w", v, group, err)
	}
	parts := make([]*partRecord, ranks)
	open := map[int]bool{}
	elsewhere := map[int][]uint64{} // rank -> other unpublished versions it has records of
	for _, k := range keys {
		switch {
		case k.kind == recordRefused:
			continue
		case k.v != v:
			if k.v > latest && k.rank < ranks {
				elsewhere[k.rank] = append(elsewhere[k.rank], k.v)
			}
			continue
		case k.rank >= ranks:
			return nil, refusal(RefusedMismatch, []int{k.rank}, fmt.Errorf("publish version %d of group %s: rank %d has a %s record of it, but the group has %d ranks (0..%d): %w",
				v, group, k.rank, k.kind, ranks, ranks-1, ErrGroupMismatch))
		case k.kind == recordOpen:
			open[k.rank] = true
			continue
		}
		name := recordName(k.group, k.v, k.rank, k.kind)
		data, err := gr.GetRecord(RecordGroup, name)
		if err != nil {
			return nil, fmt.Errorf("publish version %d of group %s: rank %d's part: %w", v, group, k.rank, err)
		}
		rec, err := decodePart(data, k)
		if err != nil {
			return nil, refusal(RefusedDamaged, []int{k.rank}, fmt.Errorf("publish version %d of group %s: rank %d's part record groups/%s: %w", v, group, k.rank, name, err))
		}
		if rec.Ranks != ranks {
			return nil, refusal(RefusedMismatch, []int{k.rank}, fmt.Errorf("publish version %d of group %s: rank %d wrote its part for a group of %d ranks, the publisher's has %d: %w",
				v, group, k.rank, rec.Ranks, ranks, ErrGroupMismatch))
		}
		if rec.Base != latest {
			return nil, refusal(RefusedMismatch, []int{k.rank}, fmt.Errorf("publish version %d of group %s: rank %d diffed its files against version %d, but the latest version is %d: rank %d must write its part again: %w",
				v, group, k.rank, rec.Base, latest, k.rank, ErrGroupMismatch))
		}
		parts[k.rank] = rec
	}
	var missing, other []int
	var why []string
	var also []uint64
	for r, p := range parts {
		if p != nil {
			continue
		}
		if vs := elsewhere[r]; len(vs) > 0 && !open[r] {
			slices.Sort(vs)
			other = append(other, r)
			also = append(also, vs...)
			why = append(why, fmt.Sprintf("rank %d wrote version %d", r, vs[0]))
			continue
		}
		missing = append(missing, r)
		if open[r] {
			why = append(why, fmt.Sprintf("rank %d is writing", r))
		}
	}
	if len(other) > 0 {
		slices.Sort(also)
		return nil, &groupRefusal{kind: RefusedMismatch, ranks: other, also: slices.Compact(also), err: fmt.Errorf("publish version %d of group %s: %s sealed no part of it (%s): %w",
			v, group, rankList(other), strings.Join(why, "; "), ErrGroupMismatch)}
	}
	if len(missing) > 0 {
		detail := ""
		if len(why) > 0 {
			detail = " (" + strings.Join(why, "; ") + ")"
		}
		return nil, fmt.Errorf("publish version %d of group %s: %s of %d sealed no part yet%s: %w",
			v, group, rankList(missing), ranks, detail, ErrGroupIncomplete)
	}
	return parts, nil
}

// PublishGroup seals version v of writer group group (of ranks ranks) from its ranks'
// parts, as one manifest written by the store's writer (group.go): the version appears
// whole or not at all. It refuses, publishing nothing, a version with a rank's part
// missing (ErrGroupIncomplete), ranks that disagree on the version, on W or on the base
// (ErrGroupMismatch), a path two ranks wrote (ErrGroupConflict), a damaged part, one
// naming an object that is not stored, or one whose files do not hash to their recorded
// SHA-256 (ErrCorrupt: every file is read once, group_check.go); each error names the ranks. Once the
// version is sealed, the group's records of it and of every older version are deleted.
func (s *Store) PublishGroup(group string, v uint64, ranks int) (VersionInfo, error) {
	if err := s.checkOpen(); err != nil {
		return VersionInfo{}, err
	}
	if s.readOnly || s.groups.rank != nil {
		return VersionInfo{}, fmt.Errorf("publish version %d of group %s: only the store's writer publishes: %w", v, group, ErrGroupRank)
	}
	if err := (Rank{Group: group, Ranks: ranks}).check(); err != nil {
		return VersionInfo{}, fmt.Errorf("publish version %d: %w", v, err)
	}
	if err := checkVersionNumber(v); err != nil {
		return VersionInfo{}, fmt.Errorf("publish: %w", err)
	}
	gr, err := s.groups.publisher.records()
	if err != nil {
		return VersionInfo{}, err
	}
	if err := s.versions.checkAbove(v); err != nil {
		return VersionInfo{}, fmt.Errorf("publish group %s: %w", group, err)
	}
	if ref, err := readRefusal(gr, group, v); err != nil {
		return VersionInfo{}, fmt.Errorf("publish version %d of group %s: %w", v, group, err)
	} else if ref != nil {
		return VersionInfo{}, fmt.Errorf("publish: %w", refusalErr(ref))
	}
	latest, _ := s.Latest()
	parts, err := s.groups.publisher.collectParts(gr, group, v, ranks, latest)
	if err != nil {
		return VersionInfo{}, err
	}
	w, err := s.NewVersion(v)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("publish group %s: %w", group, err)
	}
	// The publisher diffs nothing: bringing its copy forward (a whole checkpoint's writes,
	// the first time a rebuild) would only delay the next version's publish.
	w.noMaterialize = true
	ok := false
	defer func() {
		if !ok {
			w.Abort()
		}
	}()
	if err := w.takeParts(group, parts); err != nil {
		return VersionInfo{}, err
	}
	if err := w.checkPartFiles(group, parts); err != nil {
		return VersionInfo{}, err
	}
	info, err := w.Seal()
	if err != nil {
		if errors.Is(err, errInjected) {
			ok = true // as if the process died here: nothing runs after
		}
		return VersionInfo{}, fmt.Errorf("publish version %d of group %s: %w", v, group, err)
	}
	ok = true
	s.groups.publisher.clean(gr, group, v)
	s.log.Info("writer group: version published", "group", group, "version", v, "ranks", ranks)
	return info, nil
}

// takeParts fills the publisher's Writer with the parts' files, directories and created
// objects, refusing a path of two ranks and an object that is not stored.
func (w *Writer) takeParts(group string, parts []*partRecord) error {
	owner := map[string]int{}    // file path -> rank
	dirOwner := map[string]int{} // directory path -> rank
	w.mu.Lock()
	for _, p := range parts {
		for i := range p.Files {
			f := &p.Files[i]
			if r, ok := owner[f.Path]; ok {
				w.mu.Unlock()
				return refusal(RefusedConflict, []int{r, p.Rank}, fmt.Errorf("publish version %d of group %s: file %s is written by rank %d and by rank %d: %w", w.v, group, f.Path, r, p.Rank, ErrGroupConflict))
			}
			owner[f.Path] = p.Rank
			w.files[f.Path] = f
		}
		for _, d := range p.Dirs {
			if mode, ok := w.dirs[d.Path]; ok && mode != d.Mode {
				w.mu.Unlock()
				return refusal(RefusedConflict, []int{dirOwner[d.Path], p.Rank}, fmt.Errorf("publish version %d of group %s: directory %s has mode %o in rank %d's part and %o in rank %d's: %w",
					w.v, group, d.Path, mode, dirOwner[d.Path], d.Mode, p.Rank, ErrGroupConflict))
			}
			if _, ok := dirOwner[d.Path]; !ok {
				dirOwner[d.Path] = p.Rank
			}
			w.dirs[d.Path] = d.Mode
		}
		for _, o := range p.Objects {
			w.created[o.ID] = o.Size
		}
	}
	w.mu.Unlock()
	for d, rd := range dirOwner {
		if rf, ok := owner[d]; ok {
			return refusal(RefusedConflict, []int{rf, rd}, fmt.Errorf("publish version %d of group %s: %s is a file of rank %d and a directory of rank %d: %w", w.v, group, d, rf, rd, ErrGroupConflict))
		}
	}
	// The ranks' pack indexes: loaded (their objects are found in their packs) and named in
	// the manifest.
	var indexes []string
	for _, p := range parts {
		indexes = append(indexes, p.Indexes...)
	}
	if len(indexes) > 0 {
		if err := w.s.be.loadIndexes(indexes); err != nil {
			return fmt.Errorf("publish version %d of group %s: %w", w.v, group, err)
		}
		w.mu.Lock()
		w.indexes = mergeIndexNames(indexes)
		w.mu.Unlock()
	}
	// Every object a part names must be stored (held first: a sweep spares what is held).
	// One in a pack of an index no part names now (a part of a version refused or
	// published before) is looked for again after every index is read once.
	reloaded := false
	for _, p := range parts {
		refs := map[ID]bool{}
		manifestRoots(&manifest{Files: p.Files}, refs)
		for id := range refs {
			w.hold(id)
			if !reloaded && !w.s.ingest.exists(id) {
				reloaded = true
				if err := w.s.be.reloadIndexes(); err != nil {
					return fmt.Errorf("publish version %d of group %s: %w", w.v, group, err)
				}
			}
			if !w.s.ingest.exists(id) && !w.s.groups.publisher.existsElsewhere(id) {
				return refusal(RefusedDamaged, []int{p.Rank}, fmt.Errorf("publish version %d of group %s: rank %d's part names object %s, which is not stored: %w", w.v, group, p.Rank, id, ErrCorrupt))
			}
		}
	}
	return nil
}

// existsElsewhere asks the backend itself whether object id is stored, where its StatObject
// answers from what this process knows (RemoteStat): a rank in another process put it.
func (p *groupPublisher) existsElsewhere(id ID) bool {
	rs := p.be.remoteStat
	if rs == nil {
		return false
	}
	_, err := rs.StatRemote(id)
	return err == nil
}

// PublishGroupWait is PublishGroup, tried again every poll while some rank's part is
// missing, until ctx ends (its error then wraps the last ErrGroupIncomplete, naming the
// ranks still missing). Every other refusal returns at once.
func (s *Store) PublishGroupWait(ctx context.Context, group string, v uint64, ranks int, poll time.Duration) (VersionInfo, error) {
	if poll <= 0 {
		poll = time.Second
	}
	for {
		info, err := s.PublishGroup(group, v, ranks)
		if !errors.Is(err, ErrGroupIncomplete) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return VersionInfo{}, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// PublishReady publishes, in order, every version of group whose ranks have all sealed their
// parts, and stops at the first that lacks one (a publisher's daemon calls it as it polls).
// A version it cannot publish for a reason that waiting cannot cure (ranks that disagree,
// a path of two ranks, a damaged part) it refuses: a refusal record names the ranks and the
// reason, its parts and markers are deleted, its ranks' waits fail (ErrGroupRefused), and
// the next versions are looked at. It returns what it published and the refusals (each
// once: a refused version is passed over afterwards, its late records deleted); an error
// (the records cannot be read, a seal fails) ends it.
func (s *Store) PublishReady(group string, ranks int) (published []VersionInfo, refused []error, err error) {
	gr, err := s.groups.publisher.records()
	if err != nil {
		return nil, nil, err
	}
	keys, err := listRecords(gr, group)
	if err != nil {
		return nil, nil, fmt.Errorf("publish group %s: %w", group, err)
	}
	top, _ := s.versions.highest()
	isRefused := map[uint64]bool{}
	for _, k := range keys {
		if k.kind == recordRefused {
			isRefused[k.v] = true
		}
	}
	var pending []uint64
	late := map[uint64]bool{}
	for _, k := range keys {
		switch {
		case k.v <= top || k.kind == recordRefused:
		case isRefused[k.v]:
			late[k.v] = true // a rank sealed or began it after the refusal
		case k.kind == recordPart:
			pending = append(pending, k.v)
		}
	}
	for v := range late {
		if err := s.groups.publisher.dropVersionRecords(gr, group, v); err != nil {
			s.log.Warn("writer group: records of a refused version not deleted", "group", group, "version", v, "err", err)
		}
	}
	slices.Sort(pending)
	for _, v := range slices.Compact(pending) {
		if isRefused[v] {
			continue
		}
		info, err := s.PublishGroup(group, v, ranks)
		if errors.Is(err, ErrGroupIncomplete) {
			break
		}
		var ref *groupRefusal
		if errors.As(err, &ref) {
			for _, rv := range append([]uint64{v}, ref.also...) {
				if isRefused[rv] {
					continue
				}
				if rerr := s.groups.publisher.refuseVersion(gr, group, ranks, rv, ref.kind, ref.ranks, err.Error()); rerr != nil {
					return published, refused, rerr
				}
				isRefused[rv] = true
			}
			refused = append(refused, err)
			continue
		}
		if err != nil {
			return published, refused, err
		}
		published = append(published, info)
	}
	return published, refused, nil
}

// AbortGroupVersion deletes every record of version v of group: its parts, open markers and
// refusal (the number may be written again).
// The objects only they named go at the next sweep (gc). A rank still writing v fails at its
// SealPart only if it sealed before the abort; use it for a version that will not complete.
func (s *Store) AbortGroupVersion(group string, v uint64) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if s.readOnly || s.groups.rank != nil {
		return fmt.Errorf("abort version %d of group %s: only the store's writer aborts: %w", v, group, ErrGroupRank)
	}
	gr, err := s.groups.publisher.records()
	if err != nil {
		return err
	}
	keys, err := listRecords(gr, group)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.v == v {
			if err := gr.DeleteRecord(RecordGroup, recordName(k.group, k.v, k.rank, k.kind)); err != nil {
				return err
			}
		}
	}
	return nil
}

// clean deletes the records of group ("": every group) of versions up to v:
// they can never be published (a version is never sealed twice, nor below the latest).
// Failures are logged: a record left is cleaned by the next publish or sweep.
func (p *groupPublisher) clean(gr Records, group string, v uint64) {
	keys, err := listRecords(gr, group)
	if err != nil {
		p.log.Warn("writer group: records not cleaned", "err", err)
		return
	}
	n := 0
	for _, k := range keys {
		if k.v > v {
			continue
		}
		if err := gr.DeleteRecord(RecordGroup, recordName(k.group, k.v, k.rank, k.kind)); err != nil {
			p.log.Warn("writer group: record not deleted", "err", err)
			continue
		}
		n++
	}
	if n > 0 {
		p.log.Debug("writer group: records of past versions deleted", "group", group, "upto", v, "records", n)
	}
}

// cleanStale deletes the writer groups' records that can never be published
// (of versions up to the highest taken): the writer's sweep calls it.
func (p *groupPublisher) cleanStale() {
	if gr, err := p.records(); err == nil {
		top, _ := p.st.versions.highest()
		p.clean(gr, "", top)
	}
}

// groupPendingError is a sweep's reason to delete nothing: a rank is writing objects no
// record names yet, or a part record cannot be read. It counts as errUnreadableManifests
// (what the store needs is unknown), which every sweep's caller logs and passes over.
type groupPendingError struct{ msg string }

func (e *groupPendingError) Error() string        { return e.msg }
func (e *groupPendingError) Is(target error) bool { return target == errUnreadableManifests }

// roots adds to roots the objects named by the parts that may still be published
// (versions above every version taken, diffed against the latest). writing (empty: none)
// says that a rank is writing (an open marker without its part): objects nothing names yet
// may be its. A groupPendingError says that a part cannot be read. A store without group
// records has none.
func (p *groupPublisher) roots(roots map[ID]bool) (writing string, err error) {
	gr, err := p.records()
	if err != nil {
		return "", nil
	}
	top, _ := p.st.versions.highest()
	latest, _ := p.st.Latest()
	keys, err := listRecords(gr, "")
	if err != nil {
		return "", &groupPendingError{fmt.Sprintf("writer group records cannot be listed: %v", err)}
	}
	parts := map[recordKey]bool{}
	refused := map[recordKey]bool{} // by group and version
	for _, k := range keys {
		switch k.kind {
		case recordPart:
			parts[recordKey{k.group, k.v, k.rank, recordOpen}] = true
		case recordRefused:
			refused[recordKey{group: k.group, v: k.v}] = true
		}
	}
	for _, k := range keys {
		if k.v <= top || refused[recordKey{group: k.group, v: k.v}] {
			continue // cannot be published: the next publish or sweep deletes it
		}
		name := recordName(k.group, k.v, k.rank, k.kind)
		if k.kind == recordOpen {
			if !parts[k] && writing == "" {
				writing = fmt.Sprintf("rank %d of writer group %s is writing version %d (groups/%s): its objects are not named yet", k.rank, k.group, k.v, name)
			}
			continue
		}
		data, err := gr.GetRecord(RecordGroup, name)
		if err != nil {
			return "", &groupPendingError{fmt.Sprintf("writer group part groups/%s: %v", name, err)}
		}
		rec, err := decodePart(data, k)
		if err != nil {
			return "", &groupPendingError{fmt.Sprintf("writer group part groups/%s: %v (delete it with AbortGroupVersion)", name, err)}
		}
		if rec.Base != latest {
			continue // diffed against an older version: it cannot be published
		}
		manifestRoots(&manifest{Files: rec.Files}, roots)
	}
	return writing, nil
}

// droppedObjects is every object the versions drop need, through delta bases: what a gc
// may delete while a writer group's rank writes objects that nothing names yet (those are
// new, so never among these; one the rank found stored and named instead is caught by the
// publisher's check that every object of a part is stored). nil if any cannot be read.
func (p *groupPublisher) droppedObjects(drop []VersionInfo) map[ID]bool {
	roots := map[ID]bool{}
	for _, info := range drop {
		ver, err := p.st.versions.loadVersion(info.Number)
		if err != nil {
			return nil
		}
		manifestRoots(ver.m, roots)
	}
	objs, err := p.st.collector.liveSetWhole(roots, nil)
	if err != nil {
		return nil
	}
	return objs
}
