package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The JSON half of safetensors parsing: a token walk that refuses what encoding/json would
// let through silently (duplicate keys, invalid UTF-8, fractions in integer fields).

// parseHeaderJSON reads the JSON object of a header into h.Metadata and h.Tensors (unsorted).
// It walks tokens rather than decoding into a map so duplicate keys are seen and refused
// instead of silently keeping the last one.
func parseHeaderJSON(js []byte, h *Header) error {
	if !utf8.Valid(js) {
		return fmt.Errorf("%w: header JSON is not valid UTF-8", ErrMalformed)
	}
	if len(js) == 0 || js[0] != '{' {
		return fmt.Errorf("%w: header JSON does not start with '{'", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	seen := make(map[string]struct{})
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return fmt.Errorf("%w: header key: %v", ErrMalformed, err)
		}
		if _, dup := seen[key]; dup {
			return fmt.Errorf("%w: duplicate header key %q", ErrMalformed, key)
		}
		seen[key] = struct{}{}
		if key == metadataKey {
			if h.Metadata, err = parseMetadata(dec); err != nil {
				return fmt.Errorf("%w: __metadata__: %v", ErrMalformed, err)
			}
			continue
		}
		t, err := parseTensorEntry(dec, key)
		if err != nil {
			return fmt.Errorf("%w: tensor %q: %v", ErrMalformed, key, err)
		}
		h.Tensors = append(h.Tensors, t)
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	// Writers pad the header with spaces; anything else after the object is refused.
	for _, c := range js[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return fmt.Errorf("%w: header has %q after the JSON object", ErrMalformed, c)
		}
	}
	return nil
}

// parseMetadata reads the value of __metadata__: null or an object of strings.
func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want an object of strings, got %v", tok)
	}
	meta := make(map[string]string)
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return nil, fmt.Errorf("key: %v", err)
		}
		if _, dup := meta[k]; dup {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		v, err := stringToken(dec)
		if err != nil {
			return nil, fmt.Errorf("value of %q: %v", k, err)
		}
		meta[k] = v
	}
	return meta, expectDelim(dec, '}')
}

// parseTensorEntry reads {"dtype": ..., "shape": [...], "data_offsets": [begin, end]} and
// checks it on its own: known dtype, non-negative shape, byte length matching the shape.
func parseTensorEntry(dec *json.Decoder, name string) (Tensor, error) {
	t := Tensor{Name: name}
	if err := expectDelim(dec, '{'); err != nil {
		return t, err
	}
	var haveDType, haveShape, haveOffsets bool
	for dec.More() {
		field, err := stringToken(dec)
		if err != nil {
			return t, fmt.Errorf("field name: %v", err)
		}
		switch field {
		case "dtype":
			if haveDType {
				return t, fmt.Errorf("duplicate field %q", field)
			}
			haveDType = true
			s, err := stringToken(dec)
			if err != nil {
				return t, fmt.Errorf("dtype: %v", err)
			}
			t.DType = DType(s)
		case "shape":
			if haveShape {
				return t, fmt.Errorf("duplicate field %q", field)
			}
			haveShape = true
			if t.Shape, err = intArray(dec); err != nil {
				return t, fmt.Errorf("shape: %v", err)
			}
			if t.Shape == nil {
				t.Shape = []int64{}
			}
		case "data_offsets":
			if haveOffsets {
				return t, fmt.Errorf("duplicate field %q", field)
			}
			haveOffsets = true
			offs, err := intArray(dec)
			if err != nil {
				return t, fmt.Errorf("data_offsets: %v", err)
			}
			if len(offs) != 2 {
				return t, fmt.Errorf("data_offsets has %d numbers, want 2", len(offs))
			}
			t.Begin, t.End = offs[0], offs[1]
		default:
			return t, fmt.Errorf("unknown field %q", field)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return t, err
	}
	switch {
	case !haveDType:
		return t, fmt.Errorf("missing dtype")
	case !haveShape:
		return t, fmt.Errorf("missing shape")
	case !haveOffsets:
		return t, fmt.Errorf("missing data_offsets")
	}
	return t, checkTensorEntry(t)
}

// checkTensorEntry checks a tensor entry on its own, once its three fields are read: known
// dtype, offsets in order, byte length matching the shape. The reference and the fast
// parser (safetensors_fast.go) both end with it.
func checkTensorEntry(t Tensor) error {
	size := t.DType.Size()
	if size == 0 {
		return fmt.Errorf("unknown dtype %q", t.DType)
	}
	if t.End < t.Begin {
		return fmt.Errorf("data_offsets [%d, %d] end before they begin", t.Begin, t.End)
	}
	elements, byteLen, err := checkedElements(t.Shape, size)
	if err != nil {
		return err
	}
	if t.End-t.Begin != byteLen {
		return fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but shape %v of %s needs %d elements x %d bytes = %d",
			t.Begin, t.End, t.End-t.Begin, t.Shape, t.DType, elements, size, byteLen)
	}
	return nil
}

// intArray reads a JSON array of non-negative integers (no fractions, no exponents). The
// array is taken whole (the decoder checks it is valid JSON) and cut at its commas: a token
// each (dec.Token) cost allocations per number, and the header of a mixture of experts holds
// tens of thousands of them. It accepts exactly what the token walk accepted
// (TestIntArrayMatchesTokenWalk): every element a number, an integer in int64 range, >= 0.
func intArray(dec *json.Decoder) ([]int64, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	raw = bytes.Trim(raw, jsonSpace)
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, fmt.Errorf("want '[', got %.40s", raw)
	}
	inner := bytes.Trim(raw[1:len(raw)-1], jsonSpace)
	if len(inner) == 0 {
		return nil, nil
	}
	var out []int64
	for i := 0; ; i++ {
		el, rest, more := bytes.Cut(inner, []byte{','})
		el = bytes.Trim(el, jsonSpace)
		// Only a number's characters: a string, array, object or literal has others (a
		// piece of one cut at a comma inside it too), and is refused at its first piece.
		if len(el) == 0 || bytes.IndexFunc(el, notNumberChar) >= 0 {
			return nil, fmt.Errorf("element %d is %.40s, not a number", i, el)
		}
		v, err := strconv.ParseInt(string(el), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("element %d (%s) is not an integer in int64 range", i, el)
		}
		if v < 0 {
			return nil, fmt.Errorf("element %d (%d) is negative", i, v)
		}
		out = append(out, v)
		if !more {
			break
		}
		inner = rest
	}
	return out, nil
}

// jsonSpace is JSON's whitespace.
const jsonSpace = " \t\n\r"

// notNumberChar reports a character no JSON number has.
func notNumberChar(r rune) bool {
	return !('0' <= r && r <= '9' || r == '-' || r == '+' || r == '.' || r == 'e' || r == 'E')
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %v", tok)
	}
	return s, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}
