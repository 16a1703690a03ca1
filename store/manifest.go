package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
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
//	         when it names pack indexes)
//	6     2  zero
//	8     8  JSON length L, u64 LE
//	16    L  the manifest as JSON (manifest below)
//	16+L  4  CRC-32C of every preceding byte, u32 LE
const (
	manifestMagic         = "WFSM"
	manifestFormatVersion = 1
	manifestHeadLen       = 16
	// manifestLongPaths is the format version of a manifest holding a path longer than
	// manifestV1PathLen, the bound of the releases that read format 1 alone. It is format 1
	// in every other way: it exists so that those releases refuse such a version as one of
	// an unknown format (and their repair leaves it alone) rather than judge it damaged and
	// quarantine it. Every other manifest is still written as format 1.
	manifestLongPaths = 2
	manifestV1PathLen = 3072
	// manifestIndexes is the format version of a manifest naming the pack indexes its
	// version's writers added (store format 3): a program that reads formats 1 and 2 refuses
	// it rather than read a field it does not know. It may hold long paths too.
	manifestIndexes = 3
)

// maxManifestLen bounds the JSON a reader accepts (a model with a million tensors stays far
// below it: ~160 MB); the writer refuses to seal a larger one. A variable for the tests.
const maxManifestLen = 1 << 30

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

// checkVersionNumber refuses 0 and numbers above MaxVersion.
func checkVersionNumber(v uint64) error {
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
	kindSafetensors = "safetensors"
	kindBlob        = "blob"
)

// manifest is the truth about one version: its files, how each is made of objects, and
// statistics. It is immutable once written.
type manifest struct {
	Version  uint64         `json:"version"`
	Created  time.Time      `json:"created"`
	Previous uint64         `json:"previous,omitempty"` // the version diffed against; 0: none
	Dirs     []manifestDir  `json:"dirs"`
	Files    []manifestFile `json:"files"`
	Stats    manifestStats  `json:"stats"`
	// Indexes are the names of the pack indexes (records of kind RecordIndex) the version's
	// writer, or each rank of its writer group, added: where a reader learns the locations
	// of the objects the version added, in one read each. A hint, not the truth (gc may have
	// consolidated them: a reader then reads every index).
	Indexes []string `json:"indexes,omitempty"`
}

type manifestDir struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"` // permission bits
}

type manifestFile struct {
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
	Tensors   []manifestTensor `json:"tensors,omitempty"`
}

type manifestTensor struct {
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
}

type manifestStats struct {
	LogicalBytes   int64 `json:"logical_bytes"`    // sum of file sizes
	NewObjects     int64 `json:"new_objects"`      // objects this version added
	NewObjectBytes int64 `json:"new_object_bytes"` // their stored (file) bytes
	ChangedElems   int64 `json:"changed_elements"`
	TotalElems     int64 `json:"total_elements"`
}

func (t *manifestTensor) elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// encodeManifest returns the manifest file bytes of m.
func encodeManifest(m *manifest) ([]byte, error) {
	js, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest of version %d: %w", m.Version, err)
	}
	b := make([]byte, manifestHeadLen, manifestHeadLen+len(js)+4)
	copy(b, manifestMagic)
	binary.LittleEndian.PutUint16(b[4:], m.formatVersion())
	binary.LittleEndian.PutUint64(b[8:], uint64(len(js)))
	b = append(b, js...)
	return binary.LittleEndian.AppendUint32(b, crc32c(b)), nil
}

// formatVersion is the format version m is written in: manifestIndexes if it names pack
// indexes, manifestLongPaths if it holds a path longer than manifestV1PathLen, else
// manifestFormatVersion.
func (m *manifest) formatVersion() uint16 {
	if len(m.Indexes) > 0 {
		return manifestIndexes
	}
	for i := range m.Dirs {
		if len(m.Dirs[i].Path) > manifestV1PathLen {
			return manifestLongPaths
		}
	}
	for i := range m.Files {
		if len(m.Files[i].Path) > manifestV1PathLen {
			return manifestLongPaths
		}
	}
	return manifestFormatVersion
}

// encodeManifestChecked is encodeManifest for a seal: the bytes are read back with the
// reader's own checks (decodeManifest) and must encode to themselves again, so that a
// version is never sealed that readers would refuse (a manifest over maxManifestLen) or read
// otherwise than it was written. What is read back is usually m itself (sameManifest, a
// comparison of the values that never holds for values that encode otherwise), which then
// encodes to the same bytes without a second encoding; otherwise it is encoded again and
// compared byte by byte. It costs a decode of the manifest and a comparison: ~0.1% of a
// seal's work for a model of a few hundred tensors, ~1% for one of 3,000 (docs/benchmarks.md).
// limit is the length of JSON the seal accepts: maxManifestLen (ingester.manifestLimit, which a
// test lowers to reach the refusal with a small version).
func encodeManifestChecked(m *manifest, limit uint64) ([]byte, error) {
	data, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	if n := uint64(len(data) - manifestHeadLen - 4); n > limit {
		return nil, fmt.Errorf("version %d: its manifest would be %d bytes of JSON, more than the %d readers accept (too many files or tensors): %w",
			m.Version, n, limit, ErrManifestTooLarge)
	}
	back, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("version %d: its manifest would not read back: %w", m.Version, err)
	}
	if sameManifest(back, m) {
		return data, nil
	}
	again, err := encodeManifest(back)
	if err != nil || !bytes.Equal(again, data) {
		return nil, fmt.Errorf("version %d: its manifest reads back as another manifest (%v): %w", m.Version, err, ErrCorrupt)
	}
	return data, nil
}

// decodeManifest checks magic, version and CRC, decodes the JSON strictly and validates it.
func decodeManifest(b []byte) (*manifest, error) {
	js, err := manifestBody(b)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var m manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest JSON: %v: %w", err, ErrCorrupt)
	}
	if dec.More() {
		return nil, fmt.Errorf("manifest JSON has trailing data: %w", ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest of version %d: %w: %w", m.Version, err, ErrCorrupt)
	}
	return &m, nil
}

// manifestBody checks the magic, version, length and CRC of manifest file bytes and returns
// the JSON they frame.
func manifestBody(b []byte) ([]byte, error) {
	if len(b) < len(manifestMagic) || string(b[:4]) != manifestMagic {
		return nil, fmt.Errorf("no WFSM magic: %w", ErrCorrupt)
	}
	if len(b) < manifestHeadLen+4 {
		return nil, fmt.Errorf("manifest of %d bytes is truncated: %w", len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != manifestFormatVersion && v != manifestLongPaths && v != manifestIndexes {
		return nil, fmt.Errorf("manifest format version %d (this program reads %d to %d): %w", v, manifestFormatVersion, manifestIndexes, ErrUnsupportedVersion)
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if n > maxManifestLen || uint64(len(b)) != manifestHeadLen+n+4 {
		return nil, fmt.Errorf("manifest JSON length %d in a %d-byte file: %w", n, len(b), ErrCorrupt)
	}
	body := b[:len(b)-4]
	if got, want := crc32c(body), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("manifest CRC-32C %08x, stored %08x: %w", got, want, ErrCorrupt)
	}
	return body[manifestHeadLen:], nil
}

// validate checks what readers rely on: clean unique paths, files under recorded or implied
// directories, tensors contiguous and filling each safetensors file exactly.
func (m *manifest) validate() error {
	if err := checkVersionNumber(m.Version); err != nil {
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
		if err := checkPath(d.Path); err != nil {
			return err
		}
		if seen[d.Path] {
			return fmt.Errorf("path %q twice", d.Path)
		}
		seen[d.Path] = true
	}
	for i := range m.Files {
		f := &m.Files[i]
		if err := checkPath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("path %q twice", f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 {
			return fmt.Errorf("%s: size %d", f.Path, f.Size)
		}
		if err := f.validate(); err != nil {
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

func (f *manifestFile) validate() error {
	switch f.Kind {
	case kindBlob:
		if f.ID.IsZero() || len(f.Tensors) > 0 || !f.Header.IsZero() {
			return fmt.Errorf("blob entry with tensors, a header or no object")
		}
		return nil
	case kindSafetensors:
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

// checkPath accepts clean, relative, slash-separated paths without "." or ".." elements,
// in UTF-8 (the manifest's JSON would replace other bytes: the name read back would be
// another), no NUL, each element at most MaxNameLen bytes (ErrNameTooLong; the whole path
// has no bound, see MaxNameLen). Any other byte a POSIX name may hold is stored as it is: a
// backslash, a newline, a control character.
func checkPath(p string) error {
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

// fileMode turns stored permission bits into a FileMode.
func fileMode(bits uint32) fs.FileMode { return fs.FileMode(bits) & fs.ModePerm }
