package delta

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// The fast half of safetensors header parsing: a scanner for the shape every writer produces
// (string keys without escapes, tensor entries of exactly dtype, shape and data_offsets, plain
// non-negative integers, __metadata__ an object of plain strings or null). It never refuses: a
// header it is not sure of goes to the reference (parseHeaderJSON, the token walk), so the two
// accept and refuse the same headers by construction. What it accepts, the reference accepts
// too and reads to the same Header (TestParseHeaderFastMatchesReference, FuzzParseHeaderFast).
//
// Why: the reference's token walk costs about 30 microseconds and ~25 allocations per tensor
// entry, which a mixture of experts (tens of thousands of entries per checkpoint, a header per
// shard streamed through the mount each version) pays on every version. The scanner costs a
// few allocations per header: one string holds every tensor name, one array every shape.

// parseHeaderFast reads the JSON object of a header into h.Metadata and h.Tensors (unsorted,
// in document order) as parseHeaderJSON would, and reports whether it did. On false, h is in
// an unspecified state and the caller must ask the reference.
func parseHeaderFast(js []byte, h *Header) bool {
	// The reference requires the object to open at the first byte, without whitespace.
	if len(js) == 0 || js[0] != '{' {
		return false
	}
	s := headerScanner{js: js, pos: 1}
	n := bytes.Count(js, []byte(`"data_offsets"`))
	tensors := make([]Tensor, 0, n)
	shapes := make([]int64, 0, 3*n)
	names := make([]int32, 0, 2*n) // each name's [start, end) in js
	var meta map[string]string
	haveMeta := false
	if !s.consume('}') {
		for {
			a, b, ok := s.str()
			if !ok || !s.consume(':') {
				return false
			}
			if string(js[a:b]) == metadataKey {
				if haveMeta {
					return false // duplicate key: the reference says so
				}
				haveMeta = true
				if meta, ok = s.metadata(); !ok {
					return false
				}
			} else {
				var t Tensor
				if shapes, ok = s.entry(&t, shapes); !ok {
					return false
				}
				tensors = append(tensors, t)
				names = append(names, int32(a), int32(b))
			}
			if s.consume(',') {
				continue
			}
			if s.consume('}') {
				break
			}
			return false
		}
	}
	// Writers pad the header with spaces; anything else after the object goes to the
	// reference (which refuses it).
	s.ws()
	if s.pos != len(js) {
		return false
	}
	// One string holds every name; each tensor's Name is a piece of it.
	total := 0
	for i := 0; i < len(names); i += 2 {
		total += int(names[i+1] - names[i])
	}
	var sb strings.Builder
	sb.Grow(total)
	for i := 0; i < len(names); i += 2 {
		sb.Write(js[names[i]:names[i+1]])
	}
	all := sb.String()
	seen := make(map[string]struct{}, len(tensors))
	off := 0
	for i := range tensors {
		l := int(names[2*i+1] - names[2*i])
		name := all[off : off+l]
		off += l
		if _, dup := seen[name]; dup {
			return false
		}
		seen[name] = struct{}{}
		tensors[i].Name = name
	}
	if len(tensors) == 0 {
		tensors = nil // as the reference leaves it
	}
	h.Metadata, h.Tensors = meta, tensors
	return true
}

// headerScanner walks a header's JSON bytes; every method reports false for anything it is
// not sure of.
type headerScanner struct {
	js  []byte
	pos int
}

// ws skips JSON whitespace.
func (s *headerScanner) ws() {
	for s.pos < len(s.js) {
		switch s.js[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// consume skips whitespace and takes c if it comes next.
func (s *headerScanner) consume(c byte) bool {
	s.ws()
	if s.pos < len(s.js) && s.js[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// str reads a string without escapes or control characters, valid UTF-8, and returns where
// its content is in js.
func (s *headerScanner) str() (start, end int, ok bool) {
	s.ws()
	if s.pos >= len(s.js) || s.js[s.pos] != '"' {
		return 0, 0, false
	}
	start = s.pos + 1
	high := false
	for i := start; i < len(s.js); i++ {
		c := s.js[i]
		switch {
		case c == '"':
			if high && !utf8.Valid(s.js[start:i]) {
				return 0, 0, false
			}
			s.pos = i + 1
			return start, i, true
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= 0x80:
			high = true
		}
	}
	return 0, 0, false
}

// uint reads a non-negative integer of at most 18 digits (so it fits an int64) in JSON's
// spelling: no sign, no leading zero, no fraction or exponent.
func (s *headerScanner) uint() (int64, bool) {
	s.ws()
	i := s.pos
	if i >= len(s.js) {
		return 0, false
	}
	var v int64
	switch c := s.js[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		for i < len(s.js) && i-s.pos < 18 && '0' <= s.js[i] && s.js[i] <= '9' {
			v = v*10 + int64(s.js[i]-'0')
			i++
		}
	default:
		return 0, false
	}
	if i < len(s.js) {
		switch c := s.js[i]; {
		case '0' <= c && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
			return 0, false
		}
	}
	s.pos = i
	return v, true
}

// ints appends the integers of an array ([] included) to dst.
func (s *headerScanner) ints(dst []int64) ([]int64, bool) {
	if !s.consume('[') {
		return dst, false
	}
	if s.consume(']') {
		return dst, true
	}
	for {
		v, ok := s.uint()
		if !ok {
			return dst, false
		}
		dst = append(dst, v)
		if s.consume(',') {
			continue
		}
		return dst, s.consume(']')
	}
}

// pair reads an array of exactly two integers.
func (s *headerScanner) pair() (a, b int64, ok bool) {
	if !s.consume('[') {
		return 0, 0, false
	}
	if a, ok = s.uint(); !ok || !s.consume(',') {
		return 0, 0, false
	}
	if b, ok = s.uint(); !ok || !s.consume(']') {
		return 0, 0, false
	}
	return a, b, true
}

// entry reads a tensor entry into t (all but its name), its shape appended to shapes (t.Shape
// is a piece of it), and checks it as the reference does.
func (s *headerScanner) entry(t *Tensor, shapes []int64) ([]int64, bool) {
	if !s.consume('{') {
		return shapes, false
	}
	var haveDType, haveShape, haveOffsets bool
	for first := true; ; first = false {
		if !first && !s.consume(',') {
			break
		}
		a, b, ok := s.str()
		if !ok || !s.consume(':') {
			return shapes, false
		}
		switch string(s.js[a:b]) {
		case "dtype":
			va, vb, ok := s.str()
			if haveDType || !ok {
				return shapes, false
			}
			haveDType = true
			if t.DType, ok = knownDType(s.js[va:vb]); !ok {
				return shapes, false
			}
		case "shape":
			if haveShape {
				return shapes, false
			}
			haveShape = true
			start := len(shapes)
			if shapes, ok = s.ints(shapes); !ok {
				return shapes, false
			}
			t.Shape = shapes[start:len(shapes):len(shapes)]
		case "data_offsets":
			if haveOffsets {
				return shapes, false
			}
			haveOffsets = true
			if t.Begin, t.End, ok = s.pair(); !ok {
				return shapes, false
			}
		default:
			return shapes, false
		}
	}
	if !s.consume('}') || !haveDType || !haveShape || !haveOffsets {
		return shapes, false
	}
	return shapes, checkTensorEntry(*t) == nil
}

// metadata reads the value of __metadata__: null (nil) or an object of plain strings.
func (s *headerScanner) metadata() (map[string]string, bool) {
	s.ws()
	if bytes.HasPrefix(s.js[s.pos:], []byte("null")) {
		s.pos += 4
		return nil, true
	}
	if !s.consume('{') {
		return nil, false
	}
	meta := make(map[string]string)
	if s.consume('}') {
		return meta, true
	}
	for {
		ka, kb, ok := s.str()
		if !ok || !s.consume(':') {
			return nil, false
		}
		va, vb, ok := s.str()
		if !ok {
			return nil, false
		}
		k := string(s.js[ka:kb])
		if _, dup := meta[k]; dup {
			return nil, false
		}
		meta[k] = string(s.js[va:vb])
		if s.consume(',') {
			continue
		}
		return meta, s.consume('}')
	}
}

// knownDType returns the DType spelled b, if it is one of the format's.
func knownDType(b []byte) (DType, bool) {
	switch string(b) {
	case "BOOL":
		return DTypeBool, true
	case "U8":
		return DTypeU8, true
	case "I8":
		return DTypeI8, true
	case "U16":
		return DTypeU16, true
	case "I16":
		return DTypeI16, true
	case "U32":
		return DTypeU32, true
	case "I32":
		return DTypeI32, true
	case "U64":
		return DTypeU64, true
	case "I64":
		return DTypeI64, true
	case "F8_E4M3":
		return DTypeF8E4M3, true
	case "F8_E5M2":
		return DTypeF8E5M2, true
	case "BF16":
		return DTypeBF16, true
	case "F16":
		return DTypeF16, true
	case "F32":
		return DTypeF32, true
	case "F64":
		return DTypeF64, true
	}
	return "", false
}
