package fs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/weightfs/weightfs/store"
)

const (
	versionPrefix = "weight_v"
	latestName    = "latest"
	doneName      = "DONE"
)

// VersionName is the directory name of version v: weight_v and at least six digits.
func VersionName(v uint64) string { return fmt.Sprintf("%s%06d", versionPrefix, v) }

// ParseVersionName reports the number named by name. ok is false for names that are not
// version-like at all (they name staging directories); err is set for names that start like a
// version but are not canonical (weight_v12, weight_v0000012, weight_v000000, weight_vx).
func ParseVersionName(name string) (v uint64, ok bool, err error) {
	digits, found := strings.CutPrefix(name, versionPrefix)
	if !found {
		return 0, false, nil
	}
	if digits == "" {
		return 0, true, fmt.Errorf("%q: %w: no digits after %s", name, errBadVersionName, versionPrefix)
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, true, fmt.Errorf("%q: %w: %q is not a decimal number", name, errBadVersionName, digits)
		}
	}
	v, perr := strconv.ParseUint(digits, 10, 64)
	if perr != nil {
		return 0, true, fmt.Errorf("%q: %w: %v", name, errBadVersionName, perr)
	}
	if v == 0 {
		return 0, true, fmt.Errorf("%q: %w: version numbers start at 1", name, errBadVersionName)
	}
	if VersionName(v) != name {
		return 0, true, fmt.Errorf("%q: %w: write it as %s (six digits, zero-padded)", name, errBadVersionName, VersionName(v))
	}
	return v, true, nil
}

const (
	// maxNameLen is the longest file or directory name, in bytes, that an open version takes:
	// what statfs advertises (NAME_MAX), and the store's bound (store.MaxNameLen).
	maxNameLen = store.MaxNameLen
)
