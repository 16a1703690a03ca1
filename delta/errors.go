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
	// ErrInvalidArgument marks a call that breaks its function's contract: a width other than
	// 1, 2, 4 or 8, slices of unequal or unaligned length, indices out of range or out of
	// order. It is the caller's bug, not bad input data.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrLocked marks an apply refused because another apply of the same file holds its
	// lock (ApplyOptions.NoWait); the message names the holder's process and host.
	ErrLocked = errors.New("locked by another apply")
	// ErrNoContext marks a version-2 delta body decoded or applied without its context (the
	// decoded delta it was coded against, docs/format.md Part II): Delta.SetContext or
	// ApplyDeltaContext supply it.
	ErrNoContext = errors.New("delta body needs its context")
	// ErrContextMismatch marks a version-2 delta body decoded against a context that is not the
	// one it was coded against: a block of the context differs in change count or checksum from
	// what the body recorded. Errors wrapping it also wrap ErrMalformed, since the caller cannot
	// tell a wrong context from a damaged body.
	ErrContextMismatch = errors.New("delta context does not match")
)
