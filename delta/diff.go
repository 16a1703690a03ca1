package delta

// Changes collects the output of a diff: the indices of changed elements (ascending, relative
// to the start of the compared slices, in elements) and their new values, Width bytes each,
// concatenated in the same order.
type Changes struct {
	Index  []uint32
	Values []byte
}

// Reset empties c, keeping its capacity.
func (c *Changes) Reset() {
	c.Index = c.Index[:0]
	c.Values = c.Values[:0]
}

// DiffBackend finds the elements that differ between two equal-length byte slices.
//
// Diff compares base and cur element by element at width bytes (1, 2, 4 or 8), bytewise (so
// NaN payloads and -0 are exact), and appends to out the index and the new value of every
// element that differs, in ascending order. len(base) must equal len(cur), be a multiple of
// width, and hold fewer than 2^32 elements; callers cut tensors into chunks.
//
// Every backend must produce exactly the output of the CPU reference, for every input.
type DiffBackend interface {
	Name() string
	Diff(base, cur []byte, width int, out *Changes) error
}
