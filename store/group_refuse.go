package store

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/weightfs/weightfs/store/format"
)

// Refusals (docs/format.md Part I §9): when the publisher refuses a version for a reason
// that waiting cannot cure (two ranks wrote one file, ranks disagree on the version, on W or
// on the base, a damaged part), it writes a refusal record, groups/NAME/vNNNNNN/refused, and
// deletes the version's parts and open markers. A rank waiting on the version
// (WaitPublished) then fails with ErrGroupRefused and the publisher's reason, and a rank
// that begins the version afterwards (NewPart) fails at once: the number is not used by the
// group again (the group writes its next save under a higher one). The record goes with
// the group's other records once a later version is published (the clean-up of §9), or
// with AbortGroupVersion.

// The kinds of refusal (the record's "kind"); the record's bytes are format/group.go's.
const (
	RefusedConflict = format.RefusedConflict // two ranks wrote one path
	RefusedMismatch = format.RefusedMismatch // ranks disagree on the version number, W or the base
	RefusedDamaged  = format.RefusedDamaged  // a part record fails its checks, or names a missing object
	RefusedAborted  = format.RefusedAborted  // AbortGroupVersion: an operator ended the version
)

// refusalRecord is the JSON content of a refusal record.
type refusalRecord = format.RefusalRecord

func encodeRefusal(rec *refusalRecord) ([]byte, error) { return format.EncodeRefusal(rec) }

// decodeRefusal checks a refusal record's framing and JSON (strictly) against its name.
func decodeRefusal(b []byte, key recordKey) (*refusalRecord, error) {
	return format.DecodeRefusal(b, key.format())
}

// refusalErr is the error a rank gets for a refused version.
func refusalErr(rec *refusalRecord) error {
	return fmt.Errorf("version %d of group %s was refused by its publisher (%s): %s: %w", rec.Version, rec.Group, rec.Writer, rec.Reason, ErrGroupRefused)
}

// readRefusal returns version v's refusal record of group, or nil if it has none. A record
// that cannot be read is an error; one that fails its checks refuses the version too (its
// error says why).
func readRefusal(gr Records, group string, v uint64) (*refusalRecord, error) {
	key := recordKey{group, v, -1, recordRefused}
	data, err := gr.GetRecord(RecordGroup, recordName(group, v, -1, recordRefused))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec, err := decodeRefusal(data, key)
	if err != nil {
		return &refusalRecord{Group: group, Version: v, Ranks: 1, Kind: RefusedDamaged, Blamed: []int{},
			Reason: fmt.Sprintf("its refusal record cannot be read: %v", err), Writer: "unknown"}, nil
	}
	return rec, nil
}

// groupRefusal is a publish error that waiting cannot cure: PublishReady refuses the version
// (and the versions in also, the other numbers that ranks wrote) with a refusal record.
type groupRefusal struct {
	kind  string
	ranks []int
	also  []uint64
	err   error
}

func (e *groupRefusal) Error() string { return e.err.Error() }
func (e *groupRefusal) Unwrap() error { return e.err }

// refusal marks err as a refusal of kind naming ranks.
func refusal(kind string, ranks []int, err error) error {
	return &groupRefusal{kind: kind, ranks: ranks, err: err}
}

// refuseVersion writes version v's refusal record and deletes its other records. The
// record goes first: a rank that finds its part gone finds the reason.
func (p *groupPublisher) refuseVersion(gr Records, group string, ranks int, v uint64, kind string, blamed []int, reason string) error {
	blamed = slices.Clone(blamed)
	slices.Sort(blamed)
	blamed = slices.Compact(blamed)
	if blamed == nil {
		blamed = []int{}
	}
	rec := &refusalRecord{Group: group, Version: v, Ranks: ranks, Kind: kind, Blamed: blamed, Reason: reason, Writer: writerName()}
	data, err := encodeRefusal(rec)
	if err != nil {
		return err
	}
	if err := gr.PutRecord(RecordGroup, recordName(group, v, -1, recordRefused), data); err != nil {
		return fmt.Errorf("refuse version %d of group %s: %w", v, group, err)
	}
	p.log.Info("writer group: version refused", "group", group, "version", v, "kind", kind,
		"ranks", rankListOrNone(blamed), "reason", reason)
	return p.dropVersionRecords(gr, group, v)
}

// dropVersionRecords deletes version v's parts and open markers (not its refusal).
func (p *groupPublisher) dropVersionRecords(gr Records, group string, v uint64) error {
	keys, err := listRecords(gr, group)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.v == v && k.kind != recordRefused {
			if err := gr.DeleteRecord(RecordGroup, recordName(k.group, k.v, k.rank, k.kind)); err != nil {
				return err
			}
		}
	}
	return nil
}

func rankListOrNone(ranks []int) string {
	if len(ranks) == 0 {
		return "none"
	}
	return rankList(ranks)
}

// partsState describes version v's records for people: which ranks sealed a part, which are
// writing, which have nothing (a rank waiting on the publisher says it when it gives up).
func partsState(gr Records, group string, v uint64, ranks int) string {
	keys, err := listRecords(gr, group)
	if err != nil {
		return fmt.Sprintf("the records cannot be listed: %v", err)
	}
	sealed, writing := map[int]bool{}, map[int]bool{}
	for _, k := range keys {
		if k.v != v {
			continue
		}
		switch k.kind {
		case recordPart:
			sealed[k.rank] = true
		case recordOpen:
			writing[k.rank] = true
		}
	}
	var s, w, none []int
	for r := range ranks {
		switch {
		case sealed[r]:
			s = append(s, r)
		case writing[r]:
			w = append(w, r)
		default:
			none = append(none, r)
		}
	}
	var out []string
	if len(s) > 0 {
		out = append(out, rankList(s)+" sealed")
	}
	if len(w) > 0 {
		out = append(out, rankList(w)+" writing")
	}
	if len(none) > 0 {
		out = append(out, rankList(none)+" not begun")
	}
	return strings.Join(out, ", ")
}
