package gen

import "errors"

// Sentinel errors of package gen. Every error returned by the package wraps one of these (or
// an I/O error from the operating system) with context.
var (
	// ErrBadConfig: a Config field is out of range or the shapes do not fit together
	// (Hidden not a multiple of Heads, Heads not a multiple of KVHeads, more shards than
	// tensors, a learning rate that is not a finite positive number, ...).
	ErrBadConfig = errors.New("bad generator config")

	// ErrBadParamCount: a parameter count such as "250M" could not be parsed or is out of range.
	ErrBadParamCount = errors.New("bad parameter count")

	// ErrBadVersion: a version or step number is out of range (versions start at 1).
	ErrBadVersion = errors.New("bad version number")
)
