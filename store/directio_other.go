//go:build !linux

package store

import "os"

// openDirect: O_DIRECT is Linux's; elsewhere every read goes through the page cache.
func openDirect(string, string) (*os.File, error) { return nil, errNoDirectIO }

// rangeCached cannot tell: the caller reads through the page cache.
func rangeCached(*os.File, int64, int64) (all, known bool) { return false, false }
