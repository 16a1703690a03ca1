package delta

import "errors"

// Sentinel errors of the package. Callers test with errors.Is; messages carry context.
var (
	// ErrMalformed marks input that is not a well-formed safetensors file, delta or patch.
	ErrMalformed = errors.New("malformed")
	// ErrUnsupportedVersion marks an encoded object or patch whose format version is unknown.
	ErrUnsupportedVersion = errors.New("unsupported format version")
	// ErrBaseMismatch marks a patch or delta applied to bytes that are not its base.
	ErrBaseMismatch = errors.New("base does not match")
)
