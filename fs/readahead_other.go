//go:build !linux

package fs

import "errors"

// ReadAheadKiB is the kernel read-ahead weightfs asks for on its mounts (Linux only).
const ReadAheadKiB = 4096

// SetReadAhead is not supported outside Linux.
func SetReadAhead(mnt string, kib int) error {
	return errors.New("set read-ahead: only on Linux")
}

// readAheadPath is not known outside Linux.
func readAheadPath(mnt string) (string, error) {
	return "", errors.New("read-ahead path: only on Linux")
}
