package delta

// API CONTRACT (bodies to be replaced by the implementation).

// Direction says which way a delta is applied.
type Direction int

const (
	// Forward turns base bytes into the new bytes.
	Forward Direction = iota
	// Backward turns the new bytes back into the base bytes.
	Backward
)

// DeltaEncoder builds the sparse delta of one tensor. Not safe for concurrent use.
type DeltaEncoder struct{}

// NewDeltaEncoder starts the delta of a tensor of elements elements of width bytes each; float
// selects the ordered-integer mapping of sign-magnitude floats for the value differences.
func NewDeltaEncoder(width int, float bool, elements int64) *DeltaEncoder { return nil }

// Add records changed elements: first is the absolute element index of chunk-relative index
// 0, idx the ascending chunk-relative indices, base and cur the old and new values (width
// bytes each, in the order of idx). Calls must come in ascending order of element index.
func (e *DeltaEncoder) Add(first int64, idx []uint32, base, cur []byte) error { return errNotYet }

// Finish returns the encoded delta body (format in docs/format.md).
func (e *DeltaEncoder) Finish() ([]byte, error) { return nil, errNotYet }

// DeltaInfo describes an encoded delta body.
type DeltaInfo struct {
	Width    int
	Float    bool
	Elements int64
	Changed  int64
}

// ParseDelta validates the framing of an encoded delta body and describes it.
func ParseDelta(body []byte) (DeltaInfo, error) { return DeltaInfo{}, errNotYet }

// ApplyDelta applies the changes of body that fall in elements [first, first+len(dst)/width)
// to dst in place, in the given direction. Only blocks touching that range are decoded.
func ApplyDelta(body []byte, dst []byte, first int64, dir Direction) error { return errNotYet }
