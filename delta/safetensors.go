package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// API CONTRACT (implemented here; the layout and the checks are in docs/format.md (Part III) §1).

// DType is a safetensors element type, spelled as in the format ("BF16", "F32", ...).
type DType string

// The dtypes of the safetensors format.
const (
	DTypeBool    DType = "BOOL"
	DTypeU8      DType = "U8"
	DTypeI8      DType = "I8"
	DTypeU16     DType = "U16"
	DTypeI16     DType = "I16"
	DTypeU32     DType = "U32"
	DTypeI32     DType = "I32"
	DTypeU64     DType = "U64"
	DTypeI64     DType = "I64"
	DTypeF8E4M3  DType = "F8_E4M3"
	DTypeF8E5M2  DType = "F8_E5M2"
	DTypeBF16    DType = "BF16"
	DTypeF16     DType = "F16"
	DTypeF32     DType = "F32"
	DTypeF64     DType = "F64"
	metadataKey        = "__metadata__"
	headerLenLen       = 8 // bytes of the little-endian u64 that opens every file
)

// Size is the width of one element in bytes, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case DTypeBool, DTypeU8, DTypeI8, DTypeF8E4M3, DTypeF8E5M2:
		return 1
	case DTypeU16, DTypeI16, DTypeBF16, DTypeF16:
		return 2
	case DTypeU32, DTypeI32, DTypeF32:
		return 4
	case DTypeU64, DTypeI64, DTypeF64:
		return 8
	}
	return 0
}

// IsFloat reports whether d is a floating-point type (its bits are sign-magnitude).
func (d DType) IsFloat() bool {
	switch d {
	case DTypeF8E4M3, DTypeF8E5M2, DTypeBF16, DTypeF16, DTypeF32, DTypeF64:
		return true
	}
	return false
}

// Tensor is one entry of a safetensors header. Begin and End are byte offsets relative to the
// start of the data section, as in the file.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// Elements is the product of the shape (1 for a scalar). For a tensor that came out of
// ParseHeader it cannot overflow; for others use checkedElements.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// ByteLen is End - Begin, the length of the tensor's raw bytes.
func (t Tensor) ByteLen() int64 { return t.End - t.Begin }

// checkedElements is the product of shape, refusing negative dimensions and products (also
// times the element size) that do not fit in an int64.
func checkedElements(shape []int64, size int) (elements, byteLen int64, err error) {
	n := uint64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("dimension %d of shape %v is negative", i, shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return 0, 0, fmt.Errorf("shape %v has more elements than fit in int64", shape)
		}
		n = lo
	}
	hi, lo := bits.Mul64(n, uint64(size))
	if hi != 0 || lo > 1<<63-1 {
		return 0, 0, fmt.Errorf("shape %v times %d bytes overflows int64", shape, size)
	}
	return int64(n), int64(lo), nil
}

// Header is a parsed and validated safetensors header.
type Header struct {
	Metadata  map[string]string // __metadata__, nil if absent
	Tensors   []Tensor          // sorted by Begin; contiguous from 0
	HeaderLen int64             // N: the JSON length stored in the first 8 bytes
}

// DataStart is the file offset of the data section: 8 + HeaderLen.
func (h *Header) DataStart() int64 { return 8 + h.HeaderLen }

// Tensor returns the tensor called name.
func (h *Header) Tensor(name string) (Tensor, bool) {
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// MaxHeaderLen bounds the JSON header; larger headers are refused as malformed.
const MaxHeaderLen = 100 << 20

// HeaderLength decodes the first 8 bytes of a safetensors file (little-endian u64) and checks
// it against MaxHeaderLen and the file size.
func HeaderLength(first8 []byte, fileSize int64) (int64, error) {
	if len(first8) < headerLenLen || fileSize < headerLenLen {
		return 0, fmt.Errorf("%w: file of %d bytes is shorter than the 8-byte header length", ErrMalformed, fileSize)
	}
	n := binary.LittleEndian.Uint64(first8)
	if n > MaxHeaderLen {
		return 0, fmt.Errorf("%w: header length %d exceeds the limit of %d bytes", ErrMalformed, n, MaxHeaderLen)
	}
	if int64(n) > fileSize-headerLenLen {
		return 0, fmt.Errorf("%w: header length %d runs past the end of the %d-byte file", ErrMalformed, n, fileSize)
	}
	return int64(n), nil
}

// ParseHeader parses and validates the header held in prefix (which must hold at least
// 8+HeaderLen bytes) of a file of fileSize bytes: every dtype known, every tensor's byte
// length equal to elements x dtype size, tensors contiguous from offset 0 and ending exactly
// at the end of the file. Errors wrap ErrMalformed and say what is wrong.
func ParseHeader(prefix []byte, fileSize int64) (*Header, error) {
	return parseHeader(prefix, fileSize, true)
}

// parseHeader is ParseHeader with the fast scanner (safetensors_fast.go) tried first when fast
// is set; without it, the reference alone.
func parseHeader(prefix []byte, fileSize int64, fast bool) (*Header, error) {
	n, err := HeaderLength(prefix, fileSize)
	if err != nil {
		return nil, err
	}
	h, err := parseHeaderObject(prefix, n, fast)
	if err != nil {
		return nil, err
	}
	if err := checkLayout(h.Tensors, fileSize-h.DataStart()); err != nil {
		return nil, err
	}
	return h, nil
}

// parseHeaderObject parses the JSON object of a header of n bytes held in prefix (after the
// 8-byte length): the fast scanner first when fast is set, the reference if it is not sure.
func parseHeaderObject(prefix []byte, n int64, fast bool) (*Header, error) {
	if int64(len(prefix)) < headerLenLen+n {
		return nil, fmt.Errorf("%w: header needs %d bytes, only %d given", ErrMalformed, headerLenLen+n, len(prefix))
	}
	js := prefix[headerLenLen : headerLenLen+n]
	h := &Header{HeaderLen: n}
	if fast && parseHeaderFast(js, h) {
		return h, nil
	}
	*h = Header{HeaderLen: n}
	if err := parseHeaderJSON(js, h); err != nil {
		return nil, err
	}
	return h, nil
}

// ParseHeaderAnySize parses and validates the header held in prefix (at least 8+HeaderLen
// bytes) of a safetensors file whose size is not known yet, and returns the file size its
// tensors imply: 8 + HeaderLen + the largest end offset. ParseHeader(prefix, size) accepts
// the header for that size, and for no other; when this refuses, ParseHeader refuses it for
// every size. A stream classifies a file from its first bytes with it (store/stream_header.go).
func ParseHeaderAnySize(prefix []byte) (*Header, int64, error) {
	return parseHeaderAnySize(prefix, true)
}

func parseHeaderAnySize(prefix []byte, fast bool) (*Header, int64, error) {
	if len(prefix) < headerLenLen {
		return nil, 0, fmt.Errorf("%w: %d bytes are shorter than the 8-byte header length", ErrMalformed, len(prefix))
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > MaxHeaderLen {
		return nil, 0, fmt.Errorf("%w: header length %d exceeds the limit of %d bytes", ErrMalformed, n, MaxHeaderLen)
	}
	h, err := parseHeaderObject(prefix, int64(n), fast)
	if err != nil {
		return nil, 0, err
	}
	var end int64
	for _, t := range h.Tensors {
		end = max(end, t.End)
	}
	if end > 1<<63-1-h.DataStart() {
		return nil, 0, fmt.Errorf("%w: tensors end at data offset %d, past the largest file size", ErrMalformed, end)
	}
	if err := checkLayout(h.Tensors, end); err != nil {
		return nil, 0, err
	}
	return h, h.DataStart() + end, nil
}

// checkLayout sorts tensors by offset and checks they tile [0, dataLen) exactly.
func checkLayout(tensors []Tensor, dataLen int64) error {
	// Sorting by (Begin, End) puts zero-length tensors before a tensor starting at the same
	// offset, so ties cannot break contiguity; the name makes the order total.
	slices.SortFunc(tensors, func(a, b Tensor) int {
		if c := cmpInt64(a.Begin, b.Begin); c != 0 {
			return c
		}
		if c := cmpInt64(a.End, b.End); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.Name), []byte(b.Name))
	})
	var end int64
	prev := ""
	for _, t := range tensors {
		switch {
		case t.Begin > end && prev == "":
			return fmt.Errorf("%w: first tensor %q starts at %d, not 0 (gap)", ErrMalformed, t.Name, t.Begin)
		case t.Begin > end:
			return fmt.Errorf("%w: tensor %q starts at %d but previous tensor %q ends at %d (gap)", ErrMalformed, t.Name, t.Begin, prev, end)
		case t.Begin < end:
			return fmt.Errorf("%w: tensor %q at [%d, %d] overlaps previous tensor %q ending at %d", ErrMalformed, t.Name, t.Begin, t.End, prev, end)
		}
		end, prev = t.End, t.Name
	}
	if end != dataLen {
		return fmt.Errorf("%w: tensors end at data offset %d but the data section holds %d bytes", ErrMalformed, end, dataLen)
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReadHeader reads and parses the header of a safetensors file of size bytes from r.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	var first8 [headerLenLen]byte
	if size >= headerLenLen {
		if got, err := r.ReadAt(first8[:], 0); err != nil && (err != io.EOF || got != headerLenLen) {
			return nil, fmt.Errorf("read safetensors header length: %w", err)
		}
	}
	n, err := HeaderLength(first8[:], size)
	if err != nil {
		return nil, err
	}
	prefix := make([]byte, headerLenLen+n)
	copy(prefix, first8[:])
	// ReaderAt may report io.EOF together with a full read that ends at the end of the file.
	if got, err := r.ReadAt(prefix[headerLenLen:], headerLenLen); err != nil && (err != io.EOF || int64(got) != n) {
		return nil, fmt.Errorf("read safetensors header of %d bytes: %w", n, err)
	}
	return ParseHeader(prefix, size)
}

// EncodeHeader returns the 8-byte length and the JSON header for tensors laid out in the given
// order, contiguous from offset 0 (it sets Begin and End of each), padded with spaces to a
// multiple of 8 bytes. meta, if non-nil, becomes __metadata__.
//
// Keys are written in a fixed order (__metadata__ first with its keys sorted, then the
// tensors in the given order), so equal input gives equal bytes.
func EncodeHeader(meta map[string]string, tensors []Tensor) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, headerLenLen))
	buf.WriteByte('{')
	first := true
	if meta != nil {
		if err := writeMetadata(&buf, meta); err != nil {
			return nil, err
		}
		first = false
	}
	seen := make(map[string]struct{}, len(tensors))
	var offset int64
	for i := range tensors {
		t := &tensors[i]
		if t.Name == metadataKey {
			return nil, fmt.Errorf("encode header: tensor name %q is reserved", t.Name)
		}
		if _, dup := seen[t.Name]; dup {
			return nil, fmt.Errorf("encode header: duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = struct{}{}
		size := t.DType.Size()
		if size == 0 {
			return nil, fmt.Errorf("encode header: tensor %q has unknown dtype %q", t.Name, t.DType)
		}
		_, byteLen, err := checkedElements(t.Shape, size)
		if err != nil {
			return nil, fmt.Errorf("encode header: tensor %q: %w", t.Name, err)
		}
		if offset > 1<<63-1-byteLen {
			return nil, fmt.Errorf("encode header: tensor %q: data section exceeds int64", t.Name)
		}
		t.Begin, t.End = offset, offset+byteLen
		offset = t.End
		if !first {
			buf.WriteByte(',')
		}
		first = false
		if err := writeTensorEntry(&buf, t); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	// Pad so the data section starts 8-aligned, as the official writer does.
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	out := buf.Bytes()
	n := int64(len(out) - headerLenLen)
	if n > MaxHeaderLen {
		return nil, fmt.Errorf("encode header: %d bytes exceed the limit of %d", n, MaxHeaderLen)
	}
	binary.LittleEndian.PutUint64(out, uint64(n))
	return out, nil
}

// writeMetadata writes the __metadata__ entry of a header, its keys sorted.
func writeMetadata(buf *bytes.Buffer, meta map[string]string) error {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf.WriteString(`"__metadata__":{`)
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeJSONString(buf, k); err != nil {
			return fmt.Errorf("encode metadata key: %w", err)
		}
		buf.WriteByte(':')
		if err := writeJSONString(buf, meta[k]); err != nil {
			return fmt.Errorf("encode metadata value of %q: %w", k, err)
		}
	}
	buf.WriteByte('}')
	return nil
}

// writeTensorEntry writes the header entry of tensor t: its name, dtype, shape and offsets.
func writeTensorEntry(buf *bytes.Buffer, t *Tensor) error {
	if err := writeJSONString(buf, t.Name); err != nil {
		return fmt.Errorf("encode tensor name: %w", err)
	}
	buf.WriteString(`:{"dtype":`)
	_ = writeJSONString(buf, string(t.DType)) // a known dtype is plain ASCII
	buf.WriteString(`,"shape":[`)
	for j, d := range t.Shape {
		if j > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(strconv.FormatInt(d, 10))
	}
	buf.WriteString(`],"data_offsets":[`)
	buf.WriteString(strconv.FormatInt(t.Begin, 10))
	buf.WriteByte(',')
	buf.WriteString(strconv.FormatInt(t.End, 10))
	buf.WriteString("]}")
	return nil
}

// writeJSONString writes s as a JSON string. Invalid UTF-8 is refused rather than silently
// replaced, so what is written reads back as the same string.
func writeJSONString(buf *bytes.Buffer, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("string %q is not valid UTF-8", s)
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
	return nil
}
