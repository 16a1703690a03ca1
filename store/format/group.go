package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The records of a writer group (docs/format.md Part I §9 has them byte by byte): a rank's
// part record and open marker, and the publisher's refusal record, all framed alike:
//
//	0     4  magic "WFSP" (part record, open marker) or "WFSR" (refusal record)
//	4     2  the record's format version, u16 LE (1)
//	6     2  zero
//	8     8  JSON length L, u64 LE
//	16    L  the record as JSON (PartRecord, RefusalRecord)
//	16+L  4  CRC-32C of every preceding byte, u32 LE
//
// They live at groups/NAME/vNNNNNN/rank-R.part (the rank's sealed part),
// groups/NAME/vNNNNNN/rank-R.open (the rank has begun the version and may be writing
// objects that nothing names yet: sweeps wait) and groups/NAME/vNNNNNN/refused. The same
// framing as a manifest: a reader that knows one knows the other.
const (
	PartMagic         = "WFSP"
	PartFormatVersion = 1
	// RecordHeadLen is the framing's head, before the JSON.
	RecordHeadLen = 16
	// MaxPartLen bounds a record's JSON, as MaxManifestLen bounds a manifest's.
	MaxPartLen = MaxManifestLen
	// MaxRanks is the largest number of ranks a writer group may have.
	MaxRanks = 4096

	RefusalMagic         = "WFSR"
	RefusalFormatVersion = 1
)

// Record kinds: the suffix of a record's name.
const (
	RecordPart = "part"
	RecordOpen = "open"
	// RecordRefused is the publisher's refusal of a version: its name is
	// NAME/vNNNNNN/refused, of no rank (RecordKey.Rank -1).
	RecordRefused = "refused"
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

// PartRecord is the JSON content of a part record (and, with no files, of an open marker).
type PartRecord struct {
	Group   string `json:"group"`
	Version uint64 `json:"version"`
	Rank    int    `json:"rank"`
	Ranks   int    `json:"ranks"`
	// Base is the version the rank diffed against: the latest sealed one when it began (0:
	// none). The publisher takes a part only if Base is still the latest.
	Base   uint64         `json:"base"`
	Writer string         `json:"writer"` // "host pid N", for people
	Dirs   []ManifestDir  `json:"dirs"`   // directories the rank added (not those implied)
	Files  []ManifestFile `json:"files"`  // the rank's files, as the manifest will hold them
	// Objects are the objects the rank stored for this part, with their stored sizes (the
	// manifest's new_objects and new_object_bytes count them).
	Objects []PartObject `json:"objects"`
	// Indexes are the pack indexes the rank wrote for its objects (store format 3): the
	// publisher loads them, and names them in the version's manifest.
	Indexes []string `json:"indexes,omitempty"`
}

// PartObject is an object a part names, with its stored size.
type PartObject struct {
	ID   ID    `json:"id"`
	Size int64 `json:"size"`
}

// RecordName is a record's name below groups/: NAME/vNNNNNN/rank-R.KIND, or
// NAME/vNNNNNN/refused.
func RecordName(group string, v uint64, rank int, kind string) string {
	if kind == RecordRefused {
		return fmt.Sprintf("%s/%s/%s", group, ManifestName(v), RecordRefused)
	}
	return fmt.Sprintf("%s/%s/rank-%d.%s", group, ManifestName(v), rank, kind)
}

// RecordKey is a parsed record name.
type RecordKey struct {
	Group   string
	Version uint64
	Rank    int // -1: the refusal record
	Kind    string
}

// ParseRecordName is the inverse of RecordName; ok is false for any other name (temporary
// files, names of another program).
func ParseRecordName(name string) (RecordKey, bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || CheckGroupName(parts[0]) != nil {
		return RecordKey{}, false
	}
	v, ok := ParseManifestName(parts[1])
	if !ok {
		return RecordKey{}, false
	}
	if parts[2] == RecordRefused {
		return RecordKey{parts[0], v, -1, RecordRefused}, true
	}
	base, kind, ok := strings.Cut(parts[2], ".")
	if !ok || (kind != RecordPart && kind != RecordOpen) || !strings.HasPrefix(base, "rank-") {
		return RecordKey{}, false
	}
	r, err := strconv.Atoi(base[len("rank-"):])
	if err != nil || r < 0 || r >= MaxRanks || strconv.Itoa(r) != base[len("rank-"):] {
		return RecordKey{}, false
	}
	return RecordKey{parts[0], v, r, kind}, true
}

// EncodePart returns the record file bytes of rec.
func EncodePart(rec *PartRecord) ([]byte, error) {
	js, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode part record: %w", err)
	}
	return FrameRecord(PartMagic, PartFormatVersion, js), nil
}

// FrameRecord wraps a record's JSON in the framing of a writer group's records: magic,
// format version, zero, length, JSON, CRC-32C.
func FrameRecord(magic string, version uint16, js []byte) []byte {
	b := make([]byte, RecordHeadLen, RecordHeadLen+len(js)+4)
	copy(b, magic)
	binary.LittleEndian.PutUint16(b[4:], version)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(js)))
	b = append(b, js...)
	return binary.LittleEndian.AppendUint32(b, CRC32C(b))
}

// UnframeRecord checks the framing of a record (what: "part record", "refusal record") and
// returns its JSON.
func UnframeRecord(b []byte, magic string, version uint16, what string) ([]byte, error) {
	if len(b) < 4 || string(b[:4]) != magic {
		return nil, fmt.Errorf("no %s magic: %w", magic, ErrCorrupt)
	}
	if len(b) < RecordHeadLen+4 {
		return nil, fmt.Errorf("%s of %d bytes is truncated: %w", what, len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return nil, fmt.Errorf("%s format version %d (this program reads %d): %w", what, v, version, ErrUnsupportedVersion)
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 {
		return nil, fmt.Errorf("%s: reserved bytes are not zero: %w", what, ErrCorrupt)
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if n > MaxPartLen || uint64(len(b)) != RecordHeadLen+n+4 {
		return nil, fmt.Errorf("%s JSON length %d in a %d-byte file: %w", what, n, len(b), ErrCorrupt)
	}
	if got, want := CRC32C(b[:len(b)-4]), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("%s CRC-32C %08x, stored %08x: %w", what, got, want, ErrCorrupt)
	}
	return b[RecordHeadLen : len(b)-4], nil
}

// DecodePart checks magic, version, length and CRC, decodes the JSON strictly and checks it
// against the name it was stored under (key) and what a manifest requires of its files.
func DecodePart(b []byte, key RecordKey) (*PartRecord, error) {
	js, err := UnframeRecord(b, PartMagic, PartFormatVersion, "part record")
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var rec PartRecord
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("part record JSON: %v: %w", err, ErrCorrupt)
	}
	if dec.More() {
		return nil, fmt.Errorf("part record JSON has trailing data: %w", ErrCorrupt)
	}
	if err := rec.Check(key); err != nil {
		return nil, fmt.Errorf("part record: %w: %w", err, ErrCorrupt)
	}
	return &rec, nil
}

// Check validates a decoded record: it says what its name says, and its files are files a
// manifest may hold.
func (rec *PartRecord) Check(key RecordKey) error {
	if rec.Group != key.Group || rec.Version != key.Version || rec.Rank != key.Rank {
		return fmt.Errorf("it says group %q version %d rank %d, but is stored as %s", rec.Group, rec.Version, rec.Rank,
			RecordName(key.Group, key.Version, key.Rank, key.Kind))
	}
	if rec.Ranks < 1 || rec.Ranks > MaxRanks || rec.Rank >= rec.Ranks {
		return fmt.Errorf("rank %d of %d ranks", rec.Rank, rec.Ranks)
	}
	if err := CheckVersionNumber(rec.Version); err != nil {
		return err
	}
	if rec.Base >= rec.Version {
		return fmt.Errorf("base version %d is not below version %d", rec.Base, rec.Version)
	}
	if key.Kind == RecordOpen {
		if len(rec.Files) > 0 || len(rec.Dirs) > 0 || len(rec.Objects) > 0 {
			return fmt.Errorf("an open marker with files")
		}
		return nil
	}
	// A manifest of the part alone must be valid: paths clean and unique, files whole.
	m := &Manifest{Version: rec.Version, Dirs: rec.Dirs, Files: rec.Files}
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

// Kinds of refusal (a refusal record's "kind").
const (
	RefusedConflict = "conflict" // two ranks wrote one path
	RefusedMismatch = "mismatch" // ranks disagree on the version number, W or the base
	RefusedDamaged  = "damaged"  // a part record fails its checks, or names a missing object
	RefusedAborted  = "aborted"  // an operator ended the version (store.AbortGroupVersion)
)

// RefusalRecord is the JSON content of a refusal record.
type RefusalRecord struct {
	Group   string `json:"group"`
	Version uint64 `json:"version"`
	Ranks   int    `json:"ranks"`  // W, as the publisher was told it
	Kind    string `json:"kind"`   // one of the Refused* kinds
	Blamed  []int  `json:"blamed"` // the ranks the reason names, sorted (may be empty)
	Reason  string `json:"reason"` // the publisher's error, for people
	Writer  string `json:"writer"` // the publisher, "host pid N"
}

// EncodeRefusal returns the record file bytes of rec.
func EncodeRefusal(rec *RefusalRecord) ([]byte, error) {
	js, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode refusal record: %w", err)
	}
	return FrameRecord(RefusalMagic, RefusalFormatVersion, js), nil
}

// DecodeRefusal checks a refusal record's framing and JSON (strictly) against its name.
func DecodeRefusal(b []byte, key RecordKey) (*RefusalRecord, error) {
	js, err := UnframeRecord(b, RefusalMagic, RefusalFormatVersion, "refusal record")
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var rec RefusalRecord
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("refusal record JSON: %v: %w", err, ErrCorrupt)
	}
	if dec.More() {
		return nil, fmt.Errorf("refusal record JSON has trailing data: %w", ErrCorrupt)
	}
	switch {
	case rec.Group != key.Group || rec.Version != key.Version:
		return nil, fmt.Errorf("refusal record says group %q version %d, but is stored as %s: %w", rec.Group, rec.Version,
			RecordName(key.Group, key.Version, -1, RecordRefused), ErrCorrupt)
	case rec.Ranks < 1 || rec.Ranks > MaxRanks:
		return nil, fmt.Errorf("refusal record of %d ranks: %w", rec.Ranks, ErrCorrupt)
	case !slices.Contains([]string{RefusedConflict, RefusedMismatch, RefusedDamaged, RefusedAborted}, rec.Kind):
		return nil, fmt.Errorf("refusal record of kind %q: %w", rec.Kind, ErrCorrupt)
	}
	for _, r := range rec.Blamed {
		if r < 0 || r >= MaxRanks {
			return nil, fmt.Errorf("refusal record blames rank %d: %w", r, ErrCorrupt)
		}
	}
	return &rec, nil
}
