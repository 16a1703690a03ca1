package delta

import (
	"errors"
	"io"
)

// API CONTRACT (bodies to be replaced by the implementation).

// DType is a safetensors element type, spelled as in the format ("BF16", "F32", ...).
type DType string

// Size is the width of one element in bytes, or 0 for an unknown dtype.
func (d DType) Size() int { return 0 }

// IsFloat reports whether d is a floating-point type (its bits are sign-magnitude).
func (d DType) IsFloat() bool { return false }

// Tensor is one entry of a safetensors header. Begin and End are byte offsets relative to the
// start of the data section, as in the file.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// Elements is the product of the shape (1 for a scalar).
func (t Tensor) Elements() int64 { return 0 }

// Header is a parsed and validated safetensors header.
type Header struct {
	Metadata  map[string]string // __metadata__, nil if absent
	Tensors   []Tensor          // sorted by Begin; contiguous from 0
	HeaderLen int64             // N: the JSON length stored in the first 8 bytes
}

// DataStart is the file offset of the data section: 8 + HeaderLen.
func (h *Header) DataStart() int64 { return 8 + h.HeaderLen }

// MaxHeaderLen bounds the JSON header; larger headers are refused as malformed.
const MaxHeaderLen = 100 << 20

var errNotYet = errors.New("not implemented yet")

// HeaderLength decodes the first 8 bytes of a safetensors file (little-endian u64) and checks
// it against MaxHeaderLen and the file size.
func HeaderLength(first8 []byte, fileSize int64) (int64, error) { return 0, errNotYet }

// ParseHeader parses and validates the header held in prefix (which must hold at least
// 8+HeaderLen bytes) of a file of fileSize bytes: every dtype known, every tensor's byte
// length equal to elements x dtype size, tensors contiguous from offset 0 and ending exactly
// at the end of the file. Errors wrap ErrMalformed and say what is wrong.
func ParseHeader(prefix []byte, fileSize int64) (*Header, error) { return nil, errNotYet }

// ReadHeader reads and parses the header of a safetensors file of size bytes from r.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) { return nil, errNotYet }

// EncodeHeader returns the 8-byte length and the JSON header for tensors laid out in the given
// order, contiguous from offset 0 (it sets Begin and End of each), padded with spaces to a
// multiple of 8 bytes. meta, if non-nil, becomes __metadata__.
func EncodeHeader(meta map[string]string, tensors []Tensor) ([]byte, error) {
	return nil, errNotYet
}
