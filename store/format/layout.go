package format

import (
	"fmt"
	"strconv"
)

// ManifestName is a manifest's name in a store's layout (STORE/versions/NAME, in S3
// PREFIX/versions/NAME; docs/format.md Part I §1): "v" and the number, zero-padded to six
// digits (longer numbers keep all their digits). A writer group's records name their version
// the same way.
func ManifestName(v uint64) string { return fmt.Sprintf("v%06d", v) }

// ParseManifestName is the inverse of ManifestName; ok is false for other names, and for
// numbers above MaxVersion (no version of this program seals one).
func ParseManifestName(name string) (uint64, bool) {
	if len(name) < 7 || name[0] != 'v' {
		return 0, false
	}
	v, err := strconv.ParseUint(name[1:], 10, 64)
	if err != nil || v == 0 || v > MaxVersion || ManifestName(v) != name {
		return 0, false
	}
	return v, true
}
