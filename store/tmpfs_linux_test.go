//go:build linux

package store

import (
	"fmt"
	"syscall"
)

func mountTmpfs(dir string, size int) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
}

func unmountTmpfs(dir string) { syscall.Unmount(dir, syscall.MNT_DETACH) }
