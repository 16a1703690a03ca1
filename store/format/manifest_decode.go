package format

import (
	"bytes"
	"errors"
	"io"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/weightfs/weightfs/delta"
)

// The manifest's JSON is decoded without reflection: a walk of its fields over the tokens of
// jsontext (github.com/go-json-experiment/json, the encoding/json/v2 of Go 1.27, which
// validates the JSON grammar and UTF-8 and unquotes strings). encoding/json's reflection
// costs ~10 µs a tensor and leaves 3 heap objects per tensor; this walk costs a fraction of
// that (docs/benchmarks.md, "Tensor count (figure 11)") and leaves none per tensor: the
// paths and names of a manifest share one string, its shapes a few arrays.
//
// The walk covers the JSON the encoder writes and what differs from it only in whitespace,
// key order and string escapes. Anything else (a key spelt in another case, which
// encoding/json matches; a key twice; a null where a value is written; invalid UTF-8, which
// encoding/json replaces; trailing bytes; a number that is no integer; any error) makes it
// give up, and DecodeManifest decodes the JSON with encoding/json, the reference, which
// accepts or refuses as it always has. So the set of manifests accepted, and what each
// decodes to, is encoding/json's by construction where the walk gives up, and by test where
// it does not (FuzzManifestDecoders, TestManifestCodecsAgree).

// errNotCanonical: the walk met JSON it leaves to the reference decoder.
var errNotCanonical = errors.New("manifest JSON outside the fast decoder's subset")

// span is where a string lies in a manifestDecoder's arena.
type span struct{ off, n uint32 }

// shapeChunk is the number of dimensions a manifest's shapes are allocated by.
const shapeChunk = 4096

// manifestDecoder holds the state of one decode.
type manifestDecoder struct {
	d *jsontext.Decoder
	// arena holds the paths and tensor names in the order read; at the end it becomes one
	// string, and dirs, files and tensors (in that order, as they lie in the manifest) take
	// their substrings.
	arena               []byte
	dirPaths, filePaths []span
	tensorNames         []span
	shapes              []int64          // the chunk shapes are cut from
	tensors             []ManifestTensor // the tensors of the file being read
	unquoted            []byte           // scratch for strings with escapes
}

// decodeManifestFast decodes manifest JSON as encoding/json does (into the same value), or
// returns errNotCanonical (or another error) where it leaves js to encoding/json.
func decodeManifestFast(js []byte) (*Manifest, error) {
	md := manifestDecoder{
		d:     jsontext.NewDecoder(bytes.NewBuffer(js), jsontext.AllowDuplicateNames(true)), // duplicates: seen bits below
		arena: make([]byte, 0, len(js)/4),
	}
	m := new(Manifest)
	if err := md.manifest(m); err != nil {
		return nil, err
	}
	// One value and nothing but whitespace after it (encoding/json's More accepts some
	// trailing bytes: the reference judges those).
	if _, err := md.d.ReadToken(); err != io.EOF {
		return nil, errNotCanonical
	}
	names := string(md.arena)
	at := func(s span) string { return names[s.off : s.off+s.n] }
	for i := range m.Dirs {
		m.Dirs[i].Path = at(md.dirPaths[i])
	}
	k := 0
	for i := range m.Files {
		f := &m.Files[i]
		f.Path = at(md.filePaths[i])
		for j := range f.Tensors {
			f.Tensors[j].Name = at(md.tensorNames[k])
			k++
		}
	}
	return m, nil
}

// object reads an object, calling field for each key (its bytes without the quotes), which
// returns the key's bit. A key read twice gives up (encoding/json keeps the last value).
func (md *manifestDecoder) object(field func(key []byte) (uint32, error)) error {
	if err := md.delim('{'); err != nil {
		return err
	}
	var seen uint32
	for md.d.PeekKind() == '"' {
		raw, err := md.d.ReadValue()
		if err != nil {
			return err
		}
		if bytes.IndexByte(raw, '\\') >= 0 {
			return errNotCanonical // an escaped key: encoding/json matches keys after unquoting and case folding
		}
		bit, err := field(raw[1 : len(raw)-1])
		if err != nil {
			return err
		}
		if seen&bit != 0 {
			return errNotCanonical
		}
		seen |= bit
	}
	return md.delim('}')
}

func (md *manifestDecoder) delim(k jsontext.Kind) error {
	tok, err := md.d.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != k {
		return errNotCanonical
	}
	return nil
}

// array reads an array calling elem for each element, or a null; it reports whether it read
// an array (encoding/json makes a slice nil for null, empty for []).
func (md *manifestDecoder) array(elem func() error) (bool, error) {
	if md.d.PeekKind() == 'n' {
		return false, md.delim('n')
	}
	if err := md.delim('['); err != nil {
		return false, err
	}
	for k := md.d.PeekKind(); k != ']'; k = md.d.PeekKind() {
		if k == 0 {
			if _, err := md.d.ReadToken(); err != nil {
				return false, err
			}
			return false, errNotCanonical
		}
		if err := elem(); err != nil {
			return false, err
		}
	}
	return true, md.delim(']')
}

// value reads a value of kind k and returns its bytes as in the JSON.
func (md *manifestDecoder) value(k jsontext.Kind) (jsontext.Value, error) {
	raw, err := md.d.ReadValue()
	if err != nil {
		return nil, err
	}
	if raw.Kind() != k {
		return nil, errNotCanonical
	}
	return raw, nil
}

// str reads a string and returns its unquoted bytes, valid until the next read.
func (md *manifestDecoder) str() ([]byte, error) {
	raw, err := md.value('"')
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1], nil
	}
	md.unquoted, err = jsontext.AppendUnquote(md.unquoted[:0], raw)
	return md.unquoted, err
}

// arenaStr reads a string into the arena.
func (md *manifestDecoder) arenaStr() (span, error) {
	b, err := md.str()
	if err != nil {
		return span{}, err
	}
	s := span{uint32(len(md.arena)), uint32(len(b))}
	md.arena = append(md.arena, b...)
	return s, nil
}

// The numbers: encoding/json parses an integer field's literal with strconv (ParseInt,
// ParseUint, and a bound for narrower types) and refuses what they refuse; so does this.
func (md *manifestDecoder) int64() (int64, error) {
	raw, err := md.value('0')
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(raw), 10, 64)
}

func (md *manifestDecoder) uint(bits int) (uint64, error) {
	raw, err := md.value('0')
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(raw), 10, bits)
}

// id reads an object id: what ID.UnmarshalText accepts (64 lowercase hex digits).
func (md *manifestDecoder) id(id *ID) error {
	b, err := md.str()
	if err != nil {
		return err
	}
	if len(b) != 2*len(id) {
		return errNotCanonical
	}
	var bad byte
	for i := range id {
		hi, lo := lowerHex[b[2*i]], lowerHex[b[2*i+1]]
		bad |= hi | lo
		id[i] = hi<<4 | lo
	}
	if bad&0xf0 != 0 {
		return errNotCanonical
	}
	return nil
}

// xxh3 reads a tensor's digest: what XXH3.UnmarshalText accepts (32 lowercase hex digits).
func (md *manifestDecoder) xxh3(x *XXH3) error {
	b, err := md.str()
	if err != nil {
		return err
	}
	if x.UnmarshalText(b) != nil {
		return errNotCanonical // the reference refuses it, in its words
	}
	return nil
}

// lowerHex is the value of each lowercase hex digit, 0xff for every other byte.
var lowerHex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

// dtypes are the dtypes a manifest's tensors share rather than each holding its own copy.
var dtypes = []delta.DType{delta.DTypeBool, delta.DTypeU8, delta.DTypeI8, delta.DTypeU16, delta.DTypeI16,
	delta.DTypeU32, delta.DTypeI32, delta.DTypeU64, delta.DTypeI64, delta.DTypeF8E4M3, delta.DTypeF8E5M2,
	delta.DTypeBF16, delta.DTypeF16, delta.DTypeF32, delta.DTypeF64}

// intern returns the string of b, shared with one of known where it is one.
func intern[S ~string](b []byte, known []S) S {
	for _, s := range known {
		if string(s) == string(b) {
			return s
		}
	}
	return S(b)
}

var kinds = []string{KindSafetensors, KindBlob}

func (md *manifestDecoder) manifest(m *Manifest) error {
	return md.object(func(key []byte) (bit uint32, err error) {
		switch string(key) {
		case "version":
			bit = 1 << 0
			m.Version, err = md.uint(64)
		case "created":
			bit = 1 << 1
			var raw jsontext.Value
			if raw, err = md.value('"'); err == nil {
				err = m.Created.UnmarshalJSON(raw) // what encoding/json calls with the same bytes
			}
		case "previous":
			bit = 1 << 2
			m.Previous, err = md.uint(64)
		case "dirs":
			bit = 1 << 3
			err = md.dirs(m)
		case "files":
			bit = 1 << 4
			err = md.files(m)
		case "stats":
			bit = 1 << 5
			err = md.stats(&m.Stats)
		case "indexes":
			bit = 1 << 6
			err = md.indexes(&m.Indexes)
		default:
			err = errNotCanonical
		}
		return bit, err
	})
}

func (md *manifestDecoder) dirs(m *Manifest) error {
	some, err := md.array(func() error {
		var d ManifestDir
		var path span
		err := md.object(func(key []byte) (bit uint32, err error) {
			switch string(key) {
			case "path":
				bit = 1 << 0
				path, err = md.arenaStr()
			case "mode":
				bit = 1 << 1
				var v uint64
				v, err = md.uint(32)
				d.Mode = uint32(v)
			default:
				err = errNotCanonical
			}
			return bit, err
		})
		m.Dirs = append(m.Dirs, d)
		md.dirPaths = append(md.dirPaths, path)
		return err
	})
	if some && m.Dirs == nil {
		m.Dirs = []ManifestDir{}
	}
	return err
}

func (md *manifestDecoder) files(m *Manifest) error {
	some, err := md.array(func() error {
		var f ManifestFile
		var path span
		err := md.object(func(key []byte) (bit uint32, err error) {
			switch string(key) {
			case "path":
				bit = 1 << 0
				path, err = md.arenaStr()
			case "mode":
				bit = 1 << 1
				var v uint64
				v, err = md.uint(32)
				f.Mode = uint32(v)
			case "size":
				bit = 1 << 2
				f.Size, err = md.int64()
			case "sha256":
				bit = 1 << 3
				err = md.id(&f.SHA256)
			case "kind":
				bit = 1 << 4
				var b []byte
				b, err = md.str()
				f.Kind = intern(b, kinds)
			case "id":
				bit = 1 << 5
				err = md.id(&f.ID)
			case "header":
				bit = 1 << 6
				err = md.id(&f.Header)
			case "header_len":
				bit = 1 << 7
				f.HeaderLen, err = md.int64()
			case "tensors":
				bit = 1 << 8
				f.Tensors, err = md.fileTensors()
			default:
				err = errNotCanonical
			}
			return bit, err
		})
		m.Files = append(m.Files, f)
		md.filePaths = append(md.filePaths, path)
		return err
	})
	if some && m.Files == nil {
		m.Files = []ManifestFile{}
	}
	return err
}

// fileTensors reads a file's tensors into the scratch slice and returns a copy of exactly
// their number.
func (md *manifestDecoder) fileTensors() ([]ManifestTensor, error) {
	md.tensors = md.tensors[:0]
	some, err := md.array(func() error {
		md.tensors = append(md.tensors, ManifestTensor{})
		return md.tensor(&md.tensors[len(md.tensors)-1])
	})
	if err != nil || !some {
		return nil, err
	}
	return append(make([]ManifestTensor, 0, len(md.tensors)), md.tensors...), nil
}

func (md *manifestDecoder) tensor(t *ManifestTensor) error {
	var name span
	err := md.object(func(key []byte) (bit uint32, err error) {
		switch string(key) {
		case "name":
			bit = 1 << 0
			name, err = md.arenaStr()
		case "dtype":
			bit = 1 << 1
			var b []byte
			b, err = md.str()
			t.DType = intern(b, dtypes)
		case "shape":
			bit = 1 << 2
			err = md.shape(t)
		case "begin":
			bit = 1 << 3
			t.Begin, err = md.int64()
		case "end":
			bit = 1 << 4
			t.End, err = md.int64()
		case "id":
			bit = 1 << 5
			err = md.id(&t.ID)
		case "base":
			bit = 1 << 6
			err = md.id(&t.Base)
		case "changed":
			bit = 1 << 7
			t.Changed, err = md.int64()
		case "xxh3":
			bit = 1 << 8
			err = md.xxh3(&t.XXH3)
		default:
			err = errNotCanonical
		}
		return bit, err
	})
	md.tensorNames = append(md.tensorNames, name)
	return err
}

// shape reads a shape into the shared chunk (a slice of it whose capacity ends where it
// does, so that an append to one shape copies rather than writes into the next).
func (md *manifestDecoder) shape(t *ManifestTensor) error {
	start := len(md.shapes)
	some, err := md.array(func() error {
		v, err := md.int64()
		if len(md.shapes) == cap(md.shapes) {
			// A new chunk, holding the dimensions read so far of this shape.
			grown := make([]int64, len(md.shapes)-start, max(shapeChunk, 2*(len(md.shapes)-start)))
			copy(grown, md.shapes[start:])
			md.shapes, start = grown, 0
		}
		md.shapes = append(md.shapes, v)
		return err
	})
	if err != nil {
		return err
	}
	if some {
		if md.shapes == nil {
			md.shapes = make([]int64, 0, shapeChunk)
		}
		t.Shape = md.shapes[start:len(md.shapes):len(md.shapes)]
	}
	return nil
}

func (md *manifestDecoder) stats(s *ManifestStats) error {
	return md.object(func(key []byte) (uint32, error) {
		var p *int64
		var bit uint32
		switch string(key) {
		case "logical_bytes":
			p, bit = &s.LogicalBytes, 1<<0
		case "new_objects":
			p, bit = &s.NewObjects, 1<<1
		case "new_object_bytes":
			p, bit = &s.NewObjectBytes, 1<<2
		case "changed_elements":
			p, bit = &s.ChangedElems, 1<<3
		case "total_elements":
			p, bit = &s.TotalElems, 1<<4
		default:
			return 0, errNotCanonical
		}
		var err error
		*p, err = md.int64()
		return bit, err
	})
}

// indexes reads the list of a manifest's pack index names into *dst: an empty list ([]) is an
// empty slice, as encoding/json makes it, and null leaves *dst as it was.
func (md *manifestDecoder) indexes(dst *[]string) error {
	some, err := md.array(func() error {
		b, err := md.str()
		*dst = append(*dst, string(b))
		return err
	})
	if some && *dst == nil {
		*dst = []string{}
	}
	return err
}
