package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store/pack"
)

// Manifest files, versions/vNNNNNN (docs/format.md (Part I) has them byte by byte):
//
//	0     4  magic "WFSM"
//	4     2  manifest format version, u16 LE (1; 2 when a path is longer than 3072 bytes; 3
//	         when it names pack indexes; 4 when its tensors carry xxh3-128 digests)
//	6     2  zero
//	8     8  JSON length L, u64 LE
//	16    L  the manifest as JSON (manifest below)
//	16+L  4  CRC-32C of every preceding byte, u32 LE
const (
	ManifestMagic         = "WFSM"
	ManifestFormatVersion = 1
	ManifestHeadLen       = 16
	// ManifestLongPaths is the format version of a manifest holding a path longer than
	// ManifestV1PathLen, the bound of the releases that read format 1 alone. It is format 1
	// in every other way: it exists so that those releases refuse such a version as one of
	// an unknown format (and their repair leaves it alone) rather than judge it damaged and
	// quarantine it. Every other manifest is still written as format 1.
	ManifestLongPaths = 2
	ManifestV1PathLen = 3072
	// ManifestIndexes is the format version of a manifest naming the pack indexes its
	// version's writers added (store format 3): a program that reads formats 1 and 2 refuses
	// it rather than read a field it does not know. It may hold long paths too.
	ManifestIndexes = 3
	// ManifestTensorDigests is the format version of a manifest some of whose tensors carry
	// the xxh3-128 of their raw bytes (ManifestTensor.XXH3): a program that reads formats 1
	// to 3 refuses it as of an unknown format (its decoders refuse unknown fields: it would
	// take the manifest for damage otherwise). It may hold long paths and pack indexes too.
	ManifestTensorDigests = 4
)

// MaxManifestLen bounds the JSON a reader accepts (a model with a million tensors stays far
// below it: ~160 MB); the writer refuses to seal a larger one. A variable for the tests.
const MaxManifestLen = 1 << 30

// Bounds of what a version may hold (docs/format.md (Part I) §4).
const (
	// MaxVersion is the largest version number: twelve digits, exact in a JSON number read
	// as a double (2^53), in an int64, and in every name that carries it (weight_vN, vN,
	// slime's "version" strings, which keep all their digits past six).
	MaxVersion = 999_999_999_999
	// MaxNameLen is the longest element of a path, in bytes: the kernel's NAME_MAX, which
	// every file system the copy or an export is written to enforces. A whole path has no
	// bound of its own, as on Linux's file systems: PATH_MAX bounds what one system call is
	// given, not how deep a tree is, and a version holds every tree ext4 does, whatever
	// directory of a mount it is made in. The store reaches its files below its own
	// directories by relative paths (reldir.go), never past PATH_MAX.
	MaxNameLen = 255
)

// CheckVersionNumber refuses 0 and numbers above MaxVersion.
func CheckVersionNumber(v uint64) error {
	if v > MaxVersion {
		return fmt.Errorf("version %d: the largest version number is %d: %w", v, uint64(MaxVersion), ErrVersionOutOfRange)
	}
	if v == 0 {
		return fmt.Errorf("version 0: version numbers start at 1: %w", ErrVersionOutOfRange)
	}
	return nil
}

// File kinds of a manifest.
const (
	KindSafetensors = "safetensors"
	KindBlob        = "blob"
)

// Manifest is the truth about one version: its files, how each is made of objects, and
// statistics. It is immutable once written.
type Manifest struct {
	Version  uint64         `json:"version"`
	Created  time.Time      `json:"created"`
	Previous uint64         `json:"previous,omitempty"` // the version diffed against; 0: none
	Dirs     []ManifestDir  `json:"dirs"`
	Files    []ManifestFile `json:"files"`
	Stats    ManifestStats  `json:"stats"`
	// Indexes are the names of the pack indexes (records of kind RecordIndex) the version's
	// writer, or each rank of its writer group, added: where a reader learns the locations
	// of the objects the version added, in one read each. A hint, not the truth (gc may have
	// consolidated them: a reader then reads every index).
	Indexes []string `json:"indexes,omitempty"`
}

// ManifestDir is a directory of a version.
type ManifestDir struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"` // permission bits
}

// ManifestFile is a file of a version and the objects it is made of.
type ManifestFile struct {
	Path   string `json:"path"`
	Mode   uint32 `json:"mode"` // permission bits
	Size   int64  `json:"size"`
	SHA256 ID     `json:"sha256"` // of the whole file
	Kind   string `json:"kind"`   // "safetensors" or "blob"
	// Blob: the object holding the whole file.
	ID ID `json:"id,omitzero"`
	// Safetensors: the object holding bytes [0, HeaderLen) (the 8-byte length and the JSON),
	// then the tensors in file order, contiguous.
	Header    ID               `json:"header,omitzero"`
	HeaderLen int64            `json:"header_len,omitempty"`
	Tensors   []ManifestTensor `json:"tensors,omitempty"`
}

// ManifestTensor is a tensor of a safetensors file and the object holding its bytes.
type ManifestTensor struct {
	Name  string      `json:"name"`
	DType delta.DType `json:"dtype"`
	Shape []int64     `json:"shape"`
	Begin int64       `json:"begin"` // byte offsets in the data section, as in the file
	End   int64       `json:"end"`
	ID    ID          `json:"id"`
	// Base is the tensor of the previous version this one was diffed against (zero: none,
	// the tensor is new or its dtype or shape changed); Changed counts the elements that
	// differ from it (all elements when there is no base).
	Base    ID    `json:"base,omitzero"`
	Changed int64 `json:"changed"`
	// XXH3 is the xxh3-128 of the tensor's raw bytes (the content of object ID), computed
	// by the writer in the pass that computes ID; zero: not recorded (manifests written
	// before format ManifestTensorDigests), and a reader checks the rebuilt bytes against ID.
	XXH3 XXH3 `json:"xxh3,omitzero"`
}

// ManifestStats are the statistics of a version.
type ManifestStats struct {
	LogicalBytes   int64 `json:"logical_bytes"`    // sum of file sizes
	NewObjects     int64 `json:"new_objects"`      // objects this version added
	NewObjectBytes int64 `json:"new_object_bytes"` // their stored (file) bytes
	ChangedElems   int64 `json:"changed_elements"`
	TotalElems     int64 `json:"total_elements"`
}

// Elements is the number of elements of t's shape.
func (t *ManifestTensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// EncodeManifest returns the manifest file bytes of m. The JSON is appendManifestJSON's
// (manifest_encode.go), the bytes encoding/json writes for m (encodeManifestJSONReflect).
func EncodeManifest(m *Manifest) ([]byte, error) {
	b := make([]byte, ManifestHeadLen, ManifestHeadLen+manifestJSONLen(m)+4)
	b, err := appendManifestJSON(b, m)
	if err != nil {
		_, err = encodeManifestJSONReflect(m) // encoding/json's words for it
		return nil, fmt.Errorf("encode Manifest of version %d: %w", m.Version, err)
	}
	copy(b, ManifestMagic)
	binary.LittleEndian.PutUint16(b[4:], m.FormatVersion())
	binary.LittleEndian.PutUint64(b[8:], uint64(len(b)-ManifestHeadLen))
	return binary.LittleEndian.AppendUint32(b, CRC32C(b)), nil
}

// encodeManifestJSONReflect is the manifest's JSON as encoding/json writes it: the reference
// appendManifestJSON is tested against.
func encodeManifestJSONReflect(m *Manifest) ([]byte, error) { return json.Marshal(m) }

// FormatVersion is the format version m is written in: ManifestTensorDigests if a tensor
// carries its xxh3-128, ManifestIndexes if it names pack indexes, ManifestLongPaths if it
// holds a path longer than ManifestV1PathLen, else ManifestFormatVersion.
func (m *Manifest) FormatVersion() uint16 {
	for i := range m.Files {
		for j := range m.Files[i].Tensors {
			if !m.Files[i].Tensors[j].XXH3.IsZero() {
				return ManifestTensorDigests
			}
		}
	}
	if len(m.Indexes) > 0 {
		return ManifestIndexes
	}
	for i := range m.Dirs {
		if len(m.Dirs[i].Path) > ManifestV1PathLen {
			return ManifestLongPaths
		}
	}
	for i := range m.Files {
		if len(m.Files[i].Path) > ManifestV1PathLen {
			return ManifestLongPaths
		}
	}
	return ManifestFormatVersion
}

// DecodeManifest checks magic, version and CRC, decodes the JSON strictly and validates it.
// The JSON is decoded by decodeManifestFast (manifest_decode.go), or, for JSON it leaves alone,
// by encoding/json (decodeManifestJSONReflect): either way into the value, and with the
// verdict, of encoding/json.
func DecodeManifest(b []byte) (*Manifest, error) {
	js, err := ManifestBody(b)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifestFast(js)
	if err != nil {
		if m, err = decodeManifestJSONReflect(js); err != nil {
			return nil, err
		}
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("Manifest of version %d: %w: %w", m.Version, err, ErrCorrupt)
	}
	return m, nil
}

// decodeManifestJSONReflect decodes manifest JSON with encoding/json: unknown fields and
// trailing data are refused, keys match in any case, invalid UTF-8 becomes U+FFFD. It is the
// reference decodeManifestFast is tested against, and the decoder of what that leaves alone.
func decodeManifestJSONReflect(js []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("Manifest JSON: %v: %w", err, ErrCorrupt)
	}
	if dec.More() {
		return nil, fmt.Errorf("Manifest JSON has trailing data: %w", ErrCorrupt)
	}
	return &m, nil
}

// ManifestBody checks the magic, version, length and CRC of manifest file bytes and returns
// the JSON they frame.
func ManifestBody(b []byte) ([]byte, error) {
	if len(b) < len(ManifestMagic) || string(b[:4]) != ManifestMagic {
		return nil, fmt.Errorf("no WFSM magic: %w", ErrCorrupt)
	}
	if len(b) < ManifestHeadLen+4 {
		return nil, fmt.Errorf("Manifest of %d bytes is truncated: %w", len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v < ManifestFormatVersion || v > ManifestTensorDigests {
		return nil, fmt.Errorf("Manifest format version %d (this program reads %d to %d): %w", v, ManifestFormatVersion, ManifestTensorDigests, ErrUnsupportedVersion)
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if n > MaxManifestLen || uint64(len(b)) != ManifestHeadLen+n+4 {
		return nil, fmt.Errorf("Manifest JSON length %d in a %d-byte file: %w", n, len(b), ErrCorrupt)
	}
	body := b[:len(b)-4]
	if got, want := CRC32C(body), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("Manifest CRC-32C %08x, stored %08x: %w", got, want, ErrCorrupt)
	}
	return body[ManifestHeadLen:], nil
}

// Validate checks what readers rely on: clean unique paths, files under recorded or implied
// directories, tensors contiguous and filling each safetensors file exactly.
func (m *Manifest) Validate() error {
	if err := CheckVersionNumber(m.Version); err != nil {
		return err
	}
	if m.Previous >= m.Version {
		return fmt.Errorf("previous version %d is not below it", m.Previous)
	}
	for _, n := range m.Indexes {
		if _, ok := pack.ParseName(n); !ok {
			return fmt.Errorf("pack index name %q", n)
		}
	}
	seen := map[string]bool{}
	for _, d := range m.Dirs {
		if err := CheckPath(d.Path); err != nil {
			return err
		}
		if seen[d.Path] {
			return fmt.Errorf("path %q twice", d.Path)
		}
		seen[d.Path] = true
	}
	for i := range m.Files {
		f := &m.Files[i]
		if err := CheckPath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("path %q twice", f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 {
			return fmt.Errorf("%s: size %d", f.Path, f.Size)
		}
		if err := f.Validate(); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	// A file may not sit below another file.
	files := make(map[string]bool, len(m.Files))
	for i := range m.Files {
		files[m.Files[i].Path] = true
	}
	for p := range seen {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if files[dir] {
				return fmt.Errorf("%q lies below the file %q", p, dir)
			}
		}
	}
	return nil
}

// Validate checks one file's entry: its kind, its objects, and its tensors filling it exactly.
func (f *ManifestFile) Validate() error {
	switch f.Kind {
	case KindBlob:
		if f.ID.IsZero() || len(f.Tensors) > 0 || !f.Header.IsZero() {
			return fmt.Errorf("blob entry with tensors, a header or no object")
		}
		return nil
	case KindSafetensors:
	default:
		return fmt.Errorf("file kind %q", f.Kind)
	}
	if f.Header.IsZero() || f.HeaderLen < 8 || !f.ID.IsZero() {
		return fmt.Errorf("safetensors entry without a header object")
	}
	var end int64
	for i := range f.Tensors {
		t := &f.Tensors[i]
		w := int64(t.DType.Size())
		if w == 0 {
			return fmt.Errorf("tensor %q: dtype %q", t.Name, t.DType)
		}
		n := int64(1)
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && n > (1<<62)/d) {
				return fmt.Errorf("tensor %q: shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		if t.Begin != end || n > (1<<62)/w || t.End-t.Begin != n*w || t.ID.IsZero() {
			return fmt.Errorf("tensor %q: bytes [%d, %d) for %d elements of %d bytes after %d", t.Name, t.Begin, t.End, n, w, end)
		}
		if t.Changed < 0 || t.Changed > n {
			return fmt.Errorf("tensor %q: %d changed of %d", t.Name, t.Changed, n)
		}
		end = t.End
	}
	if f.HeaderLen+end != f.Size {
		return fmt.Errorf("header and tensors hold %d bytes, file has %d", f.HeaderLen+end, f.Size)
	}
	return nil
}

// CheckPath accepts clean, relative, slash-separated paths without "." or ".." elements,
// in UTF-8 (the manifest's JSON would replace other bytes: the name read back would be
// another), no NUL, each element at most MaxNameLen bytes (ErrNameTooLong; the whole path
// has no bound, see MaxNameLen). Any other byte a POSIX name may hold is stored as it is: a
// backslash, a newline, a control character.
func CheckPath(p string) error {
	if p == "" || p == "." || strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.HasPrefix(p, "../") || p == ".." ||
		strings.Contains(p, "\x00") || !utf8.ValidString(p) {
		return fmt.Errorf("path %q: %w", p, ErrBadPath)
	}
	for rest := p; rest != ""; {
		elem, after, _ := strings.Cut(rest, "/")
		if len(elem) > MaxNameLen {
			return fmt.Errorf("path %q: the name %q is %d bytes, more than %d: %w", p, elem, len(elem), MaxNameLen, ErrNameTooLong)
		}
		rest = after
	}
	return nil
}
