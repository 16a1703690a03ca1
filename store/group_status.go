package store

import (
	"fmt"
	"slices"
)

// What a writer group's records say, for people (`weightfs group status`), and the operator's
// end of a version that cannot complete (`weightfs group abort`). Both work on a store opened
// read-only too: the records are not the writer's files (docs/format.md Part I §9).

// GroupVersionStatus is what the records of one version of a writer group say.
type GroupVersionStatus struct {
	Version uint64
	Ranks   int   // W, as the records say it (0: no record says)
	Sealed  []int // ranks with a part
	Writing []int // ranks with an open marker and no part
	// Taken: the version is at or below the highest version number taken, so its records
	// can never be published (the next publish or sweep deletes them).
	Taken   bool
	Refused *GroupRefusalInfo // the publisher's refusal, nil if none
	Damaged []string          // records that cannot be read, with why
}

// GroupRefusalInfo is a refusal record (docs/format.md Part I §9).
type GroupRefusalInfo struct {
	Kind      string // RefusedConflict, RefusedMismatch, RefusedDamaged or RefusedAborted
	Blamed    []int
	Reason    string
	Publisher string // "host pid N"
}

// GroupStatus lists, by version, the records of writer group group.
func (s *Store) GroupStatus(group string) ([]GroupVersionStatus, error) {
	if err := CheckGroupName(group); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	gr, err := s.groups.publisher.records()
	if err != nil {
		return nil, err
	}
	if s.readOnly {
		if err := s.Refresh(); err != nil {
			return nil, err
		}
	}
	keys, err := listRecords(gr, group)
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", group, err)
	}
	top, _ := s.versions.highest()
	byV := map[uint64]*GroupVersionStatus{}
	var order []uint64
	parts := map[recordKey]bool{}
	for _, k := range keys {
		if k.kind == recordPart {
			parts[recordKey{k.group, k.v, k.rank, recordOpen}] = true
		}
	}
	for _, k := range keys {
		st := byV[k.v]
		if st == nil {
			st = &GroupVersionStatus{Version: k.v, Taken: k.v <= top}
			byV[k.v] = st
			order = append(order, k.v)
		}
		name := recordName(k.group, k.v, k.rank, k.kind)
		switch k.kind {
		case recordRefused:
			ref, err := readRefusal(gr, group, k.v)
			if err != nil {
				st.Damaged = append(st.Damaged, fmt.Sprintf("groups/%s: %v", name, err))
				continue
			}
			st.Refused = &GroupRefusalInfo{Kind: ref.Kind, Blamed: ref.Blamed, Reason: ref.Reason, Publisher: ref.Writer}
			st.Ranks = max(st.Ranks, ref.Ranks)
		case recordOpen:
			if parts[k] {
				continue // the part supersedes it
			}
			st.Writing = append(st.Writing, k.rank)
			if data, err := gr.GetRecord(RecordGroup, name); err == nil {
				if rec, err := decodePart(data, k); err == nil {
					st.Ranks = max(st.Ranks, rec.Ranks)
				}
			}
		case recordPart:
			st.Sealed = append(st.Sealed, k.rank)
			data, err := gr.GetRecord(RecordGroup, name)
			if err == nil {
				var rec *partRecord
				if rec, err = decodePart(data, k); err == nil {
					st.Ranks = max(st.Ranks, rec.Ranks)
				}
			}
			if err != nil {
				st.Damaged = append(st.Damaged, fmt.Sprintf("groups/%s: %v", name, err))
			}
		}
	}
	slices.Sort(order)
	out := make([]GroupVersionStatus, 0, len(order))
	for _, v := range order {
		st := byV[v]
		slices.Sort(st.Sealed)
		slices.Sort(st.Writing)
		out = append(out, *st)
	}
	return out, nil
}

// CancelGroupVersion ends version v of writer group group, which will not complete (a rank
// is gone for good): it writes a refusal record of kind RefusedAborted that blames the ranks
// without a part (ranks, W, as the records say; 0: as the caller gives it) and deletes the
// version's parts and markers. The ranks waiting on v fail (ErrGroupRefused, ECANCELED at the
// mount), the sweeps no longer wait on v's markers, and the group writes its next save under a
// higher number. A version already taken (published, or below the latest) is refused
// (ErrVersionNotAbove). Any process but a rank may call it, the reader of a CLI included:
// a publish that runs at the same moment may still publish v whole (then the record is
// merely cleaned with the others).
func (s *Store) CancelGroupVersion(group string, v uint64, ranks int, why string) error {
	if s.groups.rank != nil {
		return fmt.Errorf("cancel version %d of group %s: a rank does not: %w", v, group, ErrGroupRank)
	}
	sts, err := s.GroupStatus(group)
	if err != nil {
		return err
	}
	var st *GroupVersionStatus
	for i := range sts {
		if sts[i].Version == v {
			st = &sts[i]
		}
	}
	top, _ := s.versions.highest()
	if v <= top {
		return fmt.Errorf("cancel version %d of group %s: version %d is taken (the highest is %d): %w", v, group, v, top, ErrVersionNotAbove)
	}
	if st != nil && st.Ranks > 0 {
		ranks = st.Ranks
	}
	if ranks < 1 || ranks > MaxRanks {
		return fmt.Errorf("cancel version %d of group %s: no record says how many ranks it has; give W: %w", v, group, ErrGroupMismatch)
	}
	var blamed, sealed []int
	if st != nil {
		sealed = st.Sealed
	}
	for r := range ranks {
		if !slices.Contains(sealed, r) {
			blamed = append(blamed, r)
		}
	}
	gr, err := s.groups.publisher.records()
	if err != nil {
		return err
	}
	reason := fmt.Sprintf("aborted by %s: %s had sealed no part", writerName(), rankListOrNone(blamed))
	if why != "" {
		reason += " (" + why + ")"
	}
	return s.groups.publisher.refuseVersion(gr, group, ranks, v, RefusedAborted, blamed, reason)
}
