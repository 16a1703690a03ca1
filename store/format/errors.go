package format

import "errors"

// The sentinel errors the codecs wrap. Package store re-exports each under the same name
// (store.ErrCorrupt is ErrCorrupt), so callers test with errors.Is against either.
var (
	// ErrCorrupt marks store data that fails a check: a CRC, a SHA-256, a framing rule. Reads
	// return it rather than wrong bytes; Verify reports it per object and per version.
	ErrCorrupt = errors.New("corrupt store data")
	// ErrUnsupportedVersion marks a store, object or manifest of an unknown format version;
	// it is refused, never read "best effort".
	ErrUnsupportedVersion = errors.New("unsupported store format version")
	// ErrNotAStore marks a path that holds no weightfs store (no or an alien format file).
	ErrNotAStore = errors.New("not a weightfs store")
	// ErrBadPath marks a path that is not a clean, relative, slash-separated path.
	ErrBadPath = errors.New("invalid path")
	// ErrVersionOutOfRange marks a version number above MaxVersion (refused by Commit,
	// NewVersion and manifest validation).
	ErrVersionOutOfRange = errors.New("version number is above the largest a store accepts")
	// ErrNameTooLong marks a path with an element longer than MaxNameLen bytes (the fs
	// package answers ENAMETOOLONG).
	ErrNameTooLong = errors.New("file name too long")
)
