package store

import "github.com/weightfs/weightfs/store/format"

// The records of a writer group (part records, open markers, refusal records): their bytes,
// names and checks are package store/format's (format/group.go; docs/format.md Part I §9).
// This file keeps store's names for them; group*.go read and write them through Records.

const (
	// MaxRanks is the largest number of ranks a writer group may have.
	MaxRanks = format.MaxRanks
	// partHeadLen is the records' framing head, before the JSON.
	partHeadLen = format.RecordHeadLen
)

// Record kinds: the suffix of a record's name.
const (
	recordPart = format.RecordPart
	recordOpen = format.RecordOpen
	// recordRefused is the publisher's refusal of a version (group_refuse.go): its name is
	// NAME/vNNNNNN/refused, of no rank (recordKey.rank -1).
	recordRefused = format.RecordRefused
)

// CheckGroupName refuses a group name that is not 1 to 64 letters, digits, '.', '_' or
// '-', starting with a letter or digit.
func CheckGroupName(name string) error { return format.CheckGroupName(name) }

type (
	partRecord = format.PartRecord
	partObject = format.PartObject
)

// recordName is a record's name below groups/: NAME/vNNNNNN/rank-R.KIND.
func recordName(group string, v uint64, rank int, kind string) string {
	return format.RecordName(group, v, rank, kind)
}

// recordKey is a parsed record name (format.RecordKey, under the names the group's code
// has always used; it is also a map key there).
type recordKey struct {
	group string
	v     uint64
	rank  int
	kind  string
}

func (k recordKey) format() format.RecordKey {
	return format.RecordKey{Group: k.group, Version: k.v, Rank: k.rank, Kind: k.kind}
}

// parseRecordName is the inverse of recordName; ok is false for any other name (temporary
// files, names of another program).
func parseRecordName(name string) (recordKey, bool) {
	k, ok := format.ParseRecordName(name)
	return recordKey{k.Group, k.Version, k.Rank, k.Kind}, ok
}

// encodePart returns the record file bytes of rec.
func encodePart(rec *partRecord) ([]byte, error) { return format.EncodePart(rec) }

// decodePart checks magic, version, length and CRC, decodes the JSON strictly and checks it
// against the name it was stored under (key) and what a manifest requires of its files.
func decodePart(b []byte, key recordKey) (*partRecord, error) {
	return format.DecodePart(b, key.format())
}

// checkPart validates a record about to be written as decodePart checks one read.
func checkPart(rec *partRecord, key recordKey) error { return rec.Check(key.format()) }
