//go:build !linux

package store

import "os"

// adviseWillNeed is a no-op where posix_fadvise is not wired up.
func adviseWillNeed(*os.File, int64, int64) {}
