package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Part records of a writer group (docs/format.md Part I §9 has them byte by byte):
//
//	0     4  magic "WFSP"
//	4     2  part record format version, u16 LE (1)
//	6     2  zero
//	8     8  JSON length L, u64 LE
//	16    L  the record as JSON (partRecord below)
//	16+L  4  CRC-32C of every preceding byte, u32 LE
//
// They live at groups/NAME/vNNNNNN/rank-R.part (the rank's sealed part) and
// groups/NAME/vNNNNNN/rank-R.open (the rank has begun the version and may be writing
// objects that nothing names yet: sweeps wait). The same framing as a manifest: a reader
// that knows one knows the other.
const (
	partMagic         = "WFSP"
	partFormatVersion = 1
	partHeadLen       = 16
	// maxPartLen bounds a part record's JSON, as maxManifestLen bounds a manifest's.
	maxPartLen = maxManifestLen
	// MaxRanks is the largest number of ranks a writer group may have.
	MaxRanks = 4096
)

// Record kinds: the suffix of a record's name.
const (
	recordPart = "part"
	recordOpen = "open"
	// recordRefused is the publisher's refusal of a version (group_refuse.go): its name is
	// NAME/vNNNNNN/refused, of no rank (recordKey.rank -1).
	recordRefused = "refused"
)

// groupNameRE is what a group's name may be: it is one element of the records' paths.
var groupNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckGroupName refuses a group name that is not 1 to 64 letters, digits, '.', '_' or
// '-', starting with a letter or digit.
func CheckGroupName(name string) error {
	if !groupNameRE.MatchString(name) {
		return fmt.Errorf("group name %q: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, ErrBadPath)
	}
	return nil
}

// partRecord is the JSON content of a part record (and, with no files, of an open marker).
type partRecord struct {
	Group   string `json:"group"`
	Version uint64 `json:"version"`
	Rank    int    `json:"rank"`
	Ranks   int    `json:"ranks"`
	// Base is the version the rank diffed against: the latest sealed one when it began (0:
	// none). The publisher takes a part only if Base is still the latest.
	Base   uint64         `json:"base"`
	Writer string         `json:"writer"` // "host pid N", for people
	Dirs   []manifestDir  `json:"dirs"`   // directories the rank added (not those implied)
	Files  []manifestFile `json:"files"`  // the rank's files, as the manifest will hold them
	// Objects are the objects the rank stored for this part, with their stored sizes (the
	// manifest's new_objects and new_object_bytes count them).
	Objects []partObject `json:"objects"`
	// Indexes are the pack indexes the rank wrote for its objects (store format 3): the
	// publisher loads them, and names them in the version's manifest.
	Indexes []string `json:"indexes,omitempty"`
}

type partObject struct {
	ID   ID    `json:"id"`
	Size int64 `json:"size"`
}

// recordName is a record's name below groups/: NAME/vNNNNNN/rank-R.KIND.
func recordName(group string, v uint64, rank int, kind string) string {
	if kind == recordRefused {
		return fmt.Sprintf("%s/%s/%s", group, manifestName(v), recordRefused)
	}
	return fmt.Sprintf("%s/%s/rank-%d.%s", group, manifestName(v), rank, kind)
}

// recordKey is a parsed record name.
type recordKey struct {
	group string
	v     uint64
	rank  int
	kind  string
}

// parseRecordName is the inverse of recordName; ok is false for any other name (temporary
// files, names of another program).
func parseRecordName(name string) (recordKey, bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || CheckGroupName(parts[0]) != nil {
		return recordKey{}, false
	}
	v, ok := parseManifestName(parts[1])
	if !ok {
		return recordKey{}, false
	}
	if parts[2] == recordRefused {
		return recordKey{parts[0], v, -1, recordRefused}, true
	}
	base, kind, ok := strings.Cut(parts[2], ".")
	if !ok || (kind != recordPart && kind != recordOpen) || !strings.HasPrefix(base, "rank-") {
		return recordKey{}, false
	}
	r, err := strconv.Atoi(base[len("rank-"):])
	if err != nil || r < 0 || r >= MaxRanks || strconv.Itoa(r) != base[len("rank-"):] {
		return recordKey{}, false
	}
	return recordKey{parts[0], v, r, kind}, true
}

// encodePart returns the record file bytes of rec.
func encodePart(rec *partRecord) ([]byte, error) {
	js, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode part record: %w", err)
	}
	return frameRecord(partMagic, partFormatVersion, js), nil
}

// frameRecord wraps a record's JSON in the framing of part records: magic, format version,
// zero, length, JSON, CRC-32C.
func frameRecord(magic string, version uint16, js []byte) []byte {
	b := make([]byte, partHeadLen, partHeadLen+len(js)+4)
	copy(b, magic)
	binary.LittleEndian.PutUint16(b[4:], version)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(js)))
	b = append(b, js...)
	return binary.LittleEndian.AppendUint32(b, crc32c(b))
}

// unframeRecord checks the framing of a record (what: "part record", "refusal record") and
// returns its JSON.
func unframeRecord(b []byte, magic string, version uint16, what string) ([]byte, error) {
	if len(b) < 4 || string(b[:4]) != magic {
		return nil, fmt.Errorf("no %s magic: %w", magic, ErrCorrupt)
	}
	if len(b) < partHeadLen+4 {
		return nil, fmt.Errorf("%s of %d bytes is truncated: %w", what, len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return nil, fmt.Errorf("%s format version %d (this program reads %d): %w", what, v, version, ErrUnsupportedVersion)
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 {
		return nil, fmt.Errorf("%s: reserved bytes are not zero: %w", what, ErrCorrupt)
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if n > maxPartLen || uint64(len(b)) != partHeadLen+n+4 {
		return nil, fmt.Errorf("%s JSON length %d in a %d-byte file: %w", what, n, len(b), ErrCorrupt)
	}
	if got, want := crc32c(b[:len(b)-4]), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("%s CRC-32C %08x, stored %08x: %w", what, got, want, ErrCorrupt)
	}
	return b[partHeadLen : len(b)-4], nil
}

// decodePart checks magic, version, length and CRC, decodes the JSON strictly and checks it
// against the name it was stored under (key) and what a manifest requires of its files.
func decodePart(b []byte, key recordKey) (*partRecord, error) {
	js, err := unframeRecord(b, partMagic, partFormatVersion, "part record")
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var rec partRecord
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("part record JSON: %v: %w", err, ErrCorrupt)
	}
	if dec.More() {
		return nil, fmt.Errorf("part record JSON has trailing data: %w", ErrCorrupt)
	}
	if err := rec.check(key); err != nil {
		return nil, fmt.Errorf("part record: %w: %w", err, ErrCorrupt)
	}
	return &rec, nil
}

// check validates a decoded record: it says what its name says, and its files are files a
// manifest may hold.
func (rec *partRecord) check(key recordKey) error {
	if rec.Group != key.group || rec.Version != key.v || rec.Rank != key.rank {
		return fmt.Errorf("it says group %q version %d rank %d, but is stored as %s", rec.Group, rec.Version, rec.Rank,
			recordName(key.group, key.v, key.rank, key.kind))
	}
	if rec.Ranks < 1 || rec.Ranks > MaxRanks || rec.Rank >= rec.Ranks {
		return fmt.Errorf("rank %d of %d ranks", rec.Rank, rec.Ranks)
	}
	if err := checkVersionNumber(rec.Version); err != nil {
		return err
	}
	if rec.Base >= rec.Version {
		return fmt.Errorf("base version %d is not below version %d", rec.Base, rec.Version)
	}
	if key.kind == recordOpen {
		if len(rec.Files) > 0 || len(rec.Dirs) > 0 || len(rec.Objects) > 0 {
			return fmt.Errorf("an open marker with files")
		}
		return nil
	}
	// A manifest of the part alone must be valid: paths clean and unique, files whole.
	m := &manifest{Version: rec.Version, Dirs: rec.Dirs, Files: rec.Files}
	if err := m.Validate(); err != nil {
		return err
	}
	for _, o := range rec.Objects {
		if o.ID.IsZero() || o.Size <= 0 {
			return fmt.Errorf("object %s of size %d", o.ID, o.Size)
		}
	}
	return nil
}
