//go:build !linux

package store

import "os"

// setDirect: O_DIRECT is Linux's; elsewhere seeds are written through the page cache.
func setDirect(*os.File) bool { return false }

func clearDirect(*os.File) bool { return true }
