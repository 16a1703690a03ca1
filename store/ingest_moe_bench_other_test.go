//go:build !linux

package store

import "errors"

// evictTree is Linux's (POSIX_FADV_DONTNEED): elsewhere WEIGHTFS_BENCH_MOE_COLD is refused.
func evictTree(dir string) error { return errors.New("evictTree: Linux only") }
